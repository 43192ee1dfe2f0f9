"""Everything recorded of every release as one compact file: ``fi_compat/_records/surface.zip``.

Most facts hold for many releases: a function keeps its signature across dozens of them.
The store keeps each distinct record of a name once, with the releases it holds for. It is
a zip archive whose members are read one at a time:

* ``index.json``: ``{"schema": 1, "releases": [...], "modules": {module: RELEASES},
  "shards": [first module of each shard]}``: every recorded release, oldest first (PEP 440
  order), the releases that ship each module, and how the modules, in sorted order, are cut
  into shards of about :data:`SHARD_BYTES` of JSON (neighbouring modules are alike and
  compress well together; a shard is small enough that reading one module stays cheap);
* ``<shard>.names.json``: ``{module: {"names": {name: [[RELEASES, SHAPE], ...]}, "all" |
  "open" | "getattr" | "unreadable": [[RELEASES, value], ...]}}``: the name index. Each
  distinct version of a name, with the releases it holds for (a name is absent from the
  releases no version lists) and its SHAPE: a short name record whole (``"=typing"``,
  ``"@flashinfer.norm"``, ``"&function:flashinfer.norm:rmsnorm"``, see
  ``fi_compat._records._format.expand_name``), else ``"#kind:defined_in"``; a home that
  is the module itself is written ``"."``. Kind, home and guard of every name, and whether
  two releases hold the same version, are read from the index alone;
* ``tables.json``: ``{module: [RELEASES, ...]}``: the releases of each module cut into runs
  whose module reads the same in every one of them: every name (a re-export's definition
  followed to its home) holds the same stored record, and so do ``all``, ``open``,
  ``getattr`` and ``unreadable``. Two releases in one run have nothing to compare in that
  module, which a diff of two releases skips without reading its shard;
* ``<shard>.records``: one line per name with a full record, ``module<TAB>name<TAB>[RECORD
  | null, ...]``: the full record of each version (null where the index holds it whole), a
  JSON array decoded only when that name is asked for (a diff reads few of a shard's
  records, and splitting lines is ten times faster than decoding them all). A function's
  parameters are short lists (``["x"]``, ``["eps", 1, "1e-06", "float"]``: name, kind, default,
  annotation; ``fi_compat._records._format.compact_parameter``);
* ``records/<release>.json``: each release's record, what fi-compat adapts and measures
  beyond names (the comm functions, enums and classes under every name they have had, the
  attention wrappers and families, ``fast_decode_plan``, the import hazards), in the
  per-release schema of ``fi_compat/_records/README.md``.

``RELEASES`` is a string of indices into ``releases`` and ranges of them (``"0-12,15"``).
Packing is lossless (:func:`unpack` gives back every release's surface and
:func:`unpack_records` its record, which tests check). :func:`extend` adds releases to a
packed store (or sets some aside) without unpacking the others: the same bytes as packing
every release again. It copies, as stored, each module whose releases keep their positions
and read as they did, and works out the others again: a new newest release, or a shipped
one set aside and modelled again, costs about 2 CPU-seconds (most of it compressing the
store; 8 to 10 when every module was worked out again); a release added or set aside
between others moves every later one, and costs about 8.
"""

from __future__ import annotations

import functools
import io
import json
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from packaging.version import Version

from fi_compat._records._format import (
    JSONRecord,
    compact_parameter,
    expand_parameter,
    read_home,
    shape_of,
)
from fi_compat._records._format import compact_name as short_name
from fi_compat._records._format import expand_name as long_name

__all__ = [
    "STORE_SCHEMA",
    "decode_ranges",
    "encode_ranges",
    "extend",
    "pack",
    "release_record_member",
    "unpack",
    "unpack_records",
]

STORE_SCHEMA = 1
INDEX = "index.json"
#: The member holding each module's runs of releases that read alike (see the docstring).
TABLES = "tables.json"
#: The suffix of a shard's name index member (``<shard>.names.json``).
NAMES = ".names.json"
#: The suffix of a shard's records member (``<shard>.records``).
RECORDS = ".records"
#: The folder of the members holding each release's record (``records/<release>.json``).
RELEASE_RECORDS = "records/"
#: About how much JSON one shard holds (its name index and its records together).
SHARD_BYTES = 1 << 20
#: The deflate level of the shipped store (the smallest: 3.9 MB for 112 releases, where level
#: 1 gives 5.9 MB and writes its 67 MB five times faster, 0.2 s against 1.1 s).
SHIPPED_LEVEL = 9
_DATE = (2020, 1, 1, 0, 0, 0)  # a fixed timestamp: the same store gives the same bytes

#: Release -> module -> the module's record (:func:`fi_compat._recorder.surface.surface`).
Surfaces = Mapping[str, Mapping[str, JSONRecord]]


# ----------------------------------------------------------------------------- signatures


def _compact_function(record: JSONRecord | None) -> JSONRecord | None:
    if record is None:
        return None
    compact = {key: value for key, value in record.items() if key != "parameters"}
    if not compact["decorators"]:
        del compact["decorators"]
    compact["params"] = [compact_parameter(parameter) for parameter in record["parameters"]]
    return compact


def _expand_function(record: JSONRecord | None) -> JSONRecord | None:
    if record is None or "params" not in record:
        return record
    expanded = {key: value for key, value in record.items() if key != "params"}
    expanded.setdefault("decorators", [])
    expanded["parameters"] = [expand_parameter(item) for item in record["params"]]
    return dict(sorted(expanded.items()))


def _convert_name(record: JSONRecord, convert: Any) -> JSONRecord:
    out = dict(record)
    if out.get("function") is not None:
        out["function"] = convert(out["function"])
    if out.get("class") is not None:
        cls = dict(out["class"])
        cls["methods"] = {name: convert(method) for name, method in cls["methods"].items()}
        out["class"] = cls
    return out


def compact_name(record: JSONRecord) -> JSONRecord | str:
    """A name record as the store writes it: functions as signature text, the commonest
    records as short strings (:func:`fi_compat._records._format.expand_name`)."""
    short = short_name(_convert_name(record, _compact_function))
    return short if isinstance(short, str) else dict(short)


def expand_name(record: JSONRecord | str) -> JSONRecord:
    """The inverse of :func:`compact_name`."""
    return _convert_name(dict(long_name(record)), _expand_function)


# ----------------------------------------------------------------------------- ranges


def encode_ranges(indices: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"``."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def decode_ranges(text: str) -> list[int]:
    """The inverse of :func:`encode_ranges`."""
    indices: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        indices += range(int(first), int(last or first) + 1)
    return indices


# ----------------------------------------------------------------------------- packing


#: The store's one spelling of JSON: keys sorted, no spaces, text as is. Made once:
#: :func:`json.dumps` with these options builds an encoder per call, which was a third of
#: what :func:`extend` spends dumping its quarter of a million values.
_ENCODER = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _dump(data: Any) -> bytes:
    return _ENCODER.encode(data).encode()


def _member(name: str) -> zipfile.ZipInfo:
    """The member's entry: deflated, with a fixed timestamp. (LZMA would make the store
    a fifth smaller, 1.5 MB instead of 1.9 MB, and every read of a member three times
    slower: a diff of two far-apart releases reads most members.)"""
    info = zipfile.ZipInfo(name, date_time=_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


#: The fields of a module's record besides its names, each stored as its versions.
EXTRAS = ("all", "open", "getattr", "unreadable")

#: A name's (or a module field's) versions while packing: the stored value's JSON -> (the
#: positions of the releases that hold it, the value).
Versions = dict[bytes, tuple[list[int], Any]]
#: Module -> ``{"names": {name: Versions}, "all" | "open" | ...: Versions}``.
Tables = dict[str, dict[str, Any]]
#: A module as the store writes it: its name index's JSON, and its records' JSON by name.
Spelled = tuple[bytes, dict[str, bytes]]

#: Reads one JSON value at an offset (:func:`_split_names`, :func:`_holds_at`).
_DECODER = json.JSONDecoder()


def _add(versions: Versions, position: int, value: Any) -> None:
    versions.setdefault(_dump(value), ([], value))[0].append(position)


def _ordered(versions: Versions) -> list[list[Any]]:
    """``[[RELEASES, value], ...]``, each value once, in the order of the first release that
    has it."""
    found = sorted(versions.values(), key=lambda held: min(held[0]))
    return [[encode_ranges(positions), value] for positions, value in found]


def release_record_member(release: str) -> str:
    """The member holding ``release``'s record (what fi-compat adapts and measures beyond
    names: ``fi_compat/_records/README.md``'s per-release schema)."""
    return f"{RELEASE_RECORDS}{release}.json"


def _add_surface(
    tables: Tables, modules: dict[str, list[int]], position: int, surface: Mapping[str, JSONRecord]
) -> None:
    for module, found in surface.items():
        modules.setdefault(module, []).append(position)
        table = tables.setdefault(module, {})
        for name, record in found.get("names", {}).items():
            _add(table.setdefault("names", {}).setdefault(name, {}), position, compact_name(record))
        for key in EXTRAS:
            if key in found:
                _add(table.setdefault(key, {}), position, found[key])


def _check(surfaces: Surfaces, release_records: Mapping[str, Any]) -> None:
    if set(surfaces) != set(release_records):
        raise ValueError(
            f"expected a record for every surface; found surfaces without a record "
            f"{sorted(set(surfaces) - set(release_records))} and records without a surface "
            f"{sorted(set(release_records) - set(surfaces))}"
        )


def pack(surfaces: Surfaces, release_records: Mapping[str, JSONRecord]) -> bytes:
    """The store's bytes for these releases' surfaces and records (deterministic): one
    file holds everything recorded of every release. Each release needs both."""
    _check(surfaces, release_records)
    releases = sorted(surfaces, key=Version)
    modules: dict[str, list[int]] = {}
    tables: Tables = {}
    for position, release in enumerate(releases):
        _add_surface(tables, modules, position, surfaces[release])
    indexes: dict[str, JSONRecord] = {}
    spelled: dict[str, Spelled] = {}
    for module, table in tables.items():
        indexes[module], spelled[module] = _spelled(module, table)
    records = {release: _dump(release_records[release]) for release in releases}
    return _packed(releases, modules, spelled, _alike(indexes, modules), records, SHIPPED_LEVEL)


def extend(
    data: bytes,
    surfaces: Surfaces,
    release_records: Mapping[str, JSONRecord],
    dropped: Iterable[str] = (),
    *,
    level: int = SHIPPED_LEVEL,
) -> bytes:
    """The store ``data`` less the ``dropped`` releases, plus (or in place of their stored
    selves) the releases of ``surfaces``: the bytes :func:`pack` gives for that set of
    releases, made from the packed store without unpacking every release. ``level``: the
    members' deflate level (at another level than the shipped one, the same members
    compressed otherwise).

    A module whose releases keep their positions and read as they did (none is set aside
    or moved, and an added release that ships it stands where a set-aside one did, holding
    the same records) is written as it is stored: its name index and records lines copied,
    its runs kept unless a fresh release reads differently through a re-export to a
    module that changed. Only the other modules are decoded, merged and compared again: a
    new newest release, or a release set aside and modelled again, costs a second or two
    where packing the 112 shipped releases again takes half a minute.
    """
    _check(surfaces, release_records)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        index = json.loads(archive.read(INDEX))
        old: list[str] = index["releases"]
        gone = set(dropped) | set(surfaces)
        kept = [release for release in old if release not in gone]
        releases = sorted([*kept, *surfaces], key=Version)
        position_of = {release: position for position, release in enumerate(releases)}
        moved = [position_of.get(release) if release not in gone else None for release in old]
        stored_runs: dict[str, list[str]] = json.loads(archive.read(TABLES))
        stored: dict[str, tuple[JSONRecord, bytes]] = {}
        lines: dict[str, dict[str, bytes]] = {}
        for number in range(len(index["shards"])):
            stored.update(_split_names(archive.read(f"{number}{NAMES}").decode()))
            for module, name, versions in _split_records(archive.read(f"{number}{RECORDS}")):
                lines.setdefault(module, {})[name] = versions
        records = {release: archive.read(release_record_member(release)) for release in kept}

    def remap(ranges: str) -> list[int]:
        return [p for p in (moved[i] for i in decode_ranges(ranges)) if p is not None]

    fresh = frozenset(position_of[release] for release in surfaces)
    added: dict[str, set[int]] = {}  # module -> the fresh releases that ship it
    for release, surface in surfaces.items():
        for module in surface:
            added.setdefault(module, set()).add(position_of[release])

    def stays(module: str, was: list[int]) -> bool:
        """Whether the module reads as stored: its releases keep their positions, and a
        fresh one stands only where a set-aside one did, holding what it held."""
        here = added.get(module, set())
        return (
            here.issubset(was)
            and all(moved[p] == p or (moved[p] is None and p in here) for p in was)
            and all(
                _reads_as_stored(
                    module,
                    stored[module][0],
                    lines.get(module, {}),
                    p,
                    surfaces[releases[p]][module],
                )
                for p in here
            )
        )

    modules: dict[str, list[int]] = {}
    changed = set(added) - set(stored)
    for module, ranges in index["modules"].items():
        was = decode_ranges(ranges)
        if stays(module, was):
            modules[module] = was
            continue
        changed.add(module)
        if found := remap(ranges):
            modules[module] = found
    tables: Tables = {m: {} for m in changed if m in modules or m in added}
    for module, table in tables.items():
        if module in stored:
            _merge_stored(table, module, stored[module][0], lines.get(module, {}), remap)
    for release, surface in surfaces.items():
        touched = {module: found for module, found in surface.items() if module in tables}
        _add_surface(tables, modules, position_of[release], touched)
    indexes: dict[str, JSONRecord] = {}
    spelled: dict[str, Spelled] = {}
    for module in modules:
        if module in tables:
            modules[module].sort()
            indexes[module], spelled[module] = _spelled(module, tables[module])
        else:
            indexes[module] = stored[module][0]
            spelled[module] = (stored[module][1], lines.get(module, {}))
    # Runs to find again: a changed module's, and a kept one's whose fresh release may read
    # alike or apart through a re-export to a changed module.
    redo = set(tables)
    if changed:
        reaching = _reaching(changed, stored)
        redo |= {
            module for module in reaching & set(modules) if fresh.intersection(modules[module])
        }
    known = {
        module: [run for run in map(remap, stored_runs[module]) if run]
        for module in redo
        if module in stored_runs
    }
    alike = {module: stored_runs[module] for module in modules if module not in redo}
    alike.update(_alike(indexes, modules, known, fresh, redo))
    for release in surfaces:
        records[release] = _dump(release_records[release])
    return _packed(releases, modules, spelled, alike, records, level)


def _split_names(text: str) -> dict[str, tuple[JSONRecord, bytes]]:
    """A shard's name index (``<shard>.names.json``, as :func:`_joined` writes it) by module:
    each module's index and its JSON as stored, to be copied without spelling it again."""
    found: dict[str, tuple[JSONRecord, bytes]] = {}
    if text == "{}":
        return found
    at = 0  # at the "{" or "," before each module's key
    while text[at : at + 1] == ("," if found else "{"):
        module, colon = _DECODER.raw_decode(text, at + 1)
        if not isinstance(module, str) or text[colon : colon + 1] != ":":
            break
        index, at = _DECODER.raw_decode(text, colon + 1)
        found[module] = (index, text[colon + 1 : at].encode())
        if text[at:] == "}":
            return found
    raise ValueError(f"expected a name index as the store writes it; found {text[:80]!r}")


def _split_records(data: bytes) -> Iterator[tuple[str, str, bytes]]:
    """A shard's records member as ``(module, name, versions' JSON)``, the JSON as stored."""
    for line in data.split(b"\n") if data else ():
        module, name, versions = line.split(b"\t", 2)
        yield module.decode(), name.decode(), versions


def _reads_as_stored(
    module: str,
    index: JSONRecord,
    lines: Mapping[str, bytes],
    position: int,
    found: Mapping[str, Any],
) -> bool:
    """Whether ``found``, a release's record of ``module``, holds at ``position`` what the
    store does: the same names, each spelled as the version stored for that release, and
    the same ``all``, ``open``, ``getattr`` and ``unreadable``. Compared as spelled (the
    store's identity of a value), never as decoded values (``True == 1``)."""
    names = found.get("names", {})
    held = 0
    for name, versions in index["names"].items():
        number = next(
            (n for n, (ranges, _) in enumerate(versions) if position in _members(ranges)), None
        )
        if number is None:
            continue
        record = names.get(name)
        if record is None:
            return False
        held += 1
        value = compact_name(record)
        if isinstance(value, str):  # held whole in the index, never in the records lines
            if value != read_home(versions[number][1], module):
                return False
        elif not _holds_at(lines.get(name, b""), number, _dump(value)):
            return False
    if held != len(names):
        return False
    for key in EXTRAS:
        stored = [_dump(v) for ranges, v in index.get(key, []) if position in _members(ranges)]
        if stored != ([_dump(found[key])] if key in found else []):
            return False
    return True


def _holds_at(line: bytes, number: int, spelled: bytes) -> bool:
    """Whether item ``number`` of a records line (``[RECORD | null, ...]``) is ``spelled``:
    a complete JSON value that the item starts with is the whole item."""
    if not line:
        return False
    at = 1
    if number:
        text = line.decode()
        for _ in range(number):
            at = _DECODER.raw_decode(text, at)[1] + 1
        at = len(text[:at].encode())
    return line.startswith(spelled, at)


def _merge_stored(
    table: dict[str, Any],
    module: str,
    index: JSONRecord,
    lines: Mapping[str, bytes],
    remap: Callable[[str], list[int]],
) -> None:
    """Into ``table``, the module's stored versions at the releases that keep them
    (``remap``: their stored ranges -> the releases' positions now)."""
    for name, versions in index["names"].items():
        line = lines.get(name)
        full = json.loads(line) if line is not None else None
        held: Versions = {}
        for number, (ranges, shape) in enumerate(versions):
            value = full[number] if full is not None else None
            if value is None:
                value = read_home(shape, module)
            if positions := remap(ranges):
                held[_dump(value)] = (positions, value)
        if held:
            table.setdefault("names", {})[name] = held
    for key in EXTRAS:
        held = {}
        for ranges, value in index.get(key, []):
            if positions := remap(ranges):
                held[_dump(value)] = (positions, value)
        if held:
            table[key] = held


def _reaching(changed: set[str], stored: Mapping[str, tuple[JSONRecord, bytes]]) -> set[str]:
    """The stored modules whose re-exports lead, home after home, to a ``changed`` module
    (whose releases may then read alike or apart where a fresh release stands)."""
    users: dict[str, set[str]] = {}
    for module, (index, _) in stored.items():
        for versions in index["names"].values():
            for _, shape in versions:
                if shape.startswith("&"):
                    home = read_home(shape, module).split(":", 2)[1]
                    users.setdefault(home, set()).add(module)
    reaching: set[str] = set()
    todo = list(changed)
    while todo:
        for user in users.get(todo.pop(), ()):
            if user not in reaching:
                reaching.add(user)
                todo.append(user)
    return reaching


def _spelled(module: str, table: Mapping[str, Any]) -> tuple[JSONRecord, Spelled]:
    """The module's name index, and it as the store writes it (with its records lines)."""
    index: JSONRecord = {"names": {}}
    stored: dict[str, bytes] = {}
    for name, held in sorted(table.get("names", {}).items()):
        versions = _ordered(held)
        index["names"][name] = [[ranges, shape_of(value, module)] for ranges, value in versions]
        full = [None if isinstance(value, str) else value for _, value in versions]
        if any(value is not None for value in full):
            stored[name] = _dump(full)
    for key in EXTRAS:
        if key in table:
            index[key] = _ordered(table[key])
    return index, (_dump(index), stored)


def _packed(
    releases: list[str],
    modules: Mapping[str, list[int]],
    spelled: Mapping[str, Spelled],
    alike: Mapping[str, list[str]],
    release_records: Mapping[str, bytes],
    level: int,
) -> bytes:
    """The archive: each module's index and records as ``spelled``, cut into shards by
    their size, its releases (``modules``) and runs (``alike``), deflated at ``level``."""
    weights = {
        module: len(index) + len(_joined(lines)) for module, (index, lines) in spelled.items()
    }
    shards = _shards(weights)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        index_data = {
            "schema": STORE_SCHEMA,
            "releases": releases,
            "modules": {module: encode_ranges(found) for module, found in sorted(modules.items())},
            "shards": [members[0] for members in shards],
        }
        _write(archive, INDEX, index_data, level)
        _write(archive, TABLES, alike, level)
        for number, members in enumerate(shards):
            names = _joined({module: spelled[module][0] for module in members})
            archive.writestr(_member(f"{number}{NAMES}"), names, compresslevel=level)
            lines = [
                b"%s\t%s\t%s" % (module.encode(), name.encode(), versions)
                for module in members
                for name, versions in spelled[module][1].items()
            ]
            archive.writestr(_member(f"{number}{RECORDS}"), b"\n".join(lines), compresslevel=level)
        for release in releases:
            archive.writestr(
                _member(release_record_member(release)),
                release_records[release],
                compresslevel=level,
            )
    return buffer.getvalue()


def _alike(
    indexes: Mapping[str, JSONRecord],
    modules: Mapping[str, list[int]],
    known: Mapping[str, list[list[int]]] | None = None,
    fresh: frozenset[int] = frozenset(),
    among: Iterable[str] | None = None,
) -> dict[str, list[str]]:
    """Module -> its releases cut into runs where the module reads the same (``tables.json``),
    for the modules ``among`` (all of ``indexes``, which holds every module a re-export may
    lead to, unless told).

    A module's identity at a release is the version each of its names holds there (a
    re-export stored as ``&kind:home:name`` takes the identity of that name in its home,
    as the reader compares them), with the versions of ``all``, ``open``, ``getattr`` and
    ``unreadable``. ``known`` gives runs already found among the releases that are not
    ``fresh`` (adding or dropping other releases cannot make two of them read alike or
    apart): only each run's first release and the fresh ones are then compared, and
    nothing when the module has no fresh release.
    """
    picked: dict[tuple[str, int], dict[str, int]] = {}
    shipped = {module: frozenset(found) for module, found in modules.items()}

    def versions(module: str, position: int) -> dict[str, int]:
        key = (module, position)
        found = picked.get(key)
        if found is None:
            found = {}
            for name, versions in indexes[module]["names"].items():
                for number, (ranges, _) in enumerate(versions):
                    if position in _members(ranges):
                        found[name] = number
                        break
            picked[key] = found
        return found

    def identity(module: str, name: str, position: int, depth: int = 0) -> Any:
        number = versions(module, position).get(name)
        if number is None:
            return None
        shape = indexes[module]["names"][name][number][1]
        if shape.startswith("&") and depth < _MAX_HOPS:
            data = long_name(read_home(shape, module))
            home = data["defined_in"]
            if home in indexes and position in shipped[home]:
                return (number, identity(home, data["same"], position, depth + 1))
            return (number, None)
        return number

    def reads(module: str, position: int) -> Any:
        table = indexes[module]
        names = tuple((name, identity(module, name, position)) for name in sorted(table["names"]))
        extras = tuple(
            next(
                (
                    number
                    for number, (ranges, _) in enumerate(table.get(key, []))
                    if position in _members(ranges)
                ),
                None,
            )
            for key in EXTRAS
        )
        return names, extras

    alike: dict[str, list[str]] = {}
    for module in sorted(indexes if among is None else among):
        runs: dict[Any, list[int]] = {}
        todo = modules[module]
        if known is not None and module in known:
            todo = [position for position in todo if position in fresh]
            for number, run in enumerate(known[module]):
                # nothing fresh to place: the runs stand, with no need to tell them apart
                runs[reads(module, run[0]) if todo else number] = list(run)
        for position in todo:
            runs.setdefault(reads(module, position), []).append(position)
        alike[module] = [encode_ranges(found) for found in sorted(runs.values(), key=min)]
    return alike


#: How many re-exports deep :func:`_alike` follows a name to its home (the recorder
#: writes a re-export of a definition, never of another re-export; this bounds a cycle).
_MAX_HOPS = 8


@functools.cache
def _members(ranges: str) -> frozenset[int]:
    return frozenset(decode_ranges(ranges))


def _joined(spelled: Mapping[str, bytes]) -> bytes:
    """:func:`_dump` of the object whose keys, in sorted order, are those of ``spelled`` and
    whose values are what ``spelled`` holds already dumped: the same bytes, each value
    dumped once however many times it is written or weighed."""
    return b"{%s}" % b",".join(b"%s:%s" % (_dump(key), spelled[key]) for key in sorted(spelled))


def _shards(weights: Mapping[str, int]) -> list[list[str]]:
    """The modules, in order, cut into runs of about :data:`SHARD_BYTES` of JSON each
    (``weights``: each module's bytes of index and records): read together (neighbouring
    modules are alike, so they compress together) and small enough that reading one module
    stays cheap."""
    shards: list[list[str]] = [[]]
    size = 0
    for module in sorted(weights):
        weight = weights[module]
        if shards[-1] and size + weight > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(module)
        size += weight
    return shards if shards[0] else []


def _write(archive: zipfile.ZipFile, name: str, data: Any, level: int) -> None:
    archive.writestr(_member(name), _dump(data), compresslevel=level)


def unpack_records(data: bytes, only: Iterable[str] | None = None) -> dict[str, JSONRecord]:
    """Every release's record, as :func:`pack` was given it (``only`` these releases: the
    others' members are not read)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        releases: list[str] = json.loads(archive.read(INDEX))["releases"]
        wanted = frozenset(releases if only is None else only)
        return {
            release: json.loads(archive.read(release_record_member(release)))
            for release in releases
            if release in wanted
        }


def unpack(data: bytes, only: Iterable[str] | None = None) -> dict[str, dict[str, JSONRecord]]:
    """Every release's surface, as :func:`pack` was given it (``only`` these releases).

    A name's line of full records is kept as text and decoded only when one of its versions
    holds for a wanted release (for one release, a few thousand of some 80,000 lines)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        index = json.loads(archive.read(INDEX))
        releases: list[str] = index["releases"]
        wanted = frozenset(releases if only is None else only)
        surfaces: dict[str, dict[str, JSONRecord]] = {r: {} for r in releases if r in wanted}
        every = len(surfaces) == len(releases)

        @functools.cache
        def positions(ranges: str) -> tuple[int, ...]:
            found = decode_ranges(ranges)
            return tuple(found if every else (p for p in found if releases[p] in wanted))

        tables: dict[str, JSONRecord] = {}
        stored: dict[str, dict[str, str]] = {}
        for number in range(len(index["shards"])):
            tables.update(json.loads(archive.read(f"{number}{NAMES}")))
            for line in archive.read(f"{number}{RECORDS}").decode().splitlines():
                module, name, versions = line.split("\t", 2)
                stored.setdefault(module, {})[name] = versions
        for module, ranges in index["modules"].items():
            table, records = tables[module], stored.get(module, {})
            for position in positions(ranges):
                surfaces[releases[position]][module] = {"names": {}}
            for name, versions in table["names"].items():
                text = records.get(name)
                full: list[Any] | None = None
                for number, (ranges_of, shape) in enumerate(versions):
                    held = positions(ranges_of)
                    if not held:
                        continue
                    if full is None and text is not None:
                        full = json.loads(text)
                        if len(full) != len(versions):
                            raise ValueError(
                                f"{module}.{name}: {len(full)} stored records for "
                                f"{len(versions)} versions"
                            )
                    value = None if full is None else full[number]
                    record = expand_name(read_home(shape, module) if value is None else value)
                    for position in held:
                        surfaces[releases[position]][module]["names"][name] = record
            for key in EXTRAS:
                for ranges_of, value in table.get(key, []):
                    for position in positions(ranges_of):
                        found = surfaces[releases[position]][module]
                        if key == "unreadable":
                            found.pop("names", None)
                        found[key] = value
    return surfaces
