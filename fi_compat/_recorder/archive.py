"""The ``flashinfer`` package of one release, read as text out of a wheel, an sdist or a tree.

Nothing is imported or unpacked to disk: the recorder needs the ``.py`` files only, keyed
by module name, and reads the same release the same way whatever form it comes in.
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from fi_compat._surface import DISTRIBUTIONS, FLASHINFER
from fi_compat.errors import RecordingError

__all__ = ["Source", "parse_release_file", "read_release", "version_from_filename"]

_DISTRIBUTIONS = frozenset(canonicalize_name(name) for name in DISTRIBUTIONS)
#: Path fragment every file of the package has inside an archive.
_PACKAGE_DIR = f"{FLASHINFER}/"
_PACKAGE_INIT = (FLASHINFER, "__init__.py")


@dataclass(frozen=True)
class Source:
    """The ``flashinfer`` package of one release: module name -> (path in the release, text)."""

    files: dict[str, tuple[str, str]]

    def is_module(self, name: str) -> bool:
        """``name`` is a module or package of the release."""
        return name in self.files


def _module_name(relative: PurePosixPath) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _collect(paths: Iterator[tuple[str, bytes]]) -> Source:
    """Keep the ``.py`` files of the shallowest ``flashinfer`` package found."""
    entries = [(PurePosixPath(path), data) for path, data in paths if path.endswith(".py")]
    roots = sorted(
        (p.parent.parent for p, _ in entries if p.parts[-2:] == _PACKAGE_INIT),
        key=lambda p: (len(p.parts), str(p)),
    )
    if not roots:
        raise RecordingError(f"no {'/'.join(_PACKAGE_INIT)} found in the release")
    root = roots[0]
    files: dict[str, tuple[str, str]] = {}
    for path, data in entries:
        try:
            relative = path.relative_to(root)
        except ValueError:
            continue
        if relative.parts[0] != FLASHINFER:
            continue
        files[_module_name(relative)] = (str(relative), data.decode("utf-8", "replace"))
    return Source(files)


def _read_wheel(path: Path) -> Source:
    with zipfile.ZipFile(path) as archive:
        return _collect(
            (info.filename, archive.read(info))
            for info in archive.infolist()
            if info.filename.endswith(".py") and _PACKAGE_DIR in info.filename
        )


def _read_sdist(path: Path) -> Source:
    def members() -> Iterator[tuple[str, bytes]]:
        with tarfile.open(path) as archive:
            for member in archive.getmembers():
                if not member.name.endswith(".py") or _PACKAGE_DIR not in member.name:
                    continue
                if not (member.isfile() or member.issym()):
                    continue
                try:
                    handle = archive.extractfile(member)
                except KeyError:  # a symlink pointing outside the archive
                    continue
                if handle is not None:
                    yield member.name, handle.read()

    return _collect(members())


def _read_tree(path: Path) -> Source:
    # A directory holding the package (site-packages, a checkout): read only the package.
    package = path / FLASHINFER
    top = package if (package / "__init__.py").is_file() else path

    def walk() -> Iterator[tuple[str, bytes]]:
        for file in sorted(top.rglob("*.py")):
            if file.is_file():
                yield file.relative_to(path).as_posix(), file.read_bytes()

    return _collect(walk())


def read_release(path: Path) -> Source:
    """Read the ``flashinfer`` package out of a wheel, an sdist or a source tree."""
    if path.is_dir():
        return _read_tree(path)
    if path.name.endswith((".whl", ".zip")):
        return _read_wheel(path)
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        return _read_sdist(path)
    raise RecordingError(f"expected a .whl, .tar.gz or a directory; found {path.name}")


def parse_release_file(name: str) -> tuple[NormalizedName, Version] | None:
    """The distribution and version a wheel or sdist file name declares; None for others."""
    try:
        if name.endswith(".whl"):
            distribution, version, _build, _tags = parse_wheel_filename(name)
            return distribution, version
        return parse_sdist_filename(name)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None


def version_from_filename(name: str) -> str | None:
    """The release version in a FlashInfer wheel or sdist file name, or None."""
    parsed = parse_release_file(name)
    if parsed is None or parsed[0] not in _DISTRIBUTIONS:
        return None
    return str(parsed[1])
