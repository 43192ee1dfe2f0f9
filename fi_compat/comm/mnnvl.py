"""``flashinfer.comm.mnnvl`` for ``from fi_compat.comm.mnnvl import ...``.

Every public name of the installed release's ``flashinfer.comm.mnnvl`` is handed through as
it is, except :data:`TorchDistBackend`, whose ``bcast`` takes a group-local root on every
release. The allreduce-fusion guide, ``docs/guide/comm.md`` ("Every other name is handed
through"), says how.

Importing this module imports neither torch nor FlashInfer.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from typing import Any

from fi_compat._surface import MNNVL_MODULE, TORCH_DIST_BACKEND

__all__ = ["TorchDistBackend"]

TorchDistBackend: type
"""The installed release's class of this name, adapted where its ``bcast`` needs it.

Where that class's ``bcast(data, root)`` reads ``root`` as a global rank (0.6.0 to 0.6.12;
the probe's ``bcast_root_is_group_local`` finding), this is a subclass whose ``bcast`` maps
the group-local root to the global rank with ``torch.distributed.get_global_rank`` first;
from 0.6.13, whose class does that itself, it is FlashInfer's class unchanged.
Looked up on each access (declared here for type checkers, ``__all__`` and this reference);
raises :class:`~fi_compat.errors.NameUnavailableError` where the release has no such class.

.. versionadded:: 0.2.0
"""


def __getattr__(name: str) -> Any:
    from fi_compat.comm._names import hand_through

    if name == TORCH_DIST_BACKEND.key:
        from fi_compat.comm._group import torch_dist_backend

        return torch_dist_backend()
    return hand_through(MNNVL_MODULE, name, __name__)


def __dir__() -> list[str]:
    return list(__all__)
