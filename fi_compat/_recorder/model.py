"""One release's model (its record and its surface), made in parts on every core there is.

Parsing a release's modules is most of the work of modelling it (a 0.7 release ships about
2,000 modules and 100 MB of Python), and each module's part of the surface needs only the
modules its names lead to. So the builder reads the release's files once, then forks workers
that share those files (copy-on-write) and each parse and record what their part needs: the
record is one part, and the recorded modules are cut, in order, into parts of about equal
source size, so that a subpackage's modules mostly meet in one worker. The parts come back as
plain JSON-ready data, and the surface is finished (re-exports shared) in the parent. The
result is the same, byte for byte, however many workers made it: one worker makes it in this
process, which is also what happens where ``fork`` is not available.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

from fi_compat._recorder.archive import read_release
from fi_compat._recorder.record import record_release
from fi_compat._recorder.resolve import Package
from fi_compat._recorder.surface import module_tables, recorded_modules, surface

__all__ = ["default_jobs", "model_release", "parts"]

Record = dict[str, Any]

#: Parts per worker: more parts than workers lets a worker that finishes early take another,
#: fewer keeps the modules of a subpackage together (each worker parses what its part needs).
_PARTS_PER_JOB = 3

#: The release being modelled, for the forked workers (set just before they start).
_PACKAGE: Package | None = None
_PATH: Path | None = None
_RELEASE: str | None = None
_TASKS: list[list[str]] = []


def default_jobs() -> int:
    """The cores this process may run on, where ``fork`` can share the read files; else 1."""
    if "fork" not in multiprocessing.get_all_start_methods() or sys.platform != "linux":
        return 1
    return max(1, len(os.sched_getaffinity(0)))


def parts(package: Package, count: int) -> list[list[str]]:
    """The recorded modules, in order, cut into at most ``count`` runs of about equal source
    size (none empty)."""
    modules = recorded_modules(package)
    sizes = [len(package.source.files[name][1]) + 1 for name in modules]
    share = sum(sizes) / max(1, count)
    cut: list[list[str]] = [[]]
    filled = 0.0
    for name, size in zip(modules, sizes, strict=True):
        if filled >= share * len(cut) and len(cut) < count:
            cut.append([])
        cut[-1].append(name)
        filled += size
    return [part for part in cut if part]


def _work(task: int | None) -> tuple[int | None, Record]:
    """In a worker: the record (``None``) or the tables of part ``task``."""
    assert _PACKAGE is not None
    assert _PATH is not None
    if task is None:
        return None, record_release(_PATH, release=_RELEASE, package=_PACKAGE)
    return task, module_tables(_PACKAGE, _TASKS[task])


def model_release(
    path: Path, release: str | None = None, jobs: int | None = None
) -> tuple[Record, dict[str, Record]]:
    """The record and the surface of the release at ``path``, made by ``jobs`` processes
    (default :func:`default_jobs`); the same result for any ``jobs``.

    With more than one job the workers are forked, so the caller should be a process with
    one thread: the builder's own (``python -m fi_compat._recorder model``), which is where
    fi-compat calls this. A worker's error (a :class:`~fi_compat.errors.RecordingError`) is
    raised here.
    """
    global _PACKAGE, _PATH, _RELEASE, _TASKS
    package = Package(read_release(path))  # read once, shared by every worker
    # Forked workers hung once (a worker died, the pool waited): opt-in until that is found.
    jobs = 1 if jobs is None else max(1, jobs)
    if jobs == 1:
        record = record_release(path, release=release, package=package)
        return record, surface(package)
    _PACKAGE, _PATH, _RELEASE = package, path, release
    _TASKS = parts(package, jobs * _PARTS_PER_JOB)
    try:
        tasks: list[int | None] = [None, *range(len(_TASKS))]
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            done = dict(pool.imap_unordered(_work, tasks))
    finally:
        _PACKAGE = _PATH = _RELEASE = None
        _TASKS = []
    tables: dict[str, Record] = {}
    for index in range(len(tasks) - 1):
        tables.update(done[index])
    return done[None], surface(package, tables)
