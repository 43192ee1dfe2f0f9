"""``FusionWorkspace`` and :func:`create_workspace`: every release decision, made once.

Creating a workspace decides which FlashInfer API runs it (the unified
``create_allreduce_fusion_workspace`` / ``allreduce_fusion`` of 0.6.0+, the legacy TRT-LLM
IPC pair of 0.2.9+, or the unfused reference path), which keywords the installed release
gets, how a process group reaches the rendezvous, and binds the per-call path. Every
decision is made from :func:`fi_compat.get_capabilities`, never from the version number,
and logged once at debug level.
"""

from __future__ import annotations

import importlib
import inspect
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from fi_compat._arguments import (
    describe,
    require_bool,
    require_choice,
    require_instance,
    require_int,
    require_real,
)
from fi_compat._log import get_logger
from fi_compat._signature import inspect_callable
from fi_compat._surface import GATES
from fi_compat.capabilities import Capabilities, get_capabilities
from fi_compat.comm._checks import Spec, call_scalars, destroyed_error
from fi_compat.comm._fused import (
    LEGACY_CALL,
    UNIFIED_CALL,
    Bound,
    Launcher,
    Preparer,
    Runner,
    bind_unified,
    bind_with_launch,
    legacy_launch,
)
from fi_compat.comm._group import GroupSpan, group_backend, group_span
from fi_compat.comm._pattern import AllReduceFusionPattern
from fi_compat.comm._prepared import PreparedAllReduce
from fi_compat.comm._reference import reference_launch
from fi_compat.determinism import ensure_fusion_allowed
from fi_compat.errors import (
    CapabilityMissingError,
    FlashInferUnavailableError,
    GroupNotSupportedError,
    InvalidArgumentError,
    WorkspaceMismatchError,
    explain,
)

if TYPE_CHECKING:
    import torch

__all__ = ["Api", "FusionWorkspace", "create_workspace"]

logger = get_logger(__name__)

#: Which path runs a workspace.
Api = Literal["unified", "legacy", "reference"]

UNIFIED_FACTORY = "create_allreduce_fusion_workspace"
UNIFIED_FUSION = "allreduce_fusion"
LEGACY_FACTORY = "trtllm_create_ipc_workspace_for_all_reduce_fusion"
LEGACY_FUSION = "trtllm_allreduce_fusion"
LEGACY_DESTROY = "trtllm_destroy_ipc_workspace_for_all_reduce_fusion"

_DTYPES = ("float16", "bfloat16", "float32")
#: FlashInfer's allreduce-fusion backends (``backend=`` of the unified factory, 0.6.0+).
_BACKENDS = ("auto", "trtllm", "mnnvl", "mnnvl-cutedsl")
_APIS = ("auto", "unified", "legacy", "reference")
#: Rank counts the TRT-LLM fusion kernel dispatches on (``allreduce_fusion_op`` in
#: trtllm_allreduce_fusion.cuh, every release since 0.2.9; anything else fails at launch
#: with "unsupported ranks number! Supported ranks: 2, 4, 8, 16"). It runs both the
#: legacy API and the unified API's "trtllm" backend.
TRTLLM_RANKS = (2, 4, 8, 16)
#: Factory keywords fi-compat sets itself, from create_workspace's own arguments, and
#: checks every call against (or, for the legacy factory, that change what it returns):
#: factory_options may not hold them, so what FlashInfer allocates is what is checked.
_RESERVED_OPTIONS = frozenset(
    {
        "world_size",
        "rank",
        "max_token_num",
        "hidden_dim",
        "dtype",
        "backend",
        "group",
        "comm_backend",
        "gpus_per_node",
        "force_oneshot_support",
        "device",
        "api",
        "fallback",
        # the legacy trtllm_create_ipc_workspace_for_all_reduce_fusion's names
        "tp_rank",
        "tp_size",
        "use_fp32_lamport",
        "create_metadata",
        "use_symm_dev_mem",
    }
)
#: Value checks of the unified factory's keyword-only options (0.7.x, mnnvl-cutedsl).
_BOOL_OPTIONS = frozenset(
    {
        "include_shared_expert",
        "add_residual",
        "write_residual_output",
        "apply_rms_norm",
        "dynamic_fp8",
        "write_norm_output",
    }
)
_REAL_OPTIONS: dict[str, float | None] = {
    "rms_eps": 0.0,
    "weight_bias": None,
    "routed_scaling_factor": None,
}


class FusionWorkspace:
    """An allreduce-fusion workspace bound to the installed FlashInfer release.

    Obtain one from :func:`create_workspace` (or the drop-in
    :func:`fi_compat.comm.create_allreduce_fusion_workspace`); pass it to
    :func:`fi_compat.comm.allreduce_residual_rmsnorm`, or :meth:`prepare` a call on static
    buffers. ``destroy()`` is idempotent and frees the buffers with the destroy function
    of the workspace's own API; the workspace is also a context manager.

    Attributes
    ----------
    api
        ``"unified"``, ``"legacy"`` or ``"reference"`` (unfused, no FlashInfer buffers).
    backend
        FlashInfer's backend (``"trtllm"``, ``"mnnvl"``, ...), the requested one when the
        workspace does not say, or ``"reference"``.
    world_size, rank, max_token_num, hidden_dim, dtype, group
        What the workspace was created for.
    native
        FlashInfer's workspace object (unified), the tuple the legacy factory returned,
        or None (reference).
    comm_backend
        The ``comm_backend`` passed to FlashInfer, if any.
    reason
        Why a reference workspace is unfused; None for a fused one.
    decisions
        What was decided at creation, one sentence each (also logged at debug level).
    """

    __slots__ = (
        "_destroy",
        "_destroyed",
        "_prepare",
        "_prepared",
        "_run",
        "api",
        "backend",
        "comm_backend",
        "decisions",
        "group",
        "native",
        "reason",
        "spec",
    )

    def __init__(
        self,
        *,
        api: Api,
        backend: str,
        spec: Spec,
        group: Any,
        bound: Bound,
        destroy: Callable[[], None] | None,
        native: Any = None,
        comm_backend: Any = None,
        reason: str | None = None,
        decisions: tuple[str, ...] = (),
    ) -> None:
        self.api: Api = api
        self.backend = backend
        self.spec = spec
        self.group = group
        self.native = native
        self.comm_backend = comm_backend
        self.reason = reason
        self.decisions = decisions
        self._run: Runner = bound.run
        self._prepare: Preparer = bound.prepare
        self._prepared: weakref.WeakSet[PreparedAllReduce] = weakref.WeakSet()
        self._destroy = destroy
        self._destroyed = False

    # -- what it was made for ----------------------------------------------------------

    @property
    def world_size(self) -> int:
        """Ranks in the group."""
        return self.spec.world_size

    @property
    def rank(self) -> int:
        """This process's rank in the group."""
        return self.spec.rank

    @property
    def max_token_num(self) -> int:
        """The most tokens one call may carry."""
        return self.spec.max_token_num

    @property
    def hidden_dim(self) -> int:
        """The hidden size every call must have."""
        return self.spec.hidden_dim

    @property
    def dtype(self) -> torch.dtype:
        """The element type every tensor must have."""
        return self.spec.dtype

    @property
    def fused(self) -> bool:
        """True when calls run FlashInfer's fused kernel."""
        return self.api != "reference"

    @property
    def destroyed(self) -> bool:
        """True once :meth:`destroy` has run."""
        return self._destroyed

    # -- lifetime ----------------------------------------------------------------------

    def destroy(self) -> None:
        """Free the buffers with this API's destroy function; later calls do nothing.

        Unified: the FlashInfer workspace's own ``destroy()``. Legacy:
        ``trtllm_destroy_ipc_workspace_for_all_reduce_fusion(ipc_handles, group=...)``
        (never the non-fusion ``trtllm_destroy_ipc_workspace_for_all_reduce``).
        Afterwards every call, prepared ones included, raises
        :class:`~fi_compat.errors.WorkspaceDestroyedError`.
        """
        if self._destroyed:
            return
        self._destroyed = True
        api = self.api

        def refuse(*_: Any) -> NoReturn:
            raise destroyed_error(api)

        self._run = self._prepare = refuse
        for prepared in list(self._prepared):
            prepared._revoke(refuse)
        self._prepared.clear()
        destroy, self._destroy = self._destroy, None
        if destroy is not None:
            destroy()

    def __enter__(self) -> FusionWorkspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.destroy()

    # -- prepared calls ----------------------------------------------------------------

    def prepare(
        self,
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        *,
        eps: float = 1e-6,
        norm_out: torch.Tensor | None = None,
        residual_out: torch.Tensor | None = None,
        use_oneshot: bool | None = None,
        fp32_acc: bool = False,
        trigger_completion_at_end: bool = True,
        launch_with_pdl: bool = True,
    ) -> PreparedAllReduce:
        """Check these tensors once and return a call that launches on them.

        The arguments are those of :func:`~fi_compat.comm.allreduce_residual_rmsnorm`,
        checked the same way (every :class:`~fi_compat.errors.WorkspaceMismatchError`
        is raised here); outputs left as None are allocated now. The returned
        :class:`~fi_compat.comm.PreparedAllReduce` takes no arguments: each call launches
        the fused kernel (or the reference path) on these very tensors, reading whatever
        values they hold, with no per-call checks. It is for static buffers, such as
        those of a CUDA graph, that keep their shape and storage; prepare one per layer
        and batch size.

        Raises
        ------
        WorkspaceMismatchError
            A tensor does not fit the workspace.
        InvalidArgumentError
            A switch is not a bool (``use_oneshot``: not None or a bool), or ``eps`` is
            not a finite real number >= 0.
        WorkspaceDestroyedError
            The workspace was destroyed (a prepared call raises it too once it is).
        CapabilityMissingError
            ``launch_with_pdl=True, trigger_completion_at_end=False`` on a release that
            can honour neither (see :attr:`decisions`).
        """
        eps = call_scalars(eps, use_oneshot, fp32_acc, trigger_completion_at_end, launch_with_pdl)
        call, norm_out, residual_out = self._prepare(
            input,
            residual,
            weight,
            eps,
            norm_out,
            residual_out,
            use_oneshot,
            fp32_acc,
            trigger_completion_at_end,
            launch_with_pdl,
        )
        prepared = PreparedAllReduce(self, call, norm_out, residual_out, int(input.shape[0]))
        self._prepared.add(prepared)
        return prepared

    def __getattr__(self, name: str) -> Any:
        # Drop-in use: attributes of FlashInfer's own workspace (is_buffer_size_sufficient,
        # workspace_tensor, ...) are reachable through this object.
        if name.startswith("_"):
            raise AttributeError(name)
        native = object.__getattribute__(self, "native")
        if self.api == "unified" and native is not None:
            return getattr(native, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else "live"
        return (
            f"FusionWorkspace(api={self.api!r}, backend={self.backend!r}, "
            f"world_size={self.world_size}, rank={self.rank}, "
            f"max_token_num={self.max_token_num}, hidden_dim={self.hidden_dim}, "
            f"dtype={self.dtype}, {state})"
        )

    @property
    def ipc_handles(self) -> Any:
        """Legacy workspaces: the IPC handles the factory returned."""
        if self.api == "legacy":
            return self.native[0]
        return getattr(self.native, "ipc_handles", None)

    @property
    def workspace_tensor(self) -> Any:
        """Legacy workspaces: the pointer tensor passed as ``workspace_ptrs``."""
        if self.api == "legacy":
            return self.native[1]
        return getattr(self.native, "workspace_tensor", None)


# ------------------------------------------------------------------------------ helpers


def _accepts(caps: Capabilities, function: str, keyword: str) -> bool:
    shape = caps.comm.shapes.get(function)
    return shape is not None and shape.support(keyword).supported


def _required(function: Callable[..., Any]) -> set[str] | None:
    """Names of parameters without a default, or None when unreadable."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    return {
        p.name
        for p in parameters
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }


def _check_call(
    caps: Capabilities, name: str, function: Callable[..., Any], ours: set[str]
) -> None:
    """Refuse to bind a call the installed ``name`` would reject with ``TypeError``."""
    shape = caps.comm.shapes.get(name)
    keywords = set(shape.keywords) if shape is not None and shape.keywords is not None else None
    unknown = sorted(ours - keywords) if keywords is not None else []
    required = _required(function)
    missing = sorted(required - ours) if required is not None else []
    if unknown or missing:
        found = []
        if unknown:
            found.append(f"no keyword {', '.join(unknown)}")
        if missing:
            found.append(f"required parameter {', '.join(missing)}")
        raise CapabilityMissingError(
            explain(
                f"flashinfer.comm.{name} to take {', '.join(sorted(ours))}",
                f"{'; '.join(found)} in the installed release",
                fix="report this release to fi-compat; until then use api='reference'",
            ),
            feature=name,
        )


def _spec(
    world_size: int,
    rank: int,
    max_token_num: int,
    hidden_dim: int,
    dtype: Any,
    device: Any,
) -> Spec:
    import torch

    for label, value in (
        ("world_size", world_size),
        ("max_token_num", max_token_num),
        ("hidden_dim", hidden_dim),
    ):
        require_int(label, value, minimum=1, error=WorkspaceMismatchError)
    require_int(
        "rank",
        rank,
        minimum=0,
        maximum=world_size - 1,
        error=WorkspaceMismatchError,
        fix="pass this process's rank in the group",
    )
    allowed = tuple(getattr(torch, name) for name in _DTYPES)
    if not any(dtype is candidate for candidate in allowed):
        raise WorkspaceMismatchError(
            explain(
                f"dtype one of {', '.join(f'torch.{name}' for name in _DTYPES)}",
                f"{dtype!r}",
                fix="allreduce fusion runs on half, bfloat16 or float32 activations",
            )
        )
    return Spec(world_size, rank, max_token_num, hidden_dim, dtype, _device_index(device))


def _device_index(device: Any) -> int:
    """``Tensor.get_device()`` of tensors on ``device``: -1 for the CPU, else the index."""
    import torch

    if device is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else -1
    wrong = InvalidArgumentError(
        explain(
            "device to be None, 'cpu', 'cuda', 'cuda:<index>', a CUDA index or a "
            "torch.device of those",
            f"{device!r}",
            fix="pass the CUDA device the tensors live on",
        )
    )
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise wrong
    if isinstance(device, int):
        if device < 0:
            raise wrong
        return device  # a CUDA index, as torch.device(index) reads it on a CUDA machine
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{wrong} (torch: {error})") from None
    if resolved.type == "cpu":
        return -1
    if resolved.type != "cuda":
        raise wrong
    index: int | None = resolved.index  # None for a bare "cuda"
    if index is not None:
        return index
    if not torch.cuda.is_available():
        raise InvalidArgumentError(
            explain(
                "a CUDA device for device='cuda'",
                "no CUDA device in this process",
                fix="pass device='cuda:<index>' explicitly, or 'cpu'",
            )
        )
    return torch.cuda.current_device()


def _check_group(span: GroupSpan, spec: Spec) -> None:
    if span.size is None:
        return
    if span.size != spec.world_size or span.rank != spec.rank:
        raise WorkspaceMismatchError(
            explain(
                f"world_size={spec.world_size}, rank={spec.rank} to describe the group",
                f"a group of {span.size} processes in which this process is rank {span.rank}",
                fix="pass torch.distributed.get_world_size(group) and get_rank(group)",
            )
        )


def _import(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _pattern(comm: Any) -> int:
    installed = getattr(comm, "AllReduceFusionPattern", None)
    value = getattr(installed, "kARResidualRMSNorm", AllReduceFusionPattern.kARResidualRMSNorm)
    return int(value)


def _missing(feature: str, what: str, found: str, fix: str) -> CapabilityMissingError:
    gate = GATES.get(feature)
    return CapabilityMissingError(
        explain(what, found, changed_in=gate.introduced_in if gate else None, fix=fix),
        feature=feature,
        introduced_in=gate.introduced_in if gate else None,
    )


def _group_error(caps: Capabilities, function: str, span: GroupSpan, why: str) -> Exception:
    gate = GATES["group"]
    return GroupNotSupportedError(
        explain(
            f"flashinfer.comm.{function} to honour group= (a group of {span.size} of "
            f"{span.world_size} processes)",
            f"flashinfer {caps.flashinfer.version}: {why}",
            changed_in=gate.introduced_in,
            fix=f"upgrade flashinfer-python to {gate.introduced_in} or later, or use the "
            "unfused path (api='reference'); dropping the group would run the rendezvous "
            "over the whole world and hang",
        ),
        feature="group",
        introduced_in=gate.introduced_in,
    )


def _check_arguments(
    api: Any, backend: Any, gpus_per_node: Any, force_oneshot_support: Any, fallback: Any
) -> None:
    """The plain arguments of :func:`create_workspace` (sizes and dtype: see ``_spec``)."""
    require_choice("api", api, _APIS)
    require_choice(
        "backend",
        backend,
        _BACKENDS,
        fix="pass one of FlashInfer's allreduce-fusion backends ('auto' picks one)",
    )
    require_int("gpus_per_node", gpus_per_node, minimum=1, optional=True)
    require_bool("force_oneshot_support", force_oneshot_support)
    require_bool("fallback", fallback)


def _check_factory_options(factory_options: Any) -> Mapping[str, Any]:
    """``factory_options`` as a mapping FlashInfer may take, or InvalidArgumentError.

    Keys must be strings and none that fi-compat sets itself (see ``_RESERVED_OPTIONS``):
    an option that changed what FlashInfer allocates would let through calls the buffers
    cannot hold. The values of the unified factory's known options are checked too.
    """
    if factory_options is None:
        return {}
    require_instance(
        "factory_options",
        factory_options,
        Mapping,
        "a mapping of keyword names to values",
        optional=True,
        fix="pass a dict, e.g. factory_options={'top_k': 8}",
    )
    options = dict(factory_options)
    for name, value in options.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(
                explain(
                    "factory_options keys to be keyword names (str)",
                    f"the key {describe(name)}",
                )
            )
        if name in _RESERVED_OPTIONS:
            raise InvalidArgumentError(
                explain(
                    "factory_options without the keywords fi-compat sets itself",
                    f"factory_options[{name!r}]={value!r}",
                    fix=f"pass {name} as create_workspace's own argument (tp_rank, tp_size: "
                    "rank, world_size; use_fp32_lamport: dtype=torch.float32): fi-compat "
                    "checks every call against what the workspace was created with, so "
                    "FlashInfer must allocate exactly that",
                )
            )
        if value is None:
            continue
        if name in _BOOL_OPTIONS:
            require_bool(f"factory_options[{name!r}]", value)
        elif name in _REAL_OPTIONS:
            require_real(f"factory_options[{name!r}]", value, minimum=_REAL_OPTIONS[name])
        elif name == "top_k":
            require_int("factory_options['top_k']", value, minimum=1)
    return options


def _trtllm_ranks_error(spec: Spec, where: str) -> InvalidArgumentError | None:
    """The error for a world size the TRT-LLM fusion kernel cannot run, or None."""
    if spec.world_size in TRTLLM_RANKS:
        return None
    return InvalidArgumentError(
        explain(
            f"world_size one of {', '.join(map(str, TRTLLM_RANKS))} for {where} (the "
            "TRT-LLM fusion kernel dispatches on those rank counts only)",
            f"world_size={spec.world_size}",
            fix="use backend='mnnvl' where the unified API has it, or the unfused path "
            "(api='reference'); a launch would fail with 'unsupported ranks number'",
        )
    )


# ---------------------------------------------------------------------------- the factory


def create_workspace(
    world_size: int,
    rank: int,
    max_token_num: int,
    hidden_dim: int,
    dtype: torch.dtype,
    *,
    group: Any = None,
    backend: str = "auto",
    api: Literal["auto", "unified", "legacy", "reference"] = "auto",
    comm_backend: Any = None,
    gpus_per_node: int | None = None,
    force_oneshot_support: bool = False,
    factory_options: Mapping[str, Any] | None = None,
    device: Any = None,
    fallback: bool = True,
) -> FusionWorkspace:
    """Create an allreduce-fusion workspace for the installed FlashInfer release.

    Parameters
    ----------
    world_size, rank
        Size of the group and this process's rank in it.
    max_token_num, hidden_dim, dtype
        The largest batch, the hidden size and the activation dtype.
    group
        The ``torch.distributed`` process group (None: the default group). Passed as
        ``group=`` where the factory takes it (0.6.10.post1+); otherwise, when it is not
        the whole world, carried by a ``TorchDistBackend`` over the group as
        ``comm_backend=`` (0.6.0+); otherwise :class:`GroupNotSupportedError`.
    backend
        FlashInfer's backend: ``"auto"``, ``"trtllm"``, ``"mnnvl"`` or
        ``"mnnvl-cutedsl"`` (legacy workspaces are ``"trtllm"``).
    api
        ``"auto"`` (unified where present, else legacy), or force one of ``"unified"``,
        ``"legacy"``, ``"reference"``.
    comm_backend, gpus_per_node, force_oneshot_support, factory_options
        Passed to the unified factory (extra keyword options via ``factory_options``, a
        mapping with str keys); a value the release cannot take raises
        :class:`CapabilityMissingError`. ``factory_options`` may not hold a keyword
        fi-compat sets itself (``world_size``, ``rank``, ``max_token_num``,
        ``hidden_dim``, ``dtype``, ``backend``, ``group``, ``comm_backend``,
        ``gpus_per_node``, ``force_oneshot_support``, the legacy ``tp_rank``,
        ``tp_size``, ``use_fp32_lamport``, ...): every call is checked against what the
        workspace was created for, so FlashInfer must allocate exactly that.
        ``force_oneshot_support`` is a bool.
    device
        Where the tensors live: None (the current CUDA device, or CPU without CUDA),
        ``"cpu"``, ``"cuda"``, ``"cuda:<index>"``, an index or a ``torch.device``.
    fallback
        A bool. When fusion is unavailable (no ``flashinfer.comm``, neither API, world
        size 1, a world size the TRT-LLM kernel cannot run on the legacy API or
        ``backend="trtllm"``), return a reference workspace (``api == "reference"``,
        ``reason`` says why) instead of raising.

    Raises
    ------
    FusionForbiddenError
        Deterministic inference is on (a reference workspace is still allowed).
    GroupNotSupportedError
        ``group`` cannot be honoured by the installed release.
    CapabilityMissingError, FlashInferUnavailableError
        Something asked for is not in the installed release (and no fallback applies).
    WorkspaceMismatchError
        The sizes or dtype are wrong, or ``world_size``/``rank`` do not describe
        ``group``.
    InvalidArgumentError
        ``api``, ``backend``, ``device``, ``gpus_per_node`` or ``factory_options`` is
        wrong, a switch is not a bool, or the world size cannot run fused (1 for every
        fused API; other than 2, 4, 8, 16 for the TRT-LLM kernel: the legacy API,
        ``backend="trtllm"``, or ``"auto"`` when FlashInfer picks TRT-LLM) and
        ``fallback`` does not apply. Raised before any FlashInfer call, except in the
        last case, where the workspace FlashInfer made is destroyed first.
    """
    _check_arguments(api, backend, gpus_per_node, force_oneshot_support, fallback)
    options = _check_factory_options(factory_options)
    if api != "reference":
        ensure_fusion_allowed("an allreduce-fusion workspace")
    spec = _spec(world_size, rank, max_token_num, hidden_dim, dtype, device)
    span = group_span(group)
    _check_group(span, spec)
    chosen, reason = _choose(spec, api, fallback)
    if chosen == "legacy" or (chosen == "unified" and backend == "trtllm"):
        unsupported = _trtllm_ranks_error(
            spec, "the legacy API" if chosen == "legacy" else "backend='trtllm'"
        )
        if unsupported is not None:
            if api != "auto" or not fallback:
                raise unsupported
            chosen, reason = (
                "reference",
                f"the TRT-LLM fusion kernel cannot run {spec.world_size} ranks",
            )
    if chosen == "reference":
        decisions = (f"unfused reference path: {reason}",)
        logger.debug("fusion workspace %r: %s", spec, decisions[0])
        if span.size is None and spec.world_size > 1:
            raise CapabilityMissingError(
                explain(
                    f"torch.distributed initialized for a reference workspace of "
                    f"{spec.world_size} processes",
                    "torch.distributed not initialized",
                    fix="call torch.distributed.init_process_group() first",
                ),
                feature="torch.distributed",
            )
        bound = bind_with_launch(spec, reference_launch(group=group, world_size=spec.world_size))
        return FusionWorkspace(
            api="reference",
            backend="reference",
            spec=spec,
            group=group,
            bound=bound,
            destroy=None,
            reason=reason,
            decisions=decisions,
        )
    caps = get_capabilities()
    comm = importlib.import_module("flashinfer.comm")
    if chosen == "unified":
        workspace = _create_unified(
            caps,
            comm,
            spec,
            span,
            group=group,
            backend=backend,
            comm_backend=comm_backend,
            gpus_per_node=gpus_per_node,
            force_oneshot_support=force_oneshot_support,
            factory_options=options,
        )
    else:
        workspace = _create_legacy(
            caps,
            comm,
            spec,
            span,
            group=group,
            backend=backend,
            comm_backend=comm_backend,
            gpus_per_node=gpus_per_node,
            force_oneshot_support=force_oneshot_support,
            factory_options=options,
        )
    for decision in workspace.decisions:
        logger.debug("fusion workspace (%s): %s", workspace.api, decision)
    return workspace


def _choose(spec: Spec, api: str, fallback: bool) -> tuple[Api, str | None]:
    """Which path runs the workspace; probes FlashInfer only when it could be fused."""
    if api == "reference":
        return "reference", "api='reference' was asked for"
    if spec.world_size == 1:
        if api == "auto" and fallback:
            return "reference", "world_size is 1: there is nothing to all-reduce"
        raise InvalidArgumentError(
            explain(
                "world_size >= 2 for a fused workspace (FlashInfer's fusion kernels run "
                f"on 2 or more ranks; TRT-LLM on {', '.join(map(str, TRTLLM_RANKS))})",
                f"world_size=1 with api={api!r}, fallback={fallback!r}",
                fix="use api='reference' (or api='auto' with fallback=True): with one "
                "process there is nothing to all-reduce",
            )
        )
    caps = get_capabilities()
    if not caps.comm.available:
        reason = f"flashinfer.comm is unavailable ({caps.comm.error})"
        if api == "auto" and fallback:
            return "reference", reason
        raise FlashInferUnavailableError(
            explain(
                "an importable flashinfer.comm",
                caps.comm.error or "nothing",
                fix="install flashinfer-python (with a CUDA runtime loaded before 0.6.14), "
                "or use the unfused path (api='reference' or fallback=True)",
            )
        )
    if api in ("auto", "unified") and caps.comm.unified_api:
        return "unified", None
    if api in ("auto", "legacy") and caps.comm.legacy_api:
        return "legacy", None
    if api == "auto" and fallback:
        return "reference", "flashinfer.comm has neither allreduce-fusion API"
    feature = "unified_api" if api == "unified" else "legacy_api"
    raise _missing(
        feature,
        f"the {api if api != 'auto' else 'unified or legacy'} allreduce-fusion API",
        f"flashinfer {caps.flashinfer.version} without it",
        "install a release that has it, or use api='reference'",
    )


def _create_unified(
    caps: Capabilities,
    comm: Any,
    spec: Spec,
    span: GroupSpan,
    *,
    group: Any,
    backend: str,
    comm_backend: Any,
    gpus_per_node: int | None,
    force_oneshot_support: bool,
    factory_options: Mapping[str, Any],
) -> FusionWorkspace:
    factory = getattr(comm, UNIFIED_FACTORY)
    fusion = getattr(comm, UNIFIED_FUSION)
    decisions: list[str] = []
    kwargs: dict[str, Any] = {
        "backend": backend,
        "world_size": spec.world_size,
        "rank": spec.rank,
        "max_token_num": spec.max_token_num,
        "hidden_dim": spec.hidden_dim,
        "dtype": spec.dtype,
    }
    optional: dict[str, tuple[Any, Any]] = {
        "gpus_per_node": (gpus_per_node, None),
        "force_oneshot_support": (force_oneshot_support, False),
    }
    optional.update({name: (value, None) for name, value in factory_options.items()})
    for name, (value, default) in optional.items():
        if value is default or value == default:
            continue
        if not _accepts(caps, UNIFIED_FACTORY, name):
            raise _missing(
                name,
                f"flashinfer.comm.{UNIFIED_FACTORY} to take {name}=",
                f"flashinfer {caps.flashinfer.version} without it",
                f"leave {name} out, or upgrade flashinfer-python",
            )
        kwargs[name] = value
    takes_group = _accepts(caps, UNIFIED_FACTORY, "group")
    takes_backend = _accepts(caps, UNIFIED_FACTORY, "comm_backend")
    if comm_backend is not None:
        if not takes_backend:
            raise _missing(
                "comm_backend",
                f"flashinfer.comm.{UNIFIED_FACTORY} to take comm_backend=",
                f"flashinfer {caps.flashinfer.version} without it",
                "leave comm_backend out, or upgrade flashinfer-python",
            )
        kwargs["comm_backend"] = comm_backend
        decisions.append("comm_backend passed as given by the caller")
    if group is not None:
        if takes_group:
            kwargs["group"] = group
            decisions.append("group passed as group=")
        local_root = caps.comm.bcast_root_is_group_local.supported
        needs_backend = not span.whole_world and (not takes_group or not local_root)
        if needs_backend and comm_backend is None:
            path = caps.comm.torch_dist_backend
            # FlashInfer's mnnvl-cutedsl backend refuses comm_backend; it takes group.
            if takes_backend and path is not None and backend != "mnnvl-cutedsl":
                kwargs["comm_backend"] = comm_backend = group_backend(
                    _import(path), group, root_is_group_local=local_root
                )
                decisions.append(
                    f"group carried by comm_backend={path} over the group"
                    + ("" if local_root else ", with bcast mapping the group-local root")
                )
            elif not takes_group:
                why = f"{UNIFIED_FACTORY} takes no group=" + (
                    "" if takes_backend else " and no comm_backend="
                )
                if takes_backend:
                    why += " and flashinfer.comm has no TorchDistBackend"
                raise _group_error(caps, UNIFIED_FACTORY, span, why)
        elif not takes_group and span.whole_world:
            decisions.append("group left out: it spans the whole world, the default")
        elif not takes_group:
            decisions.append("group carried by the caller's comm_backend")
    pattern = _pattern(comm)
    _check_call(caps, UNIFIED_FUSION, fusion, set(UNIFIED_CALL))
    pass_trigger = _accepts(caps, UNIFIED_FUSION, "trigger_completion_at_end")
    native = factory(**kwargs)
    native_backend = getattr(native, "backend", None)
    unsupported = _trtllm_ranks_error(spec, "a workspace on FlashInfer's 'trtllm' backend")
    if native_backend == "trtllm" and unsupported is not None:
        native.destroy()  # backend='auto' chose TRT-LLM: it could never launch
        raise unsupported
    early: Launcher | None = None
    if not pass_trigger:
        try:
            early = _early_trigger(caps, comm, spec, native, pattern, decisions)
        except BaseException:
            native.destroy()  # do not leak the buffers of a workspace nobody will hold
            raise
    bound = bind_unified(
        spec,
        function=fusion,
        native=native,
        pattern=pattern,
        pass_trigger=pass_trigger,
        early_trigger=early,
    )
    return FusionWorkspace(
        api="unified",
        backend=native_backend if isinstance(native_backend, str) else backend,
        spec=spec,
        group=group,
        bound=bound,
        destroy=native.destroy,
        native=native,
        comm_backend=comm_backend,
        decisions=tuple(decisions),
    )


def _early_trigger(
    caps: Capabilities, comm: Any, spec: Spec, native: Any, pattern: int, decisions: list[str]
) -> Launcher | None:
    """How a release without ``trigger_completion_at_end`` (0.6.0 to 0.6.7) honours False.

    Those releases run the TRT-LLM kernel with the flag equal to ``launch_with_pdl``: the
    same result whenever ``launch_with_pdl`` is False or the flag is True. For
    ``launch_with_pdl=True, trigger_completion_at_end=False`` the TRT-LLM workspace is run
    through the legacy ``trtllm_allreduce_fusion`` (the very kernel, with the flag
    honoured); MNNVL ignores the flag in every release; anything else is refused.
    """
    gate = GATES["trigger_completion_at_end"]
    if str(getattr(native, "backend", "")).startswith("mnnvl"):
        decisions.append(
            "trigger_completion_at_end not passed: this release's allreduce_fusion lacks it "
            f"(added in {gate.introduced_in}) and the MNNVL backend ignores it in every release"
        )
        return None
    ptrs = getattr(native, "workspace_tensor", None)
    if caps.comm.legacy_api and ptrs is not None:
        decisions.append(
            "trigger_completion_at_end passed when it matters: this release's "
            f"allreduce_fusion lacks it (added in {gate.introduced_in}); with "
            "launch_with_pdl=True and trigger_completion_at_end=False the call runs "
            f"{LEGACY_FUSION} on the workspace's pointers, otherwise allreduce_fusion"
        )
        fusion = getattr(comm, LEGACY_FUSION)
        _check_call(caps, LEGACY_FUSION, fusion, set(LEGACY_CALL))
        return legacy_launch(spec, function=fusion, workspace_ptrs=ptrs, pattern=pattern)
    decisions.append(
        "trigger_completion_at_end=False with launch_with_pdl=True will be refused: this "
        f"release's allreduce_fusion lacks the keyword (added in {gate.introduced_in})"
    )
    version = caps.flashinfer.version

    def refuse(*_: Any) -> NoReturn:
        raise _missing(
            "trigger_completion_at_end",
            "allreduce_fusion to take trigger_completion_at_end=False",
            f"flashinfer {version}, whose allreduce_fusion signals completion at the end "
            "whenever launch_with_pdl=True",
            "pass trigger_completion_at_end=True (the result is the same; only the "
            "overlap with the next kernel is lost), or upgrade flashinfer-python",
        )

    # A prepared call is refused when it is prepared, not when it is launched.
    return Launcher(refuse, refuse)


def _create_legacy(
    caps: Capabilities,
    comm: Any,
    spec: Spec,
    span: GroupSpan,
    *,
    group: Any,
    backend: str,
    comm_backend: Any,
    gpus_per_node: int | None,
    force_oneshot_support: bool,
    factory_options: Mapping[str, Any],
) -> FusionWorkspace:
    import torch

    unified = GATES["unified_api"].introduced_in
    if backend not in ("auto", "trtllm"):
        raise _missing(
            "unified_api",
            f"backend={backend!r} (only the unified API has backends besides TRT-LLM)",
            f"flashinfer {caps.flashinfer.version} with only the legacy API",
            f"use backend='auto' or 'trtllm', or upgrade flashinfer-python to {unified}+",
        )
    asked = {
        "comm_backend": comm_backend is not None,
        "gpus_per_node": gpus_per_node is not None,
        "force_oneshot_support": bool(force_oneshot_support),
        **{name: value is not None for name, value in factory_options.items()},
    }
    for name, given in asked.items():
        if given:
            raise _missing(
                "unified_api",
                f"{name}= (an option of the unified {UNIFIED_FACTORY})",
                f"flashinfer {caps.flashinfer.version} with only the legacy API",
                f"leave {name} out, or upgrade flashinfer-python to {unified}+",
            )
    factory = getattr(comm, LEGACY_FACTORY)
    fusion = getattr(comm, LEGACY_FUSION)
    destroy = getattr(comm, LEGACY_DESTROY, None)
    if not callable(destroy):
        raise _missing(
            "legacy_api",
            f"flashinfer.comm.{LEGACY_DESTROY} to free the legacy workspace",
            f"flashinfer {caps.flashinfer.version} without it",
            "use api='reference'",
        )
    _check_call(caps, LEGACY_FUSION, fusion, set(LEGACY_CALL))
    decisions: list[str] = []
    kwargs: dict[str, Any] = {
        "tp_rank": spec.rank,
        "tp_size": spec.world_size,
        "max_token_num": spec.max_token_num,
        "hidden_dim": spec.hidden_dim,
    }
    if spec.dtype is torch.float32:
        if not _accepts(caps, LEGACY_FACTORY, "use_fp32_lamport"):
            raise _missing(
                "legacy_api",
                f"{LEGACY_FACTORY} to take use_fp32_lamport= for float32",
                f"flashinfer {caps.flashinfer.version} without it",
                "use bfloat16 or float16 activations",
            )
        kwargs["use_fp32_lamport"] = True
    destroy_kwargs: dict[str, Any] = {}
    if group is not None:
        if _accepts(caps, LEGACY_FACTORY, "group"):
            kwargs["group"] = group
            decisions.append("group passed as group=")
        elif span.whole_world:
            decisions.append("group left out: it spans the whole world, the default")
        else:
            raise _group_error(caps, LEGACY_FACTORY, span, f"{LEGACY_FACTORY} takes no group=")
        if inspect_callable(LEGACY_DESTROY, destroy).support("group").supported:
            destroy_kwargs["group"] = group
    created = factory(**kwargs)
    ipc_handles = created[0]
    launch = legacy_launch(spec, function=fusion, workspace_ptrs=created[1], pattern=_pattern(comm))
    decisions.append(f"legacy API: {LEGACY_FACTORY} + {LEGACY_FUSION}, freed by {LEGACY_DESTROY}")

    def free() -> None:
        destroy(ipc_handles, **destroy_kwargs)

    return FusionWorkspace(
        api="legacy",
        backend="trtllm",
        spec=spec,
        group=group,
        bound=bind_with_launch(spec, launch),
        destroy=free,
        native=created,
        decisions=tuple(decisions),
    )
