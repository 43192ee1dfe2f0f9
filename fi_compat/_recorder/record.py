"""One release's record: what fi-compat reads of FlashInfer, taken from ``fi_compat._surface``.

The names come from the one description of FlashInfer's surface: every function, enum
and class symbol of ``flashinfer.comm`` and every attention wrapper is looked up under
each of its homes, newest first, and recorded under the FlashInfer name it has there
(null when the release binds no home of that name), and so is each ``flashinfer.decode``
function symbol. A rename or a move in FlashInfer is a new
:class:`~fi_compat._surface.Home` in the surface and nothing here. Every attention family of
``ATTENTION_FAMILIES`` that top-level ``flashinfer`` exports is recorded as well
(``attention_families``); every module's names are the surface's (:mod:`.surface`), kept
in the store. The layout is described in
``fi_compat/_records/README.md``.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fi_compat._forwarding import calls_named
from fi_compat._recorder.archive import read_release, version_from_filename
from fi_compat._recorder.hazards import import_hazards
from fi_compat._recorder.resolve import Package
from fi_compat._recorder.signatures import ClassNode, Recorder
from fi_compat._records._format import JSONRecord
from fi_compat._surface import (
    ATTENTION_FAMILIES,
    COMM,
    COMM_SYMBOLS,
    DECODE_FUNCTIONS,
    FLASHINFER,
    INIT,
    PLAN,
    PLAN_IMPL,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    WORKSPACE,
    WRAPPER_SYMBOLS,
    Home,
    Symbol,
)
from fi_compat.errors import RecordingError

__all__ = ["SCHEMA_VERSION", "dump_record", "file_sha256", "record_release"]

#: Bumped whenever the JSON layout changes in a way a reader of the previous version would
#: misread (2: name tables, ``decode``, class attributes; 3: the name tables left for the
#: surface store, which records every module). ``attention_families`` is a new key a
#: schema-2 reader ignores and a file without it reads as recording none, so it needed no
#: bump.
SCHEMA_VERSION = 3

# Facts only the recorder needs, so the surface does not declare them:
#: The method fi-compat frees a unified workspace with, recorded on every workspace class.
_DESTROY = "destroy"
#: ``TorchDistBackend``'s broadcast, and the torch.distributed call that makes its ``root``
#: group-local (the record's ``bcast_root_is_group_local``).
_BCAST = "bcast"
_GLOBAL_RANK = "get_global_rank"
#: The methods recorded on every attention family besides ``__init__``, ``plan`` and
#: ``_plan_impl``: the pre-0.2 name of ``plan`` (an alias of it in most classes, a method
#: of its own in the shared-prefix cascade wrapper), ``run`` and its older name.
_BEGIN_FORWARD = "begin_forward"
_RUN = "run"
_FORWARD = "forward"
_FAMILY_METHODS = (INIT, PLAN, _BEGIN_FORWARD, _RUN, _FORWARD, PLAN_IMPL)

#: Looks a symbol up at one of its homes: its record there, or None.
Lookup = Callable[[Symbol, Home], "JSONRecord | None"]


def _methods(symbol: Symbol, *extra: str) -> tuple[str, ...]:
    """The methods recorded on a class: ``__init__``, those the surface reads, ``extra``."""
    return tuple(dict.fromkeys((INIT, *symbol.methods, *extra)))


def _by_name(symbols: Iterable[Symbol], lookup: Lookup) -> dict[str, JSONRecord | None]:
    """Each name the symbols have had -> the record at the newest home of that name found."""
    records: dict[str, JSONRecord | None] = {}
    for symbol in symbols:
        for name in symbol.names:
            homes = (home for home in symbol.homes if home.name == name)
            found = (lookup(symbol, home) for home in homes)
            records[name] = next((record for record in found if record is not None), None)
    return records


def _of_kind(kind: str) -> list[Symbol]:
    return [symbol for symbol in COMM_SYMBOLS if symbol.kind == kind]


def record_release(
    path: Path, *, release: str | None = None, package: Package | None = None
) -> JSONRecord:
    """JSONRecord one release.

    Parameters
    ----------
    path
        A ``.whl``, an sdist ``.tar.gz`` or a directory containing ``flashinfer/``.
    release
        The version to record; by default taken from the file name.
    package
        The release's files already read from ``path`` (a caller that also takes the
        release's surface reads and parses them once).

    Returns
    -------
    dict
        The JSON-ready record (see ``signatures/README.md``).
    """
    version = release or version_from_filename(path.name)
    if version is None:
        raise RecordingError(f"cannot tell the release version of {path}; pass release=")
    if package is None:
        package = Package(read_release(path))
    recorder = Recorder(package)
    workspace_classes, classes = _comm_classes(recorder)
    return {
        "schema": SCHEMA_VERSION,
        "release": version,
        "source": {"filename": path.name, "sha256": file_sha256(path)},
        "import": import_hazards(package),
        "comm": {
            "exists": package.source.is_module(COMM),
            "functions": _by_name(
                _of_kind("function"), lambda _, home: recorder.function(home.module, home.name)
            ),
            "enums": _by_name(
                _of_kind("enum"), lambda _, home: recorder.enum_record(home.module, home.name)
            ),
            "classes": classes,
            "workspace_classes": workspace_classes,
        },
        "attention": _by_name(
            WRAPPER_SYMBOLS, lambda symbol, home: _wrapper(recorder, symbol, home)
        ),
        "decode": _by_name(
            DECODE_FUNCTIONS, lambda _, home: recorder.function(home.module, home.name)
        ),
        "attention_families": _families(recorder),
    }


def _comm_classes(recorder: Recorder) -> tuple[list[str], dict[str, JSONRecord | None]]:
    """The workspace classes the factory returns, and every class record of ``comm``.

    The classes of ``flashinfer.comm`` are the unified API's workspaces, recorded with
    ``__init__`` and ``destroy`` and whether ``flashinfer.comm`` exports them, and
    ``TorchDistBackend``, found in its own modules.
    """
    homes = UNIFIED_FACTORY.homes
    home = next((h for h in homes if recorder.package.resolve(h.module, h.name)), homes[0])
    annotated = recorder.returned_classes(home.module, home.name)
    constructed = recorder.constructed_classes(home.module, home.name)
    # The annotated (abstract) class first, then the concrete classes built per backend.
    workspace_classes = [*annotated, *(name for name in constructed if name not in annotated)]
    where = {**annotated, **constructed}
    methods = _methods(WORKSPACE, _DESTROY)

    def workspace(module: str, name: str) -> JSONRecord | None:
        found = recorder.class_record(module, name, methods)
        if found is not None:
            found["exported"] = module == COMM
        return found

    def lookup(symbol: Symbol, home: Home) -> JSONRecord | None:
        if symbol is TORCH_DIST_BACKEND:
            return _torch_dist_backend(recorder, home)
        return workspace(home.module, home.name)

    classes = _by_name(_of_kind("class"), lookup)
    for name in workspace_classes:
        if classes.get(name) is None:
            classes[name] = workspace(COMM, name) or workspace(where[name], name)
    return workspace_classes, classes


def _torch_dist_backend(recorder: Recorder, home: Home) -> JSONRecord | None:
    found = recorder.class_record(home.module, home.name, _methods(TORCH_DIST_BACKEND))
    if found is None:
        return None
    defining = recorder.find_class(home.module, home.name)
    assert defining is not None
    bcast = recorder.find_method(*defining, _BCAST)
    found["module"] = home.module
    found["bcast_root_is_group_local"] = bcast is not None and calls_named(bcast[2], _GLOBAL_RANK)
    return found


def _wrapper(recorder: Recorder, symbol: Symbol, home: Home) -> JSONRecord | None:
    found = recorder.class_record(home.module, home.name, _methods(symbol))
    if found is None:
        return None
    plan = found["methods"].get(PLAN)
    target = plan.get("forwards_kwargs_to") if plan else None
    found["plan_forwards_to"] = target if target in found["methods"] else None
    return found


def _families(recorder: Recorder) -> dict[str, JSONRecord | None]:
    """Every class of ``ATTENTION_FAMILIES`` as top-level ``flashinfer`` binds it, or null.

    Each is recorded with ``__init__``, ``plan``, ``begin_forward``, ``run``, ``forward``
    and ``_plan_impl`` (null where the class and its bases have none; a class-body alias
    such as ``begin_forward = plan`` is recorded as the ``def`` it names), whatever their
    ``**kwargs`` reach, its instance attributes, ``plan_forwards_to`` as for the wrappers,
    and ``family_bases``: its direct base classes that are families too, by family name.
    A method that is an alias of another recorded one is listed in ``aliases`` (alias ->
    method) instead of ``methods``, so its record is not written twice.
    """
    found: dict[str, ClassNode] = {}
    for name in ATTENTION_FAMILIES:
        node = recorder.find_class(FLASHINFER, name)
        if node is not None:
            found[name] = node
    records: dict[str, JSONRecord | None] = {}
    for name in ATTENTION_FAMILIES:
        if name not in found:
            records[name] = None
            continue
        record = recorder.class_record(FLASHINFER, name, _FAMILY_METHODS, aliases=True)
        assert record is not None
        record["aliases"] = _aliases(record["methods"])
        for alias in record["aliases"]:
            del record["methods"][alias]
        plan = record["methods"].get(PLAN) or record["methods"].get(_BEGIN_FORWARD)
        target = plan.get("forwards_kwargs_to") if plan else None
        record["plan_forwards_to"] = target if target in record["methods"] else None
        record["family_bases"] = _family_bases(recorder, found[name], found)
        records[name] = record
    return records


def _aliases(methods: dict[str, JSONRecord | None]) -> dict[str, str]:
    """Each recorded method that is another recorded method's ``def`` -> that method."""
    found: dict[str, str] = {}
    for name, method in methods.items():
        if method is None:
            continue
        own = method["qualname"].rpartition(".")[2]
        if own != name and methods.get(own) == method:
            found[name] = own
    return found


def _family_bases(recorder: Recorder, cls: ClassNode, families: dict[str, ClassNode]) -> list[str]:
    """The direct bases of ``cls`` that resolve to one of ``families``, by family name."""
    module, node = cls
    names: list[str] = []
    for base in node.bases:
        if not isinstance(base, ast.Name):
            continue
        resolved = recorder.find_class(module.name, base.id)
        if resolved is None:
            continue
        for family, (_, family_node) in families.items():
            if family_node is resolved[1] and family not in names:
                names.append(family)
    return names


def file_sha256(path: Path) -> str | None:
    """The file's sha256 (hex), or None for a source tree."""
    if path.is_dir():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dump_record(record: Mapping[str, Any]) -> str:
    """A record's one canonical text (sorted keys, no whitespace, final newline): the same
    record always gives the same text (``python -m tools.record --output -`` prints it)."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
