"""The unified allreduce-fusion API (0.6.0+): its workspace, its bound call, the drop-in.

FlashInfer's factory (:data:`~fi_compat._surface.UNIFIED_FACTORY`) returns a workspace
object that frees itself with ``destroy()``; its fused call
(:data:`~fi_compat._surface.UNIFIED_FUSION`) takes that object and keyword arguments. This
module makes the workspace (:func:`create_unified`: which keywords the installed release
gets, how a process group reaches its rendezvous), binds the per-call paths
(:func:`bind_unified`), and forwards the drop-in's other patterns (:func:`call_unified`).

Releases 0.6.0 to 0.6.7 lack ``trigger_completion_at_end``; :func:`_early_trigger` says how
a call that sets it to False is honoured there (through the legacy call, on the same
TRT-LLM workspace) or completes at the end, its safe equivalent. On a TRT-LLM workspace, a
call goes below the public call where that was measured to be exact
(:mod:`fi_compat.comm._layers`, the lowest launch layer).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fi_compat._log import get_logger
from fi_compat._requirements.names import LEGACY_API, UNIFIED_API, gate_feature
from fi_compat._surface import (
    COMM,
    GATES,
    LEGACY_FUSION,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
)
from fi_compat.capabilities import Capabilities, get_capabilities
from fi_compat.comm._factory import (
    Created,
    Request,
    accepts,
    capability_missing,
    check_call,
    check_pattern,
    group_error,
    installed,
    installed_pattern,
    not_accepted,
    option_refused,
    trtllm_ranks_error,
)
from fi_compat.comm._group import group_backend
from fi_compat.comm._launch import BoundCall, Launcher, bind, keyword_launch, table_freeze
from fi_compat.comm._layers import lowest_layer
from fi_compat.comm._legacy import LEGACY_CALL, legacy_launch
from fi_compat.comm._sizes import Fit, fit_for
from fi_compat.comm._types import Spec, Values

if TYPE_CHECKING:
    import torch

__all__ = ["UNIFIED_CALL", "bind_unified", "call_unified", "create_unified"]


logger = get_logger(__name__)

#: The keywords the bound call passes to the unified fused call (0.6.0+), in the order it
#: passes them, each with what it takes (a name of ``LAUNCH_VALUES`` of ``_launch``, or the
#: constant ``workspace`` or ``pattern``); ``trigger_completion_at_end`` (0.6.8+) is
#: passed only where accepted.
UNIFIED_CALL: dict[str, str] = {
    "input": "input",
    "workspace": "workspace",
    "pattern": "pattern",
    "launch_with_pdl": "launch_with_pdl",
    "trigger_completion_at_end": "trigger_completion_at_end",
    "residual_out": "residual_out",
    "norm_out": "norm_out",
    "residual_in": "residual",
    "rms_gamma": "weight",
    "rms_eps": "eps",
    "use_oneshot": "use_oneshot",
    "fp32_acc": "fp32_acc",
}
#: What a workspace serves, per :attr:`~fi_compat.comm._sizes.Fit.rule`, for its decisions.
_SERVED = {
    "product": "any call whose tokens x hidden fits max_token_num x hidden_dim",
    "bytes": "any call whose bytes fit the buffer, asked of its is_buffer_size_sufficient",
    "exact": "only calls of the creation-time hidden size",
}
#: :data:`UNIFIED_CALL` on a release without ``trigger_completion_at_end`` (0.6.0 to 0.6.7).
_WITHOUT_TRIGGER = {
    name: source for name, source in UNIFIED_CALL.items() if name != "trigger_completion_at_end"
}


# ---------------------------------------------------------------------------- creation


def create_unified(caps: Capabilities, request: Request) -> Created:
    """A workspace from the unified factory, bound to the unified fused call.

    ``request`` as checked by ``create_workspace``. Its ``group`` goes as ``group=`` where
    the factory takes it; otherwise, when it is not the whole world, as a ``comm_backend``
    over the group; otherwise :class:`~fi_compat.errors.GroupNotSupportedError`. A
    workspace made and then refused (a TRT-LLM one for a world size it cannot run) is
    destroyed before the error is raised.
    """
    spec, span, group, backend = request.spec, request.span, request.group, request.backend
    comm_backend = request.comm_backend
    factory = installed(caps, UNIFIED_FACTORY, UNIFIED_API)
    fusion = installed(caps, UNIFIED_FUSION, UNIFIED_API)
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
        "gpus_per_node": (request.gpus_per_node, None),
        "force_oneshot_support": (request.force_oneshot_support, False),
    }
    optional.update({name: (value, None) for name, value in request.factory_options.items()})
    for name, (value, default) in optional.items():
        if value is default or value == default:
            continue
        if not accepts(caps, UNIFIED_FACTORY, name):
            raise option_refused(caps, name, legacy=False)
        kwargs[name] = value
    accepts_group = accepts(caps, UNIFIED_FACTORY, "group")
    accepts_backend = accepts(caps, UNIFIED_FACTORY, "comm_backend")
    if comm_backend is not None:
        if not accepts_backend:
            raise capability_missing(
                gate_feature("comm_backend"),
                f"{UNIFIED_FACTORY.dotted} to take comm_backend=",
                f"flashinfer {caps.flashinfer.version} without it",
                "leave comm_backend out, or upgrade flashinfer-python",
            )
        kwargs["comm_backend"] = comm_backend
        decisions.append("comm_backend passed as given by the caller")
    if group is not None:
        if accepts_group:
            kwargs["group"] = group
            decisions.append("group passed as group=")
        local_root = caps.comm.bcast_root_is_group_local.supported
        needs_backend = not span.whole_world and (not accepts_group or not local_root)
        if needs_backend and comm_backend is None:
            path = caps.comm.torch_dist_backend
            # FlashInfer's mnnvl-cutedsl backend refuses comm_backend; it takes group.
            if accepts_backend and path is not None and backend != "mnnvl-cutedsl":
                kwargs["comm_backend"] = comm_backend = group_backend(
                    _import(path), group, root_is_group_local=local_root
                )
                decisions.append(
                    f"group carried by comm_backend={path} over the group"
                    + ("" if local_root else ", with bcast mapping the group-local root")
                )
            elif not accepts_group:
                why = f"{UNIFIED_FACTORY.key} takes no group=" + (
                    "" if accepts_backend else " and no comm_backend="
                )
                if accepts_backend:
                    why += f" and {COMM} has no {TORCH_DIST_BACKEND.key}"
                raise group_error(caps, UNIFIED_FACTORY, span, why)
        elif not accepts_group and span.whole_world:
            decisions.append("group left out: it spans the whole world, the default")
        elif not accepts_group:
            decisions.append("group carried by the caller's comm_backend")
    pattern = installed_pattern()
    check_call(caps, UNIFIED_FUSION, fusion, _WITHOUT_TRIGGER)
    pass_trigger = accepts(caps, UNIFIED_FUSION, "trigger_completion_at_end")
    native = factory(**kwargs)
    native_backend = getattr(native, "backend", None)
    unsupported = trtllm_ranks_error(spec, "a workspace on FlashInfer's 'trtllm' backend")
    if native_backend == "trtllm" and unsupported is not None:
        native.destroy()  # backend='auto' chose TRT-LLM: it could never launch
        raise unsupported
    early: Launcher | None = None
    if not pass_trigger:
        try:
            early = _early_trigger(caps, spec, native, pattern, decisions)
        except BaseException:
            native.destroy()  # do not leak the buffers of a workspace nobody will hold
            raise
    lowest, decision = lowest_layer(
        caps.flashinfer.version, spec, fusion=fusion, native=native, pattern=pattern
    )
    decisions.append(decision)
    kind = native_backend if isinstance(native_backend, str) else backend
    fit = fit_for(spec, release=caps.flashinfer.version, kind=kind, native=native)
    decisions.append(f"per-call sizes: {_SERVED[fit.rule]} ({fit.why})")
    bound = bind_unified(
        spec,
        fit,
        function=fusion,
        native=native,
        pattern=pattern,
        pass_trigger=pass_trigger,
        early_trigger=early,
        lowest=lowest,
    )
    return Created(
        backend=native_backend if isinstance(native_backend, str) else backend,
        bound=bound,
        destroy=native.destroy,
        fit=fit,
        native=native,
        comm_backend=comm_backend,
        decisions=tuple(decisions),
    )


def _import(dotted: str) -> Any:
    """The object at ``"<module>.<name>"`` (a path the probe reported)."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _early_trigger(
    caps: Capabilities, spec: Spec, native: Any, pattern: int, decisions: list[str]
) -> Launcher | None:
    """How a release without ``trigger_completion_at_end`` (0.6.0 to 0.6.7) honours False.

    Those releases run the TRT-LLM kernel with the flag equal to ``launch_with_pdl``: the
    same result whenever ``launch_with_pdl`` is False or the flag is True. For
    ``launch_with_pdl=True, trigger_completion_at_end=False`` the TRT-LLM workspace is run
    through the legacy fused call (the very kernel, with the flag honoured); MNNVL ignores
    the flag in every release; anything else completes at the end, which is always correct
    (the flag only lets the next kernel start early).
    """
    gate = GATES["trigger_completion_at_end"]
    fused = UNIFIED_FUSION.key
    if str(getattr(native, "backend", "")).startswith("mnnvl"):
        decisions.append(
            f"trigger_completion_at_end not passed: this release's {fused} lacks it "
            f"(added in {gate.introduced_in}) and the MNNVL backend ignores it in every release"
        )
        return None
    ptrs = getattr(native, "workspace_tensor", None)
    if caps.comm.legacy_api and ptrs is not None:
        decisions.append(
            "trigger_completion_at_end passed when it matters: this release's "
            f"{fused} lacks it (added in {gate.introduced_in}); with "
            "launch_with_pdl=True and trigger_completion_at_end=False the residual RMSNorm "
            f"call runs {LEGACY_FUSION.key} on the workspace's pointers, otherwise {fused}; "
            "the drop-in's other patterns (all-reduce only, quantised) then completes at the "
            "end, the same result with no overlap"
        )
        function = installed(caps, LEGACY_FUSION, LEGACY_API)
        check_call(caps, LEGACY_FUSION, function, LEGACY_CALL)
        return legacy_launch(spec, function=function, workspace_ptrs=ptrs, pattern=pattern)
    decisions.append(
        "trigger_completion_at_end=False with launch_with_pdl=True completes at the end: "
        f"this release's {fused} lacks the keyword (added in {gate.introduced_in}) and signals "
        "completion at the end whenever launch_with_pdl=True; the result is the same, only "
        "the overlap with the next kernel is lost"
    )
    return None


# ----------------------------------------------------------------------------- binding


def bind_unified(
    spec: Spec,
    fit: Fit,
    *,
    function: Callable[..., Any],
    native: Any,
    pattern: int,
    pass_trigger: bool,
    early_trigger: Launcher | None,
    lowest: Launcher | None = None,
) -> BoundCall:
    """The paths into the unified fused call.

    Parameters
    ----------
    spec
        What the workspace holds.
    fit
        Which call sizes it serves.
    function
        The installed :data:`~fi_compat._surface.UNIFIED_FUSION`.
    native
        The FlashInfer workspace object.
    pattern
        The installed release's ``kARResidualRMSNorm`` code.
    pass_trigger
        The release takes ``trigger_completion_at_end`` (0.6.8+).
    early_trigger
        Only where it does not: what runs a call with ``launch_with_pdl=True`` and
        ``trigger_completion_at_end=False`` (the release itself would signal completion
        at the end). None means the release's behaviour is the same either way.
    lowest
        The launch below the public call (:func:`lowest_layer`), or None to call
        ``function``. It passes what ``function`` would, so the early-trigger case keeps
        going to ``early_trigger``.
    """
    usual = lowest if lowest is not None else _public(function, native, pattern, pass_trigger)
    return bind(spec, fit, usual if early_trigger is None else _either(early_trigger, usual))


def _public(
    function: Callable[..., Any], native: Any, pattern: int, pass_trigger: bool
) -> Launcher:
    """The public fused call by keyword (frozen: by position where its signature allows)."""
    table = UNIFIED_CALL if pass_trigger else _WITHOUT_TRIGGER
    constants = {"workspace": native, "pattern": pattern}
    return Launcher(
        keyword_launch(function, table, constants), table_freeze(function, table, constants)
    )


def _either(early: Launcher, usual: Launcher) -> Launcher:
    """``early`` for ``launch_with_pdl=True, trigger_completion_at_end=False``, else ``usual``."""

    def chosen(call: Values) -> Launcher:
        _, _, _, _, _, _, _, _, trigger_completion_at_end, launch_with_pdl = call
        return early if launch_with_pdl and not trigger_completion_at_end else usual

    def launch(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Any:
        return chosen(call).launch(call, norm_out, residual_out, tokens, hidden)

    def freeze(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Callable[[], Any]:
        return chosen(call).freeze(call, norm_out, residual_out, tokens, hidden)

    return Launcher(launch, freeze)


# ---------------------------------------------------------------------------- drop-in


def call_unified(input: Any, native: Any, pattern: int, given: Mapping[str, Any]) -> Any:
    """The drop-in's call on a unified workspace object ``native``, any pattern.

    ``given`` holds the drop-in's arguments that differ from their defaults; each is
    passed where the installed fused call takes it. A pattern the installed release lacks,
    or an argument it does not take, raises
    :class:`~fi_compat.errors.CapabilityMissingError`, except
    ``trigger_completion_at_end=False``: a release without the keyword (0.6.0 to 0.6.7)
    completes at the end, which computes the same result (the flag only lets the next
    kernel start early), so it is left out, with one debug record per process.
    """
    caps = get_capabilities()
    check_pattern(caps, pattern)
    shape = caps.comm.shapes.get(UNIFIED_FUSION.key)
    accepted = shape.keywords if shape is not None and shape.keywords is not None else {}
    kwargs: dict[str, Any] = {}
    for name, value in given.items():
        if name in accepted:
            kwargs[name] = value
        elif name == "trigger_completion_at_end":
            _completes_at_end(caps.flashinfer.version)
        else:
            raise not_accepted(UNIFIED_FUSION, name, caps.flashinfer.version)
    fusion = installed(caps, UNIFIED_FUSION, UNIFIED_API)
    return fusion(input=input, workspace=native, pattern=pattern, **kwargs)


_told: set[str | None] = set()


def _completes_at_end(version: str | None) -> None:
    """Say once, at debug level, that an early completion signal became completion at the end."""
    if version in _told:
        return
    _told.add(version)
    gate = GATES["trigger_completion_at_end"]
    logger.debug(
        "trigger_completion_at_end=False completes at the end: flashinfer %s's %s lacks the "
        "keyword (added in %s); the result is the same, only the overlap is lost",
        version,
        UNIFIED_FUSION.key,
        gate.introduced_in,
    )
