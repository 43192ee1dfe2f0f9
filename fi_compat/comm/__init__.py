"""Allreduce fusion on every FlashInfer release, with an unfused reference path.

One stable API over FlashInfer's allreduce + residual add + RMSNorm fusion:

* :func:`create_workspace` makes a :class:`FusionWorkspace` on the unified API (0.6.0+),
  the legacy TRT-LLM IPC API (0.2.9 to 0.5.x, still present later) or, when fusion is
  unavailable, the unfused reference path; it passes ``group`` and ``comm_backend`` only
  where the installed release takes them and never drops a group that matters.
* :func:`allreduce_residual_rmsnorm` is the per-layer call; everything that depends on
  the release was decided when the workspace was created, and every tensor is checked
  before the launch.
* :meth:`FusionWorkspace.prepare` checks a set of static buffers once and returns a
  :class:`PreparedAllReduce`, a zero-argument call with no per-call work besides the
  launch (for CUDA-graph capture and decode loops over fixed buffers).
* :func:`create_allreduce_fusion_workspace`, :func:`allreduce_fusion` and
  :class:`AllReduceFusionPattern` are drop-in replacements for ``flashinfer.comm``'s, with
  the newest signatures.
* Every other public name of the installed ``flashinfer.comm`` (``QuantizationSFLayout``,
  ``MoeAlltoAll``, ``Mapping``, ...) is handed through as it is, looked up on each access,
  and :mod:`fi_compat.comm.mnnvl` does the same for ``flashinfer.comm.mnnvl`` (with a
  ``TorchDistBackend`` whose ``bcast`` takes a group-local root on every release). A name
  the installed release lacks raises :class:`~fi_compat.errors.NameUnavailableError`, an
  ``AttributeError`` that names the release that introduced it. So
  ``import flashinfer.comm as comm`` can become ``import fi_compat.comm as comm``.

Importing this package imports neither torch nor FlashInfer; each name is loaded on first
use. ``__all__`` lists fi-compat's own names only, so ``from fi_compat.comm import *``
imports no FlashInfer.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fi_compat.comm._bound import PreparedAllReduce
    from fi_compat.comm._dropin import allreduce_fusion, create_allreduce_fusion_workspace
    from fi_compat.comm._facade import allreduce_residual_rmsnorm
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
    "PreparedAllReduce": "fi_compat.comm._bound",
    "allreduce_fusion": "fi_compat.comm._dropin",
    "allreduce_residual_rmsnorm": "fi_compat.comm._facade",
    "create_allreduce_fusion_workspace": "fi_compat.comm._dropin",
    "create_workspace": "fi_compat.comm._workspace",
}


#: Submodules that stand in for ``flashinfer.comm``'s submodules of the same name.
_SUBMODULES = frozenset({"mnnvl"})


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
