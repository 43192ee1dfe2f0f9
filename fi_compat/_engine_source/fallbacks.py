"""Where an engine's code falls back when FlashInfer, or a part of it, is missing.

An engine imports FlashInfer in a ``try`` and binds a stand-in in the handler
(``except ImportError: Wrapper = object``), or keeps a module only where it has a function
(``comm = comm if hasattr(comm, "f") else None``). Either way the name is FlashInfer's along
one branch and a fallback along the other, and a use of it runs FlashInfer on that branch.
The reading of a file (:mod:`fi_compat._engine_source.read`) asks this module what a
``try``'s handlers catch (:func:`caught`, :func:`guards`), which arm of a conditional
expression an assignment binds by (:func:`branch`), and which bindings a ``try``'s body made
that its handlers only replaced with a fallback (:func:`kept_through`, :func:`is_none`); the
judge (:mod:`fi_compat.upgrade._judge`) asks whether the handlers around a use catch what it
raises (:func:`catches`).
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Iterator, Mapping, Sequence

__all__ = ["branch", "catches", "caught", "guards", "is_none", "kept_through"]

#: Handlers that catch what a missing name or module raises, by exception name.
_CATCH_ALL = frozenset({"Exception", "BaseException", ""})


def caught(handler: ast.ExceptHandler) -> set[str]:
    """The exception names ``handler`` catches (``""`` for a bare ``except``)."""
    if handler.type is None:
        return {""}
    nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = set()
    for node in nodes:
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names


def catches(handlers: frozenset[str], exception: str) -> bool:
    """Whether handlers catching ``handlers`` (:func:`caught`'s names) catch the built-in
    ``exception``: by its name, a base class's name or a bare ``except``."""
    bases = getattr(builtins, exception).__mro__[:-1]  # ``object`` is no exception
    return bool(handlers & ({""} | {base.__name__ for base in bases}))


def guards(handlers: frozenset[str]) -> bool:
    """Whether handlers catching ``handlers`` catch what a missing name or module raises."""
    return bool(handlers & (_CATCH_ALL | {"ImportError", "ModuleNotFoundError", "AttributeError"}))


def is_none(node: ast.expr) -> bool:
    """Whether ``node`` is ``None``: the fallback of a failed import (``except ImportError:
    comm = None``), not another value the uses below could mean."""
    return isinstance(node, ast.Constant) and node.value is None


def _arms(value: ast.expr) -> Iterator[ast.expr]:
    """Each arm of a conditional expression (of the ones nested in it too), else ``value``."""
    if isinstance(value, ast.IfExp):
        yield from _arms(value.body)
        yield from _arms(value.orelse)
    else:
        yield value


def branch(value: ast.expr, meaning: Callable[[ast.expr], str | None]) -> ast.expr:
    """The arm of a conditional expression an assignment of ``value`` binds by: the one arm
    that means a FlashInfer module or object (``meaning``: its path, None for none), where
    the others mean none (``comm if hasattr(comm, "f") else None``; ``None``, ``object``, a
    class of the file) or the same; else ``value`` itself (two meanings: neither is bound)."""
    if not isinstance(value, ast.IfExp):
        return value
    meant: dict[str, ast.expr] = {}
    for arm in _arms(value):
        found = meaning(arm)
        if found:
            meant.setdefault(found, arm)
    return next(iter(meant.values())) if len(meant) == 1 else value


def kept_through(
    body: Sequence[Mapping[str, str]],
    after: Sequence[dict[str, str]],
    ours: Callable[[str], bool],
) -> None:
    """Give back, in ``after`` (what names hold once a ``try``'s handlers were read), each
    binding that ``body`` (what they held at the end of its body) made to FlashInfer
    (``ours``) and that the handlers replaced with something that is not (``except
    ImportError: Wrapper = object``): where the body ran to its end, the name is still
    FlashInfer's. The mappings go in pairs (the names' modules, their objects, ...); a name a
    handler binds to FlashInfer itself keeps what the handler gave."""
    names = {name for held in body for name, path in held.items() if ours(path)}
    for name in names:
        if any(ours(held.get(name, "")) for held in after):
            continue
        for before, now in zip(body, after, strict=True):
            if name in before:
                now[name] = before[name]
            else:
                now.pop(name, None)
