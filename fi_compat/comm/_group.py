"""Process groups: does a group span the whole world, and a ``TorchDistBackend`` that
broadcasts from a group-local root.

Where the probe reports ``bcast_root_is_group_local`` as anything but ``supported``,
:func:`group_backend` subclasses FlashInfer's ``TorchDistBackend`` with a ``bcast`` that maps
the group-local root to a global rank itself. The allreduce-fusion guide,
``docs/guide/comm.md`` ("``group`` is never silently dropped"), says why.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from typing import Any, cast

__all__ = ["GroupSpan", "group_backend", "group_span", "torch_dist_backend"]


@dataclass(frozen=True)
class GroupSpan:
    """How a process group relates to the default (world) group.

    Attributes
    ----------
    size
        Processes in the group, or None when torch.distributed is not initialized.
    rank
        This process's rank in the group, or None.
    world_size
        Processes in the world, or None.
    """

    size: int | None
    rank: int | None
    world_size: int | None

    @property
    def whole_world(self) -> bool:
        """The group holds every process, so leaving it out changes nothing."""
        return self.size is not None and self.size == self.world_size


def group_span(group: Any) -> GroupSpan:
    """Measure ``group`` (None means the default group) with torch.distributed."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return GroupSpan(None, None, None)
    world = dist.get_world_size()
    if group is None:
        return GroupSpan(world, dist.get_rank(), world)
    return GroupSpan(dist.get_world_size(group), dist.get_rank(group), world)


def _bcast_group_local_root(self: Any, data: Any, root: int) -> Any:
    """``bcast`` whose ``root`` is a rank in the backend's group, as MPI defines it."""
    import torch.distributed as dist

    group = self._fi_compat_group
    source = dist.get_global_rank(group, root) if group is not None else root
    objects = [data]
    dist.broadcast_object_list(objects, src=source, group=group)
    return objects[0]


_adapters: dict[type, type] = {}
_lock = threading.Lock()


def _adapter_class(base: type) -> type:
    """``base`` with a ``bcast`` that maps a group-local root; one class per base."""
    with _lock:
        adapter = _adapters.get(base)
        if adapter is None:
            adapter = type(
                f"GroupRoot{base.__name__}",
                (base,),
                {
                    "__init__": _adapter_init(base),
                    "bcast": _bcast_group_local_root,
                    "__doc__": f"{base.__qualname__} whose bcast maps a group-local root "
                    "to a global rank (added by fi_compat.comm).",
                    "__module__": __name__,
                },
            )
            _adapters[base] = adapter
        return adapter


def _adapter_init(base: type) -> Any:
    """An ``__init__`` that runs ``base``'s and keeps the ``group`` it was given."""
    init: Any = cast(Any, base).__init__
    try:
        signature: inspect.Signature | None = inspect.signature(init)
    except (TypeError, ValueError):
        signature = None

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        group = kwargs.get("group")
        if signature is not None and "group" not in kwargs:
            try:
                group = signature.bind(self, *args, **kwargs).arguments.get("group")
            except TypeError:  # base.__init__ accepted what its signature does not say
                group = None
        self._fi_compat_group = group

    return __init__


def group_backend(backend_class: type, group: Any, *, root_is_group_local: bool) -> Any:
    """A ``TorchDistBackend`` over ``group`` whose ``bcast`` takes a group-local root.

    Parameters
    ----------
    backend_class
        The installed release's ``TorchDistBackend``.
    group
        The process group.
    root_is_group_local
        The release's own ``bcast`` already maps the root (probe answer ``supported``);
        then the class is used as it is. Otherwise a subclass replaces ``bcast``.
    """
    if root_is_group_local:
        return backend_class(group=group)
    return _adapter_class(backend_class)(group=group)


def torch_dist_backend() -> type:
    """The installed ``TorchDistBackend`` class, adapted where its ``bcast`` root is global.

    Raises
    ------
    NameUnavailableError
        The installed release has no ``TorchDistBackend`` (before 0.6.0).
    """
    from fi_compat._probe import locate
    from fi_compat._surface import MNNVL_MODULE, TORCH_DIST_BACKEND
    from fi_compat.capabilities import Status, get_capabilities
    from fi_compat.comm._names import unavailable

    caps = get_capabilities()
    found = locate(TORCH_DIST_BACKEND) if caps.comm.available else None
    if not isinstance(found, type):
        raise unavailable(MNNVL_MODULE, TORCH_DIST_BACKEND.key, caps.comm.error)
    if caps.comm.bcast_root_is_group_local.status is Status.SUPPORTED:
        return found
    return _adapter_class(found)
