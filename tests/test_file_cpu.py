"""``--file-cpu=N`` ends a run with the CPU seconds each test file took (tests/support/
file_cpu.py), its waited-for subprocesses and module-scoped fixtures included, and with
xdist every worker's files.

Each case runs a small project in a subprocess: one file burns CPU in its test and in a
module-scoped fixture, one in a subprocess it waits for, one almost none. Every burn runs
until its own process has used the CPU time asked for, so how busy the machine is changes
how long it takes, never how much CPU it reports.
"""

from __future__ import annotations

import re

import pytest

from tests.support.skips import ROOT

pytest_plugins = ["pytester"]

#: Spends ``seconds`` of this process's CPU time.
BURN = (
    "import time\n\n"
    "def burn(seconds):\n"
    "    until = time.process_time() + seconds\n"
    "    while time.process_time() < until:\n"
    "        pass\n"
)
TESTS = {
    "burn": BURN,
    "test_here": (
        "import pytest\nfrom burn import burn\n\n"
        "@pytest.fixture(scope='module')\n"
        "def ready():\n    burn(0.1)\n\n"
        "def test_one(ready):\n    burn(0.1)\n\n"
        "def test_two(ready):\n    pass\n"
    ),
    "test_child": (
        "import subprocess, sys\n\n"
        "def test_child():\n"
        "    code = 'import sys; sys.path.insert(0, sys.argv[1]); import burn; burn.burn(0.3)'\n"
        "    subprocess.run([sys.executable, '-c', code, __import__('os').path.dirname("
        "__file__)], check=True)\n"
    ),
    "test_idle": "def test_idle():\n    pass\n",
}


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # -p tests.support.file_cpu


def _table(pytester: pytest.Pytester, *options: str) -> dict[str, float]:
    pytester.makepyfile(**TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "tests.support.file_cpu", "-p", "no:cacheprovider", *options
    )
    assert result.ret == 0, result.stdout.str()
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "CPU seconds per test file" in line)
    table: dict[str, float] = {}
    for line in lines[start + 1 :]:
        found = re.fullmatch(r"\s*([\d.]+)  (.+)", line)
        if found is None:
            break
        table[found.group(2)] = float(found.group(1))
    return table


@pytest.mark.parametrize("options", [(), ("-n", "2", "--dist", "loadfile")], ids=["one", "xdist"])
def test_each_file_s_cpu_seconds_with_its_fixtures_and_subprocesses(
    pytester: pytest.Pytester, options: tuple[str, ...]
) -> None:
    table = _table(pytester, "--file-cpu=5", *options)
    assert table["test_here.py"] >= 0.2  # the module fixture's burn and the test's
    assert table["test_child.py"] >= 0.3  # the subprocess's
    assert table["test_idle.py"] < table["test_here.py"]
    assert list(table)[:2] == ["test_child.py", "test_here.py"]  # the costliest first
    total = table.pop("in all, 3 files")
    assert total == pytest.approx(sum(table.values()), abs=0.2)  # each figure printed to 0.1 s


def test_only_the_costliest_are_listed(pytester: pytest.Pytester) -> None:
    table = _table(pytester, "--file-cpu=1")
    assert list(table) == ["test_child.py", "in all, 3 files"]


def test_nothing_is_listed_unless_asked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**TESTS)
    result = pytester.runpytest_subprocess("-p", "tests.support.file_cpu", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.no_fnmatch_line("*CPU seconds per test file*")
