"""The fake's allreduce-fusion workspaces: what each release's workspace holds and answers.

``create_allreduce_fusion_workspace`` and the workspace classes of the generated package
call the entry points at the end of this module (:func:`_new_workspace`,
:func:`_init_workspace`, :func:`_sufficient`, ...; re-exported by
:mod:`fi_compat.testing._runtime`). :class:`_Model` holds the release's arithmetic (TRT-LLM
metadata, MNNVL Lamport buffer sizes, the CuTe DSL static shape) and its choices
(``backend="auto"``, multicast, Confidential Computing, checkpointing), each gated on a
release of :mod:`fi_compat.testing._gates`. The testing guide, ``docs/guide/testing.md``,
says what is and is not modelled.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import itertools
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fi_compat.testing._gates import (
    AUTO_ASKS_MULTICAST,
    CONFIDENTIAL_COMPUTE,
    MNNVL_ALIGNMENT,
    MULTICAST_ONLY_WHEN_ASKED,
    SYMM_DEVICE_MEMORY,
    TORCH_SYMMETRIC_MEMORY,
    TWO_SHOT_ELEMENT_SIZE,
)
from fi_compat.testing._objects import (
    Default,
    FakeFlashInfer,
    StandIn,
    actual,
    assign,
    call_arguments,
    kit_for,
)

#: ``BarrierFlagCount`` and ``MAX_COMM_SIZE`` of the TRT-LLM workspace (every release).
_BARRIER_FLAGS = 256
_MAX_COMM_SIZE = 2147483647 & ~((1 << 21) - 1)
#: The MNNVL workspace's one-shot threshold in bytes and its Lamport buffer count.
_ONE_SHOT_THRESHOLD = 64 * 1024 * 8 * 2
_LAMPORT_BUFFERS = 3
_UINT32_MAX = 2**32 - 1
#: The signal pad a ``SymmDeviceMemory`` allocation ends with, and the allocation and
#: multicast granularity the fake's driver rounds to (the real one depends on the GPU).
_SIGNAL_PAD = 2048
_GRANULARITY = 2 << 20
#: Made-up device pointers.
_POINTERS = itertools.count(0x7F00_0000_0000, 0x1000_0000)
_STRATEGIES = ("ONESHOT", "TWOSHOT", "AUTO")


class Strategy(enum.Enum):
    """The fake's own names for the MNNVL strategies (the release's enum has the same)."""

    ONESHOT = 0
    TWOSHOT = 1
    AUTO = 99


def _round_up(value: int, granularity: int) -> int:
    return (value + granularity - 1) // granularity * granularity


def _is_float32(dtype: Any) -> bool:
    """``dtype == torch.float32`` without importing torch."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return bool(dtype == torch.float32)
    return repr(dtype) == "torch.float32"


def _itemsize(dtype: Any) -> int:
    """``torch.tensor([], dtype=dtype).element_size()`` without importing torch."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int) and not isinstance(size, bool) and type(dtype).__name__ == "dtype":
        return size
    raise TypeError(f"expected a torch.dtype; found {type(dtype).__name__} {dtype!r}")


def _strategy(value: Any) -> str | None:
    """The name of an MNNVL strategy member (``"ONESHOT"``, ...), else None."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, Default):
        name = value.source.rpartition(".")[2]
        return name if name in _STRATEGIES else None
    return None


def _mnnvl_required(
    tp_size: Any, num_tokens: Any, hidden_dim: Any, dtype: Any, strategy: Any
) -> Any:
    """Bytes the MNNVL workspace needs per Lamport buffer (every release from 0.6.0)."""
    elem_size = _itemsize(dtype)
    name = _strategy(strategy)
    if name == "AUTO":
        fits = num_tokens * hidden_dim * tp_size * elem_size <= _ONE_SHOT_THRESHOLD
        name = "ONESHOT" if fits else "TWOSHOT"
    if name == "ONESHOT":
        return num_tokens * hidden_dim * tp_size * elem_size
    return 2 * math.ceil(num_tokens / tp_size) * tp_size * hidden_dim * elem_size


def _trtllm_fits(
    num_tokens: Any, hidden_dim: Any, world_size: Any, dtype: Any, metadata: Mapping[str, Any]
) -> bool:
    """The TRT-LLM workspace's metadata check (the same in every release from 0.6.0)."""
    if any(key not in metadata for key in _TRTLLM_CHECKED):
        return False
    wrong_world = world_size != metadata["tp_size"]
    too_large = num_tokens * hidden_dim > metadata["max_token_num"] * metadata["hidden_dim"]
    wrong_lamport = metadata["use_fp32_lamport"] != _is_float32(dtype)
    return not (wrong_world or too_large or wrong_lamport)


_TRTLLM_CHECKED = ("max_token_num", "tp_size", "hidden_dim", "use_fp32_lamport")
#: What ``destroy()`` deletes, per backend (the rest stays readable, as in the release).
_FREED = {
    "trtllm": ("ipc_handles", "workspace_tensor", "mem_handles", "metadata"),
    "mnnvl": (
        "buffer_flags",
        "uc_ptrs_dev",
        "uc_ptr_local",
        "mc_ptr",
        "handle",
        "mcast_buffer_handle",
        "ptrs",
        "tensor",
    ),
}


@dataclass
class WorkspaceState:
    """What the fake knows about a workspace beyond its attributes."""

    backend: str | None
    checkpointable: bool = False
    attached: bool = True
    destroyed: bool = False


class _Model:
    """The behaviour of the imitated release's allreduce-fusion workspaces.

    Each fact is gated on the release that brought it (a gate of
    :mod:`fi_compat.testing._gates`); the facts come from reading each release's
    ``flashinfer/comm`` sources (``allreduce.py``, ``trtllm_ar.py``,
    ``trtllm_mnnvl_ar.py``, ``mnnvl.py``, ``mnnvl_cutedsl_ar.py``).
    """

    def __init__(self, kit: FakeFlashInfer) -> None:
        self.kit = kit
        self.version = kit.record.version
        #: 0.6.16 made the MNNVL backend refuse Confidential Computing, and the TRT-LLM
        #: workspace fall back to torch symmetric memory under it.
        self.confidential = (
            kit.confidential_compute and self.version >= CONFIDENTIAL_COMPUTE.version
        )
        #: Confidential Computing has no NVLink multicast.
        self.multicast = kit.multicast and not kit.confidential_compute

    # -- facts ---------------------------------------------------------------------------

    @property
    def torch_symmetric_memory(self) -> bool:
        """0.6.10 .. 0.6.14 allocate both workspaces with torch symmetric memory."""
        return TORCH_SYMMETRIC_MEMORY.version <= self.version < SYMM_DEVICE_MEMORY.version

    @property
    def allocation_needs_multicast(self) -> bool:
        """Up to 0.6.15.post1 a ``SymmDeviceMemory`` refuses a GPU without multicast even
        when it was asked for no multicast buffer (0.6.16 checks only when asked)."""
        return self.version < MULTICAST_ONLY_WHEN_ASKED.version

    def _no_multicast(self) -> RuntimeError:
        return RuntimeError(
            f"fake flashinfer {self.kit.version}: its SymmDeviceMemory needs NVLink multicast, "
            "which the imitated GPUs do not support (fake_flashinfer(multicast=False) or "
            "confidential_compute=True)"
        )

    # -- the factory ---------------------------------------------------------------------

    def create(self, values: Mapping[str, Any]) -> Any:
        """``create_allreduce_fusion_workspace`` of the release."""
        args = call_arguments(values, bound=None)
        backend: Any = args.get("backend")
        world_size: Any = args.get("world_size")
        options = {
            name: args[name] for name in self.kit._factory_options if args.get(name) is not None
        }
        if "mnnvl-cutedsl" in self.kit._workspace_classes:  # 0.7.2.post1
            if backend == "mnnvl-cutedsl":
                ignored = [
                    name for name in ("gpus_per_node", "comm_backend") if args.get(name) is not None
                ]
                if args.get("force_oneshot_support"):
                    ignored.append("force_oneshot_support")
                if ignored:
                    raise ValueError(f"backend='mnnvl-cutedsl' takes none of {', '.join(ignored)}")
                return self.build(
                    "mnnvl-cutedsl",
                    {
                        "tp_size": world_size,
                        "tp_rank": args.get("rank"),
                        "max_token_num": args.get("max_token_num"),
                        "hidden_dim": args.get("hidden_dim"),
                        "dtype": args.get("dtype"),
                        "group": args.get("group"),
                        **options,
                    },
                )
            if options:
                raise ValueError(
                    f"only backend='mnnvl-cutedsl' takes {', '.join(options)}; found {backend!r}"
                )
        if backend == "auto":
            suitable = []
            if world_size <= 16:
                suitable.append("trtllm")
            if self.version < AUTO_ASKS_MULTICAST.version or self.multicast:
                # Up to 0.6.15.post1 MNNVL is always suitable; 0.6.16 asks every rank
                # whether its GPU supports multicast.
                suitable.append("mnnvl")
            if not suitable:
                raise ValueError(f"no backend suits world_size={world_size!r}")
            backend = "mnnvl" if "mnnvl" in suitable else suitable[0]
        common = {
            "max_token_num": args.get("max_token_num"),
            "hidden_dim": args.get("hidden_dim"),
            "dtype": args.get("dtype"),
        }
        if backend == "trtllm":
            return self.build(
                "trtllm",
                {"tp_size": world_size, "tp_rank": args.get("rank"), **common},
            )
        if backend == "mnnvl":
            if self.confidential:
                raise ValueError(
                    "the mnnvl backend needs NVLink multicast, which Confidential Computing "
                    "does not have; use backend='trtllm'"
                )
            buffer_size = None
            if args.get("force_oneshot_support"):
                buffer_size = _mnnvl_required(
                    world_size,
                    common["max_token_num"],
                    common["hidden_dim"],
                    common["dtype"],
                    Strategy.ONESHOT,
                )
            return self.build(
                "mnnvl",
                {
                    "world_size": world_size,
                    "rank": args.get("rank"),
                    "tp_size": world_size,
                    "tp_rank": args.get("rank"),
                    "max_num_tokens": common["max_token_num"],
                    "hidden_dim": common["hidden_dim"],
                    "dtype": common["dtype"],
                    "buffer_size_in_bytes": buffer_size,
                },
            )
        raise RuntimeError(f"fake flashinfer {self.kit.version}: unknown backend {backend!r}")

    def build(self, backend: str, params: Mapping[str, Any]) -> Any:
        where = self.kit._workspace_classes.get(backend)
        cls: Any = _FallbackWorkspace
        if where is not None:
            cls = getattr(importlib.import_module(where[0]), where[1])
        workspace = object.__new__(cls)
        if backend == "mnnvl-cutedsl":
            params = {**_init_defaults(cls), **params}
        self.setup(workspace, backend, params)
        return workspace

    # -- construction --------------------------------------------------------------------

    def setup(self, workspace: Any, backend: str, params: Mapping[str, Any]) -> None:
        """Give ``workspace`` what the release's ``__init__`` for ``backend`` gives it."""
        state = WorkspaceState(backend or None)
        if backend == "trtllm":
            values = self._trtllm(params, state)
        elif backend == "mnnvl":
            values = self._mnnvl(params, state)
        elif backend == "mnnvl-cutedsl":
            values = self._cutedsl(params)
        else:  # the base class
            values = {"world_size": params.get("world_size"), "rank": params.get("rank")}
        values.setdefault("_destroyed", False)
        recorded: tuple[str, ...] | None = getattr(type(workspace), "_fi_attributes", None)
        if recorded is not None:
            values = {name: values.get(name) for name in recorded} | {
                "_destroyed": values["_destroyed"]
            }
        vars(workspace)["_fi_state"] = state
        vars(workspace)["destroyed"] = False
        assign(workspace, values)
        if backend and not hasattr(type(workspace), "backend"):
            vars(workspace)["backend"] = backend  # files recorded before schema 2

    def _trtllm(self, params: Mapping[str, Any], state: WorkspaceState) -> dict[str, Any]:
        tp_size: Any = params.get("tp_size")
        tp_rank: Any = params.get("tp_rank")
        max_token_num: Any = params.get("max_token_num")
        hidden_dim: Any = params.get("hidden_dim")
        fp32 = _is_float32(params.get("dtype"))
        # 0.6.16: use_symm_dev_mem = not is_confidential_compute() (True before).
        symmetric = not self.confidential
        needs_multicast = self.allocation_needs_multicast and not self.torch_symmetric_memory
        if symmetric and needs_multicast and not self.multicast:
            raise self._no_multicast()
        # 0.7.2 sizes the two-shot buffer by the element size (fp16 before).
        elem_size = 4 if fp32 and self.version >= TWO_SHOT_ELEMENT_SIZE.version else 2
        buffer_size = tp_size * max_token_num * hidden_dim * elem_size
        flag_size = tp_size * _BARRIER_FLAGS * 4
        lamport_comm_size = tp_size * max_token_num * hidden_dim * (4 if fp32 else 2)
        lamport_comm_size = min(lamport_comm_size, _MAX_COMM_SIZE)
        metadata: dict[str, Any] = {
            "tp_rank": tp_rank,
            "tp_size": tp_size,
            "max_token_num": max_token_num,
            "hidden_dim": hidden_dim,
            "use_fp32_lamport": fp32,
            "buffer_size": buffer_size,
            "flag_size": flag_size,
            "lamport_comm_size": lamport_comm_size,
            "lamport_buffer_size": lamport_comm_size * 3,
        }
        if symmetric and self.version >= SYMM_DEVICE_MEMORY.version:
            metadata["control_flag_ptr"] = next(_POINTERS)  # 0.6.15+
        ipc_handles = [[next(_POINTERS) for _ in range(_count(tp_size))] for _ in range(3)]
        tensor = StandIn("workspace_tensor")
        mem_handles: list[Any] = [StandIn("mem_handle") for _ in range(3)] if symmetric else []
        internal: tuple[Any, ...] = (ipc_handles, tensor, mem_handles, metadata)
        if not symmetric:
            internal = (ipc_handles, tensor, metadata)
        # Checkpointing needs SymmDeviceMemory handles (not torch symmetric memory).
        state.checkpointable = symmetric and not self.torch_symmetric_memory
        return {
            "world_size": tp_size,
            "rank": tp_rank,
            "_internal_workspace": internal,
            "ipc_handles": ipc_handles,
            "workspace_tensor": tensor,
            "mem_handles": mem_handles,
            "metadata": metadata,
        }

    def _mnnvl(self, params: Mapping[str, Any], state: WorkspaceState) -> dict[str, Any]:
        tp_size: Any = params.get("tp_size")
        tp_rank: Any = params.get("tp_rank")
        hidden_dim: Any = params.get("hidden_dim")
        dtype: Any = params.get("dtype")
        max_num_tokens: Any = params.get("max_num_tokens")
        requested: Any = params.get("buffer_size_in_bytes")
        if requested is None:
            if max_num_tokens is None or hidden_dim is None or dtype is None:
                raise AssertionError(
                    "max_num_tokens, hidden_dim and dtype are needed without buffer_size_in_bytes"
                )
            elem_size = _itemsize(dtype)
            oneshot_tokens = min(
                _ONE_SHOT_THRESHOLD // (tp_size * elem_size * hidden_dim), max_num_tokens
            )
            one_shot = _mnnvl_required(tp_size, oneshot_tokens, hidden_dim, dtype, Strategy.ONESHOT)
            two_shot = _mnnvl_required(tp_size, max_num_tokens, hidden_dim, dtype, Strategy.TWOSHOT)
            requested = max(one_shot, two_shot)
        # 0.6.18 aligns the buffer to the two-shot stages (2 x 16 bytes); 16 bytes before.
        aligned = self.version >= MNNVL_ALIGNMENT.version
        alignment = 32 if aligned else 16
        if aligned:
            requested = _round_up(requested, alignment)
        if requested > _UINT32_MAX:
            raise ValueError(f"an MNNVL buffer of {requested} bytes exceeds UINT32_MAX")
        total = requested * _LAMPORT_BUFFERS
        mc_ptr = next(_POINTERS)
        if self.torch_symmetric_memory:
            allocated = total // 4 * 4  # float32 elements of torch symmetric memory
            if not self.multicast:
                mc_ptr = 0  # torch reports a null multicast pointer
        else:
            if not self.multicast:
                raise self._no_multicast()
            allocated = _round_up(total + _SIGNAL_PAD, _GRANULARITY) - _SIGNAL_PAD
        buffer_size_bytes = allocated // _LAMPORT_BUFFERS // alignment * alignment
        # Checkpointing is 0.6.15+, on SymmDeviceMemory.
        state.checkpointable = not self.torch_symmetric_memory
        values: dict[str, Any] = {
            "world_size": params.get("world_size", tp_size),
            "rank": tp_rank,
            "tp_size": tp_size,
            "buffer_size_bytes": buffer_size_bytes,
            "workspace_size_bytes": buffer_size_bytes * _LAMPORT_BUFFERS,
            "buffer_flags": StandIn("buffer_flags"),
            "uc_ptrs_dev": next(_POINTERS),
            "uc_ptr_local": next(_POINTERS),
            "mc_ptr": mc_ptr,
        }
        pointers = [next(_POINTERS) for _ in range(_count(tp_size))]
        if self.version < TORCH_SYMMETRIC_MEMORY.version:
            values["mcast_buffer_handle"] = StandIn("mcast_buffer_handle")
        elif self.torch_symmetric_memory:
            values |= {"ptrs": pointers, "tensor": StandIn("tensor"), "handle": StandIn("handle")}
        else:
            values |= {"ptrs": pointers, "handle": StandIn("handle")}
        return values

    def _cutedsl(self, params: Mapping[str, Any]) -> dict[str, Any]:
        tp_size: Any = params.get("tp_size")
        tp_rank: Any = params.get("tp_rank")
        if not 0 <= tp_rank < tp_size:
            raise ValueError(f"tp_rank must be in [0, {tp_size}); found {tp_rank!r}")
        values = {key: value for key, value in params.items() if key not in ("tp_size", "tp_rank")}
        return {"world_size": tp_size, "rank": tp_rank, "_protocols": {}, **values}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and 0 <= value <= 1024 else 0


def _init_defaults(cls: Any) -> dict[str, Any]:
    """The literal defaults of a generated class's ``__init__``."""
    try:
        parameters = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: actual(p.default) for p in parameters if p.default is not p.empty}


class _FallbackWorkspace:
    """Used only if a release returns a workspace class that was not recorded."""

    destroyed = False

    def destroy(self) -> None:
        self.destroyed = True


def new_workspace(token: str, values: Mapping[str, Any]) -> Any:
    """``create_allreduce_fusion_workspace`` (called by generated code)."""
    return _Model(kit_for(token)).create(values)


def init_workspace(token: str, workspace: Any, backend: str, values: Mapping[str, Any]) -> None:
    """A workspace class's ``__init__`` (called by generated code)."""
    args = call_arguments(values)
    mapping = args.pop("mapping", None)
    if mapping is not None:  # the MNNVL workspace takes a Mapping
        world_size = getattr(mapping, "world_size", None)
        rank = getattr(mapping, "rank", None)
        tp_size = getattr(mapping, "tp_size", None)
        tp_rank = getattr(mapping, "tp_rank", None)
        args |= {
            "world_size": world_size,
            "rank": rank,
            "tp_size": world_size if tp_size is None else tp_size,
            "tp_rank": rank if tp_rank is None else tp_rank,
        }
    _Model(kit_for(token)).setup(workspace, backend, args)


def _state(workspace: Any) -> WorkspaceState | None:
    state = vars(workspace).get("_fi_state")
    return state if isinstance(state, WorkspaceState) else None


def sufficient(workspace: Any, values: Mapping[str, Any]) -> Any:
    """``is_buffer_size_sufficient`` (called by generated code)."""
    state = _state(workspace)
    if state is None or state.backend is None:
        return None  # the abstract method of the base class
    args = call_arguments(values)
    tp_size, num_tokens = args.get("tp_size"), args.get("num_tokens")
    hidden_dim, dtype = args.get("hidden_dim"), args.get("dtype")
    if state.backend == "trtllm":
        return _trtllm_fits(num_tokens, hidden_dim, tp_size, dtype, workspace.metadata)
    if state.backend == "mnnvl":
        strategy = values.get("strategy", Strategy.AUTO)
        required = _mnnvl_required(tp_size, num_tokens, hidden_dim, dtype, strategy)
        return not required > workspace.buffer_size_bytes
    return (
        tp_size == workspace.world_size
        and num_tokens <= workspace.max_token_num
        and hidden_dim == workspace.hidden_dim
        and dtype == workspace.dtype
    )


def required_bytes(values: Mapping[str, Any]) -> Any:
    """MNNVL's ``get_required_buffer_size_bytes`` (called by generated code)."""
    args = dict(values)
    return _mnnvl_required(
        args.get("tp_size"),
        args.get("num_tokens"),
        args.get("hidden_dim"),
        args.get("dtype"),
        args.get("strategy", Strategy.AUTO),
    )


def checkpoint(workspace: Any, action: str) -> None:
    """``checkpoint_prepare`` / ``checkpoint_restore`` (called by generated code)."""
    state = _state(workspace)
    if state is None:
        return
    if state.destroyed:
        raise AttributeError(f"{type(workspace).__name__!r} object was destroyed")
    if not state.checkpointable:
        raise NotImplementedError(
            "checkpointing needs SymmDeviceMemory handles; this workspace is backed by torch "
            "symmetric memory"
        )
    state.attached = action == "restore"


def destroy_workspace(workspace: Any) -> None:
    """A workspace's idempotent ``destroy`` (called by generated code)."""
    state = _state(workspace)
    if vars(workspace).get("_destroyed") or (state is not None and state.destroyed):
        return
    if state is not None:
        for name in _FREED.get(state.backend or "", ()):
            vars(workspace).pop(name, None)
        state.destroyed = True
    vars(workspace)["_destroyed"] = True
    vars(workspace)["destroyed"] = True
