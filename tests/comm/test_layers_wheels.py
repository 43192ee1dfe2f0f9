"""Every release path fi-compat binds lower, proven against the real release.

A *path* is a pair of sources (the public ``allreduce_fusion`` and the legacy function
below it) that ``layers.json`` binds to the legacy function; the newest release of each is
downloaded once into the release cache and imported for real in a subprocess with the
real-release harness's CPU workarounds. There:

* ``tests/support/layers_equivalence.py`` runs 48 cases (every switch, eps, token count)
  through the release's public call and fi-compat's checked and prepared calls, and every
  argument reaching the compiled module must be the one the public call passes: the same
  tensor object, a view of the same memory, or a new tensor alike, and the same scalars;
* the layers tool measures the release again, which must give the shipped entry.

Without access to the package registry the module is skipped, saying so.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

pytest.importorskip("torch", reason="needs torch")

from fi_compat.comm._layers import measured
from tools.layers import measure_release, run_release
from tools.releases import RegistryUnreachableError, ReleaseCache

pytestmark = pytest.mark.release_matrix

SCRIPT = Path(__file__).resolve().parent.parent / "support" / "layers_equivalence.py"


def _paths() -> dict[tuple[str, str], str]:
    """(fusion source, legacy source) -> the newest release bound lower on that path."""
    newest: dict[tuple[str, str], str] = {}
    for version, entry in measured().items():
        if entry["layer"] != "legacy":
            continue
        key = (entry["fusion_source"], entry["legacy_source"])
        if key not in newest or Version(version) > Version(newest[key]):
            newest[key] = version
    return newest


PATHS = sorted(_paths().values(), key=Version)


def _cache() -> ReleaseCache:
    return ReleaseCache()


def _equivalence(version: str) -> dict[str, Any]:
    return run_release(version, _cache(), command=[sys.executable, str(SCRIPT)])


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], Any]:
    """Both subprocesses of every path, two at a time; an exception is kept as the result."""

    def attempt(job: tuple[str, str]) -> Any:
        kind, version = job
        try:
            if kind == "equivalence":
                return _equivalence(version)
            return measure_release(version, _cache())
        except Exception as error:
            return error

    jobs = [(kind, version) for version in PATHS for kind in ("equivalence", "measurement")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(jobs, pool.map(attempt, jobs), strict=True))
    for result in results.values():
        if isinstance(result, RegistryUnreachableError):
            pytest.skip(f"package registry unreachable, real releases not run: {result}")
    return results


def _result(runs: dict[tuple[str, str], Any], kind: str, version: str) -> Any:
    result = runs[kind, version]
    if isinstance(result, BaseException):
        raise result
    return result


def test_every_path_is_covered() -> None:
    """One release per path; the paths span 0.6.0 to the newest measured release."""
    assert len(PATHS) == len(set(_paths()))
    legacy = [v for v, e in measured().items() if e["layer"] == "legacy"]
    assert PATHS[0] == min(legacy, key=Version)
    assert PATHS[-1] == max(legacy, key=Version)


@pytest.mark.parametrize("version", PATHS)
def test_the_kernel_gets_what_the_public_call_passes(
    runs: dict[tuple[str, str], Any], version: str
) -> None:
    document = _result(runs, "equivalence", version)
    assert document["version"] == version
    assert any("below its deprecation wrapper" in d for d in document["decisions"]), document[
        "decisions"
    ]
    takes_trigger = Version(version) >= Version("0.6.8")
    assert (document["cases"], document["honoured"]) == ((48, 0) if takes_trigger else (36, 12))
    assert document["differences"] == [], json.dumps(document["differences"][:20], indent=1)
    assert document["warned"] == []


@pytest.mark.parametrize("version", PATHS)
def test_a_fresh_measurement_gives_the_shipped_entry(
    runs: dict[tuple[str, str], Any], version: str
) -> None:
    assert _result(runs, "measurement", version) == measured()[version]
