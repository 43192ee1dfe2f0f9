"""``FusionWorkspace`` and :func:`create_workspace`: every release decision, made once.

Creating a workspace checks the arguments, decides which path runs it (:func:`_choose`: the
unified API of 0.6.0+, the legacy TRT-LLM IPC API of 0.2.9+, or the unfused reference
path) and hands the rest to that path's module (``_unified``, ``_legacy``, ``_reference``),
which decides which keywords the installed release gets, how a process group reaches the
rendezvous, and binds the per-call path. Every decision is made from
:func:`fi_compat.get_capabilities`, never from the version number, and logged once at
debug level.
"""

from __future__ import annotations

import functools
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
from fi_compat._surface import COMM
from fi_compat.capabilities import get_capabilities
from fi_compat.comm._call import Preparer, Runner
from fi_compat.comm._checks import Spec, call_scalars, destroyed_error
from fi_compat.comm._creation import TRTLLM_RANKS, Created, missing, trtllm_ranks_error
from fi_compat.comm._group import GroupSpan, group_span
from fi_compat.comm._interface import buffer_check, checkpoint_unsupported, legacy_metadata
from fi_compat.comm._legacy import create_legacy
from fi_compat.comm._prepared import PreparedAllReduce
from fi_compat.comm._reference import create_reference
from fi_compat.comm._unified import create_unified
from fi_compat.determinism import ensure_fusion_allowed
from fi_compat.errors import (
    FlashInferUnavailableError,
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

_DTYPES = ("float16", "bfloat16", "float32")
#: FlashInfer's allreduce-fusion backends (``backend=`` of the unified factory, 0.6.0+).
_BACKENDS = ("auto", "trtllm", "mnnvl", "mnnvl-cutedsl")
_APIS = ("auto", "unified", "legacy", "reference")
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
        # the legacy factory's names
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
        "_metadata",
        "_prepare",
        "_prepared",
        "_run",
        "_sufficient",
        "api",
        "backend",
        "comm_backend",
        "decisions",
        "group",
        "native",
        "reason",
        "spec",
    )

    def __init__(self, *, api: Api, spec: Spec, group: Any, created: Created) -> None:
        self.api: Api = api
        self.backend = created.backend
        self.spec = spec
        self.group = group
        self.native = created.native
        self.comm_backend = created.comm_backend
        self.reason = created.reason
        self.decisions = created.decisions
        self._run: Runner = created.bound.run
        self._prepare: Preparer = created.bound.prepare
        self._prepared: weakref.WeakSet[PreparedAllReduce] = weakref.WeakSet()
        self._destroy = created.destroy
        self._destroyed = False
        self._metadata = legacy_metadata(spec, created.native) if api == "legacy" else None
        native_check = (
            getattr(created.native, "is_buffer_size_sufficient", None) if api == "unified" else None
        )
        self._sufficient: Callable[..., Any] = buffer_check(spec, native_check, self._metadata)

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
        self._sufficient = _never(self._sufficient)
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

    # -- FlashInfer's workspace interface (see fi_compat.comm._interface) ----------------

    @property
    def is_buffer_size_sufficient(self) -> Callable[..., Any]:
        """FlashInfer's ``is_buffer_size_sufficient(tp_size, num_tokens, hidden_dim, dtype,
        ...)``: True when such a call fits the workspace and fi-compat's checks would take
        it; False after :meth:`destroy`. On a unified workspace it has the release's own
        signature (``use_oneshot=`` or ``strategy=``)."""
        return self._sufficient

    @property
    def metadata(self) -> dict[str, Any]:
        """FlashInfer's TRT-LLM workspace metadata (``use_fp32_lamport``, sizes, ...);
        legacy workspaces have the legacy factory's. MNNVL and reference workspaces have
        none (``AttributeError``, as FlashInfer's MNNVL workspace)."""
        if self._metadata is not None:
            return self._metadata
        if self.api == "unified" and self.native is not None:
            return self.native.metadata  # type: ignore[no-any-return]
        raise AttributeError(f"a {self.api} workspace has no metadata")

    @property
    def checkpoint_prepare(self) -> Callable[[], None]:
        """FlashInfer's ``checkpoint_prepare()`` (detach the buffers while suspended);
        ``NotImplementedError`` where the workspace cannot, as in FlashInfer."""
        return self._checkpoint("checkpoint_prepare")

    @property
    def checkpoint_restore(self) -> Callable[..., None]:
        """FlashInfer's ``checkpoint_restore(comm_backend)``; ``NotImplementedError`` where
        the workspace cannot detach its buffers, as in FlashInfer."""
        return self._checkpoint("checkpoint_restore")

    def _checkpoint(self, method: str) -> Callable[..., None]:
        if self.api == "unified":
            native = getattr(self.native, method, None)
            if callable(native):
                return native  # type: ignore[no-any-return]
        return checkpoint_unsupported(self.api, self.backend, method)

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


def _never(check: Callable[..., Any]) -> Callable[..., Any]:
    """``check`` with its signature, answering False: the workspace is destroyed."""

    @functools.wraps(check)
    def destroyed(*args: Any, **kwargs: Any) -> bool:
        return False

    return destroyed


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
        unsupported = trtllm_ranks_error(
            spec, "the legacy API" if chosen == "legacy" else "backend='trtllm'"
        )
        if unsupported is not None:
            if api != "auto" or not fallback:
                raise unsupported
            chosen, reason = (
                "reference",
                f"the TRT-LLM fusion kernel cannot run {spec.world_size} ranks",
            )
    created: Created
    if chosen == "reference":
        created = create_reference(spec, span, group=group, reason=reason)
    else:
        create = create_unified if chosen == "unified" else create_legacy
        created = create(
            get_capabilities(),
            spec,
            span,
            group=group,
            backend=backend,
            comm_backend=comm_backend,
            gpus_per_node=gpus_per_node,
            force_oneshot_support=force_oneshot_support,
            factory_options=options,
        )
    workspace = FusionWorkspace(api=chosen, spec=spec, group=group, created=created)
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
        reason = f"{COMM} is unavailable ({caps.comm.error})"
        if api == "auto" and fallback:
            return "reference", reason
        raise FlashInferUnavailableError(
            explain(
                f"an importable {COMM}",
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
        return "reference", f"{COMM} has neither allreduce-fusion API"
    feature = "unified_api" if api == "unified" else "legacy_api"
    raise missing(
        feature,
        f"the {api if api != 'auto' else 'unified or legacy'} allreduce-fusion API",
        f"flashinfer {caps.flashinfer.version} without it",
        "install a release that has it, or use api='reference'",
    )
