"""What the analysis works on and what it answers: the data shared by every stage.

:class:`Resolver` is what a caller (the live probe or the recorder) hands in;
:class:`Analysis` with its :class:`Ref`, :class:`ForwardCall` and :class:`Doubt` is what
comes back.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal, Protocol

#: The keyword of a :class:`Doubt` that applies to every keyword.
ALL = "*"

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
MethodKind = Literal["instance", "class"]


@dataclass(frozen=True)
class Ref:
    """A call target that can be resolved outside the function.

    Attributes
    ----------
    base
        ``"instance"`` for ``self.name``, ``"class"`` for ``cls.name`` (the method's first
        parameter), ``"global"`` for a module-level name and its attribute chain.
    path
        ``(name,)`` for ``self.name``; ``(name, attr, ...)`` for a global.
    text
        The target as source text.
    """

    base: Literal["instance", "class", "global"]
    path: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Doubt:
    """A keyword (or :data:`ALL`) that may be dropped or replaced on the way."""

    keyword: str
    reason: str


@dataclass(frozen=True)
class ForwardCall:
    """One call that splats the carried dict: where, and its positional arguments."""

    line: int
    positional: int
    starred: bool


@dataclass(frozen=True)
class Analysis:
    """What :func:`analyse` proved.

    ``problem`` is set when no forward is proven at all (then every forwarded keyword is
    unknown); otherwise ``target`` is where the dict goes and ``doubts`` are the keywords
    (or :data:`ALL`) that may not arrive unchanged.
    """

    target: Ref | None
    calls: tuple[ForwardCall, ...] = ()
    doubts: tuple[Doubt, ...] = ()
    problem: str | None = None


class Resolver(Protocol):
    """What the analysis asks of its caller (live objects or recorded sources)."""

    def function(self, name: str) -> tuple[FunctionNode, Resolver] | None:
        """The ``def`` of the undecorated module-level function ``name``, or None.

        Returns the node and a resolver for the module that holds it.
        """

    def is_builtin(self, name: str) -> bool:
        """True when ``name`` in this module's namespace is the builtin of that name."""
