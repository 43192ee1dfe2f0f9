"""The data the analysis works on and answers, and its questions about single nodes.

Every stage shares them.

:class:`Resolver` is what a caller (the live probe or the recorder) hands in;
:class:`Analysis` with its :class:`Ref`, :class:`ForwardCall` and :class:`Doubt` is what
comes back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

# ---------------------------------------------------------------------- results
# What the analysis works on and what it answers: the data shared by every stage.


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


# ---------------------------------------------------------------------- syntax
# Reading a syntax tree: small questions about single nodes, asked by every stage.


SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_SNIPPET = 60


def calls_named(node: FunctionNode, name: str) -> bool:
    """Does the body of ``node`` call something named ``name`` (``name(...)``, ``x.name(...)``)?

    Read from the syntax tree: a mention in a comment, a string, a docstring, a default
    value or a bare reference does not count. Used for ``TorchDistBackend.bcast`` and
    ``get_global_rank`` by the live probe and the recorder alike.
    """
    for statement in node.body:
        for sub in ast.walk(statement):
            if not isinstance(sub, ast.Call):
                continue
            callee = sub.func
            if (isinstance(callee, ast.Name) and callee.id == name) or (
                isinstance(callee, ast.Attribute) and callee.attr == name
            ):
                return True
    return False


def method_kind(node: FunctionNode) -> MethodKind | None:
    """How a ``def`` in a class body binds its first parameter (None for staticmethod)."""
    names = {ast.unparse(decorator) for decorator in node.decorator_list}
    if "staticmethod" in names:
        return None
    return "class" if "classmethod" in names else "instance"


def snippet(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= _SNIPPET else text[: _SNIPPET - 3] + "..."


def constant_key(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def parameters_of(node: FunctionNode | ast.Lambda) -> list[ast.arg]:
    args = node.args
    found = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    found += [arg for arg in (args.vararg, args.kwarg) if arg is not None]
    return found


def mentions_carrier(call: ast.Call, carriers: set[str]) -> bool:
    """Does a direct argument of ``call`` name a carrier (cheap pre-check)?"""
    values = [*call.args, *(keyword.value for keyword in call.keywords)]
    return any(isinstance(value, ast.Name) and value.id in carriers for value in values)


def splatted(node: ast.expr, parent: ast.AST | None) -> bool:
    """``**node`` in a call or a dict display: its items are copied, it is not kept."""
    if isinstance(parent, ast.keyword):
        return parent.arg is None
    if isinstance(parent, ast.Dict):
        pairs = zip(parent.keys, parent.values, strict=True)
        return any(key is None and value is node for key, value in pairs)
    return False


def only_read(node: ast.expr, parent: ast.AST | None) -> bool:
    """``k in c``, ``if c``, ``not c``, ``for k in c``, ``return c``: nothing can change it."""
    if isinstance(parent, ast.Compare | ast.Expr | ast.Return):
        return True
    if isinstance(parent, ast.UnaryOp):
        return isinstance(parent.op, ast.Not)
    if isinstance(parent, ast.If | ast.While | ast.IfExp | ast.Assert):
        return parent.test is node
    if isinstance(parent, ast.For | ast.AsyncFor | ast.comprehension):
        return parent.iter is node
    return False


def bound_names(node: ast.AST) -> Iterator[str]:
    """Names a node binds (any scope inside the function counts: conservative)."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
        yield node.id
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.Lambda):
        pass
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, ast.Import | ast.ImportFrom):
        for alias in node.names:
            yield alias.asname or alias.name.partition(".")[0]
    elif isinstance(node, ast.ExceptHandler) and node.name:
        yield node.name
    elif isinstance(node, ast.Global | ast.Nonlocal):
        yield from node.names
    elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
        yield node.name
    elif isinstance(node, ast.MatchMapping) and node.rest:
        yield node.rest
