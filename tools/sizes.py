"""Measure, per FlashInfer release and backend, which call sizes one fused workspace serves.

The probe (:mod:`fi_compat._measured.sizes_probe`) and the classification it feeds
(:mod:`fi_compat._measured.sizes`, which documents the entry and its rules) are the
package's own, so that an installed release fi-compat did not ship a measurement for is
measured on the user's machine the same way (``fi-compat measure``). This tool is their
multi-release user: for each release from 0.6.0 one subprocess of this interpreter imports
the release for real (the real-release harness's CPU workarounds; the ``triton`` wheel on
the path when ``flashinfer.comm`` asks for it) and runs the probe; each release's whole
entry goes to ``tools/measurements/sizes.json``.

fi-compat ships only what its runtime reads (``fi_compat/comm/_sizes.py``):
``fi_compat/_measured/sizes.json`` holds each backend's ``check``, ``reaches`` and ``detail``
(:func:`shipped_document`), written beside the measurement and checked against it.

Run from the repository root (``make measure-sizes``)::

    python -m tools.sizes                  # every recorded release from 0.6.0
    python -m tools.sizes 0.7.2.post1 ...  # these releases (the others' entries are kept)
    python -m tools.sizes --check [VERSION ...]  # compare with the shipped file
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from fi_compat._measured.sizes import (
    NAMES_ENV,
    ONESHOT_BYTES,
    PROBE,
    RULES,
    SHIPPED_KEYS,
    TIMEOUT,
    admits,
    classify,
    classify_backend,
    fit,
    probe_names,
    shipped_entry,
)
from fi_compat._measured.sizes_probe import HIDDEN, MAX_TOKENS, PATTERNS, SHAPES, WORLD
from tools import measurement
from tools.reach import ReleaseEnvironment, run_in_release, run_with_triton
from tools.releases import ReleaseCache

__all__ = [
    "FIRST_RELEASE",
    "ONESHOT_BYTES",
    "OUTPUT",
    "RULES",
    "SHIPPED_KEYS",
    "admits",
    "build_document",
    "classify",
    "classify_backend",
    "dump_document",
    "fit",
    "main",
    "measure_release",
    "run_release",
    "shipped_document",
    "shipped_text",
    "write_shipped",
]

ROOT = Path(__file__).resolve().parent.parent
#: The whole measurement: every observation, per release, backend, pattern and shape.
OUTPUT = ROOT / "tools" / "measurements" / "sizes.json"
#: The file the runtime reads: what it reads of the measurement (:func:`shipped_document`).
SHIPPED = ROOT / "fi_compat" / "_measured" / "sizes.json"
#: The first release with the unified API.
FIRST_RELEASE = Version("0.6.0")
SCHEMA = 1
TOOL = "tools/sizes.py"

# ---------------------------------------------------------------------------- measuring


def run_probe(
    environment: ReleaseEnvironment,
    *,
    triton_dir: Path | None = None,
    timeout: float = TIMEOUT,
) -> dict[str, Any]:
    """The probe's document for one release (raises :class:`tools.reach.ProbeError`)."""
    return run_in_release(
        environment,
        [sys.executable, str(PROBE)],
        env={NAMES_ENV: json.dumps(probe_names())},
        path=() if triton_dir is None else (triton_dir,),
        timeout=timeout,
    )


def run_release(version: str, cache: ReleaseCache | None = None) -> dict[str, Any]:
    """:func:`run_probe` against one release (:func:`tools.reach.run_with_triton`)."""
    return run_with_triton(
        version, cache, lambda environment, triton: run_probe(environment, triton_dir=triton)
    )


def measure_release(version: str, cache: ReleaseCache | None = None) -> dict[str, Any]:
    """One release's entry."""
    return classify(run_release(version, cache))


def recorded_releases() -> list[str]:
    """Every recorded final release from :data:`FIRST_RELEASE` on, oldest first."""
    return measurement.measured_releases(FIRST_RELEASE)


# -------------------------------------------------------------------------- the file


def build_document(releases: Mapping[str, Any]) -> dict[str, Any]:
    """The whole ``sizes.json`` document."""
    return {
        "schema": SCHEMA,
        "tool": TOOL,
        "workspace": {
            "max_token_num": MAX_TOKENS,
            "hidden_dim": HIDDEN,
            "world_size": WORLD,
            "dtype": "bfloat16",
        },
        "shapes": {name: list(size) for name, size in SHAPES.items()},
        "patterns": list(PATTERNS),
        "releases": dict(releases),
    }


def dump_document(document: Mapping[str, Any]) -> str:
    """Deterministic text: releases sorted by version, each entry's keys in the order
    :func:`classify` writes them."""
    return measurement.dump_by_version(document)


def shipped_document(releases: Mapping[str, Any]) -> dict[str, Any]:
    """What the runtime reads of the measurement's ``releases``: per release and backend,
    :data:`SHIPPED_KEYS` only."""
    return {
        "schema": SCHEMA,
        "tool": TOOL,
        "measurement": OUTPUT.relative_to(ROOT).as_posix(),
        "releases": {release: shipped_entry(backends) for release, backends in releases.items()},
    }


def shipped_text(output: Path = OUTPUT) -> str:
    """The shipped file's text, as the measurement at ``output`` makes it."""
    return dump_document(shipped_document(measurement.load_releases(output)))


def write_shipped(output: Path = OUTPUT, shipped: Path = SHIPPED) -> None:
    """Write ``shipped`` from the measurement at ``output`` (untouched when already so)."""
    measurement.write_if_changed(shipped, shipped_text(output))


def main(
    argv: Sequence[str] | None = None,
    *,
    output: Path = OUTPUT,
    shipped: Path = SHIPPED,
    measure: Callable[[str], dict[str, Any]] | None = None,
) -> int:
    """Measure the releases, then write the measurement and the shipped file from it (or,
    with ``--check``, compare the measurement, and the shipped file with its projection)."""
    tool = measurement.Tool(
        prog="python -m tools.sizes",
        description="Measure which call sizes one fused workspace serves, per release.",
        first_release=str(FIRST_RELEASE),
        recorded_releases=recorded_releases,
        measure_release=measure_release,
        text=lambda releases: dump_document(build_document(releases)),
    )
    status = measurement.main(tool, argv, output=output, measure=measure)
    if "--check" in (argv if argv is not None else sys.argv[1:]):
        if not shipped.is_file() or shipped.read_text(encoding="utf-8") != shipped_text(output):
            print(f"differs: {shipped} is not what the runtime reads of {output}", file=sys.stderr)
            return 1
        return status
    write_shipped(output, shipped)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
