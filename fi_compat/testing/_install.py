"""The build cache and the import hook: generated packages on disk, served as ``flashinfer``.

:func:`_take_build` writes a release's generated package (:mod:`fi_compat.testing._generator`)
to a temporary directory once per (release, CUDA runtime loaded, planned import errors) and
hands it to one live fake at a time; a later fake of the same kind reuses it. The directories
are removed at interpreter exit, and each is named for the process that owns it, so that the
first build of a later process removes those of processes that ended without running exit
handlers (:func:`remove_leftovers`). Only what a fake imports on entry is written then: every
other module of the release (:mod:`fi_compat.testing._modules`) when it is first imported,
and the later part of a module written with ``defer`` when one of its names is first used
(:meth:`_Build.later_code`). While a fake is installed, its :class:`_Finder` on
``sys.meta_path`` serves ``flashinfer`` and its submodules from that package only (a module
the release lacks raises the ``ModuleNotFoundError`` of :func:`_missing`), and
:class:`_BuildLoader` compiles each module once per build. The testing guide,
``docs/guide/testing.md``, says how a fake is installed.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, ModuleType

from packaging.version import Version

from fi_compat._log import get_logger
from fi_compat._records import ReleaseRecord, module_introduced_in
from fi_compat._surface import COMM, CUDART_MODULE, FLASHINFER
from fi_compat.testing._generator import later_source_of, module_names, module_source
from fi_compat.testing._modules import Modules
from fi_compat.testing._objects import LOCK
from fi_compat.testing._registry import (
    collect,
    eager_modules,
    factory_options_of,
    workspace_classes_of,
)
from fi_compat.testing._runtime import later_path

_log = get_logger(__name__)

#: The name of a build's directory: ``fake-flashinfer-<pid>-<release>-`` (the process that
#: owns it and removes it at exit) and ``tempfile.mkdtemp``'s random suffix. A PEP 440
#: release has no hyphen, and neither has the suffix, so a name of the earlier form without
#: a pid (``fake-flashinfer-<release>-<suffix>``) never matches.
_PREFIX = "fake-flashinfer-"
_OWNED = re.compile(re.escape(_PREFIX) + r"([1-9][0-9]*)-[^-]+-[a-z0-9_]{8}")


@dataclass
class _Build:
    """A generated fake package on disk, written once and imported by each fake of its kind
    (its modules compiled once, into ``code``), one live fake at a time; with what its
    fakes read of the release's registry."""

    record: ReleaseRecord
    directory: Path
    paths: dict[str, Path]
    packages: set[str]
    workspace_classes: dict[str, tuple[str, str]]
    factory_options: tuple[str, ...]
    #: The modules a fake of this build imports on entry (the others on first use).
    eager: tuple[str, ...] = ()
    in_use: bool = False
    #: Modules not written yet (written when first imported), and how to write one.
    deferred: set[str] = field(default_factory=set)
    render: Callable[[str], str] | None = None
    #: How to write a module's later part (see :func:`_later_source`).
    render_later: Callable[[str], str] | None = None
    code: dict[str, CodeType] = field(default_factory=dict)
    #: The build's reading of the release's recorded modules (what a ``__getattr__`` serves).
    modules: Modules | None = None
    #: The folders of the package made so far (each made once, not once per module).
    made: set[Path] = field(default_factory=set)

    def later_code(self, name: str) -> CodeType | None:
        """The compiled later part of module ``name``, written on first use (beside the
        module's file, so that ``inspect.getsource`` reads it); None without one."""
        key = f"{name}:later"
        with LOCK:
            code = self.code.get(key)
            file = self.paths.get(name)
            if code is None and file is not None and self.render_later is not None:
                later = Path(later_path(str(file)))
                text = self.render_later(name)
                later.write_text(text, encoding="utf-8")
                code = compile(text, str(later), "exec", dont_inherit=True)
                self.code[key] = code
            return code

    def path(self, name: str) -> Path | None:
        """The file of module ``name``, written now if it was deferred; None if the fake
        has no such module."""
        with LOCK:
            if name in self.deferred and self.render is not None:
                written = _write(
                    self.directory, {name: self.render(name)}, self.packages, self.made
                )
                self.paths.update(written)
                self.deferred.discard(name)
            return self.paths.get(name)


#: Generated packages by (release, CUDA runtime loaded, modules with a planned import error),
#: kept for the process: generating and compiling a fake costs tens of milliseconds, a test
#: suite makes thousands of fakes, and what a fake holds per test lives in its kit.
_BUILDS: dict[tuple[str, bool, frozenset[str]], list[_Build]] = {}


def take_build(record: ReleaseRecord, *, cuda_runtime: bool, planned: frozenset[str]) -> _Build:
    """A package for ``record`` that no live fake uses, written now if there is none."""
    key = (record.release, cuda_runtime, planned)
    with LOCK:
        builds = _BUILDS.setdefault(key, [])
        for build in builds:
            if not build.in_use and build.record is record:
                build.in_use = True
                return build
    _sweep_once()
    registry = collect(record)
    prefix = f"{_PREFIX}{os.getpid()}-{record.release}-"
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    names = module_names(record, registry, cuda_runtime=cuda_runtime)
    packages = {name.rpartition(".")[0] for name in names if "." in name} | {FLASHINFER}
    eager = {name for name in eager_modules(registry) if name in names}
    modules = Modules(record, registry, frozenset(names))
    # Written now: what a fake imports on entry (with its parent packages) and the special
    # modules; any other module (most of a release's ~2000) when it is first imported.
    now = eager | {FLASHINFER, COMM, CUDART_MODULE, *planned}
    now |= {parent for name in now for parent in _parents(name)}

    def render(name: str) -> str:
        return module_source(
            record,
            registry,
            str(directory),
            name,
            cuda_runtime=cuda_runtime,
            planned=planned,
            modules=modules,
            # What a module beyond the registry binds runs on first use where the registry
            # models part of it: a fake imports those modules on entry (or the modules they
            # name), and most tests use only what the registry models.
            defer=name in now or bool(registry.in_module(name)),
        )

    def render_later(name: str) -> str:
        return later_source_of(registry, name, modules)

    made: set[Path] = set()
    build = _Build(
        record,
        directory,
        _write(directory, {name: render(name) for name in sorted(names & now)}, packages, made),
        packages,
        workspace_classes_of(registry),
        factory_options_of(record),
        eager=tuple(sorted(eager)),
        in_use=True,
        deferred=set(names - now),
        render=render,
        render_later=render_later,
        modules=modules,
        made=made,
    )
    with LOCK:
        builds.append(build)
    return build


def _parents(name: str) -> list[str]:
    """The packages above ``name`` (``flashinfer.comm.mnnvl`` -> ``flashinfer``,
    ``flashinfer.comm``)."""
    parts = name.split(".")
    return [".".join(parts[:index]) for index in range(1, len(parts))]


@atexit.register
def _remove_builds() -> None:
    """Remove every generated package (at interpreter exit)."""
    with LOCK:
        directories = [build.directory for builds in _BUILDS.values() for build in builds]
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)


@functools.cache
def _sweep_once() -> None:
    """Remove what ended processes left (:func:`remove_leftovers`), at the first build of
    this process only: one read of the temporary directory per process keeps builds cheap,
    and what a process ending later leaves, a later process removes."""
    removed = remove_leftovers()
    if removed:
        _log.debug("removed %d generated fake packages of ended processes", len(removed))


def remove_leftovers(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the generated packages that processes which have ended left in ``directory``
    (the temporary directory by default); those of them that are gone now.

    A process removes its packages at exit, but one that ends without running exit handlers
    (a pytest-xdist worker stopped at the end of a run, ``os._exit``, ``SIGKILL``) leaves
    them. Only a directory of this user named as a build's (with its owner's pid) whose
    owner no longer runs is removed: never one of a live process (a pid another user's
    process holds counts as live), never one of another form. Nothing is raised: a
    directory that vanishes or cannot be read or removed is left to whoever has it.
    """
    # On Windows, os.kill(pid, 0) would send CTRL_C_EVENT rather than probe: sweep nothing.
    if os.name != "posix":
        return []
    try:
        root = tempfile.gettempdir() if directory is None else os.fspath(directory)
        with os.scandir(root) as entries:
            candidates = [
                (entry.path, int(match.group(1)))
                for entry in entries
                if (match := _OWNED.fullmatch(entry.name)) is not None and _is_ours(entry)
            ]
    except OSError:
        return []
    removed: list[Path] = []
    for path, pid in candidates:
        if _running(pid):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            removed.append(Path(path))
    return removed


def _is_ours(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a directory (not a link to one) of this process's user."""
    try:
        return entry.is_dir(follow_symlinks=False) and (
            entry.stat(follow_symlinks=False).st_uid == os.getuid()
        )
    except OSError:
        return False


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (as any user); True where that cannot be told."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        # PermissionError: a process of another user; OverflowError: no such pid can exist,
        # but a name that cannot be judged is kept.
        return True
    return True


def _write(
    directory: Path, sources: Mapping[str, str], packages: set[str], made: set[Path]
) -> dict[str, Path]:
    """Write each module's source; the path of each module's file (``made``: the folders
    made already, which this adds to)."""
    paths: dict[str, Path] = {}
    for name, text in sources.items():
        parts = name.split(".")
        if name in packages:
            path = directory.joinpath(*parts, "__init__.py")
        else:
            path = directory.joinpath(*parts[:-1], parts[-1] + ".py")
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_text(text, encoding="utf-8")
        paths[name] = path
    return paths


class _BuildLoader(importlib.machinery.SourceFileLoader):
    """Loads a generated module from its file, compiled once per build (bytecode files may
    be disabled, and a build is imported by many fakes)."""

    def __init__(self, fullname: str, path: str, build: _Build) -> None:
        super().__init__(fullname, path)
        self._code = build.code
        self._build = build

    def later_code(self, fullname: str) -> CodeType | None:
        """The module's compiled later part (called by :mod:`fi_compat.testing._runtime`)."""
        return self._build.later_code(fullname)

    def get_code(self, fullname: str) -> CodeType:
        code = self._code.get(fullname)
        if code is None:
            code = compile(self.get_data(self.path), self.path, "exec", dont_inherit=True)
            self._code[fullname] = code
        return code


class Finder(importlib.abc.MetaPathFinder):
    """Serves ``flashinfer`` and its submodules from the generated files only."""

    def __init__(self, build: _Build) -> None:
        self.build = build

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != FLASHINFER and not fullname.startswith(FLASHINFER + "."):
            return None
        file = self.build.path(fullname)
        if file is None:
            # A submodule the release lacks. Asked by an import, raise the error Python
            # would, naming the first release that has the module; asked by
            # importlib.util.find_spec (the caller of _find_spec), answer None as Python does.
            if sys._getframe(2).f_code.co_name == "_find_and_load_unlocked":
                raise _missing(self.build.record, fullname)
            return None
        locations = [str(file.parent)] if fullname in self.build.packages else None
        return importlib.util.spec_from_file_location(
            fullname,
            file,
            loader=_BuildLoader(fullname, str(file), self.build),
            submodule_search_locations=locations,
        )


def _missing(record: ReleaseRecord, module: str) -> ModuleNotFoundError:
    """The ``ModuleNotFoundError`` of importing ``module``, which ``record``'s release lacks:
    Python's message, with the first recorded release that ships the module."""
    first = module_introduced_in(module)
    if first is None:
        where = "no recorded flashinfer-python release ships it"
    elif Version(first) < record.version:
        where = f"it shipped in {first} and is gone by {record.release}"
    else:
        where = f"the first recorded flashinfer-python release that ships it is {first}"
    return ModuleNotFoundError(
        f"No module named {module!r}: the fake flashinfer-python {record.release} has no "
        f"such module ({where})",
        name=module,
    )
