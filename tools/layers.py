"""Measure, per FlashInfer release, what the unified fused call runs below its public name.

The probe (:mod:`fi_compat._measured.layers_probe`) and the classification it feeds
(:mod:`fi_compat._measured.layers`, which documents the entry) are the package's own, so
that an installed release fi-compat did not ship a measurement for is measured on the
user's machine the same way (``fi-compat measure``). This tool is their multi-release user:
for each release from 0.6.0 one subprocess of this interpreter imports the release for real
(the CPU workarounds of the real-release harness; the ``triton`` wheel on the path when
``flashinfer.comm`` asks for it) and runs the probe; the entries go to
``fi_compat/_measured/layers.json``.

Run from the repository root (``make measure-layers``)::

    python -m tools.layers                  # every recorded release from 0.6.0
    python -m tools.layers 0.7.2.post1 ...  # these releases (the others' entries are kept)
    python -m tools.layers --check [VERSION ...]  # compare with the shipped file
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from fi_compat._measured.layers import CATALOGUE, NAMES_ENV, PROBE, TIMEOUT, classify, probe_names
from fi_compat._surface import UNIFIED_FUSION
from tools import measurement
from tools.reach import ReleaseEnvironment, run_in_release, run_with_triton
from tools.releases import ReleaseCache

__all__ = [
    "CATALOGUE",
    "FIRST_RELEASE",
    "OUTPUT",
    "build_document",
    "classify",
    "dump_document",
    "main",
    "measure_release",
    "run_probe",
    "run_release",
]

ROOT = Path(__file__).resolve().parent.parent
#: The file the runtime reads.
OUTPUT = ROOT / "fi_compat" / "_measured" / "layers.json"
#: The first release with the unified API.
FIRST_RELEASE = Version("0.6.0")
SCHEMA = 1
TOOL = "tools/layers.py"

# ---------------------------------------------------------------------------- measuring


def run_probe(
    environment: ReleaseEnvironment,
    *,
    triton_dir: Path | None = None,
    timeout: float = TIMEOUT,
    command: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The probe's document for one release (raises :class:`tools.reach.ProbeError` on failure)."""
    return run_in_release(
        environment,
        list(command) if command is not None else [sys.executable, str(PROBE)],
        env={NAMES_ENV: json.dumps(probe_names())},
        path=() if triton_dir is None else (triton_dir,),
        timeout=timeout,
    )


def run_release(
    version: str, cache: ReleaseCache | None = None, command: Sequence[str] | None = None
) -> dict[str, Any]:
    """:func:`run_probe` (or ``command``) against one release, with triton where it asks
    (:func:`tools.reach.run_with_triton`)."""
    return run_with_triton(
        version,
        cache,
        lambda environment, triton: run_probe(environment, triton_dir=triton, command=command),
    )


def measure_release(version: str, cache: ReleaseCache | None = None) -> dict[str, Any]:
    """One release's entry."""
    return classify(run_release(version, cache))


def recorded_releases() -> list[str]:
    """Every recorded final release from :data:`FIRST_RELEASE` on, oldest first."""
    return measurement.measured_releases(FIRST_RELEASE)


# -------------------------------------------------------------------------- the file


def build_document(releases: Mapping[str, Any]) -> dict[str, Any]:
    """The whole ``layers.json`` document."""
    return {"schema": SCHEMA, "tool": TOOL, "releases": dict(releases)}


def dump_document(document: Mapping[str, Any]) -> str:
    """Deterministic text: releases sorted by version, each entry's keys in the order
    :func:`classify` writes them."""
    return measurement.dump_by_version(document)


def main(
    argv: Sequence[str] | None = None,
    *,
    output: Path = OUTPUT,
    measure: Callable[[str], dict[str, Any]] | None = None,
) -> int:
    """Measure the releases, then write ``layers.json`` (or compare it, with ``--check``)."""
    tool = measurement.Tool(
        prog="python -m tools.layers",
        description=f"Measure what {UNIFIED_FUSION.key} runs below its public name, per release.",
        first_release=str(FIRST_RELEASE),
        recorded_releases=recorded_releases,
        measure_release=measure_release,
        text=lambda releases: dump_document(build_document(releases)),
    )
    return measurement.main(tool, argv, output=output, measure=measure)


if __name__ == "__main__":
    raise SystemExit(main())
