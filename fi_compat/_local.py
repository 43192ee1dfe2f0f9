"""What fi-compat keeps on this machine, and which shipped releases it is told to set aside.

fi-compat ships a model of every FlashInfer release it knew when it was built. A release
published later is modelled on the user's machine from the release's own files (records,
:mod:`fi_compat._records`) and measured there by running its own Python on the CPU
(:mod:`fi_compat._measured`); both results are kept in one cache directory, per release and
per installed files, so the work is done once per release and machine.

``FI_COMPAT_CACHE_DIR``
    The cache directory; else ``$XDG_CACHE_HOME/fi-compat``, else ``~/.cache/fi-compat``.
``FI_COMPAT_UNRECORDED``
    Comma- or space-separated shipped releases to treat as unrecorded: fi-compat then
    answers for them from their own files, exactly as on the day a release comes out
    (the proof that the day-one path equals the shipped data, and a way to re-measure a
    release on the user's own machine). Names compare as PEP 440 versions.

Nothing here imports torch or FlashInfer.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from packaging.version import Version

__all__ = [
    "CACHE_ENV",
    "DISTRIBUTION_PREFIX",
    "SETTLED_NS",
    "UNRECORDED_ENV",
    "Readings",
    "cache_root",
    "distribution_folders",
    "files_fingerprint",
    "installed_fingerprint",
    "is_left_out",
    "left_out",
    "locked",
    "settled",
]

#: The environment variable naming the cache directory.
CACHE_ENV = "FI_COMPAT_CACHE_DIR"
#: The environment variable naming the shipped releases to treat as unrecorded.
UNRECORDED_ENV = "FI_COMPAT_UNRECORDED"
#: How an installed flashinfer-python's ``.dist-info`` folder's name starts.
DISTRIBUTION_PREFIX = "flashinfer_python-"

T = TypeVar("T")


def cache_root() -> Path:
    """The directory fi-compat keeps what it builds and measures on this machine in (not
    created here)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "fi-compat"


def left_out() -> frozenset[Version]:
    """The releases :data:`UNRECORDED_ENV` names, as versions; a word that is not a PEP 440
    version is ignored (it names no release)."""
    return _parse(os.environ.get(UNRECORDED_ENV, ""))


@functools.cache
def _parse(text: str) -> frozenset[Version]:
    found: set[Version] = set()
    for word in text.replace(",", " ").split():
        try:
            found.add(Version(word))
        except ValueError:  # InvalidVersion, or a number too long for int()
            continue
    return frozenset(found)


def is_left_out(release: str) -> bool:
    """True when ``release`` is one :data:`UNRECORDED_ENV` names."""
    wanted = left_out()
    if not wanted:
        return False
    try:
        return Version(release) in wanted
    except ValueError:  # InvalidVersion, or a number too long for int()
        return False


def files_fingerprint(path: Path) -> str:
    """A short digest of what a release's files hold: a wheel's or sdist's bytes, or every
    ``.py`` file of a tree (the installed ``flashinfer`` package), names and contents.
    Equal fingerprints mean the same Python ran; a measurement or record is kept under it."""
    digest = hashlib.sha256()
    if path.is_dir():
        for file in sorted(path.rglob("*.py")):
            digest.update(file.relative_to(path).as_posix().encode())
            digest.update(b"\0")
            digest.update(file.read_bytes())
            digest.update(b"\0")
    else:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def installed_fingerprint(package: Path, folders: list[Path] | None = None) -> str:
    """:func:`files_fingerprint` of an installed ``flashinfer`` package, read cheaply where
    pip recorded it: the digest of its distribution's ``RECORD`` (which lists the hash of
    every installed file), so a process start reads one small file; a tree without one (a
    checkout on ``PYTHONPATH``) is hashed file by file. ``folders``: the
    :func:`distribution_folders` of the package's folder, where the caller has them."""
    for info in distribution_folders(package.parent) if folders is None else folders:
        record = info / "RECORD"
        try:
            stamp = os.stat(record)
        except OSError:
            continue
        if stat.S_ISREG(stamp.st_mode):
            return _record_digest(
                str(record), stamp.st_ino, stamp.st_size, stamp.st_mtime_ns, stamp.st_ctime_ns
            )
    return files_fingerprint(package)


@functools.lru_cache(maxsize=16)
def _record_digest(record: str, inode: int, size: int, modified: int, changed: int) -> str:
    """The digest of a ``RECORD`` file, hashed once per process for each state of the file
    (a process asks on every answer about an unmeasured release; pip writes ``RECORD`` as a
    new file on every install, so a changed one is never taken for the old)."""
    return "record-" + hashlib.sha256(Path(record).read_bytes()).hexdigest()[:16]


#: How long before a folder or file is read its modification time must lie for what was read
#: to be kept under that time: any change made after the reading then gives it another time,
#: on any file system's clock (the coarsest keep two seconds). A reading of something changed
#: more recently is used once and not kept.
SETTLED_NS = 2_000_000_000


def settled(modified_ns: int) -> bool:
    """Whether something last modified at ``modified_ns`` (``st_mtime_ns``) changed more than
    :data:`SETTLED_NS` ago, so that what is read of it now can be kept under that time."""
    return time.time_ns() - modified_ns > SETTLED_NS


class Readings(Generic[T]):
    """What was read of a few files or folders, each kept under the state it had when read
    (fields of its ``os.stat``) and given again while the state is the same; a reading is
    kept only when the modification time had settled (:func:`settled`), so that no change
    made after it can leave the state as it was. Holds at most ``most`` readings: past that
    it is emptied, and read again as asked."""

    def __init__(self, most: int = 16) -> None:
        self._kept: dict[str, tuple[tuple[int, ...], T]] = {}
        self._most = most

    def read(
        self, key: str, state: tuple[int, ...], modified_ns: int, reader: Callable[[], T]
    ) -> T:
        """What was read of ``key`` in ``state`` (its modification time ``modified_ns``),
        else what ``reader()`` reads now (whose exceptions go to the caller)."""
        kept = self._kept.get(key)
        if kept is not None and kept[0] == state:
            return kept[1]
        value = reader()
        if settled(modified_ns):
            if len(self._kept) >= self._most:
                self._kept.clear()
            self._kept[key] = (state, value)
        return value

    def clear(self) -> None:
        """Forget every reading."""
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)


#: The filtered listings :func:`distribution_folders` read, kept per folder and its
#: modification time.
_LISTINGS: Readings[tuple[str, ...]] = Readings()


def distribution_folders(site: Path) -> list[Path]:
    """The ``flashinfer_python-*.dist-info`` folders in ``site``, sorted by name (none where
    ``site`` cannot be listed). A process asks on every answer about an unmeasured release,
    and a listing of site-packages with its filter cost about a third of a millisecond, so
    the names are kept for as long as the folder's modification time is the one it had when
    listed (a dist-info folder made or removed changes it; :class:`Readings`)."""
    key = str(site)
    try:
        modified = os.stat(key).st_mtime_ns
        names = _LISTINGS.read(key, (modified,), modified, lambda: _distributions_in(key))
    except OSError:
        return []
    return [site / name for name in names]


def _distributions_in(folder: str) -> tuple[str, ...]:
    return tuple(
        sorted(
            name
            for name in os.listdir(folder)
            if name.startswith(DISTRIBUTION_PREFIX) and name.endswith(".dist-info")
        )
    )


@contextlib.contextmanager
def locked(path: Path, wait: float) -> Iterator[bool]:
    """Hold the lock file ``path`` (True), or give up after ``wait`` seconds (False): the
    processes of one engine (a rank each) that need the same release modelled or measured
    do it once, the others wait and read the result. Where ``fcntl`` is missing (Windows),
    nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - POSIX here
        yield True
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.1)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
