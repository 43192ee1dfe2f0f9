"""Decoded JSON -> the typed records: one parser for the per-release files and the store.

The JSON's spelling (parameters, short name records) is :mod:`fi_compat._records._format`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from fi_compat._records._classes import (
    ClassRecord,
    EnumRecord,
    FunctionRecord,
    KeptArgument,
    NameRecord,
    ParameterRecord,
)
from fi_compat._records._format import expand_parameter

__all__ = [
    "class_record",
    "enum_record",
    "function_record",
    "name_record",
]


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
        keeps=tuple(
            KeptArgument(
                item["attribute"],
                item["parameter"],
                item.get("when_none"),
                bool(item.get("none_computed", False)),
            )
            for item in data.get("keeps", ())
        ),
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
        literal=data.get("literal"),
        opaque=data.get("opaque"),
    )
