"""Parameter shapes, to compare a fake's or a real release's signature with the recorded one."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from fi_compat.testing import FunctionRecord

__all__ = ["recorded_shape", "shape"]


def shape(func: Callable[..., Any]) -> list[tuple[str, str, bool]]:
    """``(name, kind, has a default)`` of each parameter of a live callable."""
    return [
        (p.name, p.kind.name, p.default is not p.empty)
        for p in inspect.signature(func).parameters.values()
    ]


def recorded_shape(func: FunctionRecord | None) -> list[tuple[str, str, bool]]:
    """The same for a recorded function (which must be there)."""
    assert func is not None
    return [(p.name, p.kind, p.has_default) for p in func.parameters]
