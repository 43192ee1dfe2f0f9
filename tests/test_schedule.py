"""``make test`` hands its xdist workers the costliest test files first
(:mod:`tests.support.schedule`)."""

from __future__ import annotations

import json

import pytest

from tests.support import schedule
from tests.support.skips import ROOT

pytest_plugins = ["pytester"]


def test_the_queue_hands_out_the_costliest_file_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule, "costs", lambda: {"b.py": 10.0, "c.py": 30.0, "e.py": 30.0})
    queue = schedule.CostliestFirst()
    for name, tests in [("a.py", 2), ("b.py", 1), ("c.py", 2), ("d.py", 1), ("e.py", 1)]:
        queue[name] = {f"{name}::t{n}": False for n in range(tests)}
    popped = [queue.popitem(last=False) for _ in range(5)]
    # c and e cost the same: c was queued first; a (unknown) is weighed by its two tests
    assert [scope for scope, _ in popped] == ["c.py", "e.py", "b.py", "a.py", "d.py"]
    assert popped[0][1] == {"c.py::t0": False, "c.py::t1": False}
    with pytest.raises(KeyError):
        queue.popitem(last=False)
    queue.update({"x.py": {}, "y.py": {}})
    assert queue.popitem() == ("y.py", {})  # the other end is the plain dict's


def test_the_table_is_read_from_durations_lines() -> None:
    log = [
        "  12.50s setup    tests/a.py::test_x[1]",
        "1.25s call     tests/a.py::test_x[2]",
        "0.30s teardown tests/b.py::test_y",
        "12.50s call that is not a duration line",
        "========== 3 passed in 14.05s ==========",
    ]
    assert schedule.costs_from_log(log) == {"tests/a.py": 13.8, "tests/b.py": 0.3}


def test_the_shipped_table_names_test_files_that_exist() -> None:
    table = json.loads(schedule.TABLE.read_text(encoding="utf-8"))
    assert table, "tests/file_costs.json is empty: python -m tests.support.schedule"
    assert all((ROOT / path).is_file() for path in table), [
        path for path in table if not (ROOT / path).is_file()
    ]


def test_xdist_runs_the_costliest_file_first(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist", reason="needs pytest-xdist (pip install 'fi-compat[test]')")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # -p tests.support.schedule
    table = pytester.path / "costs.json"
    table.write_text(json.dumps({"test_dear.py": 100.0}), encoding="utf-8")
    pytester.makeconftest(
        "import pathlib, tests.support.schedule as schedule\n"
        f"schedule.TABLE = pathlib.Path({str(table)!r})\n"
        "schedule.costs.cache_clear()\n"
    )
    ran = pytester.path / "ran.txt"
    record = f"def test_{{0}}():\n    open({str(ran)!r}, 'a').write('{{0}}\\n')\n"
    pytester.makepyfile(
        test_cheap="\n".join(record.format(f"cheap{n}") for n in range(5)),
        test_dear=record.format("dear"),
    )
    result = pytester.runpytest_subprocess(
        "-p", "tests.support.schedule", "-p", "no:cacheprovider", "-n", "1", "--dist", "loadfile"
    )
    result.assert_outcomes(passed=6)
    ran_in_order = ran.read_text(encoding="utf-8").split()
    # the costly file first, then the other, each test once and the one it names
    assert ran_in_order == ["dear", *(f"cheap{n}" for n in range(5))]


def test_the_suite_loads_the_scheduler(request: pytest.FixtureRequest) -> None:
    """tests/conftest.py registers it, so ``make test``'s runs use it (the cases above load
    it with ``-p``)."""
    assert request.config.pluginmanager.hasplugin("tests.support.schedule")
