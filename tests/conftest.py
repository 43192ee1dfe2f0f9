"""Shared fixtures (hand-written fake ``flashinfer`` packages put on ``sys.path``) and the
``--all-releases`` option (:mod:`tests.support.release_classes`)."""

from __future__ import annotations

import gc
import importlib.metadata
import logging
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from fi_compat import capabilities
from fi_compat._local import CACHE_ENV, UNRECORDED_ENV
from tests.support import release_classes
from tests.support.fakes import FakePackage

#: Every run says what it downloads as it happens, and ends with its skips judged by reason
#: and how many release runs it answered from kept results (``--file-cpu=N``: and the CPU
#: seconds of its N costliest test files); under ``--cov`` a worker whose coverage data is
#: missing fails the run; ``--dist loadfile`` hands out the costliest test files first.
pytest_plugins = [
    "tests.support.downloads",
    "tests.support.file_cpu",
    "tests.support.kept_runs",
    "tests.support.skips",
    "tests.support.coverage_workers",
    "tests.support.schedule",
]


#: No property test is timed: a Hypothesis deadline or "too slow" health check is a timed
#: assertion, which fails on a busy machine where the same code is correct (speed is the
#: benchmarks' business, bench/). Each test's own settings still choose its examples.
settings.register_profile("fi-compat", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fi-compat")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all-releases",
        action="store_true",
        help="run every release-parametrized test on every release it names, not once per "
        "release class (tests/support/release_classes.py; make test-all)",
    )


def pytest_configure(config: pytest.Config) -> None:
    release_classes.sweep(bool(config.getoption("--all-releases")))
    # What fi-compat models and measures on a machine goes to a cache of this run's own
    # (subprocesses inherit it), so no answer depends on what a developer's cache holds;
    # no shipped release is set aside unless a test says so.
    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="fi-compat-cache-")
    os.environ.pop(UNRECORDED_ENV, None)


def pytest_unconfigure(config: pytest.Config) -> None:
    cache = os.environ.pop(CACHE_ENV, None)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)


def _flashinfer_missing() -> str | None:
    """Why the release matrix cannot run here, or None."""
    try:
        importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return (
            "the release matrix imports downloaded flashinfer-python releases with "
            "flashinfer-python's own dependencies (apache-tvm-ffi, nvidia-cutlass-dsl, ...) "
            "from this venv, and flashinfer-python is not installed here: "
            "pip install 'fi-compat[flashinfer]'"
        )
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("release_matrix") is not None:
        missing = _flashinfer_missing()
        if missing is not None:
            pytest.skip(missing)


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("--all-releases"):
        return "releases: every recorded release (--all-releases)"
    return "releases: first and last of each release class (--all-releases for every one)"


def _drop_flashinfer_modules() -> dict[str, object]:
    removed: dict[str, object] = {}
    for name in list(sys.modules):
        if name == "flashinfer" or name.startswith("flashinfer."):
            removed[name] = sys.modules.pop(name)
    return removed


@pytest.fixture
def fake_package(tmp_path: Path) -> Iterator[FakePackage]:
    """Write a fake ``flashinfer`` from ``{relative path: source}`` and put it first on sys.path.

    Real flashinfer modules already imported are set aside for the test and restored
    after it; the capability cache is cleared on both sides.
    """
    saved_modules = _drop_flashinfer_modules()
    saved_path = list(sys.path)
    root = tmp_path / "site"

    def write(files: Mapping[str, str]) -> Path:
        for relative, source in files.items():
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
        sys.path.insert(0, str(root))
        capabilities.clear_cache()
        return root

    yield write
    _drop_flashinfer_modules()
    sys.path[:] = saved_path
    sys.modules.update(saved_modules)  # type: ignore[arg-type]
    capabilities.clear_cache()


@pytest.fixture
def no_flashinfer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make ``flashinfer`` look absent, whatever is installed."""
    saved_modules = _drop_flashinfer_modules()
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    monkeypatch.setattr(capabilities, "distribution_version", lambda: None)
    capabilities.clear_cache()
    yield
    monkeypatch.undo()
    _drop_flashinfer_modules()
    sys.modules.update(saved_modules)  # type: ignore[arg-type]
    capabilities.clear_cache()


@pytest.fixture
def collector_held() -> Iterator[None]:
    """For a test that asserts an object is freed: nothing but the test keeps it.

    A finalizer that logs an exception (real FlashInfer's ``SymmDeviceMemory.__del__`` does
    on a machine without CUDA, for a buffer an earlier test left behind) makes a log record
    that pytest keeps, holding the exception's traceback and with it every frame on the stack
    when the finalizer ran: run inside a call that held the object, it kept the object alive
    and failed such a test in CI and under load. So what earlier tests left in reference
    cycles is collected first; then, until the test ends, Python's cyclic collector runs
    only where the test calls ``gc.collect()`` (held as the builder holds it while it models
    a release), and logging makes no records at all (a finalizer run when its object's last
    reference goes still runs, but what it logs holds nothing). Request it after the
    fixtures that let go of objects (entering a fake clears the caches that held them)."""
    from fi_compat._recorder.resolve import collector_paused

    gc.collect()
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with collector_paused():
            yield
    finally:
        logging.disable(disabled)
