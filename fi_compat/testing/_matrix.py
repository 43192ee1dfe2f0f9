"""The release matrix of the pytest plugin: which recorded releases a marked test runs on.

``@pytest.mark.flashinfer(RELEASES, **options)`` names the releases a test may run on (a
:mod:`packaging` specifier, or a list of exact releases; every recorded release without
one); ``--flashinfer-releases`` / the ``flashinfer_releases`` ini setting picks among them
(:data:`KEYWORDS`, or a specifier that intersects). Nothing here imports pytest, torch or
flashinfer: :mod:`fi_compat.testing.pytest_plugin` turns the errors raised here into pytest
usage and collection errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from fi_compat.errors import InvalidArgumentError, UnknownReleaseError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from fi_compat.testing._objects import FakeFlashInfer

__all__ = [
    "CELL",
    "FAKE_OPTIONS",
    "FIXTURE",
    "KEYWORDS",
    "OPTION",
    "PROPERTY",
    "FlashInferRelease",
    "Matches",
    "MatrixCell",
    "Selection",
    "matches_of_marker",
    "parse_selection",
    "relabel",
    "select",
]

#: The fixture the marker parametrizes, the command-line option, and the user property
#: naming the release in each test report.
FIXTURE = "flashinfer_release"
OPTION = "--flashinfer-releases"
PROPERTY = "flashinfer_release"
#: The autouse fixture the marker parametrizes: it installs the fake whether or not the test
#: asks for ``flashinfer_release`` (which hands its value on).
CELL = "_fi_compat_flashinfer_release"
#: The selections ``--flashinfer-releases`` takes besides a specifier.
KEYWORDS = ("all", "newest", "oldest-per-minor", "installed")
#: The keywords of ``fake_flashinfer`` a marker may pass (``tests/testing`` checks the list).
FAKE_OPTIONS = frozenset(
    {
        "cuda_runtime",
        "installed",
        "import_error",
        "comm_import_error",
        "multicast",
        "confidential_compute",
        "sm_count",
    }
)


@dataclass(frozen=True)
class FlashInferRelease:
    """The FlashInfer release a test marked ``@pytest.mark.flashinfer(...)`` runs on.

    What the ``flashinfer_release`` fixture of :mod:`fi_compat.testing.pytest_plugin`
    gives the test: the fake of a recorded release is installed for the test's duration,
    or, under ``--flashinfer-releases=installed``, the real FlashInfer is.

    .. versionadded:: 0.3.0

    Attributes
    ----------
    release
        The recorded release the fake imitates (``"0.6.5"``), or the version the installed
        FlashInfer reports (``"unknown"`` when it reports none).
    fake
        The handle of the installed fake (its call log), or None for the real FlashInfer.
    """

    release: str
    fake: FakeFlashInfer | None = field(default=None, compare=False, repr=False)

    @property
    def installed(self) -> bool:
        """The test runs on the real, installed FlashInfer, not on a fake."""
        return self.fake is None


@dataclass(frozen=True)
class Matches:
    """The releases one marker allows: its recorded matches, and how to test another."""

    releases: tuple[str, ...]
    specifier: SpecifierSet | None
    text: str

    def allows(self, version: str) -> bool:
        """Whether ``version`` (the installed FlashInfer's, say) is one the marker allows."""
        try:
            parsed = Version(version)
        except InvalidVersion:
            return True  # a source build: nothing to compare, run it
        if self.specifier is not None:
            return self.specifier.contains(parsed, prereleases=True)
        return any(Version(release) == parsed for release in self.releases)


@dataclass(frozen=True)
class Selection:
    """What ``--flashinfer-releases`` picks: a keyword of :data:`KEYWORDS` or a specifier."""

    text: str
    kind: str
    specifier: SpecifierSet | None = None


@dataclass(frozen=True)
class MatrixCell:
    """One cell of a test's matrix: a recorded release (None: the installed FlashInfer)."""

    release: str | None
    matches: Matches
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def label(self) -> str:
        return self.release if self.release is not None else "installed"


def _available() -> list[str]:
    # The records load when a marker is first read, not when pytest loads the plugin.
    from fi_compat._records import available_releases

    return available_releases()


def _recorded(text: str) -> str:
    """The recorded release ``text`` names (``0.6.05`` is ``0.6.5``); UnknownReleaseError."""
    recorded = _available()
    try:
        wanted = Version(text)
    except InvalidVersion:
        wanted = None
    for release in recorded:
        if release == text or (wanted is not None and Version(release) == wanted):
            return release
    raise UnknownReleaseError(
        f"{text!r} is not a recorded flashinfer-python release; recorded: "
        f"{recorded[0]} .. {recorded[-1]} (fi_compat.testing.available_releases())"
    )


def _specifier(text: str) -> SpecifierSet | None:
    """``text`` as a specifier; None when it is one bare version (an exact release)."""
    try:
        Version(text)
    except InvalidVersion:
        pass
    else:
        return None
    try:
        specifier = SpecifierSet(text)
    except InvalidSpecifier:
        specifier = None
    if specifier is None or not text.strip():
        raise InvalidArgumentError(
            f"{text!r} is neither a release nor a version specifier such as '>=0.6.0,<0.7'"
        )
    return specifier


def _matching(specifier: SpecifierSet) -> tuple[str, ...]:
    """The recorded releases ``specifier`` allows: as PEP 440 reads it, pre-releases only
    where it names one (``>=0.7.1rc1``); a release named exactly is always allowed."""
    named = any(Version(spec.version).is_prerelease for spec in specifier)
    return tuple(
        release
        for release in _available()
        if specifier.contains(release, prereleases=True)
        and (named or not Version(release).is_prerelease)
    )


def _finals() -> tuple[str, ...]:
    """Every recorded final release (pre-releases run when named or specified)."""
    return tuple(r for r in _available() if not Version(r).is_prerelease)


def parse_selection(text: str) -> Selection:
    """``--flashinfer-releases``'s value; InvalidArgumentError or UnknownReleaseError."""
    text = text.strip()
    if text in KEYWORDS:
        return Selection(text, text)
    specifier = _specifier(text)
    if specifier is None:
        specifier = SpecifierSet(f"=={_recorded(text)}")
    elif not _matching(specifier):
        raise InvalidArgumentError(f"{text!r} matches no recorded flashinfer-python release")
    return Selection(text, "specifier", specifier)


def matches_of_marker(args: Sequence[Any]) -> Matches:
    """The releases ``@pytest.mark.flashinfer(*args)`` allows (no argument: every one)."""
    if not args:
        return Matches(_finals(), None, "every recorded final release")
    if len(args) > 1:
        raise InvalidArgumentError(
            f"takes one specifier or one list of releases, got {len(args)} arguments: "
            f"{', '.join(repr(arg) for arg in args)}"
        )
    (given,) = args
    if isinstance(given, str):
        specifier = _specifier(given)
        if specifier is None:
            return Matches((_recorded(given),), None, given)
        found = _matching(specifier)
        if not found:
            raise InvalidArgumentError(f"{given!r} matches no recorded flashinfer-python release")
        return Matches(found, specifier, given)
    if isinstance(given, list | tuple) and given and all(isinstance(r, str) for r in given):
        releases = sorted({_recorded(release) for release in given}, key=Version)
        return Matches(tuple(releases), None, ", ".join(given))
    raise InvalidArgumentError(
        f"expected a specifier such as '>=0.6.0,<0.7' or a non-empty list of releases, "
        f"got {given!r}"
    )


def select(matches: Matches, selection: Selection) -> list[str]:
    """The releases of ``matches`` that ``selection`` keeps (not for ``installed``)."""
    releases = list(matches.releases)
    if selection.kind == "newest":
        return releases[-1:]
    if selection.kind == "oldest-per-minor":
        seen: dict[tuple[int, int], str] = {}
        for release in releases:
            version = Version(release)
            seen.setdefault((version.major, version.minor), release)
        return list(seen.values())
    if selection.specifier is not None:
        return [r for r in releases if selection.specifier.contains(r, prereleases=True)]
    return releases


def relabel(properties: list[tuple[str, object]], label: str) -> None:
    """Name the release ``label`` in a test item's ``user_properties`` (so in its reports)."""
    properties[:] = [(name, label if name == PROPERTY else value) for name, value in properties]
