"""A skip is a finding: every run ends with its skips grouped by reason, each one judged.

A skipped test proves nothing, so a skip must be one this machine cannot avoid. This plugin
(registered by ``tests/conftest.py``) closes every run with a ``skips by reason`` section:
one line per distinct reason, with how many tests it skipped and a verdict:

- ``honest``: the reason holds here and the suite cannot remove it (no torch for this
  Python, a platform feature this machine lacks, a test that does not apply to one of its
  parameters); :data:`HONEST` says why, and checks that the condition really holds here;
- ``removable``: anything else: a wheel that could be downloaded, a tool the project
  installs, a registry that ``make test`` itself needs.

With ``--strict-skips`` (``make test`` passes it to both of its test runs) a removable skip
fails the run, so a suite that only passes because something was quietly skipped does not
pass. A new kind of skip is removable until it is added to :data:`HONEST` with its reason.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["HONEST", "Environment", "Honest", "SkipLedger", "Verdict", "judge", "reason_of"]

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Environment:
    """The facts about this machine that make a skip honest or not."""

    python: tuple[int, int]
    has_torch: bool
    has_flashinfer: bool
    root: bool
    git_checkout: bool
    platform: str

    @classmethod
    def here(cls) -> Environment:
        return cls(
            python=(sys.version_info.major, sys.version_info.minor),
            has_torch=importlib.util.find_spec("torch") is not None,
            has_flashinfer=_installed("flashinfer-python"),
            root=hasattr(os, "geteuid") and os.geteuid() == 0,
            git_checkout=_git_checkout(),
            platform=sys.platform,
        )


@dataclass(frozen=True)
class Honest:
    """A skip reason that is honest ``where`` (``holds(environment)``), and why."""

    pattern: re.Pattern[str]
    where: str
    why: str
    holds: Callable[[Environment], bool]


@dataclass(frozen=True)
class Verdict:
    """What a skip reason is here: honest (with why) or removable."""

    honest: bool
    why: str


def _py310(env: Environment) -> bool:
    return env.python < (3, 11)


def _always(env: Environment) -> bool:
    return True


#: Every skip the suite is allowed to make, with the condition that makes it honest. A
#: reason matching none, or matching one whose condition does not hold here, is removable.
HONEST: tuple[Honest, ...] = (
    Honest(
        re.compile(r"needs torch|the launch needs torch|could not import 'torch"),
        "on Python 3.10 without torch",
        "no torch for this Python: torch 2.13.0 CPU is published for Python 3.11 only "
        "(an unpinned torch is a multi-GB CUDA build), so the Python 3.10 run has none",
        lambda env: _py310(env) and not env.has_torch,
    ),
    Honest(
        re.compile(
            r"flashinfer-python is not installed|installed runs the real flashinfer-python|"
            r"the release matrix imports downloaded flashinfer-python|"
            r"needs flashinfer-python \S+ installed"
        ),
        "on Python 3.10 without FlashInfer",
        "no FlashInfer for this Python: flashinfer-python needs torch, which the "
        "Python 3.10 run cannot have",
        lambda env: _py310(env) and not env.has_flashinfer,
    ),
    Honest(
        re.compile(r"griffe"),
        "on Python 3.10",
        "griffe 2 (griffelib), which reads the public API, needs Python 3.11",
        _py310,
    ),
    Honest(
        re.compile(r"needs mkdocs|the charts need the docs extra"),
        "on Python 3.10",
        "the docs toolchain's pins (mkdocs-material 9.8, mkdocstrings-python 2.0, "
        "matplotlib 3.11, whose SVGs are compared byte for byte) need Python 3.11, where "
        "make test builds the site and runs these tests",
        _py310,
    ),
    Honest(
        re.compile(r"make test measures coverage on Python 3\.11 only"),
        "on Python 3.10",
        "the check that every worker's coverage data reaches the report guards the measured "
        "run, which is the Python 3.11 suite's (make test-suite); the Python 3.10 run "
        "measures nothing",
        _py310,
    ),
    Honest(
        re.compile(r"needs the release extra"),
        "on Python 3.10",
        "the release check installs the wheel beside torch 2.13.0 CPU, published for "
        "Python 3.11 only; it runs in the Python 3.11 suite",
        _py310,
    ),
    Honest(
        re.compile(r"root reads any file"),
        "as root",
        "an unreadable file cannot be made for root, who runs this suite here and in CI",
        lambda env: env.root,
    ),
    Honest(
        re.compile(r"needs a pseudo-terminal|named pipes|symbolic links"),
        "on Windows",
        "a platform feature this operating system lacks",
        lambda env: env.platform == "win32",
    ),
    Honest(
        re.compile(r"not a git checkout"),
        "outside a git checkout",
        "run from an unpacked sdist, which has no git history",
        lambda env: not env.git_checkout,
    ),
    Honest(
        re.compile(
            r"^not on this release$|has every public name of|"
            r"^no legacy API in this release$|"
            r"^the release has no allreduce_fusion to pass a workspace object to$|"
            r"^the legacy API is TRT-LLM: refused before the factory|"
            r"^this release's allreduce_fusion has no trace wrapper$|"
            r"^this release does not check its handles$|"
            r"^SymmDeviceMemory\.mapped is not read from _mapped in this release$|"
            r"^every recorded release with flashinfer\.comm has this module$"
        ),
        "everywhere",
        "the case does not exist for this parameter (a release without the API, path or "
        "name the test is about): nothing to run, on any machine",
        _always,
    ),
)


def judge(reason: str, env: Environment, table: Iterable[Honest] = HONEST) -> Verdict:
    """Whether a skip for ``reason`` is honest in ``env``, and why."""
    for entry in table:
        if entry.pattern.search(reason):
            if entry.holds(env):
                return Verdict(True, entry.why)
            return Verdict(False, f"honest only {entry.where}, which this run is not")
    return Verdict(False, "a reason the suite could remove (none of tests/support/skips.py's)")


def reason_of(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason a skipped report gives, without pytest's ``Skipped: `` prefix."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ").strip()


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _git_checkout() -> bool:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:
        return False
    return done.returncode == 0 and done.stdout.strip() == "true"


# ------------------------------------------------------------------------------ the plugin


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--strict-skips",
        action="store_true",
        help="fail the run when a test skips for a reason the suite could remove "
        "(tests/support/skips.py; make test sets it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller sees every worker's reports
        config.pluginmanager.register(SkipLedger(config), "fi-compat-skips")


class SkipLedger:
    """Counts the run's skips by reason, prints them judged, and fails a strict run."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.reasons: Counter[str] = Counter()

    @functools.cached_property
    def environment(self) -> Environment:
        # read once: the summary and the exit status judge against the same facts
        return Environment.here()

    def judged(self) -> list[tuple[str, int, Verdict]]:
        env = self.environment
        return [(reason, count, judge(reason, env)) for reason, count in self.reasons.items()]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.reasons[reason_of(report)] += 1

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # a module that skips itself (``pytest.importorskip`` at its top) is one skip
        if report.skipped:
            self.reasons[reason_of(report)] += 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.reasons:
            return
        judged = sorted(self.judged(), key=lambda j: (j[2].honest, -j[1], j[0]))
        terminalreporter.write_sep("-", "skips by reason")
        for reason, count, verdict in judged:
            label = "honest" if verdict.honest else "REMOVABLE"
            terminalreporter.write_line(f"{count:5d}  {label:<9}  {reason}")
            terminalreporter.write_line(f"{'':18}{verdict.why}")
        removable = sum(count for _, count, verdict in judged if not verdict.honest)
        line = f"{sum(self.reasons.values()) - removable} honest skips, {removable} removable"
        if removable and self.config.getoption("--strict-skips"):
            line += ": the run fails (--strict-skips)"
        terminalreporter.write_line(line)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not self.config.getoption("--strict-skips") or exitstatus != 0:
            return
        if any(not verdict.honest for _, _, verdict in self.judged()):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
