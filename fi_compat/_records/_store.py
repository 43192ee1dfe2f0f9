"""Every module and record of every known release, read lazily from one store.

The store (written by the recorder, ``fi_compat/_recorder/store.py``, and described in
``fi_compat/_records/README.md``) keeps each distinct record of a name once, with the
releases it holds for; one zip member per module. Asking for one release's one module reads
that member only (decompressed and parsed once per process) and builds the
:class:`ModuleRecord` of that release from it, once.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import threading
import zipfile
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal

from packaging.version import Version

from fi_compat._records._catalogue import store_source
from fi_compat._records._classes import NameRecord
from fi_compat._records._format import expand_name, read_home, read_shape
from fi_compat._records._parse import name_record

__all__ = [
    "STORE",
    "ModuleRecord",
    "ModuleTables",
    "Store",
    "alike",
    "alike_runs",
    "finals_first",
    "module_introduced_in",
    "module_record",
    "modules_of",
    "opened",
    "position",
    "shipping",
    "store_releases",
]

#: The store's file in this package.
STORE = "surface.zip"
_INDEX = "index.json"
_TABLES = "tables.json"
#: The folder of the members holding each release's record.
RELEASE_RECORDS = "records/"
#: The suffixes of a shard's name index and records members.
NAMES = ".names.json"
RECORDS = ".records"
#: What a module ``__getattr__`` serves when its source does not list the names.
ANY: Literal["*"] = "*"


#: What :meth:`ModuleRecord.shape` tells of a name without building its record.
NameShape = tuple[str, "str | None", bool]


@dataclass(frozen=True)
class ModuleRecord:
    """One module of one release as ``import`` binds it (:meth:`ReleaseRecord.module`).

    .. versionadded:: 0.3.0

    Attributes
    ----------
    module, release
        The module's dotted name and the release.
    names
        Every name the module's import binds, private ones (``_get_range_buf``) included:
        name -> :class:`NameRecord`, each built on first use. Empty for an unreadable module.
    all_names
        Its literal ``__all__``, or None (not literal, or none).
    served
        What a module ``__getattr__`` serves: the names it tests for, ``"*"`` when its
        source does not list them, None without one.
    open
        Modules outside the release that it star-imports: names not in :attr:`names` may
        still be bound there.
    unreadable
        Why the recorder could not read the module (the tools answer "unknown" for it);
        None when it could.
    """

    module: str
    release: str
    names: Mapping[str, NameRecord]
    all_names: tuple[str, ...] | None = None
    served: tuple[str, ...] | Literal["*"] | None = None
    open: tuple[str, ...] = ()
    unreadable: str | None = None

    @property
    def complete(self) -> bool:
        """True when :attr:`names` is every name the module can hand out: readable, no
        star import from outside the release, no ``__getattr__`` serving unlisted names."""
        return self.unreadable is None and not self.open and self.served != ANY

    def binds(self, name: str) -> bool | None:
        """True when the module hands out ``name`` (bound at import, or served by its
        ``__getattr__``), False when it provably does not, None when the record cannot
        tell. A submodule the module does not bind is not counted here (see
        :func:`modules_of`: ``from package import submodule`` imports it)."""
        if name in self.names:
            return True
        if isinstance(self.served, tuple) and name in self.served:
            return True
        return False if self.complete else None

    def shape(self, name: str) -> NameShape | None:
        """``(kind, defined_in, conditional)`` of a bound name, or None: what a table of
        every name needs, read without building the name's record."""
        names = self.names
        if isinstance(names, _Names):
            return names.shape(name)
        found = names.get(name)
        return None if found is None else (found.kind, found.defined_in, found.conditional)

    def span(self, name: str) -> frozenset[int] | None:
        """The positions (in :func:`store_releases`) of the releases that hold the very
        record ``name`` has here, or None outside the store."""
        names = self.names
        return names.span(name) if isinstance(names, _Names) else None

    def version(self, name: str) -> Hashable | None:
        """An identity of the recorded fact behind ``name`` (equal in two releases exactly
        when the store holds one record for both), or None outside the store."""
        names = self.names
        return names.version(name) if isinstance(names, _Names) else None


class _Names(Mapping[str, NameRecord]):
    """One release's names of one module, from the store: what the name index tells
    (kind, home, guard) read per name, each full record built on first use and shared with
    every release that holds the same stored record."""

    def __init__(self, release: str, module: str, shapes: dict[str, Any], position: int) -> None:
        self._release = release
        self._module = module
        self._shapes = shapes
        self._position = position
        self._found: dict[str, tuple[int, str] | None] = {}
        self._every: list[str] | None = None

    def _pick(self, name: str) -> tuple[int, str] | None:
        """``(version, shape)`` of ``name`` in this release, or None."""
        if name in self._found:
            return self._found[name]
        picked = None
        for version, (ranges, shape) in enumerate(self._shapes.get(name, ())):
            if self._position in _positions(ranges):
                picked = (version, shape)
                break
        self._found[name] = picked
        return picked

    def _names(self) -> list[str]:
        if self._every is None:
            self._every = [name for name in self._shapes if self._pick(name) is not None]
        return self._every

    def __getitem__(self, name: str) -> NameRecord:
        picked = self._pick(name)
        if picked is None:
            raise KeyError(name)
        version, shape = picked
        key = (self._module, name, version)
        built = opened().built
        found = built.get(key)
        if found is not None:
            return found
        if shape.startswith("#"):
            data = opened().versions(self._module, name)[version]
        else:
            data = expand_name(read_home(shape, self._module))
            if "same" in data:
                return _resolved(self._release, name, data)
        return built.setdefault(key, name_record(name, data))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._pick(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def shape(self, name: str) -> NameShape | None:
        found = self._pick(name)
        return None if found is None else read_shape(found[1], self._module)

    def span(self, name: str) -> frozenset[int] | None:
        found = self._pick(name)
        if found is None:
            return None
        version, shape = found
        ranges = self._shapes[name][version][0]
        if shape.startswith("&"):
            data = expand_name(read_home(shape, self._module))
            home = module_record(self._release, data["defined_in"])
            target = home.span(data["same"]) if home is not None else None
            return None if target is None else _positions(ranges) & target
        return _positions(ranges)

    def version(self, name: str) -> Hashable | None:
        found = self._pick(name)
        if found is None:
            return None
        version, shape = found
        if shape.startswith("&"):  # the shared record's identity, and this binding's own
            data = expand_name(read_home(shape, self._module))
            home = module_record(self._release, data["defined_in"])
            return None if home is None else (home.version(data["same"]), shape)
        return self._module, name, version


class Store:
    """The open store: its index, and each module's member parsed on first use."""

    def __init__(self, path: Any = None) -> None:
        source = path or resources.files("fi_compat._records").joinpath(STORE)
        # One handle for the process: the archive's directory is read once. A file on disk
        # is opened by the archive, which closes it when the process ends.
        self._archive = zipfile.ZipFile(
            os.fspath(source) if isinstance(source, os.PathLike) else source.open("rb")
        )
        index = json.loads(self._archive.read(_INDEX))
        self.releases: tuple[str, ...] = tuple(index["releases"])
        self.position = {release: at for at, release in enumerate(self.releases)}
        self.module_ranges: dict[str, str] = index["modules"]
        self._firsts: list[str] = index["shards"]
        self._members: dict[str, Any] = {}
        self._lines: dict[int, dict[str, dict[str, str]]] = {}
        self._versions: dict[tuple[str, str], list[Any]] = {}
        #: (module, name, version) -> its NameRecord: a stored record is built once.
        self.built: dict[tuple[str, str, int], NameRecord] = {}
        self._lock = threading.Lock()

    def record(self, release: str) -> Any:
        """``release``'s record (``records/<release>.json``), decoded anew on each call (the
        loader parses it once)."""
        with self._lock:
            data = self._archive.read(f"{RELEASE_RECORDS}{release}.json")
        return json.loads(data)

    def close(self) -> None:
        """Close the archive (a store made for a test; the shipped one stays open)."""
        handle = self._archive.fp
        self._archive.close()
        if handle is not None:
            handle.close()

    def alike(self, module: str, first: int, second: int) -> bool:
        """True when ``module`` reads the same at both release positions: every name holds
        the same stored record (a re-export's followed to its home), and so do its
        ``__all__``, star imports, ``__getattr__`` and readability (the recorder's
        ``tables.json``). False when either position lacks the module."""
        for ranges in self.read_tables().get(module, ()):
            held = _positions(ranges)
            if first in held:
                return second in held
        return False

    def read_tables(self) -> dict[str, list[str]]:
        """``tables.json``: module -> the ranges of releases where it reads the same."""
        found: dict[str, list[str]] = self._read(_TABLES)
        return found

    def versions(self, module: str, name: str) -> list[Any]:
        """Each stored version's full record of ``module.name`` (None where the name index
        holds it whole), decoded on first use."""
        key = (module, name)
        found = self._versions.get(key)
        if found is None:
            text = self._records(self._shard(module)).get(module, {}).get(name)
            found = self._versions.setdefault(key, json.loads(text) if text else [])
        return found

    def _records(self, shard: int) -> dict[str, dict[str, str]]:
        """A records member's lines, split (not decoded): module -> name -> JSON text."""
        found = self._lines.get(shard)
        if found is None:
            with self._lock:
                data = self._archive.read(f"{shard}{RECORDS}")
            found = {}
            for line in data.decode().splitlines():
                module, name, versions = line.split("\t", 2)
                found.setdefault(module, {})[name] = versions
            found = self._lines.setdefault(shard, found)
        return found

    def shapes(self, module: str) -> Any:
        """The module's name index: each name's versions with the releases and shape of
        each, and ``all``, ``open``, ``getattr``, ``unreadable`` (its shard parsed once)."""
        return self._read(f"{self._shard(module)}{NAMES}")[module]

    def _shard(self, module: str) -> int:
        return bisect.bisect_right(self._firsts, module) - 1

    def _read(self, member: str) -> Any:
        found = self._members.get(member)
        if found is None:
            with self._lock:
                data = self._archive.read(member)
            found = self._members.setdefault(member, json.loads(data))
        return found


@functools.cache
def opened() -> Store:
    """The store of every known release (:func:`fi_compat._records._catalogue.store_source`:
    the shipped one, or the shipped one with the releases modelled on this machine), opened
    once per process."""
    return Store(store_source())


@functools.cache
def _positions(ranges: str) -> frozenset[int]:
    """The release positions of a ``"0-12,15"`` ranges text (each text decoded once)."""
    found: set[int] = set()
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return frozenset(found)


def _holds(ranges: str, position: int) -> bool:
    """``position`` is in the ``"0-12,15"`` ranges text."""
    return position in _positions(ranges)


def _pick(versions: list[list[Any]], position: int) -> Any:
    """The value of ``[[RANGES, value], ...]`` that holds at ``position``, or None."""
    for ranges, value in versions:
        if _holds(ranges, position):
            return value
    return None


def alike(module: str, first: str, second: str) -> bool:
    """True when ``module`` reads the same in both releases (store release strings):
    nothing in it to compare (:meth:`Store.alike`)."""
    store = opened()
    at, other = store.position.get(first), store.position.get(second)
    return at is not None and other is not None and store.alike(module, at, other)


def alike_runs(module: str) -> tuple[tuple[str, ...], ...]:
    """The releases that ship ``module``, cut into runs where it reads the same
    (:meth:`Store.alike`), oldest first within each; empty for a module no release ships."""
    store = opened()
    return tuple(
        tuple(store.releases[at] for at in sorted(_positions(ranges)))
        for ranges in store.read_tables().get(module, ())
    )


def shipping(module: str, ships: bool) -> frozenset[int]:
    """The positions of the releases that ship ``module`` (``ships``), or of those that
    do not."""
    store = opened()
    ranges = store.module_ranges.get(module)
    held = _positions(ranges) if ranges else frozenset()
    return held if ships else frozenset(range(len(store.releases))) - held


def position(release: str) -> int | None:
    """The release's position in :func:`store_releases`, or None."""
    return opened().position.get(release)


def store_releases() -> tuple[str, ...]:
    """Every release the store records, oldest first."""
    return opened().releases


@functools.cache
def modules_of(release: str) -> frozenset[str]:
    """Every recorded module of ``release`` (a release string as the store spells it)."""
    store = opened()
    position = store.position[release]
    return frozenset(
        module for module, ranges in store.module_ranges.items() if _holds(ranges, position)
    )


def module_introduced_in(module: str) -> str | None:
    """The oldest final release that ships ``module`` (the oldest pre-release when no final
    release does yet), or None."""
    store = opened()
    ranges = store.module_ranges.get(module)
    if not ranges:
        return None
    shipping = [store.releases[at] for at in sorted(_positions(ranges))]
    return next(iter(finals_first(shipping)), None)


def finals_first(releases: Iterable[str]) -> list[str]:
    """``releases`` (in version order) with the final releases first, then the
    pre-releases: the order "the first release that has it" is answered in, because what
    users install is a final release (a pre-release is named only where no final has it)."""
    ordered = list(releases)
    return [r for r in ordered if not Version(r).is_prerelease] + [
        r for r in ordered if Version(r).is_prerelease
    ]


class ModuleTables(Mapping[str, Mapping[str, NameRecord]]):
    """Module -> its name table for one release, every recorded module, read on first use."""

    def __init__(self, release: str) -> None:
        self._release = release

    def __getitem__(self, module: str) -> Mapping[str, NameRecord]:
        found = module_record(self._release, module)
        if found is None:
            raise KeyError(module)
        return found.names

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(modules_of(self._release)))

    def __len__(self) -> int:
        return len(modules_of(self._release))

    def __contains__(self, module: object) -> bool:
        return module in modules_of(self._release)

    def __reduce__(self) -> tuple[Any, ...]:
        return ModuleTables, (self._release,)

    def __repr__(self) -> str:
        return f"<name tables of the {len(self)} modules of {self._release}>"


@functools.cache
def module_record(release: str, module: str) -> ModuleRecord | None:
    """``module`` as ``release`` ships it, or None when the release has no such module."""
    store = opened()
    position = store.position.get(release)
    if position is None or module not in modules_of(release):
        return None
    data = store.shapes(module)
    unreadable = _pick(data.get("unreadable", []), position)
    if unreadable is not None:
        return ModuleRecord(module, release, MappingProxyType({}), unreadable=unreadable)
    listed = _pick(data.get("all", []), position)
    served = _pick(data.get("getattr", []), position)
    return ModuleRecord(
        module,
        release,
        _Names(release, module, data["names"], position),
        all_names=tuple(listed) if listed is not None else None,
        served=ANY if served == ANY else tuple(served) if served is not None else None,
        open=tuple(_pick(data.get("open", []), position) or ()),
    )


def _resolved(release: str, name: str, data: Mapping[str, Any]) -> NameRecord:
    """The record of ``name``; a re-export stored as ``same`` takes its definition's."""
    own = data.get("same")
    if own is None:
        return name_record(name, data)
    home = module_record(release, data["defined_in"])
    target = home.names.get(own) if home is not None else None
    if target is None:  # the store is written so that this cannot happen; never guess
        return NameRecord(name, data["kind"], data["defined_in"], None, None)
    return NameRecord(
        name=name,
        kind=target.kind,
        defined_in=target.defined_in,
        function=target.function,
        cls=target.cls,  # shared under the class's own name only (the recorder's rule)
        enum=target.enum,
        conditional=bool(data.get("conditional", False)),
    )
