"""A scan (:func:`scan_tree`): the files of the scanned trees, read as the modules they are.

:func:`scan_tree` walks the trees (:func:`scan_paths`), has each use judged against the two
releases (:mod:`fi_compat.upgrade._judge`) and returns the :class:`ScanResult` the renderers
(:mod:`fi_compat.upgrade._report`) write.

:func:`scan_paths` lists every ``*.py``/``*.pyi`` file under one or more roots (a
directory or one file each), names each by its module (the directories above it that hold
an ``__init__.py``, and the directories inside them, are its packages), and reads them with
:func:`read_module` in rounds: first every file that mentions ``flashinfer``; then, knowing
what each module binds from FlashInfer at its top level, every file that imports such a
name, so that a name passed on by an engine's own package (``from engine.kernels import
BatchDecodeWithPagedKVCacheWrapper``, a relative ``from .kernels import ...``) is followed
to FlashInfer, through as many modules as pass it on.
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
from typing import Any, cast

from fi_compat._arguments import describe, require_bool, require_instance, require_str
from fi_compat._frozen import picklable
from fi_compat.errors import InvalidArgumentError, explain
from fi_compat.upgrade._binding import Bound
from fi_compat.upgrade._history import history
from fi_compat.upgrade._judge import Finding, judge
from fi_compat.upgrade._kinds import Category
from fi_compat.upgrade._scan import Diagnostic, Reading, Use, read_module

__all__ = ["MAX_BYTES", "ScanResult", "Scanned", "scan_paths", "scan_tree"]

#: A file larger than this is reported, not parsed (engines' largest sources are < 1 MB).
MAX_BYTES = 8 * 1024 * 1024

_MARKER = b"flashinfer"
#: At most this many rounds follow names passed from module to module (a chain of
#: re-exports longer than this is not followed to its end).
_ROUNDS = 8
_CATEGORY_ORDER = {category: index for index, category in enumerate(Category)}


@dataclass(frozen=True)
class Scanned:
    """What :func:`scan_paths` found: the uses, the files it could not read, how many files
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


#: The trees scanned last, by their files' contents: judging one tree against several pairs
#: of releases (one ``scan_tree`` per pair, as an engine's CI checks a few bumps) reads and
#: parses it once. A tree whose files changed in any way is read again.
_RECENT: dict[tuple[object, ...], Scanned] = {}
_RECENT_SIZE = 4
_RECENT_LOCK = threading.Lock()


def scan_paths(*roots: Path) -> Scanned:
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
    return Scanned(list(known.uses), list(known.diagnostics), known.files, known.base)


def _read(sources: list[_Source], count: int, base: Path, diagnostics: list[Diagnostic]) -> Scanned:
    """What :func:`scan_paths` finds in ``sources`` (``diagnostics``: the files not read)."""
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
            diagnostics.append(
                Diagnostic(source.name, "binary file (contains NUL bytes): not read")
            )
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
    return Scanned(uses, diagnostics, count, base)


def _exports(sources: list[_Source], readings: dict[int, Reading]) -> dict[str, dict[str, Bound]]:
    """What each read module binds from FlashInfer at its top level, by module name (a
    ``.py`` file and its ``.pyi`` stub together)."""
    found: dict[str, dict[str, Bound]] = {}
    for index, reading in readings.items():
        module = sources[index].module
        if module and reading.bound:
            found.setdefault(module, {}).update(reading.bound)
    return found


# ----------------------------------------------------------------------------- the scan


@picklable
@dataclass(frozen=True)
class ScanResult:
    """What :func:`scan_tree` found.

    .. versionadded:: 0.3.0

    Attributes
    ----------
    root
        What the findings' paths are relative to: the scanned directory or file, as
        given; for several, the deepest directory holding them all.
    old, new
        The two releases judged against (``new`` is the installed release's for
        ``--to installed``).
    fi_compat
        True when ``flashinfer.comm`` uses were judged as ``fi_compat.comm`` serves them.
    files
        How many ``*.py`` files were looked at.
    findings
        Every judged use, by file, line and column.
    diagnostics
        Every file that could not be read or parsed, with why.
    roots
        Every directory or file scanned, as given (``(root,)`` for one).
    """

    root: str
    old: str
    new: str
    fi_compat: bool
    files: int
    findings: tuple[Finding, ...]
    diagnostics: tuple[Diagnostic, ...]
    roots: tuple[str, ...] = ()

    @property
    def breaks(self) -> bool:
        """True when some finding is :attr:`Category.BREAKS` (``fi-compat scan`` exits 1)."""
        return any(finding.category is Category.BREAKS for finding in self.findings)

    def count(self, category: Category) -> int:
        """How many findings fall in ``category``."""
        return sum(1 for finding in self.findings if finding.category is category)

    def to_dict(self) -> dict[str, Any]:
        """The result as ``fi-compat scan --json`` prints it (schema ``scan.schema.json``)."""
        from fi_compat._version import __version__

        return {
            "schema": 1,
            "tool": {"name": "fi-compat", "version": __version__},
            "root": self.root,
            "roots": list(self.roots or (self.root,)),
            "old": self.old,
            "new": self.new,
            "fi_compat": self.fi_compat,
            "files": self.files,
            "summary": {category.key: self.count(category) for category in Category},
            "findings": [finding.to_dict() for finding in self.findings],
            "diagnostics": [
                {
                    "path": diagnostic.path,
                    "message": diagnostic.message,
                    "line": diagnostic.line,
                    "column": diagnostic.column,
                }
                for diagnostic in self.diagnostics
            ],
        }


def _path(name: str, root: object) -> Path:
    """``root`` as a path that exists, or the typed error saying why not."""
    require_instance(name, root, (str, os.PathLike), "a str or os.PathLike")
    try:
        path = Path(cast("str | os.PathLike[str]", root))
        found = path.exists()
    except (TypeError, ValueError, OSError) as error:  # bytes from __fspath__, a NUL byte
        raise InvalidArgumentError(
            explain(f"{name} to be a path the system can look up", f"{describe(root)} ({error})")
        ) from None
    if not found:
        raise InvalidArgumentError(
            explain(f"{name} to name an existing directory or file", describe(str(path)))
        )
    return path


def _roots(root: object) -> list[tuple[str, Path]]:
    """``root`` (one path, or a non-empty list or tuple of them) as given and as paths."""
    if isinstance(root, (str, os.PathLike)):
        return [(str(root), _path("root", root))]
    if not isinstance(root, (list, tuple)) or not root:
        raise InvalidArgumentError(
            explain(
                "root to be a str or os.PathLike, or a non-empty list or tuple of them",
                describe(root),
            )
        )
    return [(str(item), _path("every item of root", item)) for item in root]


def scan_tree(
    root: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    old: str,
    new: str,
    *,
    fi_compat: bool = False,
) -> ScanResult:
    """Scan ``root`` for uses of FlashInfer and judge each against releases ``old`` and
    ``new``.

    .. versionadded:: 0.3.0

    Parameters
    ----------
    root
        A directory (every ``*.py``/``*.pyi`` file under it, symbolic links to directories
        not followed) or one file; or a list or tuple of them (an engine and the kernel
        package it imports FlashInfer through). Paths in the result are relative to the
        one root, or to the deepest directory holding them all.
    old, new
        Recorded flashinfer-python releases.
    fi_compat
        Judge ``flashinfer.comm`` uses as they run after the import swap to
        ``fi_compat.comm``.

    Raises
    ------
    InvalidArgumentError
        ``root`` is not a str or path, or a non-empty list or tuple of them, or names
        something that does not exist; ``old`` or ``new`` is not a non-empty str;
        ``fi_compat`` is not a bool.
    UnknownReleaseError
        ``old`` or ``new`` has no record.
    """
    given = _roots(root)
    require_str("old", old, nonempty=True)
    require_str("new", new, nonempty=True)
    require_bool("fi_compat", fi_compat)
    steps = history(old, new)
    scanned = scan_paths(*(path for _, path in given))
    findings = judge(scanned.uses, steps, fi_compat=fi_compat)
    findings.sort(key=lambda f: (f.path, f.line, f.column, _CATEGORY_ORDER[f.category], f.rule))
    return ScanResult(
        given[0][0] if len(given) == 1 else str(scanned.base),
        steps.old.release,
        steps.new.release,
        fi_compat,
        scanned.files,
        tuple(findings),
        tuple(sorted(scanned.diagnostics, key=lambda d: d.path)),
        tuple(name for name, _ in given),
    )
