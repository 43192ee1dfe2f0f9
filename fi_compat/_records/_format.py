"""How a record is spelled: the JSON of a function's parameters and of a stored name.

The one encoding the builder of a release's model (:mod:`fi_compat._recorder`) writes and
the loader (:mod:`fi_compat._records._parse`, :mod:`fi_compat._records._store`) reads: the
per-release files write a function's parameters as a list of records; the surface store
writes each as a short list (:func:`compact_parameter`) and its commonest name records as
short strings (:func:`compact_name`). :func:`parameters` is the one reading of an
``ast.arguments``. Nothing here imports the rest of fi-compat, so the builder and the
loader share it without reaching each other.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from typing import Any, Literal, get_args

__all__ = [
    "KINDS",
    "SURFACE_VERSION",
    "JSONRecord",
    "ParameterKind",
    "compact_name",
    "compact_parameter",
    "expand_name",
    "expand_parameter",
    "parameters",
    "read_home",
    "read_shape",
    "shape_of",
]

#: Bumped whenever what the builder's surface records changes
#: (:func:`fi_compat._recorder.surface.surface`): surfaces cached by ``tools.record``, and
#: releases modelled on a user's machine, made under another number are made again. Kept
#: here, with the spelling, so that checking a cached model does not import the builder.
SURFACE_VERSION = 10

#: One record as the files spell it: decoded JSON (a function, class, name or module record).
JSONRecord = dict[str, Any]

#: ``inspect.Parameter.kind.name`` values.
ParameterKind = Literal[
    "POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_POSITIONAL", "KEYWORD_ONLY", "VAR_KEYWORD"
]


def parameters(args: ast.arguments) -> list[dict[str, str]]:
    """Each parameter as ``{name, kind, default?, annotation?}``, in ``inspect`` order."""
    records: list[dict[str, str]] = []
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)

    def one(arg: ast.arg, kind: str, default: ast.expr | None) -> dict[str, str]:
        record = {"name": arg.arg, "kind": kind}
        if default is not None:
            record["default"] = ast.unparse(default)
        if arg.annotation is not None:
            record["annotation"] = ast.unparse(arg.annotation)
        return record

    for index, arg in enumerate(positional):
        kind = "POSITIONAL_ONLY" if index < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        records.append(one(arg, kind, defaults[index]))
    if args.vararg is not None:
        records.append(one(args.vararg, "VAR_POSITIONAL", None))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        records.append(one(arg, "KEYWORD_ONLY", kw_default))
    if args.kwarg is not None:
        records.append(one(args.kwarg, "VAR_KEYWORD", None))
    return records


def expand_name(data: str | Mapping[str, Any]) -> Mapping[str, Any]:
    """A name as the store writes it -> the name record's JSON.

    The store writes the commonest records as short strings: ``"=typing"`` is a value
    imported from ``typing`` (``"="``: of unknown origin), ``"@flashinfer.norm"`` a module,
    ``"&function:flashinfer.norm:rmsnorm"`` a re-export sharing the record of ``rmsnorm``
    in ``flashinfer.norm``; a final ``"?"`` marks a conditional binding. Anything else is
    the record itself.
    """
    if not isinstance(data, str):
        return data
    body = data.removesuffix("?")
    tag, rest = body[:1], body[1:]
    record: dict[str, Any]
    if tag == "=":
        record = {"kind": "value", "defined_in": rest or None}
    elif tag == "@":
        record = {"kind": "module", "defined_in": rest or None}
    elif tag == "&":
        kind, home, own = rest.split(":", 2)
        record = {"kind": kind, "defined_in": home, "same": own}
    else:
        raise ValueError(f"expected a stored name record; found {data!r}")
    if body != data:
        record["conditional"] = True
    return record


def compact_name(record: Mapping[str, Any]) -> str | Mapping[str, Any]:
    """The inverse of :func:`expand_name` (the store's writer uses it)."""
    kind, home = record["kind"], record.get("defined_in")
    mark = "?" if record.get("conditional") else ""
    keys = set(record) - {"conditional"}
    if keys == {"kind", "defined_in"} and kind in ("value", "module"):
        return f"{'=' if kind == 'value' else '@'}{home or ''}{mark}"
    if keys == {"kind", "defined_in", "same"} and home and ":" not in kind + home:
        return f"&{kind}:{home}:{record['same']}{mark}"
    return record


def shape_of(stored: str | Mapping[str, Any], module: str) -> str:
    """What the store's name index keeps of a name of ``module``: a short name itself, else
    ``"#kind:defined_in"`` (``"?"`` appended when conditional); a home that is ``module``
    itself, or the module of a short name (``"=."``, ``"&function:.:f"``), is written
    ``"."`` (most names are defined where they are bound)."""
    if isinstance(stored, str):
        return _relative(stored, module)
    mark = "?" if stored.get("conditional") else ""
    home = stored.get("defined_in") or ""
    return f"#{stored['kind']}:{'.' if home == module else home}{mark}"


def _relative(short: str, module: str) -> str:
    tag, body = short[:1], short[1:]
    if tag in "=@":
        rest = body.removesuffix("?")
        return f"{tag}{'.' if rest == module else rest}{body[len(rest) :]}"
    kind, home, rest = body.split(":", 2)
    return f"&{kind}:{'.' if home == module else home}:{rest}"


def read_home(shape: str, module: str) -> str:
    """The inverse of ``shape_of``'s ``"."``: the shape with ``module`` written out."""
    tag = shape[:1]
    if tag in "=@":
        body = shape[1:]
        rest = body.removesuffix("?")
        return f"{tag}{module if rest == '.' else rest}{body[len(rest) :]}"
    if tag == "&":
        kind, home, rest = shape[1:].split(":", 2)
        return f"&{kind}:{module if home == '.' else home}:{rest}"
    body = shape[1:]
    kind, _, home = body.partition(":")
    bare = home.removesuffix("?")
    return f"#{kind}:{module if bare == '.' else bare}{home[len(bare) :]}"


@functools.lru_cache(maxsize=1 << 16)
def read_shape(shape: str, module: str) -> tuple[str, str | None, bool]:
    """``(kind, defined_in, conditional)`` of a name index entry of ``module``."""
    shape = read_home(shape, module)
    if not shape.startswith("#"):
        found = expand_name(shape)
        return found["kind"], found.get("defined_in"), bool(found.get("conditional", False))
    body = shape[1:].removesuffix("?")
    kind, _, home = body.partition(":")
    return kind, home or None, body != shape[1:]


#: A parameter's kind as the store writes it: its index here, in the order Python's
#: ``inspect.Parameter`` kinds have (POSITIONAL_OR_KEYWORD, the commonest, is left out).
KINDS: tuple[str, ...] = get_args(ParameterKind)
_PLAIN = 1


def compact_parameter(parameter: Mapping[str, str]) -> list[Any]:
    """A parameter record as the store writes it: ``[name, kind, default, annotation]``,
    trailing absent items left out (``["x"]`` is a plain positional-or-keyword ``x``)."""
    item: list[Any] = [
        parameter["name"],
        KINDS.index(parameter["kind"]),
        parameter.get("default"),
        parameter.get("annotation"),
    ]
    while item[-1] is None:
        item.pop()
    if len(item) == 2 and item[1] == _PLAIN:
        item.pop()
    return item


def expand_parameter(item: list[Any]) -> dict[str, str]:
    """The inverse of :func:`compact_parameter`."""
    record = {"name": item[0], "kind": KINDS[item[1] if len(item) > 1 else _PLAIN]}
    if len(item) > 2 and item[2] is not None:
        record["default"] = item[2]
    if len(item) > 3 and item[3] is not None:
        record["annotation"] = item[3]
    return record
