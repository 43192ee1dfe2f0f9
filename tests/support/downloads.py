"""Downloads during a test run, said as they happen and added up at the end.

A test that needs a published wheel (a FlashInfer release, an engine, the CUDA runtime) gets
it from :class:`tools.releases.ReleaseCache`, which downloads each file once and announces it
on the ``tools.releases`` logger. This plugin (registered by ``tests/conftest.py``) prints
each announcement to the terminal at once, past pytest's capture and from every xdist
worker, so a first run that waits on the registry says so::

    [download] downloaded sglang-0.5.23-py3-none-any.whl (5.1 MB) in 3.2 s

and closes the run with one line: how many files, how many bytes and how long they took.
A warm run downloads nothing and prints nothing here.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from tools.releases import LOGGER, describe_size

__all__ = ["Download", "DownloadLog"]

_KEY = "fi_compat_downloads"


@dataclass(frozen=True)
class Download:
    """One file the run fetched from the registry."""

    name: str
    size: int
    seconds: float


class DownloadLog(logging.Handler):
    """Says every download on the terminal as it happens, and keeps the list."""

    def __init__(self, config: pytest.Config) -> None:
        super().__init__(logging.INFO)
        self.config = config
        self.downloads: list[Download] = []

    def emit(self, record: logging.LogRecord) -> None:
        name, size, seconds = getattr(record, "download", (record.getMessage(), 0, 0.0))
        self.downloads.append(Download(str(name), int(size), float(seconds)))
        line = f"\n[download] {record.getMessage()}\n"
        capture = self.config.pluginmanager.getplugin("capturemanager")
        if capture is None:  # pragma: no cover - run with -p no:capture
            sys.stderr.write(line)
        else:
            with capture.global_and_fixture_disabled():
                sys.stderr.write(line)
        sys.stderr.flush()


_STASH = pytest.StashKey[DownloadLog]()


def pytest_configure(config: pytest.Config) -> None:
    log = DownloadLog(config)
    config.stash[_STASH] = log
    LOGGER.addHandler(log)
    if LOGGER.getEffectiveLevel() > logging.INFO:
        LOGGER.setLevel(logging.INFO)


def pytest_unconfigure(config: pytest.Config) -> None:
    log = config.stash.get(_STASH, None)
    if log is not None:
        LOGGER.removeHandler(log)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the list to the controller
        log = session.config.stash[_STASH]
        workeroutput[_KEY] = [(d.name, d.size, d.seconds) for d in log.downloads]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    log: DownloadLog = node.config.stash[_STASH]
    for name, size, seconds in getattr(node, "workeroutput", {}).get(_KEY, []):
        log.downloads.append(Download(name, size, seconds))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    downloads = config.stash[_STASH].downloads
    if not downloads:
        return
    size = sum(d.size for d in downloads)
    seconds = sum(d.seconds for d in downloads)
    terminalreporter.write_sep("-", "downloads")
    files = f"{len(downloads)} file{'s' if len(downloads) > 1 else ''}"
    terminalreporter.write_line(
        f"{files} downloaded during this run ({describe_size(size)}, "
        f"{seconds:.0f} s of waiting; later runs take them from the release cache)"
    )
