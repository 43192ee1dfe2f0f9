"""Decoded JSON -> the typed records: one parser for the per-release files and the store.

The per-release files write a function's parameters as a list of records; the surface store
(:mod:`fi_compat._records._store`) writes each as a short list (:func:`compact_parameter`)
and its commonest name records as short strings (:func:`compact_name`). :func:`parameters`
is the one reading of an ``ast.arguments``, the recorder's.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, get_args

from fi_compat._records._classes import (
    ClassRecord,
    EnumRecord,
    FunctionRecord,
    NameRecord,
    ParameterKind,
    ParameterRecord,
)

__all__ = [
    "KINDS",
    "class_record",
    "compact_name",
    "compact_parameter",
    "enum_record",
    "expand_name",
    "expand_parameter",
    "function_record",
    "name_record",
    "parameters",
    "read_home",
    "read_shape",
    "shape_of",
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


def function_record(data: Mapping[str, Any] | None) -> FunctionRecord | None:
    """A function's record: ``parameters`` and ``returns``, or the store's ``signature``."""
    if data is None:
        return None
    if "params" in data:  # as the store writes them
        found = [expand_parameter(item) for item in data["params"]]
    else:
        found = data["parameters"]
    returns = data.get("returns")
    return FunctionRecord(
        qualname=data["qualname"],
        defined_in=data["defined_in"],
        decorators=tuple(data.get("decorators", ())),
        parameters=tuple(
            ParameterRecord(p["name"], p["kind"], p.get("default"), p.get("annotation"))  # type: ignore[arg-type]
            for p in found
        ),
        returns=returns,
        forwards_kwargs_to=data.get("forwards_kwargs_to"),
        forwards_kwargs_drops=tuple(data.get("forwards_kwargs_drops", ())),
        returns_attribute=data.get("returns_attribute"),
    )


def class_record(name: str, data: Mapping[str, Any] | None) -> ClassRecord | None:
    """A class's record; a class-body alias shares the record of the method it names."""
    if data is None:
        return None
    methods = {method: function_record(value) for method, value in data["methods"].items()}
    aliases = {
        alias: target
        for alias, target in data.get("aliases", {}).items()
        if methods.get(target) is not None
    }
    methods |= {alias: methods[target] for alias, target in aliases.items()}
    return ClassRecord(
        name=name,
        defined_in=data["defined_in"],
        bases=tuple(data["bases"]),
        methods=MappingProxyType(dict(sorted(methods.items()))),
        module=data.get("module"),
        plan_forwards_to=data.get("plan_forwards_to"),
        bcast_root_is_group_local=data.get("bcast_root_is_group_local"),
        exported=data.get("exported"),
        attributes=tuple(data.get("attributes", ())),
        family_bases=tuple(data.get("family_bases", ())),
        aliases=MappingProxyType(aliases),
        has_getattr=bool(data.get("getattr", False)),
        delegates_to=data["getattr"] if isinstance(data.get("getattr"), str) else None,
    )


def enum_record(name: str, data: Mapping[str, Any] | None) -> EnumRecord | None:
    """An enum's (a constant holder's) record."""
    if data is None:
        return None
    return EnumRecord(name, data["defined_in"], MappingProxyType(dict(data["members"])))


def name_record(name: str, data: Mapping[str, Any]) -> NameRecord:
    """One name of a module's table."""
    return NameRecord(
        name=name,
        kind=data["kind"],
        defined_in=data["defined_in"],
        function=function_record(data.get("function")),
        cls=class_record(name, data.get("class")),
        enum=enum_record(name, data.get("enum")),
        conditional=bool(data.get("conditional", False)),
        instance_of=data.get("instance_of"),
    )
