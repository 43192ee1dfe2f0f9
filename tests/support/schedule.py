"""The costliest test files first: how ``make test`` hands whole files to its xdist workers.

``--dist loadfile`` gives each worker a whole test file at a time, in pytest-xdist's order:
the files with the most tests first. Test count says little about cost here: the day-one
models of 26 releases are 26 tests and about a fifth of a cold run's work, while a file of
two hundred table cases takes a second. A costly file handed out last keeps one worker busy
while the other has nothing left to do, and the run waits for it.

Under ``--dist loadfile`` this plugin gives pytest-xdist a work queue that hands out the
costliest file first (longest processing time first, which keeps the two workers within one
file's cost of each other), by the seconds each file took in a measured ``make test`` (both
of its runs added up: :func:`costs`, ``tests/file_costs.json``). A file the
table does not know is weighed by its number of tests. The order is only an order: a stale
table makes a run slower, never different, and each file still runs whole on one worker, in
its own order.

Refresh the table from the log of a run with every duration printed::

    make test PYTEST_ARGS="--durations=0 --durations-min=0.3" > build/test.log 2>&1
    python -m tests.support.schedule build/test.log --write
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

__all__ = ["TABLE", "CostliestFirst", "costs", "costs_from_log", "weight"]

#: Outside ``tests/support/``, whose files are part of every kept run's key
#: (:mod:`tools.results`): a refreshed table reorders a run and changes no result.
TABLE = Path(__file__).resolve().parents[1] / "file_costs.json"


@functools.cache
def costs() -> dict[str, float]:
    """Seconds each test file took (setup, call and teardown of its tests) in a measured
    run, from :data:`TABLE` (empty before it is first written)."""
    if not TABLE.exists():
        return {}
    found: dict[str, float] = json.loads(TABLE.read_text(encoding="utf-8"))
    return found


#: What a test of a file the table does not know is taken to cost.
UNKNOWN_TEST_COST = 0.05

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+(\S+\.py(?:::\S*)?)$")


def weight(scope: str, tests: int) -> float:
    """What a file (``scope``) holding ``tests`` collected tests is expected to cost."""
    return costs().get(scope, UNKNOWN_TEST_COST * tests)


class CostliestFirst(OrderedDict[str, dict[str, bool]]):
    """pytest-xdist's work queue (file -> its tests), whose next unit (``popitem(last=False)``,
    all the scheduler takes) is the costliest file left by :func:`weight`, the first queued
    among equals; everything else is the plain ordered dict the scheduler expects."""

    def popitem(self, last: bool = True) -> tuple[str, dict[str, bool]]:
        if last:
            return super().popitem(last=True)
        if not self:
            raise KeyError("popitem(): the work queue is empty")
        scope = max(self, key=lambda each: weight(each, len(self[each])))
        return scope, self.pop(scope)


def costs_from_log(lines: Iterable[str]) -> dict[str, float]:
    """Each file's seconds, summed from pytest's ``--durations`` lines."""
    found: dict[str, float] = {}
    for line in lines:
        match = _DURATION.match(line)
        if match:
            path = match.group(2).split("::", 1)[0]
            found[path] = found.get(path, 0.0) + float(match.group(1))
    return {path: round(seconds, 1) for path, seconds in sorted(found.items())}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    # Only the queue's order changes: the workers' collections, which the scheduler sends
    # tests to by index, stay as they were collected.
    scheduler = LoadFileScheduling(config, log)
    scheduler.workqueue = CostliestFirst()
    return scheduler


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.schedule",
        description="each test file's seconds, from the logs of runs with --durations=0",
    )
    parser.add_argument("logs", nargs="+", type=Path, help="a file's seconds: its most in any log")
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.name}")
    args = parser.parse_args(argv)
    found: dict[str, float] = {}
    for log in args.logs:
        for path, seconds in costs_from_log(log.read_text(encoding="utf-8").splitlines()).items():
            found[path] = max(found.get(path, 0.0), seconds)
    text = json.dumps(dict(sorted(found.items())), indent=1) + "\n"
    if args.write:
        TABLE.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
