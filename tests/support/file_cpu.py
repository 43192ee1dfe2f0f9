"""CPU seconds per test file: where a run's work goes, whatever else shares the machine.

``--durations`` gives wall times, which on a busy machine (two xdist workers, their
subprocesses and another test run sharing two cores) say as much about the neighbours as
about the test. This plugin (registered by ``tests/conftest.py``) adds up, for each test
file, the CPU time of the process running its tests and of every subprocess it waited
for (``getrusage``: user and system time, the subprocesses' own waited-for subprocesses
included), across setup, call and teardown, so a module-scoped fixture counts for its
file. Each xdist worker hands its table to the controller. ``--file-cpu=N`` (``make test``
gives 20) closes the run with the N costliest files and the total::

    ------------------------- CPU seconds per test file -------------------------
      412.6  tests/records/test_day_one_releases.py
      ...
     2613.0  in all, 183 files

A subprocess the test does not wait for, and the controller's own work (handing out files,
combining coverage), count for no file.
"""

from __future__ import annotations

import resource
from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["cpu_seconds"]

_KEY = "fi_compat_file_cpu"
_STASH = pytest.StashKey[dict[str, float]]()


def cpu_seconds() -> float:
    """User and system CPU time of this process and of the subprocesses it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime


def _add(spent: dict[str, float], more: dict[str, float]) -> None:
    for path, seconds in more.items():
        spent[path] = spent.get(path, 0.0) + seconds


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--file-cpu",
        type=int,
        default=0,
        metavar="N",
        help="end the run with the N test files that took the most CPU seconds, their "
        "waited-for subprocesses included (0: none; make test gives 20)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_STASH] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    started = cpu_seconds()
    yield
    _add(item.config.stash[_STASH], {item.nodeid.partition("::")[0]: cpu_seconds() - started})


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the table to the controller
        spent: dict[str, float] = session.config.stash[_STASH]
        workeroutput[_KEY] = spent


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    _add(node.config.stash[_STASH], getattr(node, "workeroutput", {}).get(_KEY, {}))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    shown = config.getoption("--file-cpu")
    spent = config.stash[_STASH]
    if shown <= 0 or not spent:
        return
    terminalreporter.write_sep("-", "CPU seconds per test file")
    for path, seconds in sorted(spent.items(), key=lambda item: -item[1])[:shown]:
        terminalreporter.write_line(f"{seconds:9.1f}  {path}")
    terminalreporter.write_line(f"{sum(spent.values()):9.1f}  in all, {len(spent)} files")
