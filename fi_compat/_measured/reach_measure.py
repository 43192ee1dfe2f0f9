"""The reach probe's measurement: every family's ``plan`` run with and without the settings.

For each family, backend and combination of ``auto`` answers it consulted
(:mod:`fi_compat._measured.reach_hooks`), ``plan`` runs without the split settings, then
with each of :data:`SETTINGS` and :data:`GRAPH_SETTINGS`, then once more without (a plan
that fails only when repeated is the probe's state, not a refusal), each on a fresh wrapper
with fresh tensors. Each run reports its error (if any), the kernel-boundary calls with
their plain arguments (:mod:`fi_compat._measured.reach_recorders`), the wrapper attributes
that hold a sentinel afterwards and the hooks it consulted. When ``plan`` fails asking for
``HND`` (trtllm-gen, prims) or for causal attention (trtllm-gen prefill), the backend is
measured again that way and the report says so. :func:`measure` is the whole document.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

from .reach_arguments import LAYOUTS, construct, construct_any_layout, fresh, plan_call
from .reach_backends import (
    backend_attributes,
    constructed_backend,
    offered_backends,
    rejects_value,
)
from .reach_cpu import import_attention_modules, patch_compute_capability, patch_torch
from .reach_hooks import ANSWERS, CONSULTED, answer_sets, install_hooks, label
from .reach_names import DECODE_FAMILY, FAMILIES, NAMES
from .reach_recorders import CALLS, plain, replace_loaders, wrap_sub_planners

__all__ = ["GRAPH_SETTINGS", "SETTINGS", "measure"]

#: The split settings of the measured runs, as ``(fixed_split_size, disable_split_kv)``.
SETTINGS: tuple[tuple[int | None, bool], ...] = ((7919, False), (7920, False), (7919, True))
#: The CUDA-graph pair: FlashInfer maps ``None`` to ``-1``.
GRAPH_SETTINGS: tuple[int | None, bool] = (None, True)


def _error(error: BaseException) -> str:
    """``Type: message``; for an empty message, where it was raised and that line's source."""
    message = " ".join(str(error).split())
    if not message:
        frames = traceback.extract_tb(error.__traceback__)
        if frames:
            frame = frames[-1]
            parts = frame.filename.replace("\\", "/").split("/")
            where = (
                "/".join(parts[parts.index("flashinfer") :]) if "flashinfer" in parts else parts[-1]
            )
            message = f"at {where}:{frame.lineno} ({(frame.line or '').strip()})"
    if len(message) > 300:
        message = message[:297] + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _sentinel_attributes(wrapper: Any) -> dict[str, Any]:
    """Wrapper attributes holding a sentinel of the settings after a plan."""
    kept: dict[str, Any] = {}
    for name, value in sorted(vars(wrapper).items()):
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and value in (7919, 7920):
            kept[name] = value
    return kept


def _run(
    call: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], owner: Any
) -> dict[str, Any]:
    CALLS.clear()
    CONSULTED.clear()
    error: str | None = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call(*args, **kwargs)
    except Exception as caught:
        error = _error(caught)
    return {
        "error": error,
        "calls": [dict(entry) for entry in CALLS],
        "kept": _sentinel_attributes(owner),
        "consulted": sorted(CONSULTED),
    }


def _settings_kwargs(settings: tuple[int | None, bool]) -> dict[str, Any]:
    return {"fixed_split_size": settings[0], "disable_split_kv": settings[1]}


def _measure_runs(
    make: Callable[[], tuple[Any, Callable[..., Any]]],
    args: list[Any],
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """Baseline and settings runs, each on a fresh wrapper (and a fresh planned state)."""
    runs: list[dict[str, Any]] = []
    baseline: dict[str, Any] | None = None
    repeat: dict[str, Any] | None = None
    for index, settings in enumerate((None, *SETTINGS, GRAPH_SETTINGS, None)):
        try:
            owner, call = make()
        except Exception as caught:
            run = {"error": "setup: " + _error(caught), "calls": [], "kept": {}, "consulted": []}
        else:
            extra = {} if settings is None else _settings_kwargs(settings)
            run = _run(call, fresh(args), {**fresh(kwargs), **extra}, owner)
        if settings is not None:
            runs.append({"settings": list(settings), **run})
        elif index == 0:
            baseline = run
        else:
            repeat = run
    return {"baseline": baseline, "runs": runs, "repeat": repeat}


def _measure_resolutions(
    hooks: dict[str, list[Any]],
    make: Callable[[], tuple[Any, Callable[..., Any]]],
    args: list[Any],
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """Runs under every combination of answers of the ``auto`` hooks the plan consulted."""
    defaults = {name: answers[0] for name, answers in hooks.items()}
    ANSWERS.update(defaults)
    first = _measure_runs(make, args, kwargs)
    consulted = {name for run in (first["baseline"], *first["runs"]) for name in run["consulted"]}
    if not consulted:
        return {"default": first}
    results: dict[str, Any] = {}
    measured: set[str] = set()
    for _ in range(4):  # a hook may be consulted only under another's answer
        for answers in answer_sets(hooks, consulted):
            key = label(answers)
            if key in measured:
                continue
            measured.add(key)
            ANSWERS.update(defaults)
            ANSWERS.update(answers)
            results[key] = _measure_runs(make, args, kwargs)
        seen = {
            name
            for result in results.values()
            for run in (result["baseline"], *result["runs"])
            for name in run["consulted"]
        }
        if seen <= consulted:
            break
        consulted |= seen
    ANSWERS.update(defaults)
    return results


def _wants(resolutions: dict[str, Any], word: str) -> bool:
    """Whether ``plan`` failed without the settings, asking for ``word`` (``HND``, causal)."""
    errors = [str(result["baseline"]["error"] or "") for result in resolutions.values()]
    return any(word.lower() in error.lower() for error in errors)


def _measure_family(
    torch: Any, flashinfer: Any, family: str, hooks: dict[str, list[Any]]
) -> dict[str, Any]:
    cls = getattr(flashinfer, family)
    init = inspect.signature(cls.__init__).parameters
    accepts_backend = "backend" in init
    default = init["backend"].default if accepts_backend else None
    result: dict[str, Any] = {
        "has_plan": callable(getattr(cls, "plan", None)),
        "takes_backend": accepts_backend,
        "default_backend": default if isinstance(default, str) else None,
        "backend_attributes": [],
        "backend_attributes_after_plan": [],
        "backends": {},
    }
    if not result["has_plan"]:
        return result
    try:
        args, kwargs = plan_call(torch, family, cls)
    except LookupError as error:
        result["error"] = str(error)
        return result
    result["constructed_backend"] = constructed_backend(torch, family, cls)
    backends: list[str | None] = list(offered_backends(cls)) if accepts_backend else [None]
    for backend in backends:
        key = backend if backend is not None else "default"
        try:
            probe, first_layout = construct_any_layout(torch, family, cls, backend)
        except Exception as caught:
            message = _error(caught)
            if backend is not None and rejects_value(caught, message):
                continue  # the release does not offer this value
            result["backends"][key] = {"init_error": message}
            continue
        if backend is not None and not result["backend_attributes"]:
            result["backend_attributes"] = backend_attributes(probe, backend)

        layout, causal = first_layout, False
        for _ in range(3):

            def make(
                backend: str | None = backend, layout: str = layout
            ) -> tuple[Any, Callable[..., Any]]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    wrapper = construct(torch, family, cls, backend, layout)
                wrap_sub_planners(wrapper)
                return wrapper, wrapper.plan

            call_kwargs = {**kwargs, "causal": True} if causal else kwargs
            resolutions = _measure_resolutions(hooks, make, args, call_kwargs)
            if _wants(resolutions, LAYOUTS[1]) and layout == LAYOUTS[0]:
                layout = LAYOUTS[1]
            elif _wants(resolutions, "causal") and not causal and "causal" in kwargs:
                causal = True
            else:
                break
        result["backends"][key] = {
            "init_error": None,
            "kv_layout": layout,
            "causal": causal,
            "resolutions": resolutions,
        }
        if backend == "auto":
            # Which attribute still holds the requested value once plan resolved it.
            with contextlib.suppress(Exception):
                wrapper, call = make()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    call(*args, **kwargs)
                result["backend_attributes_after_plan"] = backend_attributes(wrapper, "auto")
    return result


def _measure_fast_decode_plan(
    torch: Any, flashinfer: Any, hooks: dict[str, list[Any]], decode: dict[str, Any]
) -> dict[str, Any] | None:
    module = sys.modules.get(NAMES["decode_module"])
    fast = getattr(module, NAMES["fast_plan"], None)
    if fast is None:
        return None
    cls = getattr(flashinfer, DECODE_FAMILY)
    parameters = inspect.signature(fast).parameters
    result: dict[str, Any] = {
        "takes": "fixed_split_size" in parameters and "disable_split_kv" in parameters,
        "backends": {},
    }
    args, kwargs = plan_call(torch, DECODE_FAMILY, cls)
    fast_kwargs = {key: value for key, value in kwargs.items() if key in parameters}
    for key, entry in decode.get("backends", {}).items():
        if entry.get("init_error") is not None:
            result["backends"][key] = {"init_error": "decode wrapper: " + entry["init_error"]}
            continue
        backend = None if key == "default" else key
        layout = str(entry.get("kv_layout", LAYOUTS[0]))
        plan_kwargs = {**kwargs, "causal": True} if entry.get("causal") else kwargs

        def make(
            backend: str | None = backend,
            layout: str = layout,
            plan_kwargs: dict[str, Any] = plan_kwargs,
        ) -> tuple[Any, Callable[..., Any]]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                wrapper = construct(torch, DECODE_FAMILY, cls, backend, layout)
                wrap_sub_planners(wrapper)
                wrapper.plan(*fresh(args), **fresh(plan_kwargs))
            return wrapper, lambda *a, **k: fast(wrapper, *a, **k)

        resolutions = _measure_resolutions(hooks, make, args, fast_kwargs)
        result["backends"][key] = {"init_error": None, "resolutions": resolutions}
    return result


def measure() -> dict[str, Any]:
    """Import the release on the path and measure every family it exports."""
    import torch

    patch_torch(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flashinfer = importlib.import_module("flashinfer")
        import_attention_modules()
    loaders = replace_loaders()
    patch_compute_capability()
    hooks = install_hooks()
    families: dict[str, Any] = {}
    for family in FAMILIES:
        if getattr(flashinfer, family, None) is None:
            continue
        try:
            families[family] = _measure_family(torch, flashinfer, family, hooks)
        except Exception as caught:
            families[family] = {"error": _error(caught), "traceback": traceback.format_exc()}
    fast: dict[str, Any] | None = None
    if DECODE_FAMILY in families and "backends" in families[DECODE_FAMILY]:
        try:
            fast = _measure_fast_decode_plan(torch, flashinfer, hooks, families[DECODE_FAMILY])
        except Exception as caught:
            fast = {"error": _error(caught), "traceback": traceback.format_exc()}
    return {
        "probe": 1,
        "version": str(getattr(flashinfer, "__version__", "")),
        "location": str(getattr(flashinfer, "__file__", "")),
        "loaders": loaders,
        "hooks": {name: [plain(a) for a in answers] for name, answers in hooks.items()},
        "families": families,
        "fast_plan": fast,
    }
