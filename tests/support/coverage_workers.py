"""Coverage that cannot lose an xdist worker: ``make test`` measures with pytest-cov.

``make test-suite`` runs ``pytest -n N --cov``. pytest-cov measures each xdist worker from
the start of its session and saves the worker's data before the worker reports that it has
finished, so the controller combines every worker's data before the report. (The run used to
be ``coverage run -m pytest -n N``: each worker then saved its data at interpreter exit, and
pytest-xdist kills a worker that has not exited 10 s after the run ends, which on a busy
machine lost whole workers' data and gave a lower figure with every test passing.)

This plugin adds the two things pytest-cov leaves soft:

* **A worker that returns no coverage data fails the run**, naming the worker (pytest-cov
  itself only prints a note under "failed workers").
* **One measurement per worker.** ``[tool.coverage.run] patch = ["subprocess"]`` measures
  every Python subprocess a test starts, through an environment variable that pytest-cov's
  coverage sets in the controller. The workers are subprocesses too: left alone, coverage's
  start-up hook would measure each a second time and save that data at exit, after the
  report. The variable is dropped just before the workers start; pytest-cov sets it again
  inside each worker, for the subprocesses its tests start.

The subprocesses a test starts save their own data when they exit (before their test ends),
so it is in the data directory when the controller combines.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

#: The environment variable through which coverage measures subprocesses (coverage 7.10+).
PROCESS_CONFIG = "COVERAGE_PROCESS_CONFIG"
#: What pytest-cov puts in a worker's output once the worker's data is saved.
WORKER_DONE = "cov_worker_node_id"
#: The name pytest-cov registers its plugin under when ``--cov`` is given.
PYTEST_COV = "_cov"


def _measuring(config: pytest.Config) -> bool:
    plugin = config.pluginmanager.get_plugin(PYTEST_COV)
    return plugin is not None and getattr(plugin, "cov_controller", None) is not None


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and _measuring(config):
        config.pluginmanager.register(WorkerCoverage(), "fi-compat-coverage-workers")


class WorkerCoverage:
    """The controller's side: what each worker returned, and the verdict."""

    def __init__(self) -> None:
        self.lost: list[str] = []

    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: Any) -> None:
        os.environ.pop(PROCESS_CONFIG, None)

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        if WORKER_DONE not in output:
            why = f": {error}" if error else ""
            self.lost.append(f"{node.gateway.id}{why}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.lost:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.lost:
            return
        terminalreporter.write_sep("!", "coverage data missing")
        for worker in self.lost:
            terminalreporter.write_line(
                f"xdist worker {worker} returned no coverage data (it crashed or was "
                "stopped before pytest-cov saved it): the coverage figure would be low "
                "with every test passing, so the run fails"
            )
