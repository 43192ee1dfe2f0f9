"""What the reach probe saw, as ``reach.json``'s verdicts: one per family and backend.

``fixed_split_size=`` and ``disable_split_kv=`` (``plan`` keywords since 0.4.0) make decode
and prefill deterministic only if ``plan`` hands them to the compiled planner, and the
signatures do not say whether it does. :mod:`fi_compat._measured.reach_probe` calls every
wrapper's ``plan`` in the release's own Python with its compiled modules replaced by
recorders; this module turns its report into one verdict per family and backend
(:func:`classify_release`), the entry ``reach.json`` holds per release. The maintainers'
``tools/reach.py`` writes the shipped file with it; :mod:`fi_compat._measured.installed`
measures the installed release with it.

Verdicts (``detail`` says what was seen, in one generated sentence):

``reaches``
    In every settings run a kernel-boundary call carries the fixed size as given (moving
    7919 -> 7920, ``-1`` for ``None``) and the disable flag (moving False -> True).
``dropped``
    ``plan`` completes and no boundary call carries them (or carries only one).
``refused``
    ``plan`` raises with the settings and completes without them, or ``plan`` takes no
    such keywords at all (the engine cannot pass them).
``unmeasured``
    ``plan`` cannot run on the CPU even without the settings, or what it hands on moves
    with the settings but not as given, or it keeps them for ``run`` (not measured).

``backend="auto"`` is measured under every answer of its device-dependent choices; it
reaches only when every answer reaches. A report that is not one (no families, a family
the probe could not measure) raises ``ValueError``: the caller says whose it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fi_compat._surface import ATTENTION_FAMILIES, FAST_DECODE_PLAN, PLAN_IMPL

__all__ = [
    "FAST_PLAN",
    "FIXED_ARRIVES",
    "NAMES_ENV",
    "PROBE",
    "TIMEOUT",
    "VERDICTS",
    "classify",
    "classify_family",
    "classify_release",
    "probe_names",
]

#: The script the subprocess runs, by path (it imports no fi-compat).
PROBE = Path(__file__).resolve().parent / "reach_probe.py"
#: The environment variable that hands the probe :func:`probe_names`.
NAMES_ENV = "FI_COMPAT_REACH_NAMES"
#: Seconds one release's subprocess may take.
TIMEOUT = 180.0
#: The key of the decode fast plan's entry (``flashinfer.decode``'s function, bound to a wrapper).
FAST_PLAN = FAST_DECODE_PLAN.key

#: What the probe passes as ``fixed_split_size`` per settings run, and what must arrive.
FIXED_ARRIVES = {7919: 7919, 7920: 7920, None: -1}

VERDICTS = ("reaches", "dropped", "refused", "unmeasured")
_NO_KEYWORDS = "{subject} takes no fixed_split_size/disable_split_kv"


def probe_names() -> dict[str, Any]:
    """The names the probe looks up, spelled in :mod:`fi_compat._surface` alone."""
    return {
        "decode_module": FAST_DECODE_PLAN.module,
        "fast_plan": FAST_PLAN,
        "families": list(ATTENTION_FAMILIES),
        "plan_impl": PLAN_IMPL,
    }


def _is_binding_error(error: str | None) -> bool:
    """Whether a run failed because ``plan`` does not bind one of the settings keywords."""
    return bool(
        error
        and error.startswith("TypeError")
        and "unexpected keyword argument" in error
        and ("fixed_split_size" in error or "disable_split_kv" in error)
    )


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _positions(call: Mapping[str, Any]) -> dict[str, Any]:
    """A boundary call's arguments by position (``"arg 3"``) and keyword (``"kw x"``)."""
    found: dict[str, Any] = {f"arg {i}": value for i, value in enumerate(call.get("args", []))}
    for key, value in sorted(call.get("kwargs", {}).items()):
        found[f"kw {key}"] = value
    return found


def _aligned(runs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], list[Mapping[str, Any]]]:
    """Boundary calls present in every run, keyed by ``(boundary, occurrence)``."""
    per_run: list[dict[tuple[str, int], Mapping[str, Any]]] = []
    for run in runs:
        seen: dict[str, int] = {}
        keyed: dict[tuple[str, int], Mapping[str, Any]] = {}
        for call in run.get("calls", []):
            boundary = str(call.get("boundary"))
            index = seen.get(boundary, 0)
            seen[boundary] = index + 1
            keyed[(boundary, index)] = call
        per_run.append(keyed)
    common = set(per_run[0]) if per_run else set()
    for keyed in per_run[1:]:
        common &= set(keyed)
    return {key: [keyed[key] for keyed in per_run] for key in sorted(common)}


def _same(value: Any, expected: Any) -> bool:
    """Equal and of the same kind (``True`` is not ``1``)."""
    return type(value) is type(expected) and value == expected


def classify(
    baseline: Mapping[str, Any],
    runs: Sequence[Mapping[str, Any]],
    subject: str = "plan",
    repeat: Mapping[str, Any] | None = None,
) -> tuple[str, str]:
    """The verdict and its detail for one backend under one answer of its ``auto`` choices.

    ``baseline`` is the run without the settings; ``runs`` the settings runs, each with
    ``settings`` (``[fixed_split_size, disable_split_kv]``), ``error``, ``calls`` (each
    ``{"boundary", "args", "kwargs"}``) and ``kept`` (wrapper attributes holding a sentinel).
    """
    if not runs:
        return "unmeasured", "the probe reported no settings runs"
    for run in runs:
        settings = run.get("settings")
        if (
            not isinstance(settings, list)
            or len(settings) != 2
            or settings[0] not in FIXED_ARRIVES
            or not isinstance(settings[1], bool)
        ):
            return "unmeasured", f"the probe reported unknown settings {settings!r}"
    base_error = baseline.get("error")
    errors = [run.get("error") for run in runs]
    if any(_is_binding_error(error) for error in errors):
        return "refused", _NO_KEYWORDS.format(subject=subject)
    if base_error is not None:
        return "unmeasured", _short(f"{subject} fails without the settings too: {base_error}")
    failed = [run for run in runs if run.get("error") is not None]
    if repeat is not None and repeat.get("error") is not None:
        # Without the settings it worked once and then not: the probe's state, not a refusal.
        return "unmeasured", _short(
            f"{subject} fails when repeated without the settings: {repeat['error']}"
        )
    if failed:
        first = failed[0]
        fixed, disable = first["settings"]
        return "refused", _short(
            f"{subject} raised {first['error']} with fixed_split_size={fixed}, "
            f"disable_split_kv={disable}, and completed without the settings"
        )
    return _classify_calls(runs)


def _classify_calls(runs: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    expected_fixed = [FIXED_ARRIVES[run["settings"][0]] for run in runs]
    expected_disable = [run["settings"][1] for run in runs]
    aligned = _aligned(runs)
    carries_fixed: list[str] = []
    carries_disable: list[str] = []
    for (boundary, index), calls in aligned.items():
        pictures = [_positions(call) for call in calls]
        slots = set(pictures[0])
        for picture in pictures[1:]:
            slots &= set(picture)
        label = boundary if index == 0 else f"{boundary} (call {index + 1})"
        fixed = [
            s
            for s in sorted(slots)
            if all(_same(p[s], e) for p, e in zip(pictures, expected_fixed, strict=True))
        ]
        disable = [
            s
            for s in sorted(slots)
            if all(_same(p[s], e) for p, e in zip(pictures, expected_disable, strict=True))
        ]
        if fixed and disable:
            return "reaches", _short(
                f"{label} receives fixed_split_size as {fixed[0]} and disable_split_kv "
                f"as {disable[0]} in every run"
            )
        if fixed:
            carries_fixed.append(f"{label} ({fixed[0]})")
        if disable:
            carries_disable.append(f"{label} ({disable[0]})")
    if carries_fixed or carries_disable:
        which = (
            f"fixed_split_size reaches {carries_fixed[0]} but disable_split_kv does not"
            if carries_fixed
            else f"disable_split_kv reaches {carries_disable[0]} but fixed_split_size does not"
        )
        return "dropped", _short(which)
    kept = sorted({name for run in runs for name in run.get("kept", {})})
    moving = _moving(runs, aligned)
    if moving:
        return "unmeasured", _short(f"{moving} moves with the settings but not as given")
    boundaries = sorted(
        {str(call.get("boundary")) for run in runs for call in run.get("calls", [])}
    )
    if kept:
        return "unmeasured", _short(
            f"plan keeps the fixed size in {', '.join(kept)} for run (not measured); "
            + (f"{boundaries[0]} gets neither setting" if boundaries else "no kernel call in plan")
        )
    if not boundaries:
        return "dropped", "plan called no compiled module and kept neither setting on the wrapper"
    named = (
        boundaries[0]
        if len(boundaries) == 1
        else f"{boundaries[0]} and {len(boundaries) - 1} other"
    )
    return "dropped", _short(f"{named} called without either setting in every run")


def _moving(
    runs: Sequence[Mapping[str, Any]], aligned: Mapping[tuple[str, int], list[Mapping[str, Any]]]
) -> str | None:
    """The first boundary argument (or call list) that differs between the settings runs."""
    shapes = {tuple(str(call.get("boundary")) for call in run.get("calls", [])) for run in runs}
    if len(shapes) > 1:
        return "the list of kernel calls"
    for (boundary, _index), calls in aligned.items():
        pictures = [_positions(call) for call in calls]
        for slot in sorted(pictures[0]):
            values = [json.dumps(p.get(slot), sort_keys=True) for p in pictures]
            if len(set(values)) > 1:
                return f"{boundary} {slot}"
    return None


_RANK = {"dropped": 0, "unmeasured": 1, "refused": 2, "reaches": 3}


def _combine(verdicts: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """One backend's verdict from its verdict under each ``auto`` answer: the worst wins."""
    if len(verdicts) == 1:
        ((verdict, detail),) = verdicts.values()
        return {"verdict": verdict, "detail": detail}
    worst = min(verdicts.items(), key=lambda item: (_RANK[item[1][0]], item[0]))
    label, (verdict, detail) = worst
    if verdict == "reaches":
        return {
            "verdict": verdict,
            "detail": _short(f"under each of {len(verdicts)} device answers: {detail}", 240),
        }
    return {"verdict": verdict, "detail": _short(f"when {label}: {detail}", 240)}


def _classify_backend(
    entry: Mapping[str, Any], plan_accepts: bool, subject: str = "plan"
) -> dict[str, str]:
    if not plan_accepts:
        return {"verdict": "refused", "detail": _NO_KEYWORDS.format(subject=subject)}
    init_error = entry.get("init_error")
    if init_error is not None:
        return {
            "verdict": "unmeasured",
            "detail": _short(f"__init__ fails in the probe: {init_error}"),
        }
    resolutions = entry.get("resolutions")
    if not isinstance(resolutions, Mapping) or not resolutions:
        return {"verdict": "unmeasured", "detail": "the probe reported no runs"}
    adjusted = [
        f"{name}={value}"
        for name, value, default in (
            ("kv_layout", entry.get("kv_layout", "NHD"), "NHD"),
            ("causal", entry.get("causal", False), False),
        )
        if value != default
    ]
    verdicts = {
        str(label): classify(
            result.get("baseline") or {}, result.get("runs", []), subject, result.get("repeat")
        )
        for label, result in sorted(resolutions.items())
    }
    combined = _combine(verdicts)
    if adjusted:
        combined["detail"] = f"{combined['detail']} (with {', '.join(adjusted)})"
    return combined


def _plan_accepts(raw: Mapping[str, Any]) -> bool:
    """Whether ``plan`` bound both keywords when called with them (in any measured run)."""
    if not raw.get("has_plan", False):
        return False
    errors = [
        run.get("error")
        for entry in raw.get("backends", {}).values()
        for result in (entry.get("resolutions") or {}).values()
        for run in result.get("runs", [])
    ]
    if any(_is_binding_error(error) for error in errors):
        return False
    return bool(raw.get("binds", True))


def _backend_attribute(raw: Mapping[str, Any]) -> str | None:
    if not raw.get("takes_backend"):
        return None
    names = sorted(raw.get("backend_attributes") or [])
    if not names:
        return None
    kept = [name for name in names if name in (raw.get("backend_attributes_after_plan") or [])]
    pool = kept or names
    return "_backend" if "_backend" in pool and len(pool) > 1 and not kept else pool[0]


def classify_family(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One family's entry of ``reach.json`` from the probe's report of it."""
    if "error" in raw:
        raise ValueError(f"the probe could not measure the family: {raw['error']}")
    plan_accepts = _plan_accepts(raw)
    backends: dict[str, dict[str, str]] = {}
    if not raw.get("has_plan", False):
        backends["default"] = {"verdict": "refused", "detail": "the class has no plan method"}
    else:
        for key, entry in sorted(raw.get("backends", {}).items()):
            backends[str(key)] = _classify_backend(entry, plan_accepts)
    # A class without backend=: what its instance holds after __init__ (the CUDA-graph
    # decode wrapper hands its base "auto"). A class with one: the signature's default, the
    # value asked for (an __init__ may resolve "auto" there for the stand-in GPU).
    constructed = raw.get("constructed_backend")
    default = raw.get("default_backend")
    if not raw.get("takes_backend") and isinstance(constructed, str):
        default = constructed
    return {
        "plan_takes": plan_accepts,
        "backend_attribute": _backend_attribute(raw),
        "default_backend": default if isinstance(default, str) else None,
        "backends": backends,
    }


def classify_release(document: Mapping[str, Any]) -> dict[str, Any]:
    """A release's entry of ``reach.json`` from the probe's whole report."""
    families = document.get("families")
    if not isinstance(families, Mapping):
        raise ValueError("the probe's report has no families")
    entry: dict[str, Any] = {}
    for family in ATTENTION_FAMILIES:
        if family in families:
            entry[family] = classify_family(families[family])
    fast = document.get("fast_plan")
    decode = entry.get(ATTENTION_FAMILIES[2])
    if isinstance(fast, Mapping):
        if "error" in fast:
            raise ValueError(f"the probe could not measure {FAST_PLAN}: {fast['error']}")
        accepts = bool(fast.get("takes"))
        entry[FAST_PLAN] = {
            "plan_takes": accepts,
            "backend_attribute": decode["backend_attribute"] if decode else None,
            "default_backend": decode["default_backend"] if decode else None,
            "backends": {
                str(key): _classify_backend(value, accepts, FAST_PLAN)
                for key, value in sorted(fast.get("backends", {}).items())
            },
        }
    return entry
