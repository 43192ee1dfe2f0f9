"""Which FlashInfer releases fi-compat knows, and where each one's model is read from.

Two places hold a release's model, both written by the one builder
(:mod:`fi_compat._recorder`) and read by the one loader (:mod:`fi_compat._records`):

* the store shipped in this package (``surface.zip``: every release's record and every
  module's names), for the releases fi-compat was built with;
* the user's cache (:func:`fi_compat._local.cache_root`), for a release modelled on this
  machine from its own files: the installed ``flashinfer`` package (on first use), a wheel,
  sdist or tree given by path, or a release fetched from the package index on request
  (``fi-compat record``). Each such release has a folder ``records/<release>/`` holding its
  record, its surface and where they came from (:class:`Local`).

A release set aside by ``FI_COMPAT_UNRECORDED`` is not read from the shipped data: it is
known only once modelled locally, exactly as on the day it was published. When the cache
adds or the switch sets aside a release, the store the loader reads is the shipped store
with those changes, packed once into the cache (``records/store-<key>.zip``) and reused by
every later process.

Nothing here imports torch or FlashInfer; nothing is written to the cache unless a
release is modelled (:func:`build`).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from fi_compat._local import (
    cache_root,
    files_fingerprint,
    installed_fingerprint,
    is_left_out,
    locked,
)
from fi_compat._records._format import SURFACE_VERSION
from fi_compat._surface import DISTRIBUTIONS, FLASHINFER
from fi_compat._version import __version__
from fi_compat.errors import RecordingError

__all__ = [
    "FORMAT",
    "RECORD_COMMAND",
    "Local",
    "build",
    "download",
    "forget",
    "installed",
    "known_releases",
    "local_releases",
    "records_dir",
    "shipped_files",
    "shipped_names",
    "store_source",
]

#: The store's file in this package.
STORE = "surface.zip"
#: What a cached model is made by: a folder whose ``source.json`` names another format was
#: made by another fi-compat's builder and is modelled again.
FORMAT = 1
#: The command that models a release on this machine, for messages.
RECORD_COMMAND = "fi-compat record"

#: The longest the builder may take (a 0.7 release takes about two minutes on 2 cores).
BUILD_TIMEOUT = 1800.0
#: How long a process waits for another that models the same release or packs the store.
LOCK_WAIT = 3600.0

_RECORD = "record.json.gz"
_SURFACE = "surface.json.gz"
_SOURCE = "source.json"


def shipped_files() -> Any:
    """The package folder holding the shipped data (an importlib.resources traversable)."""
    return resources.files("fi_compat._records")


def records_dir() -> Path:
    """Where the models made on this machine are kept."""
    return cache_root() / "records"


def shipped_names() -> tuple[str, ...]:
    """The releases whose model ships in this package, oldest first (set aside or not)."""
    return _shipped()


@functools.cache
def _shipped() -> tuple[str, ...]:
    with shipped_files().joinpath(STORE).open("rb") as handle, zipfile.ZipFile(handle) as store:
        names: list[str] = json.loads(store.read("index.json"))["releases"]
    return tuple(sorted(names, key=Version))


# ----------------------------------------------------------------------------- local models


@dataclass(frozen=True)
class Local:
    """A release modelled on this machine: its cache folder and where its files came from."""

    release: str
    folder: Path
    fingerprint: str
    source: str

    def read(self, member: str) -> Any:
        """A gzip-compressed JSON member of the folder, decoded."""
        return json.loads(gzip.decompress((self.folder / member).read_bytes()))


def _read_local(folder: Path) -> Local | None:
    """The folder's model, or None when it is not one this fi-compat made whole (a folder
    being written, a foreign or damaged one: it is never trusted, only modelled again)."""
    try:
        meta = json.loads((folder / _SOURCE).read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            return None
        release, fingerprint, source = meta["release"], meta["fingerprint"], meta["source"]
        if not all(isinstance(value, str) for value in (release, fingerprint, source)):
            return None
        if release != folder.name or str(Version(release)) != release:
            return None
        if meta.get("surface_version") != SURFACE_VERSION:
            return None
        if not ((folder / _RECORD).is_file() and (folder / _SURFACE).is_file()):
            return None
    except (OSError, ValueError, KeyError, TypeError, InvalidVersion):
        return None
    return Local(release, folder, fingerprint, source)


@functools.cache
def local_releases() -> Mapping[str, Local]:
    """Release -> its model made on this machine, for every whole one in the cache."""
    root = records_dir()
    found: dict[str, Local] = {}
    try:
        folders = sorted(path for path in root.iterdir() if path.is_dir())
    except OSError:
        return found
    for folder in folders:
        local = _read_local(folder)
        if local is not None:
            found[local.release] = local
    return found


@functools.cache
def known_releases() -> tuple[str, ...]:
    """Every release fi-compat can answer for, oldest first: the shipped ones not set aside
    by ``FI_COMPAT_UNRECORDED``, and those modelled on this machine."""
    shipped = [release for release in _shipped() if not is_left_out(release)]
    extra = [release for release in local_releases() if _is_local(release)]
    return tuple(sorted({*shipped, *extra}, key=Version))


def _is_local(release: str) -> bool:
    return release not in _shipped() or is_left_out(release)


def forget() -> None:
    """Drop what this module read of the cache, after a model was added to it."""
    local_releases.cache_clear()
    known_releases.cache_clear()


# ----------------------------------------------------------------------------- the store


def store_source() -> Any:
    """What the loader's store reads: the shipped ``surface.zip``, or, when a release is
    modelled here or set aside, the shipped store with those changes (packed once into the
    cache, then reused)."""
    shipped = _shipped()
    local = [release for release in known_releases() if _is_local(release)]
    dropped = [release for release in shipped if is_left_out(release)]
    if not local and not dropped:
        return shipped_files().joinpath(STORE)
    key = hashlib.sha256(
        json.dumps(
            [__version__, _shipped_store_size(), dropped]
            + [[r, local_releases()[r].fingerprint] for r in local]
        ).encode()
    ).hexdigest()[:16]
    target = records_dir() / f"store-{key}.zip"
    if not target.is_file():
        with locked(records_dir() / ".lock-store", LOCK_WAIT):
            if not target.is_file():  # another process may have packed it meanwhile
                _pack_store(target, dropped, local)
    return target


def _shipped_store_size() -> int:
    with shipped_files().joinpath(STORE).open("rb") as handle:
        size: int = handle.seek(0, os.SEEK_END)
    return size


def _pack_store(target: Path, dropped: list[str], local: list[str]) -> None:
    """Pack the merged store in the builder's process (about 25 s and a few GB for every
    shipped release, which the caller's process never holds), then keep only it."""
    command = [sys.executable, "-m", "fi_compat._recorder", "store", str(target)]
    command += [f"--drop={release}" for release in dropped]
    command += [f"--add={local_releases()[release].folder / _SURFACE}" for release in local]
    _run(command, f"pack the store of {', '.join(local + dropped)}")
    for old in target.parent.glob("store-*.zip"):  # one merged store is enough
        if old != target:
            old.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- building


def installed() -> tuple[str, Path] | None:
    """The installed ``flashinfer`` release and its package folder, found without importing
    it; None when none is installed, its folder cannot be found, or it reports no release
    (a source build's ``0.0.0+unknown`` names none)."""
    version = None
    for distribution in DISTRIBUTIONS:
        try:
            version = importlib.metadata.version(distribution)
        except Exception:  # not installed, or broken metadata: try the next name
            continue
        break
    try:
        spec = importlib.util.find_spec(FLASHINFER)
    except Exception:  # a broken finder or a blocked import: nothing to read
        return None
    if version is None or spec is None or not spec.submodule_search_locations:
        return None
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    if parsed.local is not None or parsed.release == (0, 0, 0):
        return None
    return str(parsed), Path(next(iter(spec.submodule_search_locations)))


def build(
    path: Path, release: str | None = None, *, source: str | None = None
) -> tuple[Local, bool]:
    """Model the release whose files are at ``path`` (a wheel, an sdist, or a folder holding
    the ``flashinfer`` package) into the cache, replacing an older model of it. The builder
    runs in a process of its own (``python -m fi_compat._recorder``): reading a recent
    release takes a minute or two and a few GB, which the caller's process never holds.
    Returns the model and whether this call made it (False: another process had modelled
    the same files, and this one waited for it).

    Raises
    ------
    RecordingError
        The files hold no ``flashinfer`` package, their release cannot be told, or the
        builder failed (its reason is the message).
    """
    tree = path.parent if path.is_dir() and path.name == FLASHINFER else path
    try:
        fingerprint = (
            installed_fingerprint(tree / FLASHINFER)
            if (tree / FLASHINFER).is_dir()
            else files_fingerprint(tree)
        )
    except OSError as error:
        raise RecordingError(
            f"expected a wheel, an sdist or a tree holding flashinfer/ at {path}; found "
            f"{type(error).__name__}: {error.strerror or error}. Fix: give the path of the "
            f"release's files"
        ) from error
    try:
        with locked(records_dir() / f".lock-{fingerprint}", LOCK_WAIT):
            # Another process (an engine's other rank) may have modelled these files meanwhile.
            forget()
            for local in local_releases().values():
                if local.fingerprint == fingerprint and release in (None, local.release):
                    return local, False
            return _build(path, tree, release, fingerprint, source), True
    except OSError as error:
        raise RecordingError(
            f"expected a writable cache at {records_dir()}; found {type(error).__name__}: "
            f"{error.strerror or error}. Fix: set FI_COMPAT_CACHE_DIR to a writable folder"
        ) from error


def _build(
    path: Path, tree: Path, release: str | None, fingerprint: str, source: str | None
) -> Local:
    scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=_made(records_dir())))
    try:
        name = _run_builder(tree, scratch, release)
        meta = {
            "format": FORMAT,
            "release": name,
            "fingerprint": fingerprint,
            "source": source or str(path),
            "surface_version": SURFACE_VERSION,
            "fi_compat": __version__,
        }
        (scratch / _SOURCE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        scratch.chmod(0o755)
        folder = records_dir() / name
        if folder.exists():
            shutil.rmtree(folder, ignore_errors=True)
        os.replace(scratch, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    forget()
    local = local_releases().get(name)
    if local is None:
        raise RecordingError(
            f"expected the model of {name} at {folder} to read back; found it incomplete "
            f"(another process replacing it?). Fix: run `{RECORD_COMMAND}` again"
        )
    return local


def _run_builder(tree: Path, out: Path, release: str | None) -> str:
    command = [sys.executable, "-m", "fi_compat._recorder", "model", str(tree), str(out)]
    if release is not None:
        command.append(f"--release={release}")
    return _run(command, f"model {tree}").strip().splitlines()[-1]


def _run(command: list[str], what: str) -> str:
    """Run the builder; its standard output, or its reason as a :class:`RecordingError`."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise RecordingError(
            f"expected the builder to {what}; found {type(error).__name__}: {error}. "
            f"Fix: run `{RECORD_COMMAND}` and read its output"
        ) from error
    if done.returncode != 0 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RecordingError(last.removeprefix("RecordingError: "))
    return done.stdout


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def download(release: str) -> Path:
    """The release's wheel (or sdist) from the package index, fetched once into the cache
    with ``pip download --no-deps``.

    Raises
    ------
    RecordingError
        pip could not fetch it (no network, no such release): the message names the
        command to run elsewhere and the path to give instead.
    """
    folder = cache_root() / "downloads" / release
    found = sorted(folder.glob("*.whl")) + sorted(folder.glob("*.tar.gz"))
    if found:
        return found[0]
    requirement = f"{DISTRIBUTIONS[0]}=={release}"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d"]
    scratch = Path(tempfile.mkdtemp(prefix=".download-", dir=_made(folder.parent)))
    try:
        done = subprocess.run(
            [*command, str(scratch), requirement],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        files = sorted(scratch.glob("*.whl")) + sorted(scratch.glob("*.tar.gz"))
        if done.returncode != 0 or not files:
            last = (done.stderr.strip().splitlines() or ["no file was downloaded"])[-1]
            raise RecordingError(
                f"expected pip to download {requirement}; found: {last}. Fix: on a machine "
                f"that reaches the package index, run `pip download --no-deps "
                f"{requirement} -d DIR`, then `{RECORD_COMMAND} --path DIR/<file>`"
            )
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / files[0].name
        os.replace(files[0], target)
        return target
    except (OSError, subprocess.SubprocessError) as error:
        raise RecordingError(
            f"expected to run pip to download {requirement}; found {error}. Fix: run `pip "
            f"download --no-deps {requirement} -d DIR`, then `{RECORD_COMMAND} --path "
            f"DIR/<file>`"
        ) from error
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
