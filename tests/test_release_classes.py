"""The release classes the release-parametrized tests run on (tests/support/release_classes.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from fi_compat.testing import available_releases
from tests.support import release_classes
from tests.support.release_classes import FACT, SURFACES, classes, computed, releases

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def selecting() -> Iterator[None]:
    """Selection on for the test, whatever ``--all-releases`` said, and restored after."""
    before = release_classes._SWEEP
    release_classes.sweep(False)
    yield
    release_classes.sweep(before)


def test_the_generated_classes_are_the_shipped_data() -> None:
    shipped = json.loads(FACT.read_text(encoding="utf-8"))
    assert shipped == computed(), (
        "the recorded releases or measurements changed the release classes: review the tests "
        "of each changed surface, then run python -m tests.support.release_classes --write"
    )


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_classes_partition_the_releases_in_order(surface: str) -> None:
    found = classes(surface)
    flat = [release for group in found for release in group]
    assert sorted(flat, key=Version) == available_releases()
    assert len(set(flat)) == len(flat)
    for group in found:
        assert group == sorted(group, key=Version)
    firsts = [Version(group[0]) for group in found]
    assert firsts == sorted(firsts)


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_a_class_holds_releases_of_one_surface_and_classes_differ(surface: str) -> None:
    project = SURFACES[surface][1]

    def key(release: str) -> str:
        return json.dumps(project(release), sort_keys=True, default=repr)

    found = classes(surface)
    for group in found:
        assert {key(release) for release in group} == {key(group[0])}
    assert len({key(group[0]) for group in found}) == len(found)


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_every_class_runs_at_its_first_and_last_release(selecting: None, surface: str) -> None:
    chosen = releases(surface)
    assert chosen == sorted(chosen, key=Version)
    for group in classes(surface):
        assert group[0] in chosen
        assert group[-1] in chosen
        assert set(group[1:-1]).isdisjoint(chosen)


def test_a_selection_among_some_releases_stays_among_them(selecting: None) -> None:
    among = [release for release in available_releases() if Version(release) >= Version("0.6")]
    chosen = releases("comm", among)
    assert set(chosen) <= set(among)
    for group in classes("comm", among):
        assert {group[0], group[-1]} <= set(chosen)


def test_all_releases_turns_the_selection_off(selecting: None) -> None:
    among = available_releases()[-6:]
    release_classes.sweep(True)
    assert releases("imports") == available_releases()
    assert releases("imports", list(reversed(among))) == among


@pytest.mark.parametrize("sweep", [False, True])
def test_an_unknown_surface_is_refused(selecting: None, sweep: bool) -> None:
    release_classes.sweep(sweep)
    with pytest.raises(KeyError, match="expected one of the surfaces"):
        releases("no such surface")


def test_every_surface_is_read_by_a_test() -> None:
    used: set[str] = set()
    for path in TESTS.rglob("test_*.py"):
        if path.name == Path(__file__).name:
            continue
        used |= set(re.findall(r"release_classes\.releases\(\s*\"(\w+)\"", path.read_text()))
    assert used == set(SURFACES)
