"""The lowest launch layer: what a TRT-LLM workspace launches below the public
``allreduce_fusion``, as measured per release.

On a TRT-LLM workspace and the residual RMSNorm pattern, a unified workspace calls the
legacy ``trtllm_allreduce_fusion`` below its deprecation wrapper, with the arguments the
public ``allreduce_fusion`` would pass (:func:`lowest_layer`), as ``tools/layers.py``
measured them per release into ``layers.json`` (:mod:`fi_compat._measured`); where that
binding is not known to be exact, it stays on the public call
(:mod:`fi_compat.comm._unified` binds either). The allreduce-fusion guide,
``docs/guide/comm.md`` ("Below the public call"), says what is measured and when the public
call is kept.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import operator
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fi_compat._measured import releases, why_unmeasured
from fi_compat._measured.layers import HANDLES_ATTACHED, PER_CALL
from fi_compat._signature import describe_error
from fi_compat._surface import LEGACY_FUSION, SYMMETRIC_HANDLE, TRTLLM_WORKSPACE, UNIFIED_FUSION
from fi_compat.comm._launch import Launcher
from fi_compat.comm._types import Spec, Values
from fi_compat.errors import WorkspaceDetachedError

if TYPE_CHECKING:
    import torch

__all__ = ["Recipe", "lowest_layer", "measured"]

#: The public call's checks that fi-compat makes itself: a measured entry that lists
#: another keeps the public call.
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
