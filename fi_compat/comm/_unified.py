"""The unified allreduce-fusion API (0.6.0+): its workspace, its bound call, the drop-in.

FlashInfer's factory (:data:`~fi_compat._surface.UNIFIED_FACTORY`) returns a workspace
object that frees itself with ``destroy()``; its fused call
(:data:`~fi_compat._surface.UNIFIED_FUSION`) takes that object and keyword arguments. This
module makes the workspace (:func:`create_unified`: which keywords the installed release
gets, how a process group reaches its rendezvous), binds the per-call paths
(:func:`bind_unified`), and forwards the drop-in's other patterns (:func:`call_unified`).

Releases 0.6.0 to 0.6.7 lack ``trigger_completion_at_end``; :func:`_early_trigger` says how
a call that sets it to False is honoured there (through the legacy call, on the same
TRT-LLM workspace) or completes at the end, its safe equivalent.

**The lowest launch layer.** On a TRT-LLM workspace and the residual RMSNorm pattern, a
workspace calls the legacy ``trtllm_allreduce_fusion`` below its deprecation wrapper, with
the arguments the public ``allreduce_fusion`` would pass (:func:`lowest_layer`), as
``tools/layers.py`` measured them per release into ``layers.json``
(:mod:`fi_compat._measured`); where that binding is not known to be exact, it stays on the
public call. The allreduce-fusion
guide, ``docs/guide/comm.md`` ("Below the public call"), says what is measured and when
the public call is kept.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import operator
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fi_compat._log import get_logger
from fi_compat._measured import releases, why_unmeasured
from fi_compat._measured.layers import FIXED, HANDLES_ATTACHED, PER_CALL, SOURCES
from fi_compat._requirements.names import LEGACY_API, UNIFIED_API, gate_feature
from fi_compat._signature import describe_error
from fi_compat._surface import (
    COMM,
    GATES,
    LEGACY_FUSION,
    SYMMETRIC_HANDLE,
    TORCH_DIST_BACKEND,
    TRTLLM_WORKSPACE,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
)
from fi_compat.capabilities import Capabilities, get_capabilities
from fi_compat.comm._call import (
    Bound,
    Fit,
    Launcher,
    Spec,
    Values,
    bind,
    fit_for,
    keyword_launch,
    table_freeze,
)
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
    not_taken,
    option_refused,
    trtllm_ranks_error,
)
from fi_compat.comm._group import group_backend
from fi_compat.comm._legacy import LEGACY_CALL, legacy_launch
from fi_compat.errors import WorkspaceDetachedError

if TYPE_CHECKING:
    import torch

__all__ = [
    "FIXED",
    "HANDLES_ATTACHED",
    "PER_CALL",
    "SOURCES",
    "UNIFIED_CALL",
    "call_unified",
    "create_unified",
    "lowest_layer",
    "measured",
]


logger = get_logger(__name__)

#: The keywords the bound call passes to the unified fused call (0.6.0+), in the order it
#: passes them, each with what it takes (a name of ``LAUNCH_VALUES`` of ``_call``, or the
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
#: What a workspace serves, per :attr:`~fi_compat.comm._call.Fit.rule`, for its decisions.
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
    takes_group = accepts(caps, UNIFIED_FACTORY, "group")
    takes_backend = accepts(caps, UNIFIED_FACTORY, "comm_backend")
    if comm_backend is not None:
        if not takes_backend:
            raise capability_missing(
                gate_feature("comm_backend"),
                f"{UNIFIED_FACTORY.dotted} to take comm_backend=",
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
                why = f"{UNIFIED_FACTORY.key} takes no group=" + (
                    "" if takes_backend else " and no comm_backend="
                )
                if takes_backend:
                    why += f" and {COMM} has no {TORCH_DIST_BACKEND.key}"
                raise group_error(caps, UNIFIED_FACTORY, span, why)
        elif not takes_group and span.whole_world:
            decisions.append("group left out: it spans the whole world, the default")
        elif not takes_group:
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
) -> Bound:
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
            raise not_taken(UNIFIED_FUSION, name, caps.flashinfer.version)
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


# ------------------------------------------------- the lowest launch layer, as measured

_CHECKS = frozenset({HANDLES_ATTACHED})
#: Where FlashInfer's trace wrapper is defined, and its name.
_TRACE_WRAPPER = ("api_logging.py", "_auto_dump_wrapper")
#: Where the ``@deprecated`` wrapper of each Python is defined, and its name.
_DEPRECATION_FILES = ("typing_extensions.py", "warnings.py")


@functools.cache
def measured() -> Mapping[str, Any]:
    """``layers.json``'s ``releases``: release -> its measured entry, the installed release's
    measured on this machine where fi-compat shipped none (:func:`fi_compat._measured.releases`)."""
    return releases("layers")


@functools.lru_cache(maxsize=64)
def _digest(code: Any) -> str | None:
    """SHA-256 of the source of a code object's function, or None when it has none."""
    try:
        source = inspect.getsource(code)
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def _code_is(function: Any, where: tuple[str, ...], name: str) -> bool:
    code = getattr(function, "__code__", None)
    return code is not None and code.co_name == name and os.path.basename(code.co_filename) in where


def _trace_dumping(wrapper: Any) -> bool | None:
    """Whether FlashInfer's trace wrapper would dump now (its own switch), None if unknown."""
    code, closure = wrapper.__code__, wrapper.__closure__ or ()
    cells = dict(zip(code.co_freevars, closure, strict=False))
    cell = cells.get("_is_trace_dump_enabled")
    if cell is None:
        return None
    try:
        return bool(cell.cell_contents())
    except Exception:  # its answer cannot be read: assume it would dump
        return None


def _function_below(public: Any) -> tuple[Any, str | None]:
    """The function the public name reaches, or None and why not."""
    layer = public
    for _ in range(4):
        below = getattr(layer, "__wrapped__", None)
        if below is None:
            return layer, None
        if not _code_is(layer, (_TRACE_WRAPPER[0],), _TRACE_WRAPPER[1]):
            return None, (
                f"{UNIFIED_FUSION.key} is wrapped by {getattr(layer, '__qualname__', layer)!r} "
                "(FlashInfer API logging on, or patched): its public call keeps it working"
            )
        if _trace_dumping(layer) is not False:
            return None, (
                "FlashInfer's trace dumping is on (FLASHINFER_TRACE_DUMP): the public call "
                "dumps the traces"
            )
        layer = below
    return None, f"{UNIFIED_FUSION.key} is wrapped more than four times"


def _legacy_below(legacy: Any) -> Any:
    """The legacy function below its ``@deprecated`` wrapper, or None if it is other."""
    below = getattr(legacy, "__wrapped__", None)
    if below is None:
        return legacy if inspect.isfunction(legacy) else None
    if (
        hasattr(legacy, "__deprecated__")
        and _code_is(legacy, _DEPRECATION_FILES, "wrapper")
        and inspect.isfunction(below)
        and getattr(below, "__wrapped__", None) is None
    ):
        return below
    return None


def lowest_layer(
    version: str | None,
    spec: Spec,
    *,
    fusion: Callable[..., Any],
    native: Any,
    pattern: int,
) -> tuple[Launcher | None, str]:
    """The launch below the public fused call for this workspace, and the decision.

    Returns ``(launcher, decision)``: the launcher is None when the workspace stays on the
    public call, and the decision says why, in a sentence for ``FusionWorkspace.decisions``.
    Whatever FlashInfer's objects raise while they are inspected here (a raising
    attribute, an unreadable source) keeps the public call and is said in the decision.
    """
    try:
        return _decide(version, spec, fusion=fusion, native=native, pattern=pattern)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # FlashInfer's objects, inspected: a finding, never a crash
        return None, (
            f"the public {UNIFIED_FUSION.key}: inspecting FlashInfer's functions and "
            f"workspace raised {describe_error(error)}"
        )


def _decide(
    version: str | None,
    spec: Spec,
    *,
    fusion: Callable[..., Any],
    native: Any,
    pattern: int,
) -> tuple[Launcher | None, str]:
    """:func:`lowest_layer` without its guard."""
    entry = measured().get(version) if version is not None else None
    public = f"the public {UNIFIED_FUSION.key}"
    if entry is None:
        hint = why_unmeasured(version)
        return None, f"{public}: flashinfer {version}'s layering was not measured" + (
            f" ({hint})" if hint else ""
        )
    if entry["layer"] != "legacy":
        return None, f"{public}: {entry['detail']}"
    function, why = _function_below(fusion)
    if function is None:
        return None, f"{public}: {why}"
    if _digest(getattr(function, "__code__", None)) != entry["fusion_source"]:
        return None, f"{public}: its source differs from flashinfer {version}'s as measured"
    namespace = function.__globals__
    workspace_class = namespace.get(TRTLLM_WORKSPACE)
    if not (isinstance(workspace_class, type) and isinstance(native, workspace_class)):
        return None, f"{public}: the workspace is not a {TRTLLM_WORKSPACE}"
    raw = _legacy_below(namespace.get(LEGACY_FUSION.key))
    if raw is None or _digest(raw.__code__) != entry["legacy_source"]:
        return None, (
            f"{public}: the {LEGACY_FUSION.key} it calls is not flashinfer {version}'s as measured"
        )
    checks = set(entry["checks"])
    if not checks <= _CHECKS:
        return None, f"{public}: checks fi-compat does not make: {sorted(checks - _CHECKS)}"
    handles: tuple[Any, ...] = ()
    if HANDLES_ATTACHED in checks:
        handle_class = namespace.get(SYMMETRIC_HANDLE)
        if not isinstance(handle_class, type):
            return None, f"{public}: {SYMMETRIC_HANDLE} is not where it was measured"
        handles = tuple(
            handle
            for handle in getattr(native, "mem_handles", ())
            if isinstance(handle, handle_class)
        )
    recipe = _recipe(raw, entry["arguments"], spec, native, pattern)
    if isinstance(recipe, str):
        return None, f"{public}: {recipe}"
    fixed, pick, allocate = recipe
    launcher = _launcher(raw, fixed, pick, allocate, handles, version)
    return launcher, (
        f"calls go to {LEGACY_FUSION.key} below its deprecation wrapper with the arguments "
        f"{public} passes (measured for flashinfer {version}), skipping only what fi-compat "
        "fixed at creation or checks on every call"
        + ("; the symmetric-memory handles are checked on every call" if handles else "")
    )


Recipe = tuple[tuple[Any, ...], Callable[[tuple[Any, ...]], tuple[Any, ...]], bool]


def _recipe(
    raw: Callable[..., Any],
    arguments: Mapping[str, Any],
    spec: Spec,
    native: Any,
    pattern: int,
) -> Recipe | str:
    """``(fixed values, picker, allocate)``: the positional call of ``raw`` per call is
    ``raw(*pick(fixed + per_call))`` with ``per_call`` in :data:`PER_CALL` order; or why
    the measured arguments cannot be placed."""
    parameters = list(inspect.signature(raw).parameters.values())
    if [parameter.name for parameter in parameters] != list(arguments):
        return f"{LEGACY_FUSION.key}'s parameters are not those measured"
    fixed: list[Any] = []
    indices: list[int] = []
    per_call = {name: position for position, name in enumerate(PER_CALL)}
    for parameter in parameters:
        if parameter.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            return f"{LEGACY_FUSION.key}'s {parameter.name} cannot be passed by position"
        source = arguments[parameter.name]
        if isinstance(source, dict):
            value = source["constant"]
        elif source in per_call:
            indices.append(-1 - per_call[source])  # resolved below, after the fixed part
            continue
        elif source == "default":
            if parameter.default is inspect.Parameter.empty:
                return f"{LEGACY_FUSION.key}'s {parameter.name} has no default"
            value = parameter.default
        elif source == "pattern":
            value = pattern
        elif source.startswith("workspace."):
            attribute = source.removeprefix("workspace.")
            if not hasattr(native, attribute):
                return f"the workspace has no {attribute}"
            value = getattr(native, attribute)
        else:
            return f"unknown source {source!r} for {parameter.name}"
        indices.append(len(fixed))
        fixed.append(value)
    # Per-call sources come after the fixed values in the tuple the picker reads.
    resolved = [index if index >= 0 else len(fixed) + (-1 - index) for index in indices]
    if len(resolved) < 2:  # itemgetter of one index returns the item, not a tuple
        return f"{LEGACY_FUSION.key} takes fewer than two parameters"
    pick = operator.itemgetter(*resolved)
    allocate = "scratch" in arguments.values()
    return tuple(fixed), pick, allocate


def _launcher(
    raw: Callable[..., Any],
    fixed: tuple[Any, ...],
    pick: Callable[[tuple[Any, ...]], tuple[Any, ...]],
    allocate: bool,
    handles: tuple[Any, ...],
    version: str | None,
) -> Launcher:
    """The launch and the frozen launch on ``raw``."""
    import torch

    empty_like = torch.empty_like

    def attached() -> None:
        for handle in handles:
            if not handle.mapped:
                raise WorkspaceDetachedError(
                    "expected the workspace's symmetric-memory handles to be attached, found "
                    f"them detached (checkpoint_prepare(), flashinfer {version}): call "
                    "checkpoint_restore(comm_backend) before the next allreduce"
                )

    def placed(target: Callable[..., Any], checked: bool) -> Any:
        """A launch that hands ``raw``'s arguments to ``target`` (``checked``: after
        :func:`attached`); one body for the launch and for what the frozen call binds."""

        def launch(
            call: Values,
            norm_out: torch.Tensor,
            residual_out: torch.Tensor,
            tokens: int,
            hidden: int,
            /,
        ) -> Any:
            if checked:
                attached()
            input, residual, weight, eps, _, _, use_oneshot, fp32_acc, trigger, pdl = call
            # The measured arguments are ``view(-1)`` of each tensor ("view:input"). The
            # validator has checked that all four are contiguous, and ``ravel()`` of a
            # contiguous tensor is that very view (same storage, offset, shape and stride:
            # it copies only a tensor that is not), for about 250 ns less each.
            flat = input.ravel()
            return target(
                *pick(
                    (
                        *fixed,
                        flat,
                        residual.ravel(),
                        residual_out.ravel(),
                        norm_out.ravel(),
                        weight,
                        empty_like(flat) if allocate else None,
                        tokens,
                        pdl,
                        trigger,
                        fp32_acc,
                        use_oneshot,
                        eps,
                        hidden,
                    )
                )
            )

        return launch

    launch = placed(raw, bool(handles))
    arguments = placed(_arguments, False)

    def freeze(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Callable[[], Any]:
        frozen = functools.partial(raw, *arguments(call, norm_out, residual_out, tokens, hidden))
        if not handles:
            return frozen

        def checked() -> Any:
            attached()
            return frozen()

        return checked

    return Launcher(launch, freeze)


def _arguments(*arguments: Any) -> tuple[Any, ...]:
    """The arguments it is given, as a tuple: what a launch of ``raw`` would pass."""
    return arguments
