"""The public API is a promise: it changes only on purpose, with a CHANGELOG entry.

``tests/support/public_api.txt`` is the API of the working tree and
``public_api-<release>.txt`` that of the last release (see
:mod:`tests.support.public_api`). A change to any public name, signature or class member
fails here until the snapshot is regenerated, and every name that differs from the last
release must be named, by its full dotted path, in the CHANGELOG's ``[Unreleased]``
section. Every public name says since when it exists (``.. versionadded::``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest
from packaging.version import Version

griffe = pytest.importorskip("griffe", reason="griffe (the docs or tools extra) reads the API")

from tests.support import public_api  # noqa: E402

CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"
REGENERATE = "python -m tests.support.public_api --write"


@pytest.fixture(scope="module")
def names() -> list[public_api.Name]:
    return public_api.names(public_api.load())


def _unreleased() -> list[str]:
    """The entries (one per bullet) of the CHANGELOG's ``[Unreleased]`` section."""
    text = CHANGELOG.read_text()
    section = text.split("## [Unreleased]", 1)[1].split("\n## [", 1)[0]
    return [entry for entry in re.split(r"\n(?=- )", section) if entry.startswith("- ")]


def _mentioned(path: str, entries: list[str]) -> bool:
    """``path`` in backticks, or its module in backticks and its name in backticks, in
    one entry."""
    module, _, name = path.rpartition(".")
    whole = re.compile(rf"`{re.escape(path)}(?:\(\))?[`.(\[]")
    short = re.compile(rf"`{re.escape(name)}(?:\(\))?`")
    parent = re.compile(rf"`{re.escape(module)}(?:\(\))?`")
    return any(
        whole.search(entry) or (parent.search(entry) and short.search(entry)) for entry in entries
    )


def _changed(old: dict[str, tuple[str, ...]], new: dict[str, tuple[str, ...]]) -> set[str]:
    return {path for path in old.keys() | new.keys() if old.get(path) != new.get(path)}


def test_the_snapshot_is_the_api_of_the_working_tree(names: list[public_api.Name]) -> None:
    live = public_api.render(names)
    recorded = public_api.SNAPSHOT.read_text()
    if live != recorded:
        changed = sorted(_changed(public_api.parse(recorded), public_api.parse(live)))
        pytest.fail(
            f"the public API changed ({', '.join(changed)}): if that is meant, run "
            f"`{REGENERATE}` and say so in CHANGELOG.md's [Unreleased] section"
        )


def test_every_change_since_the_last_release_has_a_changelog_entry(
    names: list[public_api.Name],
) -> None:
    released = public_api.parse(public_api.RELEASED.read_text())
    current = public_api.parse(public_api.render(names))
    aliases: dict[str, set[str]] = defaultdict(set)
    for name in names:
        aliases[name.target].add(name.path)
    paths_of = {name.path: aliases[name.target] for name in names}
    entries = _unreleased()
    silent = [
        path
        for path in sorted(_changed(released, current))
        if not any(_mentioned(alias, entries) for alias in paths_of.get(path, {path}))
    ]
    assert not silent, (
        f"changed since fi-compat {public_api.LAST_RELEASE} without a CHANGELOG entry naming "
        f"them (by full dotted path, in backticks): {silent}"
    )


def test_every_public_name_says_since_when(names: list[public_api.Name]) -> None:
    released = public_api.parse(public_api.RELEASED.read_text())
    last = Version(public_api.LAST_RELEASE)
    wrong, new_versions = [], set()
    for name in names:
        if name.path.rsplit(".", 1)[-1].startswith("__"):
            continue  # __version__: no docstring of its own
        added = public_api.versionadded(name.docstring)
        if len(added) != 1:
            wrong.append(f"{name.path}: {len(added)} versionadded directives")
        elif any(path in released for path in (name.path, name.target)):
            if Version(added[0]) > last:
                wrong.append(f"{name.path}: in {last} but says {added[0]}")
        elif Version(added[0]) <= last:
            wrong.append(f"{name.path}: new since {last} but says {added[0]}")
        else:
            new_versions.add(added[0])
    assert not wrong
    assert len(new_versions) <= 1, f"new names disagree on the next release: {new_versions}"


def test_the_checks_see_a_change_and_a_missing_entry() -> None:
    """The comparison and the CHANGELOG lookup can fail: a self-test on made-up text."""
    old = public_api.parse(
        "def fi_compat.x.f(a: int) -> int\nclass fi_compat.x.C()\n    .m(self)\n"
    )
    new = public_api.parse(
        "def fi_compat.x.f(b: int) -> int\nclass fi_compat.x.C()\n    .m(self, k)\n"
    )
    assert _changed(old, new) == {"fi_compat.x.f", "fi_compat.x.C"}
    entries = ["- `fi_compat.x.f()` takes `b`.", "- `fi_compat.y` drops `C`."]
    assert _mentioned("fi_compat.x.f", entries)
    assert not _mentioned("fi_compat.x.C", entries)
    assert _mentioned("fi_compat.x.C", ["- `fi_compat.x` gains `C.m`'s `k`: `C`."])
    assert public_api.versionadded("Summary.\n\n.. versionadded:: 0.3.0\n") == ["0.3.0"]
    assert public_api.versionadded("Summary. versionadded:: 0.3.0") == []
