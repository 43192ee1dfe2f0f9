"""Names a package loads on first use: its module ``__getattr__`` looks them up here.

``fi_compat`` and ``fi_compat.testing`` keep their public names in a table (name -> the
module defining it) and import that module only when the name is first read, so importing
either package stays cheap (the pytest plugin imports ``fi_compat.testing`` in every pytest
session of a project that installs fi-compat).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping

__all__ = ["attribute"]


def attribute(
    namespace: MutableMapping[str, object], table: Mapping[str, str], package: str, name: str
) -> object:
    """``package.name``, imported from the module ``table`` names and kept in the package's
    ``namespace`` (its ``globals()``), so later look-ups skip ``__getattr__``."""
    module = table.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
