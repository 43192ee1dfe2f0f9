"""The hooks of the FlashInfer release matrix: the marker, the selection, the report lines.

Loaded by :mod:`fi_compat.testing.pytest_plugin` (its ``pytest_plugins``), which holds the
``flashinfer_release`` fixture. ``pytest_generate_tests`` parametrizes every test marked
``@pytest.mark.flashinfer(...)`` over the ``flashinfer_release`` fixture, indirectly, with
one :class:`~fi_compat.testing._matrix.MatrixCell` per release (ids ``flashinfer-<release>``), so
that xdist and other parametrizations compose; the release travels to the xdist controller
in each report's ``user_properties``, where the terminal summary counts the outcomes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NoReturn

import pytest
from packaging.version import InvalidVersion, Version

from fi_compat.testing._matrix import (
    CELL,
    FAKE_OPTIONS,
    FIXTURE,
    KEYWORDS,
    OPTION,
    PROPERTY,
    FlashInferRelease,
    MatrixCell,
    Selection,
    matches_of_marker,
    parse_selection,
    relabel,
    select,
)

__all__: list[str] = []


_PLUGIN = "fi_compat-flashinfer-releases"

_INI = "flashinfer_releases"
_MARKER = (
    "flashinfer(releases=None, **options): run the test once per matching recorded FlashInfer "
    "release, under its fake (a specifier such as '>=0.6.0,<0.7' or a list of releases; "
    "options go to fi_compat.testing.fake_flashinfer); --flashinfer-releases narrows it"
)
#: The order of the outcomes in the summary, as pytest orders its own.
_OUTCOMES = ("failed", "error", "passed", "skipped", "xfailed", "xpassed")


@dataclass
class _State:
    """The run's selection, and what the marked tests did per release (the summary)."""

    selection: Selection
    source: str
    counts: dict[str, Counter[str]] = field(default_factory=dict)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        label = next((str(v) for k, v in report.user_properties if k == PROPERTY), None)
        if label is None:
            return
        wasxfail = hasattr(report, "wasxfail")
        if report.passed:
            if report.when != "call":
                return
            outcome = "xpassed" if wasxfail else "passed"
        elif report.failed:
            outcome = "failed" if report.when == "call" else "error"
        else:
            outcome = "xfailed" if wasxfail else "skipped"
        self.counts.setdefault(label, Counter())[outcome] += 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.counts:
            return
        terminalreporter.write_sep("=", "flashinfer releases")
        for label in sorted(self.counts, key=_order):
            counts = self.counts[label]
            parts = [_count(counts[outcome], outcome) for outcome in _OUTCOMES if counts[outcome]]
            terminalreporter.write_line(f"{label}: {', '.join(parts)}")


_STATE = pytest.StashKey[_State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fi-compat", "fi-compat: FlashInfer releases")
    group.addoption(
        OPTION,
        dest="flashinfer_releases",
        metavar="SELECTION",
        default=None,
        help="which FlashInfer releases tests marked @pytest.mark.flashinfer run on, among "
        "those the marker allows: all (default), newest, oldest-per-minor, a specifier such "
        "as '>=0.6,<0.7' or a release (fakes), or installed (the real FlashInfer)",
    )
    parser.addini(
        _INI,
        help=f"the default of {OPTION} (all when unset)",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)
    given = config.getoption("flashinfer_releases", None)
    if given is not None:
        text, source = str(given), f"{OPTION}={given}"
    else:
        ini = str(config.getini(_INI) or "").strip()
        text, source = (ini, f"{_INI} = {ini!r} (ini)") if ini else ("all", "default: all")
    try:
        selection = parse_selection(text)
    except (ValueError, LookupError) as error:
        raise pytest.UsageError(
            f"{source}: {error}; expected one of {', '.join(KEYWORDS)}, a release or a "
            f"specifier such as '>=0.6.0,<0.7'"
        ) from None
    state = _State(selection, source)
    config.stash[_STATE] = state
    config.pluginmanager.register(state, _PLUGIN)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None and config.pluginmanager.is_registered(state):
        config.pluginmanager.unregister(state)


def _shorten(releases: list[str]) -> str:
    if len(releases) <= 6:
        return ", ".join(releases)
    return f"{', '.join(releases[:2])}, ..., {releases[-1]} ({len(releases)})"


def pytest_report_header(config: pytest.Config) -> str:
    state = config.stash[_STATE]
    selection = state.selection
    if selection.kind == "installed":
        from fi_compat._probe import distribution_version

        version = distribution_version() or "not installed"
        return f"flashinfer releases: installed flashinfer-python {version} (real; {state.source})"
    recorded = matches_of_marker(())
    picked = _shorten(select(recorded, selection))
    return (
        f"flashinfer releases: {picked}, within what each @pytest.mark.flashinfer allows "
        f"(fakes; {state.source})"
    )


def _collection_error(definition: pytest.Item, error: Exception) -> NoReturn:
    pytest.fail(f"{definition.nodeid}: {error}", pytrace=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("flashinfer")
    if marker is None:
        if FIXTURE in metafunc.fixturenames:
            _collection_error(
                metafunc.definition,
                ValueError(f"the {FIXTURE} fixture needs @pytest.mark.flashinfer(...)"),
            )
        return
    problem: str | None = None
    where = f"@pytest.mark.flashinfer({', '.join(repr(arg) for arg in marker.args)})"
    try:
        matches = matches_of_marker(marker.args)
        unknown = sorted(set(marker.kwargs) - FAKE_OPTIONS)
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)}: not an option of fake_flashinfer "
                f"(it takes {', '.join(sorted(FAKE_OPTIONS))})"
            )
    except (ValueError, LookupError) as error:
        problem = f"{where}: {error}"
    if problem is not None:  # outside the except: the error alone, no chained traceback
        _collection_error(metafunc.definition, ValueError(problem))
    options = MappingProxyType(dict(marker.kwargs))
    selection = metafunc.config.stash[_STATE].selection
    if selection.kind == "installed":
        entries = [MatrixCell(None, matches, options)]
    else:
        entries = [MatrixCell(release, matches, options) for release in select(matches, selection)]
    if not entries:
        reason = f"{where} allows none of {selection.text} ({metafunc.config.stash[_STATE].source})"
        params = [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="flashinfer-none")]
    else:
        params = [pytest.param(entry, id=f"flashinfer-{entry.label}") for entry in entries]
    metafunc.parametrize(CELL, params, indirect=True)


def _entry(item: pytest.Item) -> MatrixCell | None:
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get(CELL) if callspec is not None else None
    return param if isinstance(param, MatrixCell) else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        entry = _entry(item)
        if entry is not None:  # in the reports, which reach the xdist controller
            item.user_properties.append((PROPERTY, entry.label))


def _count(number: int, outcome: str) -> str:
    """As pytest says it: ``1 failed``, ``2 errors``."""
    return f"{number} {outcome}{'s' if outcome == 'error' and number > 1 else ''}"


def _order(label: str) -> tuple[int, Version | str]:
    try:
        return (0, Version(label))
    except InvalidVersion:
        return (1, label)


@pytest.fixture(autouse=True)
def _fi_compat_flashinfer_release(
    request: pytest.FixtureRequest,
) -> Iterator[FlashInferRelease | None]:
    """The cell of the matrix a marked test runs in, installed; None for other tests."""
    entry = getattr(request, "param", None)
    if not isinstance(entry, MatrixCell):
        yield None
        return
    if entry.release is not None:
        from fi_compat.testing._fake import fake_flashinfer  # on first use, not at start

        with fake_flashinfer(entry.release, **entry.options) as fake:
            yield FlashInferRelease(entry.release, fake)
        return
    from fi_compat.capabilities import get_capabilities

    info = get_capabilities().flashinfer
    if not info.installed:
        pytest.skip(f"{OPTION}=installed: flashinfer-python is not installed")
    version = info.version or "unknown"
    relabel(request.node.user_properties, f"installed {version}")
    if not info.source_build and not entry.matches.allows(version):
        pytest.skip(
            f"{OPTION}=installed: the installed flashinfer-python {version} is not one of "
            f"this test's releases ({entry.matches.text})"
        )
    yield FlashInferRelease(version, None)
