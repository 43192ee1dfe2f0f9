"""How a fake binds a name its release imports from outside itself, checked one way everywhere.

``fake_flashinfer`` binds such a name (``torch``, ``cutlass.cute.typing.Float32``) to the
very object where the process has its module, and leaves it unbound otherwise, reading it
then raising an ``AttributeError`` that says where it comes from; never a stand-in.
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import pytest

from fi_compat.testing import NameRecord, StandIn
from fi_compat.testing._objects import inside

__all__ = ["is_outside", "outside_binding"]

_MISSING = object()


def is_outside(found: NameRecord) -> bool:
    """Whether ``found`` records a value or module the release imports from outside itself."""
    home = found.defined_in
    return found.kind in ("value", "module") and home is not None and not inside(home)


def outside_binding(module: ModuleType, name: str, found: NameRecord) -> Any:
    """What ``module`` binds ``name`` to, a name from outside the release: the object
    itself (never a :class:`~fi_compat.testing.StandIn`), or None where it is unbound, after
    checking that reading it says where it comes from."""
    value = getattr(module, name, _MISSING)
    if value is _MISSING:
        with pytest.raises(AttributeError, match=re.escape(f"imported from {found.defined_in}")):
            getattr(module, name)
        return None
    assert not isinstance(value, StandIn), f"{module.__name__}.{name}"
    return value
