"""Proof by leaving releases out, from the releases' published files (issue 49).

Each release here is set aside with ``FI_COMPAT_UNRECORDED`` and modelled from its published
wheel or sdist alone (``fi-compat record --path``), in a fresh interpreter with an empty cache:
its record and every module's names must equal the shipped ones byte for byte (so every
answer read from them does), and ``fi-compat diff`` against the release below it must print
what the shipped data prints. By default the first and the last release of each class of the
``imports`` surface (:mod:`tests.support.release_classes`: every distinct set of import
hazards, the part of the model read from the whole import closure of the package, at both
ends of each run of releases sharing one: 26 releases, sdists and wheels, pre-releases
included), with the ``diff`` at the two ends of the record (a diff reads nothing but the
model, which every release here is shown to equal); ``--all-releases`` (``make test-all``)
runs every recorded release, each with its diff. (The ``names`` surface's 65 ends took five
minutes of two cores with every file cached.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from fi_compat._records import available_releases
from tests.support import release_classes
from tests.support.day_one import model_in, run_python, shipped_model
from tools.releases import ReleaseCache

pytestmark = [pytest.mark.release_matrix]


#: How many of the next releases' shipped models are decoded with one's (their tests run in
#: order in one process: ``--dist loadfile``).
TOGETHER = 15


def _releases() -> list[str]:
    return release_classes.releases("imports")


def _diffed(release: str) -> bool:
    every = available_releases()
    return release_classes.sweeping() or release in (every[0], every[-1])


def _run(argv: list[str], cache: Path, left_out: str | None) -> str:
    return run_python(["-m", "fi_compat", *argv], cache, left_out)


@pytest.mark.parametrize("release", _releases())
def test_a_release_modelled_from_its_published_file_equals_the_shipped_one(
    release: str, tmp_path: Path
) -> None:
    published = ReleaseCache().download(f"flashinfer-python=={release}", wheel_only=False)
    cache = tmp_path / "cache"
    argv = ["record", "--path", str(published), "--release", release, "--json"]
    done = json.loads(_run(argv, cache, release))["records"][0]
    assert done["action"] == "modelled"
    record, surface = model_in(Path(done["folder"]))
    following = _releases()[_releases().index(release) + 1 :][:TOGETHER]
    shipped_record, shipped_surface = shipped_model(release, together=following)
    assert surface == shipped_surface
    assert {**record, "source": None} == {**shipped_record, "source": None}
    assert record["source"] == shipped_record["source"]  # the same published file
    below = [r for r in available_releases() if Version(r) < Version(release)]
    if below and _diffed(release):
        diff = ["diff", below[-1], release, "--json"]
        day_one, shipped = (
            json.loads(_run(diff, cache, release)),
            json.loads(_run(diff, cache, None)),
        )
        # What the release does is measured on the machine that has it installed: set aside
        # and not installed here, it is unmeasured, which the diff says instead of guessing.
        unmeasured = [note for note in day_one["notes"] if note not in shipped["notes"]]
        assert all(f"not measured for {release}" in note for note in unmeasured)
        ours, theirs = _changes(day_one), _changes(shipped)
        assert ours <= theirs
        assert all(json.loads(change)["kind"] in MEASURED for change in theirs - ours)
        if not unmeasured:
            assert day_one == shipped


#: The kinds of change read from the measured split reach, not from the records.
MEASURED = frozenset(
    {"backend-added", "backend-removed", "split-lost", "split-gained", "split-changed"}
    | {"default-backend"}
)


def _changes(diff: dict[str, Any]) -> set[str]:
    return {json.dumps(change, sort_keys=True) for change in diff["changes"]}
