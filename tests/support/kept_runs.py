"""How many runs of a release's Python the suite answered from kept results, added up.

:mod:`tools.results` says each run's outcome on the ``tools.results`` logger. This plugin
(registered by ``tests/conftest.py``) counts them in every xdist worker, hands the counts to
the controller, and closes the run with one line of this form::

    tools/results.py: 212 answered from kept results (their runs took 1,840 s), 3 made and
    kept (41 s), 5 made, not keepable (12 s)

A run that makes none prints nothing here.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from typing import Any

import pytest

from tools.results import LOGGER

__all__ = ["KeptRuns"]

_KEY = "fi_compat_kept_runs"
#: The outcomes, in the order the summary gives them, with how it words each.
OUTCOMES = {
    "answered": "answered from kept results (their runs took {seconds:,.0f} s)",
    "kept": "made and kept ({seconds:,.0f} s)",
    "made": "made, not keepable ({seconds:,.0f} s)",
}


class KeptRuns(logging.Handler):
    """Counts each outcome and adds up its seconds."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count: Counter[str] = Counter()
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def emit(self, record: logging.LogRecord) -> None:
        outcome, seconds = getattr(record, "kept_run", (None, 0.0))
        if outcome in OUTCOMES:
            self.add(str(outcome), 1, float(seconds))

    def add(self, outcome: str, count: int, seconds: float) -> None:
        self.count[outcome] += count
        self.seconds[outcome] += seconds


_STASH = pytest.StashKey[KeptRuns]()


def pytest_configure(config: pytest.Config) -> None:
    runs = KeptRuns()
    config.stash[_STASH] = runs
    LOGGER.addHandler(runs)
    if LOGGER.getEffectiveLevel() > logging.INFO:
        LOGGER.setLevel(logging.INFO)


def pytest_unconfigure(config: pytest.Config) -> None:
    runs = config.stash.get(_STASH, None)
    if runs is not None:
        LOGGER.removeHandler(runs)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the counts to the controller
        runs = session.config.stash[_STASH]
        workeroutput[_KEY] = {o: (runs.count[o], runs.seconds[o]) for o in runs.count}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    runs: KeptRuns = node.config.stash[_STASH]
    for outcome, (count, seconds) in getattr(node, "workeroutput", {}).get(_KEY, {}).items():
        runs.add(outcome, count, seconds)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    runs = config.stash[_STASH]
    if not runs.count:
        return
    parts = [
        f"{runs.count[outcome]} {wording.format(seconds=runs.seconds[outcome])}"
        for outcome, wording in OUTCOMES.items()
        if runs.count[outcome]
    ]
    terminalreporter.write_sep("-", "runs made once per input")
    terminalreporter.write_line(f"tools/results.py: {', '.join(parts)}")
