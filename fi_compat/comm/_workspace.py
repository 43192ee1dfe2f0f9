"""``FusionWorkspace`` and :func:`create_workspace`: which path runs a workspace, and its
lifetime.

Creating a workspace checks the arguments before anything reaches FlashInfer
(:mod:`fi_compat.comm._create_checks`), decides which path runs it (:func:`_choose`: the
unified API of 0.6.0+, the legacy TRT-LLM IPC API of 0.2.9+, or the unfused reference path)
and hands the rest, as one ``Request``, to that path's module (``_unified``, ``_legacy``,
``_reference``): every release decision, made once. ``destroy()`` frees the buffers once;
what the workspace handed out (its prepared calls, FlashInfer's methods, its
``is_buffer_size_sufficient``) reads its :class:`Life` and refuses, or answers False,
afterwards. What engines ask of a workspace besides the call is in
:mod:`fi_compat.comm._interface`, the per-layer call on it in :mod:`fi_compat.comm._call`.
The allreduce-fusion guide, ``docs/guide/comm.md``, says what is decided and what each API
answers.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from fi_compat._log import get_logger
from fi_compat._requirements.names import LEGACY_API, UNIFIED_API
from fi_compat._surface import COMM
from fi_compat.capabilities import get_capabilities
from fi_compat.comm._call_checks import call_scalars, destroyed_error
from fi_compat.comm._create_checks import (
    BACKENDS,
    check_arguments,
    check_backend,
    check_factory_options,
    check_group,
    workspace_spec,
)
from fi_compat.comm._factory import (
    TRTLLM_RANKS,
    Created,
    Request,
    capability_missing,
    trtllm_ranks_error,
)
from fi_compat.comm._group import group_span
from fi_compat.comm._interface import buffer_check, checkpoint_unsupported, legacy_metadata
from fi_compat.comm._launch import PreparedAllReduce, Preparer, Runner
from fi_compat.comm._legacy import create_legacy
from fi_compat.comm._reference import create_reference
from fi_compat.comm._types import Api, Spec
from fi_compat.comm._unified import create_unified
from fi_compat.determinism import ensure_fusion_allowed
from fi_compat.errors import (
    FlashInferUnavailableError,
    InvalidArgumentError,
    UnsupportedOperationError,
    explain,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "FusionWorkspace",
    "Life",
    "alive",
    "answering",
    "create_workspace",
]


logger = get_logger(__name__)


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

    # -- FlashInfer's workspace interface (see fi_compat.comm._interface) ---------------

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
        check_backend(caps, backend, chosen)
        create = create_unified if chosen == "unified" else create_legacy
        created = create(caps, request)
        if backend not in BACKENDS:
            passed = f"backend={backend!r}, unknown to fi-compat, passed to FlashInfer as given"
            created = created._replace(decisions=(*created.decisions, passed))
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
    feature = UNIFIED_API if api == "unified" else LEGACY_API
    raise capability_missing(
        feature,
        f"the {api if api != 'auto' else 'unified or legacy'} allreduce-fusion API",
        f"flashinfer {caps.flashinfer.version} without it",
        "install a release that has it, or use api='reference'",
    )


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
