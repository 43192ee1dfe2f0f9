"""One release's model (its record and its surface), made in parts on every core there is.

Parsing a release's modules is most of the work of modelling it (a 0.7 release ships about
2,000 modules and 100 MB of Python), and each module's part of the surface needs only the
modules its names lead to. So the builder reads the release's files once and makes the
record in this process: the record reads every module ``import flashinfer`` runs (a third to
a half of the source, and the modules most others re-export from), and the workers forked
after it share those trees (copy-on-write) instead of each parsing them again, which cost a
fifth more CPU than one process when the record was a part of its own. The recorded modules
are cut, in order, into parts of about equal source size, so that a subpackage's modules
mostly meet in one worker, and each worker parses what its parts need beyond that. The parts
come back as plain data, and the surface is finished (re-exports shared) in the parent. The
result is the same, byte for byte, however many workers made it: one worker makes it in this
process, which is also what happens where ``fork`` is not available.

No pool: a pool whose worker dies waits for that worker's result for ever (which happened
once, in a fresh-clone test run). Here the workers are forked once, after the record, and
take part numbers from a pipe the parent filled (a read of four bytes is whole, so no
lock is shared), and leave each finished part in a file of its own. The parent waits for
each worker to end, however it ends, and makes in this process every part that no worker
left: a worker that died costs time, never the model, and a part that cannot be made raises
its own error here, as it would in one process. A part is plain JSON data written and read
by the same interpreter, so it goes through :mod:`marshal`, which writes and reads a 0.7
release's tables in a third of the time :mod:`pickle` takes (0.3 s instead of 1.0 s,
measured); shared records stay shared.
"""

from __future__ import annotations

import marshal
import os
import struct
import sys
import tempfile
from pathlib import Path

from fi_compat._recorder.archive import read_release
from fi_compat._recorder.record import record_release
from fi_compat._recorder.resolve import Package
from fi_compat._recorder.signatures import Recorder
from fi_compat._recorder.surface import module_tables, recorded_modules, surface
from fi_compat._records._format import JSONRecord

__all__ = ["default_jobs", "model_release", "parts"]


#: Parts per worker: more parts than workers lets a worker that finishes early take another,
#: fewer keeps the modules of a subpackage together (each worker parses what its part needs).
_PARTS_PER_JOB = 3

#: At most this many parts (their numbers, four bytes each, must fit the pipe's buffer).
_MOST_PARTS = 1024

_NUMBER = struct.Struct("=i")

#: The recorded source (bytes) the record left unparsed below which the default number of
#: jobs finishes the surface in this process: what is left is a fraction of a second's work
#: (0.5.3 leaves 0.5 MB, 0.6.0 0.4 MB), which forking costs more CPU than it saves time
#: (measured on both: 0.1 to 0.3 s more CPU with 2 jobs, and no sooner done).
_LEAST_FORKED = 1 << 20


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


def _left(package: Package) -> int:
    """The source (bytes) of the recorded modules not parsed yet."""
    files = package.source.files
    return sum(
        len(files[name][1]) for name in recorded_modules(package) if not package.parsed(name)
    )


class _Parts:
    """The parts of one model's surface and how to make each: a run of modules' tables."""

    def __init__(self, package: Package, count: int) -> None:
        self.package = package
        self.runs = parts(package, count)
        self._recorder: Recorder | None = None

    def numbers(self) -> list[int]:
        """Every part's number."""
        return list(range(len(self.runs)))

    def make(self, number: int) -> JSONRecord:
        """The tables of run ``number``. Every part a process makes shares one recorder, as
        in one process: a definition re-exported into several of its parts is recorded
        once."""
        if self._recorder is None:
            self._recorder = Recorder(self.package)
        return module_tables(self.package, self.runs[number], self._recorder)


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
                marshal.dump(made, file)
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
                    made[number] = marshal.load(file)  # written just now, by a worker
        return made


def model_release(
    path: Path, release: str | None = None, jobs: int | None = None
) -> tuple[JSONRecord, dict[str, JSONRecord]]:
    """The record and the surface of the release at ``path``, made by ``jobs`` processes
    (default :func:`default_jobs`, or this one alone where the record left less than
    :data:`_LEAST_FORKED` of the recorded source to parse); the same result for any
    ``jobs``.

    With more than one job the workers are forked, so the caller should be a process with
    one thread: the builder's own (``python -m fi_compat._recorder model``), which is where
    fi-compat calls this. A part no worker finished (a worker that died, or a part that
    fails) is made in this process, so its error (a
    :class:`~fi_compat.errors.RecordingError`) is raised here.
    """
    package = Package(read_release(path))  # read once, shared by every worker
    # before any fork: the modules it parses are parsed once, for every worker
    record = record_release(path, release=release, package=package)
    if jobs is None:
        jobs = default_jobs() if _left(package) >= _LEAST_FORKED else 1
    if jobs <= 1 or not hasattr(os, "fork"):
        return record, surface(package)
    todo = _Parts(package, min(jobs * _PARTS_PER_JOB, _MOST_PARTS))
    made = _made_apart(todo, jobs)
    for number in todo.numbers():
        if number not in made:
            made[number] = todo.make(number)
    tables: dict[str, JSONRecord] = {}
    for number in range(len(todo.runs)):
        tables.update(made[number])
    return record, surface(package, tables)
