"""One release's model (its record and its surface), made in parts on every core there is.

Parsing a release's modules is most of the work of modelling it (a 0.7 release ships about
2,000 modules and 100 MB of Python), and each module's part of the surface needs only the
modules its names lead to. So the builder reads the release's files once, then forks workers
that share those files (copy-on-write) and each parse and record what their part needs: the
record is one part, and the recorded modules are cut, in order, into parts of about equal
source size, so that a subpackage's modules mostly meet in one worker. The parts come back as
plain data, and the surface is finished (re-exports shared) in the parent. The result is the
same, byte for byte, however many workers made it: one worker makes it in this process, which
is also what happens where ``fork`` is not available.

No pool: a pool whose worker dies waits for that worker's result for ever (which happened
once, in a fresh-clone test run). Here the workers are forked once, before anything else
runs, take part numbers from a pipe the parent filled (a read of four bytes is whole, so no
lock is shared), and leave each finished part in a file of its own. The parent waits for
each worker to end, however it ends, and makes in this process every part that no worker
left: a worker that died costs time, never the model, and a part that cannot be made raises
its own error here, as it would in one process.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import tempfile
from pathlib import Path

from fi_compat._recorder.archive import read_release
from fi_compat._recorder.record import record_release
from fi_compat._recorder.resolve import Package
from fi_compat._recorder.surface import module_tables, recorded_modules, surface
from fi_compat._records._format import JSONRecord

__all__ = ["default_jobs", "model_release", "parts"]


#: Parts per worker: more parts than workers lets a worker that finishes early take another,
#: fewer keeps the modules of a subpackage together (each worker parses what its part needs).
_PARTS_PER_JOB = 3

#: At most this many parts (their numbers, four bytes each, must fit the pipe's buffer).
_MOST_PARTS = 1024

#: The part number of the record (the tables' parts are numbered from 0).
_RECORD = -1

_NUMBER = struct.Struct("=i")


def default_jobs() -> int:
    """The cores this process may run on, where ``fork`` can share the read files; else 1."""
    if sys.platform != "linux" or not hasattr(os, "fork"):
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


class _Parts:
    """The parts of one model and how to make each: the record, or a run of modules' tables."""

    def __init__(self, path: Path, release: str | None, package: Package, count: int) -> None:
        self.path = path
        self.release = release
        self.package = package
        self.runs = parts(package, count)

    def numbers(self) -> list[int]:
        """Every part's number, the record's first (it is the longest part)."""
        return [_RECORD, *range(len(self.runs))]

    def make(self, number: int) -> JSONRecord:
        if number == _RECORD:
            return record_release(self.path, release=self.release, package=self.package)
        return module_tables(self.package, self.runs[number])


def _work(todo: _Parts, queue: int, scratch: Path) -> None:
    """In a worker: make the parts whose numbers come from ``queue``, each into a file of
    ``scratch``, until the queue is empty. Never returns."""
    code = 1
    try:
        while chunk := os.read(queue, _NUMBER.size):
            (number,) = _NUMBER.unpack(chunk)
            made = todo.make(number)
            unfinished = scratch / f"{number}.part"
            with unfinished.open("wb") as file:
                pickle.dump(made, file, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(unfinished, scratch / f"{number}.done")  # whole, or not there
        code = 0
    except BaseException:  # the parent makes this part again, and raises
        code = 1
    finally:
        os._exit(code)


def _made_apart(todo: _Parts, jobs: int) -> dict[int, JSONRecord]:
    """The parts made by ``jobs`` forked workers: every part any worker finished."""
    numbers = todo.numbers()
    with tempfile.TemporaryDirectory(prefix="fi-compat-model-") as name:
        scratch = Path(name)
        queue, filler = os.pipe()
        try:  # every number before any worker starts: well within the pipe's buffer
            os.write(filler, b"".join(_NUMBER.pack(number) for number in numbers))
        finally:
            os.close(filler)
        sys.stdout.flush()
        sys.stderr.flush()
        workers = []
        try:
            for _ in range(min(jobs, len(numbers))):
                pid = os.fork()
                if pid == 0:  # pragma: no cover - a worker, measured by its own data file
                    _work(todo, queue, scratch)
                workers.append(pid)
        finally:
            os.close(queue)
        for pid in workers:
            _, status = os.waitpid(pid, 0)
            if os.WIFSIGNALED(status):  # its parts are made again below: say why it is slower
                signal = os.WTERMSIG(status)
                print(
                    f"fi-compat: a modelling worker was ended by signal {signal}", file=sys.stderr
                )
        made: dict[int, JSONRecord] = {}
        for number in numbers:
            done = scratch / f"{number}.done"
            if done.exists():
                with done.open("rb") as file:
                    made[number] = pickle.load(file)  # written just now, by a worker
        return made


def model_release(
    path: Path, release: str | None = None, jobs: int | None = None
) -> tuple[JSONRecord, dict[str, JSONRecord]]:
    """The record and the surface of the release at ``path``, made by ``jobs`` processes
    (default :func:`default_jobs`); the same result for any ``jobs``.

    With more than one job the workers are forked, so the caller should be a process with
    one thread: the builder's own (``python -m fi_compat._recorder model``), which is where
    fi-compat calls this. A part no worker finished (a worker that died, or a part that
    fails) is made in this process, so its error (a
    :class:`~fi_compat.errors.RecordingError`) is raised here.
    """
    package = Package(read_release(path))  # read once, shared by every worker
    jobs = default_jobs() if jobs is None else max(1, jobs)
    if jobs == 1 or not hasattr(os, "fork"):
        record = record_release(path, release=release, package=package)
        return record, surface(package)
    todo = _Parts(path, release, package, min(jobs * _PARTS_PER_JOB, _MOST_PARTS))
    made = _made_apart(todo, jobs)
    for number in todo.numbers():
        if number not in made:
            made[number] = todo.make(number)
    tables: dict[str, JSONRecord] = {}
    for number in range(len(todo.runs)):
        tables.update(made[number])
    return made[_RECORD], surface(package, tables)
