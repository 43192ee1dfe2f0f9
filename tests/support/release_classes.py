"""Release classes: test a behaviour once per distinct release surface, not once per release.

A *surface* is the part of a release that one kind of test reads: the comm functions and
classes, the attention wrappers, the import hazards, ... Two releases whose surface is equal
are one *class* for the tests that read it, so those tests run the first and the last release
of each class (:func:`releases`) instead of every release: a behaviour is still checked on
every distinct surface, and at both ends of each run of releases that share it.

Each surface is computed from what the package ships (the recorded signatures, the measured
split reach and lower layers) and from the fake's own release gates, never typed by hand.
``release_classes.json`` beside this file is the generated fact:
``python -m tests.support.release_classes --write`` regenerates it, and
``tests/test_release_classes.py`` fails when a new recording or measurement changes the
classes without it (the diff shows which class appeared), or when no test reads a surface.

``pytest --all-releases`` (``make test-all``) turns the selection off: every test then runs on
every release it names.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import Version

from fi_compat import _records
from fi_compat.attention import _reach
from fi_compat.comm import _layers
from fi_compat.testing._gates import GATES

__all__ = [
    "FACT",
    "SURFACES",
    "classes",
    "computed",
    "releases",
    "sweep",
    "sweeping",
]

#: The generated fact: surface -> its classes, each a list of releases in version order.
FACT = Path(__file__).with_name("release_classes.json")

#: Set by ``pytest --all-releases`` (tests/conftest.py): :func:`releases` selects nothing out.
_SWEEP = False


def sweeping() -> bool:
    """True under ``--all-releases``: every test runs on every release it names."""
    return _SWEEP


def sweep(on: bool) -> None:
    """Run every test on every release it names (True) or once per class (False)."""
    global _SWEEP
    _SWEEP = on


@functools.cache
def _raw(release: str) -> Mapping[str, Any]:
    data: Mapping[str, Any] = _records._document(release)
    return data


def _gates(release: str) -> tuple[bool, ...]:
    """Which side of each release gate of the fake's workspace and wrapper models ``release``
    lies on (those gates are the fake's facts, not the records')."""
    version = Version(release)
    return tuple(version >= gate for gate in sorted({gate.version for gate in GATES}))


def _comm(release: str) -> object:
    comm = dict(_raw(release)["comm"])
    comm.pop("names", None)
    return (
        comm,
        _raw(release)["import"],
        _layers.measured().get(release),
        _gates(release),
    )


def _names(release: str) -> object:
    comm = _raw(release)["comm"]
    return (comm.get("names"), _comm(release))


def _fake_names(release: str) -> object:
    return (_raw(release).get("modules"), _names(release))


def _attention(release: str) -> object:
    raw = _raw(release)
    return (
        raw["attention"],
        raw.get("attention_families"),
        raw.get("decode"),
        _reach.reach_data().get(release),
        _gates(release),
    )


def _imports(release: str) -> object:
    return _raw(release)["import"]


def _everything(release: str) -> object:
    # The attention backends' name tables ("modules") are the fake's, which the report does
    # not read: they belong to the fake-names surface.
    skipped = ("release", "source", "modules")
    raw = {key: value for key, value in _raw(release).items() if key not in skipped}
    return (
        raw,
        _layers.measured().get(release),
        _reach.reach_data().get(release),
        _gates(release),
    )


#: Surface name -> (what it holds, the projection of a release onto it).
SURFACES: Mapping[str, tuple[str, Callable[[str], object]]] = {
    "comm": (
        "flashinfer.comm's recorded functions, classes, enums and workspace classes, the "
        "import hazards, the measured lower layer and the fake's workspace gates",
        _comm,
    ),
    "names": (
        "the public names of flashinfer.comm and its submodules, and the comm surface",
        _names,
    ),
    "fake_names": (
        "the public names of every module the fake binds them in: the names surface and the "
        "modules engines' attention backends import",
        _fake_names,
    ),
    "attention": (
        "the attention wrappers and families, fast_decode_plan, the measured split reach and "
        "the fake's wrapper gates",
        _attention,
    ),
    "imports": ("the import hazards (CUDA runtime, GPU query, triton)", _imports),
    "everything": (
        "the whole record, both measurements and the fake's gates (what the report reads)",
        _everything,
    ),
}


def _surface(name: str) -> Callable[[str], object]:
    try:
        return SURFACES[name][1]
    except KeyError:
        raise KeyError(f"expected one of the surfaces {sorted(SURFACES)}; found {name!r}") from None


def classes(surface: str, among: Iterable[str] | None = None) -> list[list[str]]:
    """The classes of ``among`` (default: every recorded release) for ``surface``: releases
    with equal surfaces, each class in version order, classes by their first release."""
    project = _surface(surface)
    pool = sorted(_records.available_releases() if among is None else set(among), key=Version)
    found: dict[str, list[str]] = {}
    for release in pool:
        key = json.dumps(project(release), sort_keys=True, default=repr)
        found.setdefault(key, []).append(release)
    return list(found.values())


def releases(surface: str, among: Sequence[str] | None = None) -> list[str]:
    """The releases a test of ``surface`` runs on: the first and the last of each class of
    ``among`` (default: every recorded release), in version order; all of ``among`` under
    ``--all-releases``."""
    _surface(surface)
    if _SWEEP:
        return sorted(_records.available_releases() if among is None else among, key=Version)
    chosen = {release for group in classes(surface, among) for release in (group[0], group[-1])}
    return sorted(chosen, key=Version)


def computed() -> dict[str, list[list[str]]]:
    """Every surface's classes over every recorded release, as :data:`FACT` holds them."""
    return {name: classes(name) for name in SURFACES}


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.release_classes", description=__doc__
    )
    parser.add_argument("--write", action="store_true", help=f"regenerate {FACT.name}")
    args = parser.parse_args(argv)
    text = json.dumps(computed(), indent=1) + "\n"
    if args.write:
        FACT.write_text(text, encoding="utf-8")
    for name, groups in computed().items():
        picked = sum(min(len(group), 2) for group in groups)
        total = sum(len(group) for group in groups)
        print(f"{name}: {len(groups)} classes, {picked} of {total} releases run")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
