"""``make test``'s coverage keeps every xdist worker's data, or fails the run naming the worker.

Each case runs a small project with ``pytest -n 2 --cov`` in a subprocess, the way
``make test-suite`` runs the suite (tests/support/coverage_workers.py loaded).
"""

from __future__ import annotations

import sys

import pytest

from tests.support.skips import ROOT

pytest_plugins = ["pytester"]
#: Whether this is the Python of make test's measured run (make test-py310 measures nothing).
MEASURED_RUN_PYTHON = sys.version_info >= (3, 11)
if not MEASURED_RUN_PYTHON:
    pytest.skip(
        "make test measures coverage on Python 3.11 only: the workers' data is checked there",
        allow_module_level=True,
    )
pytest.importorskip("pytest_cov", reason="needs pytest-cov (pip install 'fi-compat[test]')")
pytest.importorskip("xdist", reason="needs pytest-xdist (pip install 'fi-compat[test]')")

#: Two modules, each used by the tests of one file only: with --dist loadfile each file's
#: tests run on one worker, so each module's lines reach the report from one worker only.
MEASURED = {
    "left": "def used():\n    return 'left'\n",
    "right": "def used():\n    return 'right'\n",
}
TESTS = {
    "test_left": "import left\n\ndef test_left():\n    assert left.used() == 'left'\n",
    "test_right": "import right\n\ndef test_right():\n    assert right.used() == 'right'\n",
}
#: What the runs under test measure: the project's two modules, branch coverage, data files
#: of their own, and the subprocess patch the suite uses.
COVERAGERC = (
    "[run]\nbranch = true\nparallel = true\npatch =\n    subprocess\n    _exit\n"
    "source = left, right\n"
)


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # -p tests.support.coverage_workers


def _project(pytester: pytest.Pytester, conftest: str = "") -> None:
    pytester.makepyfile(**MEASURED, **TESTS)
    (pytester.path / ".coveragerc").write_text(COVERAGERC, encoding="utf-8")
    if conftest:
        pytester.makeconftest(conftest)


def _run(pytester: pytest.Pytester) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p",
        "tests.support.coverage_workers",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "--dist",
        "loadfile",
        "--cov",
        "--cov-report=term-missing",
    )


def test_every_worker_s_data_reaches_the_report(pytester: pytest.Pytester) -> None:
    _project(pytester)
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["left.py * 100%", "right.py * 100%", "TOTAL * 100%"])
    result.stdout.no_fnmatch_line("*coverage data missing*")


def test_a_worker_that_is_slow_to_exit_keeps_its_data(pytester: pytest.Pytester) -> None:
    """The failure ``make test`` had on a busy machine: pytest-xdist kills a worker that has
    not exited 10 s after the run, and a worker that saved its data at exit lost all of it."""
    _project(
        pytester,
        "import atexit, time\n\n"
        "def pytest_configure(config):\n"
        "    if getattr(config, 'workerinput', {}).get('workerid') == 'gw1':\n"
        "        atexit.register(time.sleep, 15)  # longer than pytest-xdist waits\n",
    )
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["TOTAL * 100%"])


def test_a_worker_whose_data_is_missing_fails_the_run_by_name(pytester: pytest.Pytester) -> None:
    _project(
        pytester,
        "import pytest\n\n"
        "@pytest.hookimpl(trylast=True)\n"
        "def pytest_sessionfinish(session):\n"
        "    if getattr(session.config, 'workerinput', {}).get('workerid') == 'gw1':\n"
        "        # as though the worker had stopped before pytest-cov saved its data\n"
        "        session.config.workeroutput.pop('cov_worker_node_id', None)\n",
    )
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*coverage data missing*", "xdist worker gw1 returned no coverage data *run fails"]
    )
    result.stdout.fnmatch_lines(["*2 passed*"])  # every test passed: only coverage failed


def test_a_crashed_worker_is_named_too(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**MEASURED)
    (pytester.path / ".coveragerc").write_text(COVERAGERC, encoding="utf-8")
    pytester.makepyfile(
        test_left="import os, left\n\ndef test_left():\n    assert left.used()\n    os._exit(1)\n",
        test_right=TESTS["test_right"],
    )
    result = _run(pytester)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*coverage data missing*", "xdist worker gw* returned no *"])


def test_a_subprocess_a_test_starts_is_measured_however_it_ends(pytester: pytest.Pytester) -> None:
    """The workers through pytest-cov, the subprocesses their tests start through coverage's
    patch: ``right`` runs only in subprocesses, one of which leaves through ``os._exit``."""
    pytester.makepyfile(**MEASURED)
    (pytester.path / ".coveragerc").write_text(COVERAGERC, encoding="utf-8")
    pytester.makepyfile(
        test_left=TESTS["test_left"],
        test_right=(
            "import subprocess, sys\n\n"
            "def test_right(tmp_path):\n"
            "    code = 'import os, sys; sys.path.insert(0, {!r}); import right; right.used(); '\n"
            "    subprocess.run([sys.executable, '-c', code.format(str(__import__('os')"
            ".path.dirname(__file__))) + 'os._exit(0)'], check=True, cwd=tmp_path)\n"
        ),
    )
    result = _run(pytester)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["right.py * 100%", "TOTAL * 100%"])


def test_make_test_measures_the_workers_through_pytest_cov() -> None:
    """The suite's recipe is the one these cases run: pytest-cov over xdist, not ``coverage
    run -m pytest`` (which saves a worker's data at exit, where xdist may kill it first)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ntest-suite:", 1)[1].split("\n\n", 1)[0]
    assert "-m pytest" in recipe
    assert "--cov " in recipe
    assert "-n $(WORKERS)" in recipe
    assert "coverage run" not in recipe
    conftest = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    assert '"tests.support.coverage_workers"' in conftest
