"""Allreduce fusion on every FlashInfer release, with an unfused reference path.

:func:`create_workspace` makes a :class:`FusionWorkspace` once, at start-up;
:func:`allreduce_residual_rmsnorm` is the per-layer call, and :meth:`FusionWorkspace.prepare`
checks static buffers once for a call with no per-call work. The drop-ins
(:func:`create_allreduce_fusion_workspace`, :func:`allreduce_fusion`,
:class:`AllReduceFusionPattern`) and every other name of the installed ``flashinfer.comm``,
handed through, let ``import flashinfer.comm as comm`` become
``import fi_compat.comm as comm``; ``fi_compat.comm.<submodule>`` is the installed
``flashinfer.comm.<submodule>``, handed through the same way (``from fi_compat.comm.mapping
import Mapping``). Importing this package imports neither torch nor FlashInfer (FlashInfer
is imported when a name or submodule of it is asked for). The allreduce-fusion guide,
``docs/guide/comm.md``, explains the rest.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fi_compat.comm import _submodules

if TYPE_CHECKING:
    from fi_compat.comm._call import allreduce_residual_rmsnorm
    from fi_compat.comm._dropin import allreduce_fusion, create_allreduce_fusion_workspace
    from fi_compat.comm._launch import PreparedAllReduce
    from fi_compat.comm._names import AllReduceFusionPattern
    from fi_compat.comm._workspace import FusionWorkspace, create_workspace

__all__ = [
    "AllReduceFusionPattern",
    "FusionWorkspace",
    "PreparedAllReduce",
    "allreduce_fusion",
    "allreduce_residual_rmsnorm",
    "create_allreduce_fusion_workspace",
    "create_workspace",
]

_WHERE = {
    "AllReduceFusionPattern": "fi_compat.comm._names",
    "FusionWorkspace": "fi_compat.comm._workspace",
    "PreparedAllReduce": "fi_compat.comm._launch",
    "allreduce_fusion": "fi_compat.comm._dropin",
    "allreduce_residual_rmsnorm": "fi_compat.comm._call",
    "create_allreduce_fusion_workspace": "fi_compat.comm._dropin",
    "create_workspace": "fi_compat.comm._workspace",
}


#: fi-compat's own modules that stand in for ``flashinfer.comm``'s submodules of the same
#: name; every other submodule is FlashInfer's, handed through (:mod:`._submodules`).
_SUBMODULES = frozenset({"mnnvl"})

_submodules.install()


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is not None:
        value = getattr(importlib.import_module(where), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    from fi_compat._surface import COMM
    from fi_compat.comm._names import hand_through

    return hand_through(COMM, name, __name__)


def __dir__() -> list[str]:
    return list(__all__)
