"""The values a FlashInfer parameter's ``Literal`` annotation lists, read from the function.

A compat layer must never be the reason an engine cannot use a new release: a ``backend=``
or ``moe_finalize_backend=`` value is invalid when the installed release does not take it,
not when fi-compat's own list lacks it. Releases annotate those parameters with
``Literal[...]`` (a ``typing`` object, or its text under postponed annotations and in the
fake); :func:`literal_choices` reads either, and answers None when the annotation says
nothing it can read, so the value is passed through for FlashInfer to judge.
"""

from __future__ import annotations

import ast
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

__all__ = ["literal_choices"]

_LITERAL_NAMES = frozenset({"Literal", "typing.Literal", "typing_extensions.Literal"})


@functools.lru_cache(maxsize=64)
def literal_choices(function: Callable[..., Any], name: str) -> tuple[object, ...] | None:
    """The values ``function``'s parameter ``name`` is annotated to take, or None.

    ``Literal[...]`` and ``Optional``/unions of them are read; anything else, an unreadable
    signature or annotation, or a parameter the function lacks answers None.
    """
    try:
        parameter = inspect.signature(function).parameters.get(name)
        annotation = getattr(parameter, "annotation", inspect.Parameter.empty)
        if annotation is inspect.Parameter.empty:
            return None
        if isinstance(annotation, str):
            return _from_text(annotation)
        return _from_object(annotation)
    except (Exception, SystemExit, GeneratorExit):  # an unreadable (or hostile) signature
        return None


def _from_object(annotation: object) -> tuple[object, ...] | None:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return typing.get_args(annotation)
    if origin is typing.Union:
        found: list[object] = []
        for member in typing.get_args(annotation):
            if member is type(None):
                found.append(None)
                continue
            values = _from_object(member)
            if values is None:
                return None
            found.extend(values)
        return tuple(found)
    return None


def _from_text(text: str) -> tuple[object, ...] | None:
    """``Literal['a', 'b']`` (or ``Optional[...]`` of it) as text, without evaluating it."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    return _from_node(node)


def _from_node(node: ast.expr) -> tuple[object, ...] | None:
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head in _LITERAL_NAMES:
            try:
                return tuple(ast.literal_eval(item) for item in items)
            except ValueError:
                return None
        if head in ("Optional", "typing.Optional") and len(items) == 1:
            inner = _from_node(items[0])
            return None if inner is None else (*inner, None)
        if head in ("Union", "typing.Union"):
            return _union(items)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union([node.left, node.right])
    if isinstance(node, ast.Constant) and node.value is None:
        return (None,)
    return None


def _union(items: list[ast.expr]) -> tuple[object, ...] | None:
    found: list[object] = []
    for item in items:
        values = _from_node(item)
        if values is None:
            return None
        found.extend(values)
    return tuple(found)
