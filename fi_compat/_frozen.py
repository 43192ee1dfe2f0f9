"""Pickling and deep-copying for the frozen records that hold read-only mappings.

fi-compat's answers (``Capabilities``, probed shapes, recorded releases) are frozen
dataclasses whose mappings are ``types.MappingProxyType``, which ``pickle`` and
``copy.deepcopy`` refuse. An engine hands such answers to its worker processes, so the
classes take :class:`Picklable`: their state travels as plain dicts (marked, and nested
ones too) and comes back read-only, equal to the original.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, TypeVar

__all__ = ["picklable"]


class _ReadOnly(dict):  # type: ignore[type-arg]
    """A mapping that was a ``MappingProxyType``: made one again on the way back."""


def _out(value: Any) -> Any:
    if isinstance(value, MappingProxyType):
        return _ReadOnly({key: _out(item) for key, item in value.items()})
    if type(value) is dict:
        return {key: _out(item) for key, item in value.items()}
    if type(value) is tuple:
        return tuple(_out(item) for item in value)
    if type(value) is list:
        return [_out(item) for item in value]
    return value


def _back(value: Any) -> Any:
    if isinstance(value, _ReadOnly):
        return MappingProxyType({key: _back(item) for key, item in value.items()})
    if type(value) is dict:
        return {key: _back(item) for key, item in value.items()}
    if type(value) is tuple:
        return tuple(_back(item) for item in value)
    if type(value) is list:
        return [_back(item) for item in value]
    return value


def _rebuild(cls: type[Any], state: dict[str, Any]) -> Any:
    made = object.__new__(cls)
    for name, value in state.items():
        object.__setattr__(made, name, _back(value))
    return made


def _reduce(self: Any) -> tuple[Any, ...]:
    state = {field.name: _out(getattr(self, field.name)) for field in dataclasses.fields(self)}
    return _rebuild, (type(self), state)


C = TypeVar("C", bound=type)


def picklable(cls: C) -> C:
    """Class decorator for a frozen dataclass: ``pickle`` and ``copy.deepcopy`` it field by
    field (its bases stay what they are)."""
    cls.__reduce__ = _reduce  # type: ignore[assignment]
    return cls
