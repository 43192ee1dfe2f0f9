"""Measure, per FlashInfer release, whether the split-KV settings reach the kernel's planner.

The probe (:mod:`fi_compat._measured.reach_probe`) and the verdicts it feeds
(:mod:`fi_compat._measured.reach`, documented there) are the package's own, so that an
installed release fi-compat did not ship a measurement for is measured on the user's
machine the same way (``fi-compat measure``). This tool is their multi-release user: for
each release it runs one subprocess of this interpreter that imports the release for real
(the extracted wheel, or the ``flashinfer/`` package of the sdist, first on
``PYTHONPATH``; the real-release harness's ``sitecustomize`` for the CPU workarounds) and
runs the probe there, then writes ``fi_compat/_measured/reach.json``, which the runtime
reads.

Run from the repository root (the Makefile's ``measure-reach`` target runs the first)::

    python -m tools.reach                  # every recorded release from 0.4.0 -> reach.json
    python -m tools.reach 0.7.2.post1 ...  # these releases (the others' entries are kept)
    python -m tools.reach --check [VERSION ...]  # compare with the shipped file; 1 if it differs

A release whose subprocess crashes, times out or prints anything but the probe's JSON is
reported on stderr and not written (its previous entry, if any, stays); the exit status
is then 1.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from fi_compat._local import CACHE_ENV
from fi_compat._measured import reach as verdicts
from fi_compat._measured import run
from fi_compat._measured.reach import FAST_PLAN, FIXED_ARRIVES, PROBE, TIMEOUT, VERDICTS, classify
from tools import measurement
from tools.releases import ReleaseCache
from tools.results import ResultCache

__all__ = [
    "FAST_PLAN",
    "FIRST_RELEASE",
    "FIXED_ARRIVES",
    "OUTPUT",
    "PROBE",
    "TIMEOUT",
    "VERDICTS",
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
    "run_kept",
    "run_probe",
]

ROOT = Path(__file__).resolve().parent.parent
#: The file this tool writes and the runtime reads.
OUTPUT = ROOT / "fi_compat" / "_measured" / "reach.json"
#: The real-release harness's start-up hook: CUDA runtime preload, GPU 0 stand-ins.
SITE_TEMPLATE = ROOT / "tests" / "support" / "release_harness_site" / "sitecustomize.py"
#: The CUDA runtime whose ``libcudart.so.12`` the hook preloads (as the harness does).
CUDA_RUNTIME = "nvidia-cuda-runtime-cu12==12.9.79"
#: ``fixed_split_size=`` and ``disable_split_kv=`` arrived in this release.
FIRST_RELEASE = Version("0.4.0")
SCHEMA = 1
TOOL = "tools/reach.py"


class ProbeError(RuntimeError):
    """A release's probe subprocess failed, timed out or printed something unusable."""


def classify_family(raw: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`fi_compat._measured.reach.classify_family`; a report that is not one raises
    :class:`ProbeError`."""
    try:
        return verdicts.classify_family(raw)
    except ValueError as error:
        raise ProbeError(str(error)) from None


def classify_release(document: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`fi_compat._measured.reach.classify_release`; a report that is not one raises
    :class:`ProbeError`."""
    try:
        return verdicts.classify_release(document)
    except ValueError as error:
        raise ProbeError(str(error)) from None


# -------------------------------------------------------------------------- the probe


def parse_probe_output(version: str, stdout: str) -> dict[str, Any]:
    """The probe's JSON report, checked to be one and to be of ``version``
    (:func:`fi_compat._measured.run.check_document`); else :class:`ProbeError`."""
    return _document(run.check_document(version, stdout))


def _document(probed: run.Probed) -> dict[str, Any]:
    if probed.document is None:
        raise ProbeError(probed.error or "the probe gave no document")
    return probed.document


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
    return run_in_release(
        environment,
        list(command) if command is not None else [sys.executable, str(PROBE)],
        env={verdicts.NAMES_ENV: json.dumps(verdicts.probe_names())},
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
    harness = {"FI_COMPAT_HARNESS_STUB_GPU": "1", **(env or {})}
    if environment.cudart is not None:
        harness["FI_COMPAT_HARNESS_CUDART"] = str(environment.cudart)
    if environment.deferred_annotations:
        harness["FI_COMPAT_HARNESS_DEFER_ANNOTATIONS"] = ",".join(environment.deferred_annotations)
    return _document(
        run.run(
            argv,
            version=environment.version,
            env=run.probe_environment(entries, harness),
            timeout=timeout,
            runner=run_kept,
        )
    )


def run_kept(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """One release's subprocess, made once per input (:mod:`tools.results`): a probe run is
    a pure function of the release's files, this checkout and the interpreter. The run gets
    an empty fi-compat cache of its own (in its scratch directory), as on a fresh machine."""
    env = {**env, CACHE_ENV: str(cwd / "fi-compat-cache")}
    return ResultCache().run(argv, env=env, cwd=cwd, timeout=timeout)


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
