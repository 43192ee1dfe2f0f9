"""Every file of an engine's source trees, read as the module it is (:func:`read_trees`).

:func:`read_trees` lists every ``*.py``/``*.pyi`` file under one or more roots (a directory
or one file each), names each by its module (the directories above it that hold an
``__init__.py``, and the directories inside them, are its packages), and reads them with
:func:`~fi_compat._engine_source.read.read_module` in rounds: first every file that mentions
``flashinfer``; then, knowing what each module binds from FlashInfer at its top level, every
file that imports such a name, so that a name passed on by an engine's own package (``from
engine.kernels import BatchDecodeWithPagedKVCacheWrapper``, a relative ``from .kernels
import ...``) is followed to FlashInfer, through as many modules as pass it on. What it
returns (:class:`Trees`) is every use found and every file not read, for the judge
(:mod:`fi_compat.upgrade._judge`) to weigh.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from fi_compat._engine_source.binding import Bound
from fi_compat._engine_source.read import BINARY, Diagnostic, Reading, Use, read_module

__all__ = ["MAX_BYTES", "Trees", "read_trees"]

#: A file larger than this is reported, not parsed (engines' largest sources are < 1 MB).
MAX_BYTES = 8 * 1024 * 1024

_MARKER = b"flashinfer"
#: At most this many rounds follow names passed from module to module (a chain of
#: re-exports longer than this is not followed to its end).
_ROUNDS = 8


@dataclass(frozen=True)
class Trees:
    """What :func:`read_trees` found: the uses, the files it could not read, how many files
    it looked at, and the directory the uses' paths are relative to."""

    uses: list[Use]
    diagnostics: list[Diagnostic]
    files: int
    base: Path


@dataclass
class _Source:
    name: str
    module: str
    package: bool
    data: bytes


def _files(root: Path) -> Iterator[tuple[Path, Diagnostic | None]]:
    """Every ``*.py`` file under ``root`` (sorted; symbolic links to directories not
    followed), or a diagnostic for each entry that cannot be listed."""
    if not root.is_dir():
        yield root, None
        return
    problems: list[OSError] = []
    for directory, subdirectories, names in os.walk(root, onerror=problems.append):
        subdirectories.sort()
        base = Path(directory)
        for name in sorted(names):
            if name.endswith((".py", ".pyi")):
                yield base / name, None
        while problems:
            error = problems.pop()
            where = Path(error.filename) if error.filename else base
            yield where, Diagnostic(_relative(where, root, ""), f"not listed: {error.strerror}")


def _relative(path: Path, root: Path, prefix: str) -> str:
    """``path``'s name in the scan: relative to ``root`` (a file root's own name), under
    ``prefix`` (where ``root`` lies under the scan's base, for several roots)."""
    try:
        name = path.relative_to(root).as_posix() if root.is_dir() else path.name
    except ValueError:
        return path.as_posix()
    return f"{prefix}/{name}" if prefix else name


class _Modules:
    """Dotted module names of files: a directory holding an ``__init__.py`` is a package,
    and so is a directory inside one (a namespace package: SGLang ships ``sglang/srt/``
    without an ``__init__.py``); a directory above every package is not."""

    def __init__(self) -> None:
        self.packages: dict[Path, tuple[str, ...]] = {}

    def _package(self, directory: Path) -> tuple[str, ...]:
        """The package ``directory`` is (``("engine", "kernels")``), ``()`` for none."""
        found = self.packages.get(directory)
        if found is None:
            parent = directory.parent
            above = self._package(parent) if parent != directory else ()
            is_package = (
                bool(above)
                or (directory / "__init__.py").is_file()
                or (directory / "__init__.pyi").is_file()
            )
            found = (*above, directory.name) if is_package and parent != directory else ()
            self.packages[directory] = found
        return found

    def name(self, path: Path) -> tuple[str, bool]:
        """``path``'s module name (``""`` where a part is not an identifier) and whether it
        is its package's ``__init__``."""
        package = path.name in ("__init__.py", "__init__.pyi")
        parts = self._package(path.parent) + (() if package else (path.name.split(".")[0],))
        if not parts or not all(part.isidentifier() for part in parts):
            return "", package
        return ".".join(parts), package


def _directory(root: Path) -> Path:
    """The directory a root is: itself, or a file root's directory."""
    return root if root.is_dir() else root.parent


def _base(roots: Sequence[Path]) -> Path:
    """The directory the paths of a scan are relative to: the root (a file root's
    directory), or the deepest directory holding every root."""
    directories = [_directory(root) for root in roots]
    if len(directories) == 1:
        return directories[0]
    return Path(os.path.commonpath([str(d.resolve()) for d in directories]))


def _sources(
    roots: Sequence[Path], base: Path, diagnostics: list[Diagnostic]
) -> tuple[list[_Source], int]:
    """Every file under the roots that can be read (each once), and how many were looked
    at; a file that cannot be read becomes a diagnostic."""
    modules = _Modules()
    sources: list[_Source] = []
    seen: set[tuple[int, int]] = set()
    count = 0
    for root in roots:
        prefix = "" if len(roots) == 1 else _prefix(root, base)
        for path, problem in _files(root):
            if problem is not None:
                diagnostics.append(problem)
                continue
            name = _relative(path, root, prefix)
            try:
                info = path.stat()
            except OSError as error:
                count += 1
                diagnostics.append(Diagnostic(name, f"not readable: {error.strerror or error}"))
                continue
            if (info.st_dev, info.st_ino) in seen:
                continue  # under two roots: read once
            seen.add((info.st_dev, info.st_ino))
            count += 1
            if not stat.S_ISREG(info.st_mode):
                diagnostics.append(Diagnostic(name, "not a regular file: not read"))
                continue
            if info.st_size > MAX_BYTES:
                diagnostics.append(
                    Diagnostic(name, f"{info.st_size} bytes, over the {MAX_BYTES}-byte limit")
                )
                continue
            try:
                data = path.read_bytes()
            except OSError as error:
                diagnostics.append(Diagnostic(name, f"not readable: {error.strerror or error}"))
                continue
            module, package = modules.name(path.absolute())
            sources.append(_Source(name, module, package, data))
    return sources, count


def _prefix(root: Path, base: Path) -> str:
    """Where ``root`` (a file root: its directory) lies under ``base`` (``""`` for there)."""
    directory = _directory(root).resolve()
    try:
        relative = directory.relative_to(base).as_posix()
    except ValueError:
        return directory.as_posix()
    return "" if relative == "." else relative


def _spelled(modules: set[str]) -> set[tuple[bytes, bytes]]:
    """Each module's package and own name, as a file importing it spells them."""
    return {
        (package.encode(), last.encode())
        for package, _, last in (module.rpartition(".") for module in modules)
    }


def _may_import(data: bytes, spelled: set[tuple[bytes, bytes]]) -> bool:
    """Whether ``data`` may import one of the modules: it spells a module's package and its
    own name (``from engine.kernels import``, ``from engine import kernels``), or its own
    name in a relative import (``from .kernels import``)."""
    relative = b"from ." in data
    return any(last in data and (relative or package in data) for package, last in spelled)


def _mentions(names: set[str]) -> re.Pattern[bytes]:
    """What a file that could use one of ``names`` (or star-import them) must contain."""
    spelled = sorted({re.escape(name.encode()) for name in names}, key=len, reverse=True)
    return re.compile(rb"\b(?:" + b"|".join(spelled) + rb")\b|import\s*\*")


#: The trees read last, by their files' contents: judging one tree against several pairs
#: of releases (one ``scan_tree`` per pair, as an engine's CI checks a few bumps) reads and
#: parses it once. A tree whose files changed in any way is read again.
_RECENT: dict[tuple[object, ...], Trees] = {}
_RECENT_SIZE = 4
_RECENT_LOCK = threading.Lock()


def read_trees(*roots: Path) -> Trees:
    """Uses and diagnostics under ``roots`` (each a directory or one file). Paths are
    relative to the root (a file root's own name) for one root, and to the deepest
    directory holding them all for several."""
    base = _base(roots)
    diagnostics: list[Diagnostic] = []
    sources, count = _sources(roots, base, diagnostics)
    key = (
        base,
        count,
        tuple(diagnostics),
        tuple(
            (s.name, s.module, s.package, hashlib.blake2b(s.data, digest_size=16).digest())
            for s in sources
        ),
    )
    with _RECENT_LOCK:
        known = _RECENT.get(key)
    if known is None:
        known = _read(sources, count, base, diagnostics)
        with _RECENT_LOCK:
            _RECENT[key] = known
            while len(_RECENT) > _RECENT_SIZE:
                del _RECENT[next(iter(_RECENT))]  # the oldest
    return Trees(list(known.uses), list(known.diagnostics), known.files, known.base)


def _read(sources: list[_Source], count: int, base: Path, diagnostics: list[Diagnostic]) -> Trees:
    """What :func:`read_trees` finds in ``sources`` (``diagnostics``: the files not read)."""
    readings: dict[int, Reading] = {}

    def read(index: int, exports: dict[str, dict[str, Bound]]) -> None:
        source = sources[index]
        readings[index] = read_module(
            source.data, source.name, source.module, package=source.package, exports=exports
        )

    unread: list[int] = []  # text files not read yet: may import a name passed on
    for index, source in enumerate(sources):
        if _MARKER in source.data:
            read(index, {})
        elif b"\0" in source.data[:8192]:
            diagnostics.append(Diagnostic(source.name, BINARY))
        else:
            unread.append(index)
    exports: dict[str, dict[str, Bound]] = {}
    for _ in range(_ROUNDS):
        # What each module binds from FlashInfer, as the last round read it. A file is read
        # (again) when it imports a name whose binding changed, or imports a module whose
        # bindings changed (or star-imports) and spells one of the changed names.
        found = _exports(sources, readings)
        changed = {
            f"{module}.{name}"
            for module in found.keys() | exports.keys()
            for name in found.get(module, {}).keys() | exports.get(module, {}).keys()
            if found.get(module, {}).get(name) != exports.get(module, {}).get(name)
        }
        exports = found
        if not changed:
            break
        modules = {name.rpartition(".")[0] for name in changed}
        mentions = _mentions({name.rpartition(".")[2] for name in changed})
        for index, reading in list(readings.items()):
            if reading.names & changed or (
                reading.imports & modules and mentions.search(sources[index].data)
            ):
                read(index, exports)
        spelled = _spelled(modules)
        now = [
            index
            for index in unread
            if _may_import(sources[index].data, spelled) and mentions.search(sources[index].data)
        ]
        for index in now:
            read(index, exports)
        unread = [index for index in unread if index not in readings]
    uses: list[Use] = []
    for index in sorted(readings):
        reading = readings[index]
        uses.extend(reading.uses)
        if reading.diagnostic is not None:
            diagnostics.append(reading.diagnostic)
    return Trees(uses, diagnostics, count, base)


def _exports(sources: list[_Source], readings: dict[int, Reading]) -> dict[str, dict[str, Bound]]:
    """What each read module binds from FlashInfer at its top level, by module name (a
    ``.py`` file and its ``.pyi`` stub together)."""
    found: dict[str, dict[str, Bound]] = {}
    for index, reading in readings.items():
        module = sources[index].module
        if module and reading.bound:
            found.setdefault(module, {}).update(reading.bound)
    return found
