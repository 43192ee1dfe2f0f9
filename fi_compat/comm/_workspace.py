"""``FusionWorkspace``, :func:`create_workspace` and the per-layer call on it.

Creating a workspace checks the arguments before anything reaches FlashInfer
(:func:`check_arguments`: the plain switches and choices; :func:`check_factory_options`: the
extra factory keywords, none of which fi-compat sets itself; :func:`workspace_spec`: sizes,
dtype and device, as the :class:`~fi_compat.comm._call.Spec` every call is checked against;
:func:`check_group`: ``world_size``/``rank`` describe the group), decides which path runs
it (:func:`_choose`: the unified API of 0.6.0+, the legacy TRT-LLM IPC API of 0.2.9+, or
the unfused reference path) and hands the rest, as one ``Request``, to that path's module
(``_unified``, ``_legacy``, ``_reference``): every release decision, made once.

Every workspace then answers FlashInfer's workspace interface, which engines ask of it:
``is_buffer_size_sufficient`` (:func:`buffer_check`: the release's own check where the
workspace has one, answering False where fi-compat's per-call checks would refuse),
``metadata`` of a legacy workspace (:func:`legacy_metadata`), and the checkpointing methods
of a workspace that cannot detach its buffers (:func:`checkpoint_unsupported`).
:func:`allreduce_residual_rmsnorm` is the one call engines make on it per layer per step.
The allreduce-fusion guide, ``docs/guide/comm.md``, says what is decided and what each API
answers.
"""

from __future__ import annotations

import functools
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
from fi_compat._literal import literal_choices
from fi_compat._log import get_logger
from fi_compat._probe import locate
from fi_compat._requirements.names import LEGACY_API, UNIFIED_API, checkpoint_feature
from fi_compat._surface import COMM, UNIFIED_FACTORY
from fi_compat.capabilities import get_capabilities
from fi_compat.comm._call import (
    FLOAT_MAX,
    PreparedAllReduce,
    Preparer,
    Runner,
    Spec,
    call_scalars,
    destroyed_error,
    not_a_workspace,
    size_mismatch,
)
from fi_compat.comm._factory import (
    TRTLLM_RANKS,
    Created,
    Request,
    capability_missing,
    trtllm_ranks_error,
)
from fi_compat.comm._group import group_span
from fi_compat.comm._legacy import create_legacy
from fi_compat.comm._reference import create_reference, unbound_reference
from fi_compat.comm._unified import create_unified
from fi_compat.determinism import ensure_fusion_allowed
from fi_compat.errors import (
    CheckpointUnsupportedError,
    FlashInferUnavailableError,
    InvalidArgumentError,
    UnsupportedOperationError,
    WorkspaceMismatchError,
    explain,
)

if TYPE_CHECKING:
    import torch

    from fi_compat.comm._call import Fit
    from fi_compat.comm._group import GroupSpan

__all__ = [
    "BACKENDS",
    "FusionWorkspace",
    "alive",
    "allreduce_residual_rmsnorm",
    "answering",
    "buffer_check",
    "checkpoint_unsupported",
    "create_workspace",
    "legacy_metadata",
]


logger = get_logger(__name__)

#: Which path runs a workspace.
Api = Literal["unified", "legacy", "reference"]


class FusionWorkspace:
    """An allreduce-fusion workspace bound to the installed FlashInfer release.

    Obtain one from :func:`create_workspace` (or the drop-in
    :func:`fi_compat.comm.create_allreduce_fusion_workspace`); pass it to
    :func:`fi_compat.comm.allreduce_residual_rmsnorm`, or :meth:`prepare` a call on static
    buffers. ``destroy()`` is idempotent and frees the buffers with the destroy function
    of the workspace's own API; the workspace is also a context manager.

    .. versionadded:: 0.2.0

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
    fit
        Which call sizes it serves, as the installed release serves them: any call that
        fits (``fit.rule`` ``"product"`` or ``"bytes"``), or only its own hidden size
        (``"exact"``, with ``fit.why``).
    """

    __slots__ = (
        "__weakref__",
        "_destroy",
        "_life",
        "_metadata",
        "_prepare",
        "_prepared",
        "_run",
        "_sufficient",
        "api",
        "backend",
        "comm_backend",
        "decisions",
        "fit",
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
        self.fit = created.fit
        self._run: Runner = created.bound.run
        self._prepare: Preparer = created.bound.prepare
        self._prepared: weakref.WeakSet[PreparedAllReduce] = weakref.WeakSet()
        self._destroy = created.destroy
        self._life = Life(api)
        self._metadata = legacy_metadata(spec, created.native) if api == "legacy" else None
        native_check = (
            getattr(created.native, "is_buffer_size_sufficient", None) if api == "unified" else None
        )
        self._sufficient: Callable[..., Any] = answering(
            self._life, buffer_check(spec, created.fit, native_check, self._metadata)
        )

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
        """The hidden size it was created for (calls of other sizes that fit are served
        where :attr:`fit` says so)."""
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
        return self._life.destroyed

    # -- lifetime ----------------------------------------------------------------------

    def destroy(self) -> None:
        """Free the buffers with this API's destroy function; later calls do nothing.

        Unified: the FlashInfer workspace's own ``destroy()``. Legacy:
        ``trtllm_destroy_ipc_workspace_for_all_reduce_fusion(ipc_handles, group=...)``
        (never the non-fusion ``trtllm_destroy_ipc_workspace_for_all_reduce``).
        Afterwards every call, prepared ones included, raises
        :class:`~fi_compat.errors.WorkspaceDestroyedError`.
        """
        if self._life.destroyed:
            return
        self._life.destroyed = True  # every method handed out reads it
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
        checked the same way; outputs left as None are allocated now. The returned
        :class:`~fi_compat.comm.PreparedAllReduce` launches on these very tensors with no
        per-call checks. The allreduce-fusion guide, ``docs/guide/comm.md`` ("Prepared
        calls"), says when to use it.

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

    # -- FlashInfer's workspace interface (see the functions at the end) ----------------

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
        native = getattr(self.native, method, None) if self.api == "unified" else None
        if not callable(native):
            kind = "legacy" if self.api == "legacy" else self.backend
            native = checkpoint_unsupported(self.api, kind, method)
        return alive(self._life, native)

    def __getattr__(self, name: str) -> Any:
        # Drop-in use: attributes of FlashInfer's own workspace (workspace_tensor, mc_ptr,
        # ...) are reachable through this object; its methods refuse once it is destroyed.
        if name.startswith("_"):
            raise AttributeError(name)
        native = object.__getattribute__(self, "native")
        if self.api != "unified" or native is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        life = object.__getattribute__(self, "_life")
        if life.destroyed:
            raise destroyed_error(self.api)
        value = getattr(native, name)
        return alive(life, value) if callable(value) else value

    # -- what it cannot do: copies would free or launch behind the original's back --------

    def __copy__(self) -> NoReturn:
        raise _not_copyable("copy.copy")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise _not_copyable("copy.deepcopy")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise _not_copyable("pickle")

    def __repr__(self) -> str:
        state = "destroyed" if self._life.destroyed else "live"
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


def _not_copyable(operation: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        explain(
            "a FusionWorkspace to be used where it was created",
            f"{operation} of one: a copy would share FlashInfer's buffers, so destroying "
            "either would leave the other launching on freed memory",
            fix="pass the workspace itself around (it is one per process and group), or "
            "create another with fi_compat.comm.create_workspace()",
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

    Which API runs it, which keywords the release gets and how ``group`` reaches the
    rendezvous are decided here, once. The allreduce-fusion guide, ``docs/guide/comm.md``,
    explains each decision and every check.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    world_size, rank
        Size of the group and this process's rank in it.
    max_token_num, hidden_dim, dtype
        The largest batch, the hidden size and the activation dtype.
    group
        The ``torch.distributed`` process group (None: the default group); never silently
        dropped.
    backend
        FlashInfer's backend: ``"auto"``, ``"trtllm"``, ``"mnnvl"``, ``"mnnvl-cutedsl"``, or
        any name the installed release's factory lists (passed as given, said in
        ``decisions``); one it does not list raises ``InvalidArgumentError``.
    api
        ``"auto"`` (unified where present, else legacy), ``"unified"``, ``"legacy"`` or
        ``"reference"``.
    comm_backend, gpus_per_node, force_oneshot_support, factory_options
        Passed to the unified factory; ``factory_options`` (str keys) holds extra keywords,
        none that fi-compat sets itself.
    device
        None (the current CUDA device, or CPU without CUDA), ``"cpu"``, ``"cuda"``,
        ``"cuda:<index>"``, an index or a ``torch.device``.
    fallback
        A bool: when fusion is unavailable, return a reference workspace (``reason`` says
        why) instead of raising.

    Raises
    ------
    FusionForbiddenError
        Deterministic inference is on (a reference workspace is still allowed).
    GroupNotSupportedError
        ``group`` cannot be honoured by the installed release.
    CapabilityMissingError, FlashInferUnavailableError
        Something asked for is not in the installed release (and no fallback applies).
    WorkspaceMismatchError
        The sizes or dtype are wrong, or ``world_size``/``rank`` do not describe ``group``.
    InvalidArgumentError
        An argument or switch is wrong, or the world size cannot run fused and ``fallback``
        does not apply.
    """
    check_arguments(api, backend, gpus_per_node, force_oneshot_support, fallback)
    options = check_factory_options(factory_options)
    if api != "reference":
        ensure_fusion_allowed("an allreduce-fusion workspace")
    spec = workspace_spec(world_size, rank, max_token_num, hidden_dim, dtype, device)
    span = group_span(group)
    check_group(span, spec)
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
    request = Request(
        spec, span, group, backend, comm_backend, gpus_per_node, force_oneshot_support, options
    )
    created: Created
    if chosen == "reference":
        created = create_reference(request, reason)
    else:
        caps = get_capabilities()
        _check_backend(caps, backend, chosen)
        create = create_unified if chosen == "unified" else create_legacy
        created = create(caps, request)
        if backend not in BACKENDS:
            passed = f"backend={backend!r}, unknown to fi-compat, passed to FlashInfer as given"
            created = created._replace(decisions=(*created.decisions, passed))
    workspace = FusionWorkspace(api=chosen, spec=spec, group=group, created=created)
    for decision in workspace.decisions:
        logger.debug("fusion workspace (%s): %s", workspace.api, decision)
    return workspace


def _check_backend(caps: Any, backend: str, chosen: Api) -> None:
    """Refuse a ``backend`` the installed unified factory's ``Literal`` annotation does not
    list; one it lists, or one it says nothing about, goes to FlashInfer as given. The
    legacy API has TRT-LLM only: a name fi-compat does not know is refused here, one of the
    unified API's backends by the legacy path (the release to upgrade to)."""
    if chosen == "legacy":
        if backend in BACKENDS:
            return  # 'auto'/'trtllm' run; the legacy path names the release for the others
        expected = (
            "backend='auto' or 'trtllm' (flashinfer "
            f"{caps.flashinfer.version} has only the legacy API, whose kernel is TRT-LLM's)"
        )
    else:
        factory = locate(UNIFIED_FACTORY)
        choices = literal_choices(factory, "backend") if callable(factory) else None
        if choices is None or backend in choices:
            return
        expected = (
            f"backend= one of {', '.join(map(repr, choices))} (what flashinfer "
            f"{caps.flashinfer.version}'s {UNIFIED_FACTORY.key} takes)"
        )
    raise InvalidArgumentError(
        explain(
            expected,
            f"backend={backend!r}",
            fix="pass one of those, or install a flashinfer-python release that has it",
        )
    )


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
    feature = UNIFIED_API if api == "unified" else LEGACY_API
    raise capability_missing(
        feature,
        f"the {api if api != 'auto' else 'unified or legacy'} allreduce-fusion API",
        f"flashinfer {caps.flashinfer.version} without it",
        "install a release that has it, or use api='reference'",
    )


# ------------------------------------------------------------- create_workspace's arguments

_DTYPES = ("float16", "bfloat16", "float32")
#: The allreduce-fusion backends fi-compat knows (``backend=`` of the unified factory,
#: 0.6.0+). Not a limit: another name goes to a release whose factory takes it, as given.
BACKENDS = ("auto", "trtllm", "mnnvl", "mnnvl-cutedsl")
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


def workspace_spec(
    world_size: int,
    rank: int,
    max_token_num: int,
    hidden_dim: int,
    dtype: Any,
    device: Any,
) -> Spec:
    """What ``create_workspace``'s sizes, dtype and device describe, checked."""
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


def check_group(span: GroupSpan, spec: Spec) -> None:
    """``world_size`` and ``rank`` describe ``group`` (when torch.distributed can tell)."""
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


def check_arguments(
    api: Any, backend: Any, gpus_per_node: Any, force_oneshot_support: Any, fallback: Any
) -> None:
    """The plain arguments of ``create_workspace`` (sizes and dtype: see :func:`workspace_spec`)."""
    require_choice("api", api, _APIS)
    if not isinstance(backend, str) or not backend:
        raise InvalidArgumentError(
            explain(
                "backend to be the name of one of FlashInfer's allreduce-fusion backends",
                describe(backend),
                fix=f"pass one of {', '.join(map(repr, BACKENDS))} ('auto' picks one), or a "
                "backend a newer release names",
            )
        )
    require_int("gpus_per_node", gpus_per_node, minimum=1, optional=True)
    require_bool("force_oneshot_support", force_oneshot_support)
    require_bool("fallback", fallback)


def check_factory_options(factory_options: Any) -> Mapping[str, Any]:
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


# ------------------------------------------------------------------------- the lifetime


class Life:
    """Whether a workspace was destroyed, shared with every callable it hands out.

    A method taken from a workspace before ``destroy()`` and called after it reads this,
    not the workspace (which it may outlive), so it answers as the workspace would.
    """

    __slots__ = ("api", "destroyed")

    def __init__(self, api: str) -> None:
        self.api = api
        self.destroyed = False


def answering(life: Life, check: Callable[..., Any]) -> Callable[..., Any]:
    """``check`` with its signature, answering False once the workspace is destroyed."""

    @functools.wraps(check)
    def is_buffer_size_sufficient(*args: Any, **kwargs: Any) -> Any:
        if life.destroyed:
            return False
        return check(*args, **kwargs)

    return is_buffer_size_sufficient


def alive(life: Life, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` with its signature, raising ``WorkspaceDestroyedError`` once the workspace
    is destroyed (FlashInfer's object behind it is then freed)."""

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        if life.destroyed:
            raise destroyed_error(life.api)
        return method(*args, **kwargs)

    return call


# ------------------------------------------------- FlashInfer's workspace interface

#: The keys of the legacy factory's metadata that its own check reads.
_METADATA_KEYS = ("tp_rank", "tp_size", "max_token_num", "hidden_dim", "use_fp32_lamport")


def legacy_metadata(spec: Spec, created: Any) -> dict[str, Any]:
    """The legacy workspace's ``metadata``: the factory's own dict, else its five keys."""
    import torch

    own = created[-1] if isinstance(created, tuple) and len(created) >= 3 else None
    if isinstance(own, dict) and all(key in own for key in _METADATA_KEYS):
        return own
    computed = {
        "tp_rank": spec.rank,
        "tp_size": spec.world_size,
        "max_token_num": spec.max_token_num,
        "hidden_dim": spec.hidden_dim,
        "use_fp32_lamport": spec.dtype is torch.float32,
    }
    return computed if not isinstance(own, dict) else {**own, **computed}


def _accepted(
    spec: Spec, fit: Fit, tp_size: Any, num_tokens: Any, hidden_dim: Any, dtype: Any
) -> bool:
    """Would fi-compat's per-call checks take tensors of this size (arguments checked)?

    On a ``bytes`` workspace the size is left to the workspace's own check (with the
    strategy its caller asks about)."""
    import torch

    require_int("tp_size", tp_size, minimum=1)
    require_int("num_tokens", num_tokens, minimum=0)
    require_int("hidden_dim", hidden_dim, minimum=1)
    require_instance("dtype", dtype, torch.dtype, "a torch.dtype")
    if not (tp_size == spec.world_size and dtype == spec.dtype):
        return False
    if fit.rule == "bytes":
        return bool(num_tokens > 0)
    return size_mismatch(spec, fit, num_tokens, hidden_dim) is None


def buffer_check(spec: Spec, fit: Fit, native_check: Any, metadata: dict[str, Any] | None) -> Any:
    """The workspace's ``is_buffer_size_sufficient``.

    Parameters
    ----------
    spec
        What the workspace was created for.
    fit
        Which call sizes it serves.
    native_check
        FlashInfer's own bound method (unified), or None.
    metadata
        The legacy workspace's metadata, checked as FlashInfer checks it; None otherwise.
    """
    if callable(native_check):
        return _around(spec, fit, native_check)

    def is_buffer_size_sufficient(
        tp_size: int,
        num_tokens: int,
        hidden_dim: int,
        dtype: torch.dtype,
        use_oneshot: Any | None = None,
    ) -> bool:
        """Whether a call of ``num_tokens x hidden_dim`` of ``dtype`` on ``tp_size`` ranks
        fits this workspace (``use_oneshot`` does not change the answer, as in FlashInfer's
        TRT-LLM workspace)."""
        import torch

        if not _accepted(spec, fit, tp_size, num_tokens, hidden_dim, dtype):
            return False
        if metadata is None:
            return True
        return (
            tp_size == metadata["tp_size"]
            and num_tokens * hidden_dim <= metadata["max_token_num"] * metadata["hidden_dim"]
            and bool(metadata["use_fp32_lamport"]) == (dtype == torch.float32)
        )

    return is_buffer_size_sufficient


def _around(spec: Spec, fit: Fit, native_check: Callable[..., Any]) -> Callable[..., Any]:
    """FlashInfer's check with its signature, answering False where fi-compat would refuse."""
    try:
        signature: inspect.Signature | None = inspect.signature(native_check)
    except (TypeError, ValueError):
        signature = None
    if signature is None or not {"tp_size", "num_tokens", "hidden_dim", "dtype"} <= set(
        signature.parameters
    ):
        return native_check  # a shape fi-compat does not know: FlashInfer answers alone

    @functools.wraps(native_check)
    def is_buffer_size_sufficient(*args: Any, **kwargs: Any) -> Any:
        given = signature.bind(*args, **kwargs).arguments  # a TypeError, as FlashInfer's
        if not _accepted(
            spec,
            fit,
            given["tp_size"],
            given["num_tokens"],
            given["hidden_dim"],
            given["dtype"],
        ):
            return False
        return native_check(*args, **kwargs)

    return is_buffer_size_sufficient


def checkpoint_unsupported(api: str, kind: str, method: str) -> Callable[..., None]:
    """``checkpoint_prepare``/``checkpoint_restore`` of a workspace that cannot detach
    (``kind``: its backend, or ``"legacy"``)."""

    def unsupported(*_: Any, **__: Any) -> None:
        raise CheckpointUnsupportedError(
            explain(
                f"a workspace whose buffers can be detached for {method}",
                f"a {api} workspace ({kind}), whose buffers stay resident",
                fix="keep the workspace resident while suspended (catch NotImplementedError), "
                "or install a flashinfer-python release with checkpointing on this backend",
            ),
            feature=checkpoint_feature(kind),
        )

    unsupported.__name__ = unsupported.__qualname__ = method
    return unsupported


# ------------------------------------------------------------------- the per-layer call


def allreduce_residual_rmsnorm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    *,
    workspace: FusionWorkspace | None,
    eps: float = 1e-6,
    norm_out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    use_oneshot: bool | None = None,
    fp32_acc: bool = False,
    trigger_completion_at_end: bool = True,
    launch_with_pdl: bool = True,
    group: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All-reduce ``input``, add ``residual``, apply RMSNorm with ``weight``.

    ``residual_out = allreduce(input) + residual`` and
    ``norm_out = rmsnorm(residual_out) * weight``, in one fused FlashInfer kernel on the
    workspace's API, or step by step (the reference path) when ``workspace`` is None or a
    reference workspace. The allreduce-fusion guide, ``docs/guide/comm.md``, says what is
    checked before the launch.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    input, residual
        ``(num_tokens, hidden_dim)``, contiguous, of the workspace's dtype and device.
    weight
        The RMSNorm weight, ``(hidden_dim,)``.
    workspace
        From :func:`~fi_compat.comm.create_workspace`; None runs the reference path over
        ``group``.
    eps
        RMSNorm epsilon: a finite real number >= 0.
    norm_out, residual_out
        Preallocated outputs (allocated when None); may be ``input`` and ``residual``.
    use_oneshot, fp32_acc, launch_with_pdl
        Bools passed to FlashInfer (``use_oneshot`` may be None).
    trigger_completion_at_end
        A bool, passed where the release takes it (0.6.8+).
    group
        The reference path's process group when ``workspace`` is None.

    Returns
    -------
    tuple of torch.Tensor
        ``(norm_out, residual_out)``.

    Raises
    ------
    WorkspaceMismatchError
        A tensor does not fit the workspace (without one: the other tensors).
    InvalidArgumentError
        A wrong ``workspace``, switch or ``eps``.
    WorkspaceDestroyedError
        The workspace was destroyed.
    """
    # The common call passes only identity comparisons here; anything unusual is either
    # refused or normalized (an int eps) by call_scalars, off the common path.
    if not (
        eps.__class__ is float
        and 0.0 <= eps <= FLOAT_MAX
        and (launch_with_pdl is True or launch_with_pdl is False)
        and (trigger_completion_at_end is True or trigger_completion_at_end is False)
        and (fp32_acc is False or fp32_acc is True)
        and (use_oneshot is None or use_oneshot is True or use_oneshot is False)
    ):
        eps = call_scalars(eps, use_oneshot, fp32_acc, trigger_completion_at_end, launch_with_pdl)
    if workspace is not None:
        try:
            run = workspace._run
        except AttributeError:
            raise not_a_workspace(workspace) from None
        return run(
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
    return unbound_reference(
        input,
        residual,
        weight,
        eps=eps,
        norm_out=norm_out,
        residual_out=residual_out,
        fp32_acc=fp32_acc,
        group=group,
    )
