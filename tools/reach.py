"""Measure, per FlashInfer release, whether the split-KV settings reach the kernel's planner.

``fixed_split_size=`` and ``disable_split_kv=`` (``plan`` keywords since 0.4.0) make decode
and prefill deterministic only if ``plan`` hands them to the compiled planner. Whether it
does depends on the wrapper class and on ``backend=``, and the signatures do not say: a
``plan`` may take both keywords and then pass them to one backend's planner and not to
another's. This tool measures it. For each release it runs one subprocess of this
interpreter that imports the release for real (the extracted wheel, or the ``flashinfer/``
package of the sdist, first on ``PYTHONPATH``; the real-release harness's ``sitecustomize``
for the CPU workarounds) and runs :mod:`tools.reach_probe` there: compiled-module loaders
replaced by recorders, ``plan`` called without the settings and with ``(7919, False)``,
``(7920, False)``, ``(7919, True)`` and ``(None, True)``. This module turns what the probe
saw into one verdict per family and backend (:func:`classify`) and writes
``fi_compat/_measured/reach.json``, which the runtime reads.

Run from the repository root (the Makefile's ``measure-reach`` target runs the first)::

    python -m tools.reach                  # every recorded release from 0.4.0 -> reach.json
    python -m tools.reach 0.7.2.post1 ...  # these releases (the others' entries are kept)
    python -m tools.reach --check [VERSION ...]  # compare with the shipped file; 1 if it differs

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
reaches only when every answer reaches.

A release whose subprocess crashes, times out or prints anything but the probe's JSON is
reported on stderr and not written (its previous entry, if any, stays); the exit status
is then 1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from fi_compat._surface import ATTENTION_FAMILIES, FAST_DECODE_PLAN, PLAN_IMPL
from tools import measurement
from tools.releases import ReleaseCache

__all__ = [
    "FIRST_RELEASE",
    "OUTPUT",
    "PROBE",
    "ProbeError",
    "ReleaseEnvironment",
    "build_document",
    "classify",
    "classify_family",
    "classify_release",
    "dump_document",
    "main",
    "measure_release",
    "parse_probe_output",
    "recorded_releases",
    "release_environment",
    "run_in_release",
    "run_probe",
]

ROOT = Path(__file__).resolve().parent.parent
#: The file this tool writes and the runtime reads.
OUTPUT = ROOT / "fi_compat" / "_measured" / "reach.json"
#: The key of the decode fast plan's entry (``flashinfer.decode``'s function, bound to a wrapper).
FAST_PLAN = FAST_DECODE_PLAN.key
#: The script the subprocess runs (by path, so only the release and the site are imported).
PROBE = Path(__file__).resolve().parent / "reach_probe.py"
#: The real-release harness's start-up hook: CUDA runtime preload, GPU 0 stand-ins.
SITE_TEMPLATE = ROOT / "tests" / "support" / "release_harness_site" / "sitecustomize.py"
#: The CUDA runtime whose ``libcudart.so.12`` the hook preloads (as the harness does).
CUDA_RUNTIME = "nvidia-cuda-runtime-cu12==12.9.79"
#: ``fixed_split_size=`` and ``disable_split_kv=`` arrived in this release.
FIRST_RELEASE = Version("0.4.0")
#: Seconds one release's subprocess may take.
TIMEOUT = 180.0
SCHEMA = 1
TOOL = "tools/reach.py"

#: What the probe passes as ``fixed_split_size`` per settings run, and what must arrive.
FIXED_ARRIVES = {7919: 7919, 7920: 7920, None: -1}

VERDICTS = ("reaches", "dropped", "refused", "unmeasured")
_NO_KEYWORDS = "{subject} takes no fixed_split_size/disable_split_kv"


class ProbeError(RuntimeError):
    """A release's probe subprocess failed, timed out or printed something unusable."""


# --------------------------------------------------------------------- classification


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
    entry: Mapping[str, Any], plan_takes: bool, subject: str = "plan"
) -> dict[str, str]:
    if not plan_takes:
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


def _plan_takes(raw: Mapping[str, Any]) -> bool:
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
        raise ProbeError(f"the probe could not measure the family: {raw['error']}")
    plan_takes = _plan_takes(raw)
    backends: dict[str, dict[str, str]] = {}
    if not raw.get("has_plan", False):
        backends["default"] = {"verdict": "refused", "detail": "the class has no plan method"}
    else:
        for key, entry in sorted(raw.get("backends", {}).items()):
            backends[str(key)] = _classify_backend(entry, plan_takes)
    # A class without backend=: what its instance holds after __init__ (the CUDA-graph
    # decode wrapper hands its base "auto"). A class with one: the signature's default, the
    # value asked for (an __init__ may resolve "auto" there for the stand-in GPU).
    constructed = raw.get("constructed_backend")
    default = raw.get("default_backend")
    if not raw.get("takes_backend") and isinstance(constructed, str):
        default = constructed
    return {
        "plan_takes": plan_takes,
        "backend_attribute": _backend_attribute(raw),
        "default_backend": default if isinstance(default, str) else None,
        "backends": backends,
    }


def classify_release(document: Mapping[str, Any]) -> dict[str, Any]:
    """A release's entry of ``reach.json`` from the probe's whole report."""
    families = document.get("families")
    if not isinstance(families, Mapping):
        raise ProbeError("the probe's report has no families")
    entry: dict[str, Any] = {}
    for family in ATTENTION_FAMILIES:
        if family in families:
            entry[family] = classify_family(families[family])
    fast = document.get("fast_plan")
    decode = entry.get(ATTENTION_FAMILIES[2])
    if isinstance(fast, Mapping):
        if "error" in fast:
            raise ProbeError(f"the probe could not measure {FAST_PLAN}: {fast['error']}")
        takes = bool(fast.get("takes"))
        entry[FAST_PLAN] = {
            "plan_takes": takes,
            "backend_attribute": decode["backend_attribute"] if decode else None,
            "default_backend": decode["default_backend"] if decode else None,
            "backends": {
                str(key): _classify_backend(value, takes, FAST_PLAN)
                for key, value in sorted(fast.get("backends", {}).items())
            },
        }
    return entry


# -------------------------------------------------------------------------- the probe


def parse_probe_output(version: str, stdout: str) -> dict[str, Any]:
    """The probe's JSON report, checked to be one and to be of ``version``."""
    try:
        document = json.loads(stdout)
    except json.JSONDecodeError as error:
        raise ProbeError(
            f"flashinfer-python {version}: the probe printed no JSON ({error})"
        ) from None
    if not isinstance(document, dict) or document.get("probe") != 1:
        raise ProbeError(f"flashinfer-python {version}: the probe printed an unknown document")
    found = document.get("version")
    if found != version:
        raise ProbeError(
            f"flashinfer-python {version}: the subprocess imported flashinfer {found!r} "
            f"from {document.get('location')!r}"
        )
    return document


@dataclass(frozen=True)
class ReleaseEnvironment:
    """What one release's subprocess needs: its package directory and the workarounds."""

    version: str
    release_dir: Path
    site_dir: Path
    cudart: Path | None
    #: Modules compiled with their annotations deferred (:func:`deferred_annotations`).
    deferred_annotations: tuple[str, ...] = ()


def run_probe(
    environment: ReleaseEnvironment,
    *,
    timeout: float = TIMEOUT,
    command: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run the probe in a subprocess of this interpreter against one release.

    Raises
    ------
    ProbeError
        The subprocess failed, timed out, or printed no usable report.
    """
    names = {
        "decode_module": FAST_DECODE_PLAN.module,
        "fast_plan": FAST_PLAN,
        "families": list(ATTENTION_FAMILIES),
        "plan_impl": PLAN_IMPL,
    }
    return run_in_release(
        environment,
        list(command) if command is not None else [sys.executable, str(PROBE)],
        env={"FI_COMPAT_REACH_NAMES": json.dumps(names)},
        timeout=timeout,
    )


def run_in_release(
    environment: ReleaseEnvironment,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    path: Sequence[Path] = (),
    timeout: float = TIMEOUT,
) -> dict[str, Any]:
    """Run ``argv`` with one release first on ``PYTHONPATH`` (then ``path``), the harness's
    CPU workarounds on, FlashInfer's own switches off and ``env`` added, in a scratch
    directory; the probe document it prints (see :func:`parse_probe_output`).

    Raises
    ------
    ProbeError
        The subprocess failed, timed out, or printed no usable report.
    """
    entries = [environment.site_dir, environment.release_dir, *path]
    variables = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "FI_COMPAT_HARNESS_", "FLASHINFER_"))
    }
    variables.update(
        PYTHONPATH=os.pathsep.join(str(entry) for entry in entries),
        PYTHONNOUSERSITE="1",
        FI_COMPAT_HARNESS_STUB_GPU="1",
        **(env or {}),
    )
    if environment.cudart is not None:
        variables["FI_COMPAT_HARNESS_CUDART"] = str(environment.cudart)
    if environment.deferred_annotations:
        variables["FI_COMPAT_HARNESS_DEFER_ANNOTATIONS"] = ",".join(
            environment.deferred_annotations
        )
    with tempfile.TemporaryDirectory(prefix="fi-compat-release-") as scratch:
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                check=False,
                cwd=scratch,
                env=variables,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise ProbeError(
                f"flashinfer-python {environment.version}: the probe timed out after {timeout:g} s"
            ) from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise ProbeError(
            f"flashinfer-python {environment.version}: the probe exited {done.returncode}\n{tail}"
        )
    return parse_probe_output(environment.version, done.stdout)


def measure_release(environment: ReleaseEnvironment, *, timeout: float = TIMEOUT) -> dict[str, Any]:
    """One release's ``reach.json`` entry, measured in a subprocess."""
    document = run_probe(environment, timeout=timeout)
    try:
        return classify_release(document)
    except ProbeError as error:
        raise ProbeError(f"flashinfer-python {environment.version}: {error}") from None


# --------------------------------------------------------------------- the releases


def recorded_releases() -> list[str]:
    """Every recorded final release from :data:`FIRST_RELEASE` on, oldest first."""
    return measurement.measured_releases(FIRST_RELEASE)


def _site_dir(cache: ReleaseCache) -> Path:
    return cache.site(SITE_TEMPLATE)


def _extract_sdist(cache: ReleaseCache, sdist: Path) -> Path:
    """The sdist's ``flashinfer/`` package unpacked under ``extracted/<sdist name>``, once."""

    def untar(scratch: Path) -> None:
        with tarfile.open(sdist) as archive:
            for member in archive.getmembers():
                parts = Path(member.name).parts
                if (
                    len(parts) < 2
                    or parts[1] != "flashinfer"
                    or not (member.isfile() or member.isdir())
                ):
                    continue
                destination = scratch / Path(*parts[1:])
                if member.isdir():
                    destination.mkdir(parents=True, exist_ok=True)
                    continue
                destination.parent.mkdir(parents=True, exist_ok=True)
                source = archive.extractfile(member)
                if source is None:
                    continue
                with source, destination.open("wb") as handle:
                    shutil.copyfileobj(source, handle)
        if not (scratch / "flashinfer" / "__init__.py").is_file():
            raise ProbeError(f"{sdist.name} holds no flashinfer/ package")

    return cache.unpacked(sdist.name.removesuffix(".tar.gz"), sdist.name, untar)


def release_environment(version: str, cache: ReleaseCache | None = None) -> ReleaseEnvironment:
    """Download (once) and unpack ``version`` and the CUDA runtime the start-up hook loads."""
    cache = cache or ReleaseCache()
    release = cache.download(f"flashinfer-python=={version}", wheel_only=False)
    if release.name.endswith(".whl"):
        release_dir = cache.extract(release)
    else:
        release_dir = _extract_sdist(cache, release)
    runtime = cache.extract(cache.download(CUDA_RUNTIME, wheel_only=True))
    found = sorted(runtime.glob("nvidia/cuda_runtime/lib/libcudart.so*"))
    return ReleaseEnvironment(
        version=version,
        release_dir=release_dir,
        site_dir=_site_dir(cache),
        cudart=found[0] if found else None,
        deferred_annotations=deferred_annotations(version),
    )


def deferred_annotations(version: str, python: tuple[int, int] | None = None) -> tuple[str, ...]:
    """The modules of ``version`` whose import-time annotations ``python`` (this
    interpreter's version by default) cannot evaluate: the module of the record's
    ``comm_requires_python`` evidence (``flashinfer/comm/fd_exchange.py:55: ...``) when
    ``python`` is below the version the record names, else none. The harness compiles
    them with annotations deferred, as the release's next post-release wrote them, so
    that their code can be measured here (the site hook's docstring)."""
    from fi_compat._records import load_release

    hazard = load_release(version).comm_requires_python
    if not hazard.value or hazard.python is None or not hazard.evidence:
        return ()
    running = python or (sys.version_info[0], sys.version_info[1])
    needed = tuple(int(part) for part in hazard.python.split("."))
    path = hazard.evidence.split(":", 1)[0]
    if running >= needed or not path.endswith(".py"):
        return ()
    return (path.removesuffix(".py").replace("/", "."),)


# -------------------------------------------------------------------------- the file


def build_document(releases: Mapping[str, Any]) -> dict[str, Any]:
    """The whole ``reach.json`` document (its text sorts every key, release numbers too)."""
    return {"schema": SCHEMA, "tool": TOOL, "releases": dict(releases)}


def dump_document(document: Mapping[str, Any]) -> str:
    """Deterministic text: sorted keys, one-space indent, newline at the end."""
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=True) + "\n"


#: The triton wheel ``flashinfer.comm`` imports from 0.6.10 to 0.6.13.
TRITON = "triton==3.6.0"
_NO_TRITON = "No module named 'triton'"


def run_with_triton(
    version: str,
    cache: ReleaseCache | None,
    probe: Callable[[ReleaseEnvironment, Path | None], dict[str, Any]],
) -> dict[str, Any]:
    """``probe(environment, None)`` for one release, downloaded once; again with the triton
    wheel on the path (``probe(environment, triton_dir)``) when the import asks for it (0.6.10
    to 0.6.13), said either in the document's ``error`` or in the failed subprocess's output."""
    cache = cache or ReleaseCache()
    environment = release_environment(version, cache)
    try:
        document = probe(environment, None)
    except ProbeError as error:
        if _NO_TRITON not in str(error):
            raise
    else:
        if _NO_TRITON not in str(document.get("error", "")):
            return document
    triton = cache.extract(cache.download(TRITON, wheel_only=True))
    return probe(environment, triton)


def measure_all(
    versions: Iterable[str],
    *,
    workers: int = 2,
    measure: Callable[[str], dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Each release's entry, and the error of each release that could not be measured."""

    def default(version: str) -> dict[str, Any]:
        return measure_release(release_environment(version))

    return measurement.measure_all(versions, workers=workers, measure=measure or default)


def _differences(shipped: Mapping[str, Any], measured: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for version, entry in sorted(measured.items()):
        old = shipped.get(version)
        if old == entry:
            continue
        if old is None:
            lines.append(f"{version}: not in the shipped file")
            continue
        for family in sorted(set(old) | set(entry)):
            if old.get(family) != entry.get(family):
                shipped_entry, measured_entry = old.get(family), entry.get(family)
                lines.append(
                    f"{version} {family}: shipped {shipped_entry!r}, measured {measured_entry!r}"
                )
    return lines


def main(
    argv: Sequence[str] | None = None,
    *,
    output: Path = OUTPUT,
    measure: Callable[[str], dict[str, Any]] | None = None,
) -> int:
    """Measure the releases, then write ``reach.json`` (or compare it, with ``--check``)."""
    tool = measurement.Tool(
        prog="python -m tools.reach",
        description="Measure whether the split-KV settings reach FlashInfer's planner.",
        first_release=str(FIRST_RELEASE),
        recorded_releases=recorded_releases,
        measure_release=lambda version: measure_release(release_environment(version)),
        text=lambda releases: dump_document(build_document(releases)),
        differences=_differences,
    )
    return measurement.main(tool, argv, output=output, measure=measure)


if __name__ == "__main__":
    raise SystemExit(main())
