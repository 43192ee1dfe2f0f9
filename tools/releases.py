"""Release files from the package registry, downloaded once into a cache and unpacked once.

Both users of real releases go through here: the recorder (``make record``), which reads a
flashinfer-python wheel, or the sdist of a release that has none, and the real-release
test matrix (``tests/support/release_harness.py``), which unpacks wheels and imports them. A
wheel is fetched as the registry's simple index lists it, the one ``pip download`` would choose
(checked against its published sha256); anything else, and any wheel that way cannot give, comes
from ``pip download --no-deps``. Files are kept outside the repository, under
``$FI_COMPAT_RELEASE_CACHE``, else ``$XDG_CACHE_HOME/fi-compat/releases``, else
``~/.cache/fi-compat/releases``: ``downloads/`` holds the files as published,
``extracted/<wheel name>/`` each unpacked wheel. Files appear in both whole or not at all
(they are written elsewhere and renamed), so concurrent runs can share one cache.

Every file actually downloaded is announced on the ``tools.releases`` logger at INFO, one
line with its size and the time it took, so a first run that waits says what for (the
suite's ``tests/support/downloads.py`` prints these lines as they come).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.tags import Tag, compatible_tags, cpython_tags, sys_tags
from packaging.utils import (
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from fi_compat._recorder.archive import parse_release_file

__all__ = [
    "LOGGER",
    "DownloadError",
    "RegistryUnreachableError",
    "ReleaseCache",
    "cache_root",
    "describe_size",
    "parse_release_file",
]

#: Where each download is announced (INFO, one line a file).
LOGGER = logging.getLogger(__name__)

#: One download of a file at a time in this process: threads measuring the same release
#: (the equivalence and the measurement of one path) wait for the first instead of racing it.
_DOWNLOADING: dict[tuple[str, str], threading.Lock] = {}
_DOWNLOADING_GUARD = threading.Lock()

#: Fragments of pip's output that mean the package registry could not be reached.
_NETWORK_ERRORS = (
    "NewConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "ProxyError",
    "SSLError",
)


class RegistryUnreachableError(RuntimeError):
    """``pip download`` could not reach the package registry."""


class DownloadError(RuntimeError):
    """``pip download`` reached the registry and still failed."""


def cache_root() -> Path:
    """Where release files are kept between runs (never in the repository)."""
    explicit = os.environ.get("FI_COMPAT_RELEASE_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "fi-compat" / "releases"


def _pinned(requirement: str) -> tuple[NormalizedName, Version]:
    name, separator, version = requirement.partition("==")
    if not separator:
        raise ValueError(f"expected a pinned 'name==version' requirement, got {requirement!r}")
    return canonicalize_name(name), Version(version)


class ReleaseCache:
    """Downloads and unpacks pinned requirements into one cache directory."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else cache_root()
        self.downloads = self.root / "downloads"
        self.extracted = self.root / "extracted"

    def cached(self, requirement: str, *, wheel_only: bool) -> Path | None:
        """The file of a pinned ``name==version`` already downloaded: a wheel, else an sdist."""
        if not self.downloads.is_dir():
            return None
        wanted = _pinned(requirement)
        found = sorted(
            (not path.name.endswith(".whl"), path.name, path)
            for path in self.downloads.iterdir()
            if path.is_file()
            and parse_release_file(path.name) == wanted
            and (path.name.endswith(".whl") or not wheel_only)
        )
        return found[0][2] if found else None

    def download(self, requirement: str, *, wheel_only: bool, python: str | None = None) -> Path:
        """The file of a pinned ``name==version``, downloaded once into the cache.

        With ``wheel_only``, only a wheel will do (to unpack and import it); otherwise a
        wheel is preferred and an sdist taken when the release has no wheel (to read it).
        ``python`` (``"3.12"``) asks for the wheel published for that Python instead of the
        running one's: pip filters a release by the running interpreter, so the Python 3.10
        run could not fetch an engine that needs a newer Python, although it only reads its
        files. A pure-Python wheel is the same file whichever Python asks; ``python`` implies
        ``wheel_only``.

        Raises
        ------
        RegistryUnreachableError
            pip could not reach the registry (the caller may skip, saying so).
        DownloadError
            pip reached it and failed anyway (a real failure).
        """
        if python is not None:
            wheel_only = True
        with _DOWNLOADING_GUARD:
            lock = _DOWNLOADING.setdefault((str(self.root), requirement), threading.Lock())
        with lock:
            return self._download(requirement, wheel_only=wheel_only, python=python)

    def _download(self, requirement: str, *, wheel_only: bool, python: str | None) -> Path:
        cached = self.cached(requirement, wheel_only=wheel_only)
        if cached is not None:
            return cached
        self.downloads.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=".download-", dir=self.downloads) as scratch:
            # The wheel straight from the registry's listing (a second or two less than pip's
            # own start-up and resolution per file); pip, as before, for anything else.
            done = _fetch_wheel(requirement, Path(scratch), python)
            if done is None:
                done = _pip_download(requirement, Path(scratch), wheel_only=True, python=python)
            listing = ""  # why the registry's listing did not give the sdist
            if done.returncode != 0 and not wheel_only:
                # No wheel, and the file is all that is wanted: the sdist as the registry
                # lists it, checked against its published digest. pip would first build the
                # sdist's metadata in an isolated environment (about 50 s for a 0.2.x
                # release, installing its build requirements), which nothing here reads;
                # some old sdists cannot be built here at all (0.2.6 lacks a directory its
                # setup.py lists).
                fetched = _fetch_sdist(requirement, Path(scratch), done)
                listing = fetched.stderr.removeprefix(done.stderr)
                done = fetched
            for isolated in (True, False):
                if done.returncode == 0 or wheel_only:
                    break
                # Else pip's own way, in an isolated environment, then in this one: some
                # sdists pin build requirements that are gone from the registry (0.4.x pins an
                # apache-tvm-ffi pre-release), and preparing their metadata here works.
                done = _pip_download(
                    requirement, Path(scratch), wheel_only=False, isolated=isolated, python=python
                )
            if done.returncode != 0 and listing:
                done = subprocess.CompletedProcess(
                    done.args, done.returncode, done.stdout, done.stderr + listing
                )
            for path in Path(scratch).iterdir():
                if path.is_file():
                    _announce(path, time.monotonic() - started)
                    os.replace(path, self.downloads / path.name)  # whole files only
        cached = self.cached(requirement, wheel_only=wheel_only)
        if done.returncode == 0 and cached is not None:
            return cached
        output = done.stdout + done.stderr
        network = [line for line in output.splitlines() if any(f in line for f in _NETWORK_ERRORS)]
        if network:
            raise RegistryUnreachableError(
                f"pip download {requirement} could not reach the package registry "
                f"({network[-1].strip()})"
            )
        raise DownloadError(f"pip download {requirement} failed ({done.returncode}):\n{output}")

    def extract(self, wheel: Path) -> Path:
        """The wheel unpacked under ``extracted/<wheel name>``, once (atomically)."""

        def unzip(scratch: Path) -> None:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(scratch)

        return self.unpacked(wheel.name.removesuffix(".whl"), wheel.name, unzip)

    def unpacked(self, name: str, origin: str, fill: Callable[[Path], None]) -> Path:
        """``extracted/<name>``, filled once by ``fill(scratch)`` and renamed into place.

        A directory is complete when it holds ``.complete`` (naming ``origin``); a
        half-done one never is, and a run that loses the race to another uses its copy.
        Whatever ``fill`` raises propagates, and the scratch directory is removed.
        """
        target = self.extracted / name
        if (target / ".complete").is_file():
            return target
        self.extracted.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=self.extracted))
        scratch.chmod(0o755)
        try:
            fill(scratch)
            (scratch / ".complete").write_text(origin + "\n", encoding="utf-8")
            try:
                scratch.rename(target)
            except OSError:
                # Another run finished the same extraction first; use its copy.
                if not (target / ".complete").is_file():
                    raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return target

    def site(self, template: Path) -> Path:
        """``site/`` holding a fresh copy of ``template`` as ``sitecustomize.py``."""
        site = self.root / "site"
        site.mkdir(parents=True, exist_ok=True)
        text = template.read_text(encoding="utf-8")
        destination = site / "sitecustomize.py"
        if not destination.is_file() or destination.read_text(encoding="utf-8") != text:
            with tempfile.NamedTemporaryFile("w", dir=site, delete=False, suffix=".tmp") as tmp:
                tmp.write(text)
            os.replace(tmp.name, destination)
        return site


def _announce(path: Path, seconds: float) -> None:
    size = path.stat().st_size
    LOGGER.info(
        "downloaded %s (%s) in %.1f s",
        path.name,
        describe_size(size),
        seconds,
        extra={"download": (path.name, size, seconds)},
    )


def describe_size(size: int) -> str:
    """A byte count as people read it: ``812.0 kB``, ``5.1 MB``, ``1.2 GB`` (powers of 1000)."""
    if size < 1000:
        return f"{size} B"
    for scale, unit in ((1e3, "kB"), (1e6, "MB")):
        if size < scale * 999.95:
            return f"{size / scale:.1f} {unit}"
    return f"{size / 1e9:.1f} GB"


#: The registry's simple index, asked for its JSON form (PEP 691): a project's files, each
#: with its URL and digest.
_SIMPLE = "https://pypi.org/simple/{name}/"
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


def _listing(name: str) -> list[dict[str, Any]]:
    """The files the registry's simple index lists for project ``name`` (PEP 691 JSON)."""
    request = urllib.request.Request(_SIMPLE.format(name=name), headers={"Accept": _SIMPLE_JSON})
    with urllib.request.urlopen(request, timeout=60) as response:
        files: list[dict[str, Any]] = json.load(response)["files"]
    return files


def _wheel_tags(python: str | None) -> list[Tag]:
    """The tags a wheel may carry, best first, as pip ranks them for the running interpreter
    or, with ``python`` (``"3.12"``), for that CPython on this platform (``--python-version``)."""
    if python is None:
        return list(sys_tags())
    version = tuple(int(part) for part in python.split("."))
    interpreter = "cp" + "".join(str(part) for part in version[:2])
    return [
        *cpython_tags(python_version=version),
        *compatible_tags(python_version=version, interpreter=interpreter),
    ]


def _fetch_wheel(
    requirement: str, destination: Path, python: str | None
) -> subprocess.CompletedProcess[str] | None:
    """The release's wheel that pip would choose (the best-ranked tag this interpreter, or
    ``python``, accepts; not yanked before yanked; a Requires-Python that admits it), fetched
    as the registry's simple index lists it and checked against its published sha256 into
    ``destination``; None when there is no such wheel or anything fails, for pip to try."""
    wanted = _pinned(requirement)
    try:
        ranks = {tag: rank for rank, tag in reversed(list(enumerate(_wheel_tags(python))))}
        target = Version(python or platform.python_version())
        candidates = []
        for item in _listing(wanted[0]):
            filename = str(item["filename"])
            if not filename.endswith(".whl"):
                continue
            name, version, build, tags = parse_wheel_filename(filename)
            accepted = [ranks[tag] for tag in tags if tag in ranks]
            admits = item.get("requires-python")
            if (name, version) != wanted or not accepted:
                continue
            if admits and target not in SpecifierSet(str(admits)):
                continue
            yanked = item.get("yanked") not in (None, False)  # True, or the reason why
            candidates.append((yanked, min(accepted), _negated(build), item))
        if not candidates:
            return None
        item = min(candidates, key=lambda found: found[:3])[3]
        if not _download_listed(item, destination, timeout=300):
            return None
    except (OSError, ValueError, KeyError, TypeError, InvalidWheelFilename):
        return None
    return subprocess.CompletedProcess(["GET", str(item["url"])], 0, "", "")


def _negated(build: tuple[int, str] | tuple[()]) -> tuple[int, str]:
    """A sort key that puts the highest build tag first (pip's preference), none last."""
    return (-build[0], build[1]) if build else (1, "")


def _download_listed(item: dict[str, Any], destination: Path, *, timeout: float) -> bool:
    """Stream the file a simple-index entry lists into ``destination``: True when it matches
    the entry's sha256. A file that does not match, or whose download raised (the error
    propagates), is removed: nothing half-written or tampered is kept."""
    published = str(item["hashes"]["sha256"])
    path = destination / Path(str(item["filename"])).name
    digest = hashlib.sha256()
    try:
        with (
            urllib.request.urlopen(str(item["url"]), timeout=timeout) as response,
            path.open("wb") as out,
        ):
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if digest.hexdigest() != published:
        path.unlink()
        return False
    return True


def _fetch_sdist(
    requirement: str, destination: Path, failed: subprocess.CompletedProcess[str]
) -> subprocess.CompletedProcess[str]:
    """The release's sdist fetched as the registry's simple index lists it and checked
    against its published sha256; ``failed`` again (with the reason added) otherwise."""
    wanted = _pinned(requirement)
    try:
        sdist = next(
            item
            for item in _listing(wanted[0])
            if not item["filename"].endswith(".whl")
            and parse_release_file(item["filename"]) == wanted
        )
        matched = _download_listed(sdist, destination, timeout=120)
    except (OSError, ValueError, KeyError, TypeError, StopIteration) as error:
        note = f"\nthe registry's simple index did not give the sdist either: {error!r}"
        return subprocess.CompletedProcess(failed.args, 1, failed.stdout, failed.stderr + note)
    if not matched:
        note = f"\n{sdist['filename']} from {sdist['url']} does not match its published sha256"
        return subprocess.CompletedProcess(failed.args, 1, failed.stdout, failed.stderr + note)
    return subprocess.CompletedProcess(failed.args, 0, failed.stdout, "")


def _pip_download(
    requirement: str,
    destination: Path,
    *,
    wheel_only: bool,
    isolated: bool = True,
    python: str | None = None,
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", "download", "--no-deps"]
    command += ["--only-binary", ":all:"] if wheel_only else ["--no-binary", ":none:"]
    if python is not None:
        command += ["--python-version", python]
    if not isolated:
        command.append("--no-build-isolation")
    command += [
        "--disable-pip-version-check",
        "--timeout",
        "30",
        "--retries",
        "2",
        "--dest",
        str(destination),
        requirement,
    ]
    return subprocess.run(command, capture_output=True, text=True, check=False)
