"""The recorded signatures of real flashinfer-python releases, and their typed loader.

The product's data about FlashInfer: read by the errors that name a release, the report, the
fake of :mod:`fi_compat.testing` (which re-exports the loader) and the tools. One store ships
in this package (``fi_compat/_records/surface.zip``: each release's record and every
module's names), read lazily when a release is first asked for; a release modelled on the
user's machine joins it there (:mod:`fi_compat._records._catalogue`). The format is
documented in ``fi_compat/_records/README.md``.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from packaging.version import Version

from fi_compat._arguments import describe, require_str
from fi_compat._deprecation import renamed_keyword
from fi_compat._local import installed_fingerprint, is_left_out
from fi_compat._log import get_logger
from fi_compat._records._catalogue import (
    RECORD_COMMAND,
    Local,
    build,
    download,
    installed,
    known_releases,
    local_releases,
    shipped_files,
    shipped_names,
)
from fi_compat._records._catalogue import forget as forget_local
from fi_compat._records._classes import (
    ClassRecord,
    EnumRecord,
    FunctionRecord,
    HazardRecord,
    KeptArgument,
    NameKind,
    NameRecord,
    ParameterRecord,
    ReleaseRecord,
    keyword_acceptance,
)
from fi_compat._records._parse import class_record, enum_record, function_record, name_record
from fi_compat._records._store import (
    ModuleRecord,
    ModuleTables,
    finals_first,
    module_record,
    modules_of,
    opened,
)
from fi_compat._surface import (
    COMM,
    UNIFIED_FACTORY,
    WORKSPACE,
)
from fi_compat._version import __version__
from fi_compat.errors import RecordingError, UnknownReleaseError

__all__ = [
    "SCHEMA_VERSION",
    "ClassRecord",
    "EnumRecord",
    "FunctionRecord",
    "HazardRecord",
    "KeptArgument",
    "ModuleRecord",
    "NameKind",
    "NameRecord",
    "ParameterRecord",
    "ReleaseRecord",
    "available_releases",
    "introduced_in",
    "keyword_acceptance",
    "keyword_introduced_in",
    "known_model",
    "listed_releases",
    "load_release",
    "member_introduced_in",
    "model_release",
    "module_introduced_in",
]

#: The schema version the recorder writes; the loader also reads schema 1 (files recorded
#: before the name tables, ``fast_decode_plan`` and class attributes, which read as empty)
#: and 2 (with the name tables of seven modules, which schema 3 leaves to the surface
#: store). ``attention_families`` came later within schema 2: a file without it records none.
SCHEMA_VERSION = 3
_SCHEMAS = (1, 2, SCHEMA_VERSION)

_logger = get_logger(__name__)

# ----------------------------------------------------------------------------- parsing


def _names(table: Mapping[str, Any]) -> Mapping[str, NameRecord]:
    return MappingProxyType({name: name_record(name, value) for name, value in table.items()})


class _NameTables(Mapping[str, Mapping[str, NameRecord]]):
    """Module -> its name table, each parsed on first use: the attention backends' tables
    are most of a record, and most readers of a record never look at them. Read-only,
    equal to the same tables parsed at once, and picklable as the JSON it came from."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self._raw = dict(raw)
        self._parsed: dict[str, Mapping[str, NameRecord]] = {}

    def __getitem__(self, module: str) -> Mapping[str, NameRecord]:
        found = self._parsed.get(module)
        if found is None:
            found = self._parsed[module] = _names(self._raw[module])
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __reduce__(self) -> tuple[Any, ...]:
        return _NameTables, (self._raw,)

    def __repr__(self) -> str:
        return f"<name tables of {sorted(self._raw)}>"


def raw_name_tables(data: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Each module of ``NAMED_MODULES`` the record lists -> its name table as decoded JSON
    (none in schema 1): the communication modules under ``comm``, the attention backends'
    under ``modules``."""
    comm = data["comm"]
    tables = {COMM: comm["names"]} if "names" in comm else {}
    for submodule, table in comm.get("submodules", {}).items():
        tables[f"{COMM}.{submodule}"] = table
    tables.update(data.get("modules", {}))
    return tables


def _name_tables(data: Mapping[str, Any]) -> Mapping[str, Mapping[str, NameRecord]]:
    """:func:`raw_name_tables`, each table parsed on first use."""
    return _NameTables(raw_name_tables(data))


def _hazard(data: Mapping[str, Any]) -> HazardRecord:
    return HazardRecord(bool(data["value"]), data["evidence"], data.get("python"))


_NO_HAZARD = {"value": False, "evidence": None}


def parse_record(
    data: Mapping[str, Any], names: Mapping[str, Mapping[str, NameRecord]] | None = None
) -> ReleaseRecord:
    """Build a :class:`ReleaseRecord` from a decoded JSON document.

    ``names`` are the release's name tables, module by module: the shipped releases take
    them from the surface store (every module); without them, from the tables the document
    holds (files recorded before the store, and records made in tests).
    """
    if data.get("schema") not in _SCHEMAS:
        raise ValueError(f"expected schema 1 to {SCHEMA_VERSION}; found {data.get('schema')!r}")
    comm = data["comm"]
    hazards = data["import"]
    return ReleaseRecord(
        release=data["release"],
        source_filename=data["source"]["filename"],
        source_sha256=data["source"]["sha256"],
        comm_requires_cuda_runtime=_hazard(hazards["comm_requires_cuda_runtime"]),
        import_queries_gpu=_hazard(hazards["import_queries_gpu"]),
        comm_requires_triton=_hazard(hazards["comm_requires_triton"]),
        comm_requires_python=_hazard(hazards.get("comm_requires_python", _NO_HAZARD)),
        comm_exists=bool(comm["exists"]),
        comm_functions=MappingProxyType(
            {name: function_record(value) for name, value in comm["functions"].items()}
        ),
        comm_enums=MappingProxyType(
            {name: enum_record(name, value) for name, value in comm["enums"].items()}
        ),
        comm_classes=_Parsed(comm["classes"], class_record),
        workspace_classes=tuple(comm["workspace_classes"]),
        attention=_Parsed(data["attention"], class_record),
        names=_name_tables(data) if names is None else names,
        decode_functions=MappingProxyType(
            {name: function_record(value) for name, value in data.get("decode", {}).items()}
        ),
        families=_Parsed(data.get("attention_families", {}), class_record),
    )


class _Parsed(Mapping[str, Any]):
    """Name -> its class record, each parsed on first use (a diff walks dozens of
    releases and reads few of their classes). Equal to the parsed dict; read-only."""

    def __init__(self, raw: Mapping[str, Any], parse: Callable[[str, Any], Any]) -> None:
        self._raw = raw
        self._parse = parse
        self._done: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._done:
            self._done[name] = self._parse(name, self._raw[name])
        return self._done[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __reduce__(self) -> tuple[Any, ...]:
        return _Parsed, (dict(self._raw), self._parse)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


# ----------------------------------------------------------------------------- loading


def _signatures() -> Any:
    return shipped_files()


def _sort_key(version: str) -> Version:
    return Version(version)


def listed_releases() -> list[str]:
    """Releases named in ``releases.txt`` (the single source of truth), oldest first; a new
    list on each call.

    .. versionadded:: 0.2.0
    """
    return list(_listed())


@functools.cache
def _listed() -> tuple[str, ...]:
    text = _signatures().joinpath("releases.txt").read_text(encoding="utf-8")
    names = [line.strip() for line in text.splitlines()]
    return tuple(
        sorted((name for name in names if name and not name.startswith("#")), key=_sort_key)
    )


def available_releases() -> list[str]:
    """Releases fi-compat has a model of, sorted by :class:`packaging.version.Version`: the
    shipped ones (less those ``FI_COMPAT_UNRECORDED`` sets aside) and those modelled on this
    machine from their own files (``fi-compat record``, or the installed release on first
    use).

    .. versionadded:: 0.2.0
    """
    return list(known_releases())


def shipped_releases() -> tuple[str, ...]:
    """Every release fi-compat knows (:func:`available_releases`), as a tuple, listed once
    per process until a release is modelled (every fake asks on entry)."""
    return known_releases()


def canonical_release(version: str) -> str:
    """The known release ``version`` names (compared as PEP 440 versions). The installed
    release, unknown so far, is modelled from its own files first (once per release and
    machine, kept in the user's cache)."""
    found = _spelled(version)
    if found is not None:
        return found
    failed = _model_installed(version)
    found = _spelled(version)
    if found is not None:
        return found
    available = known_releases()
    try:
        wanted = Version(version)
    except ValueError:  # InvalidVersion, or a number too long for int() (a hostile string)
        wanted = None
    raise UnknownReleaseError(
        f"expected a flashinfer-python release fi-compat knows "
        f"({available[0]} .. {available[-1]}); found "
        f"{describe(version)}{_neighbours(wanted, available)}"
        + (f" (modelling the installed release failed: {failed})" if failed else "")
    )


def _spelled(version: str) -> str | None:
    available = known_releases()
    if version in available:
        return version
    try:
        wanted = Version(version)
    except ValueError:
        return None
    for name in available:
        if Version(name) == wanted:
            return name
    return None


def _model_installed(version: str) -> str | None:
    """Model the installed release from its files when it is ``version`` and fi-compat has
    no model of it yet, and join it to the store every process reads. None when that was
    done or was not for this call to do; else why it failed (an unwritable cache, a builder
    that could not read the files): the release then stays unknown, as any other, and
    nothing half-made is kept for later processes to trip on."""
    here = installed()
    try:
        if here is None or Version(here[0]) != Version(version):
            return None
    except ValueError:
        return None
    release, package = here
    _logger.info(
        "flashinfer %s has no model in fi-compat %s: modelling it from its installed files "
        "at %s (once per release and machine)",
        release,
        __version__,
        package,
    )
    made: Local | None = None
    try:
        made, _ = build(package, release, source=f"installed: {package}")
        forget()
        opened()  # packs the store with the model, once, here where a failure is caught
    except (RecordingError, OSError) as error:
        _logger.info("modelling flashinfer %s failed: %s", release, error)
        if made is not None:
            shutil.rmtree(made.folder, ignore_errors=True)
        forget()
        return f"{type(error).__name__}: {error}"
    return None


def model_release(release: str | None = None, *, path: Path | None = None) -> dict[str, Any]:
    """Model a release from its own files into the user's cache (``fi-compat record``).

    ``path``: a wheel, an sdist or a tree; else the release ``release`` fetched from the
    package index; else the installed release. A release fi-compat ships data for (and
    ``FI_COMPAT_UNRECORDED`` does not set aside) is left as it is, and so is one already
    modelled from the same files. Returns what was done: ``release``, ``action``
    (``"shipped"``, ``"cached"`` or ``"modelled"``), ``source``, ``folder`` and
    ``previous`` (the known release before it, to diff against).

    Raises
    ------
    RecordingError
        No release was named and none is installed, the release is not a PEP 440 version,
        its files hold no ``flashinfer`` package, or it could not be fetched (the message
        names the command to run where the index is reachable and the path to give).
    """
    if path is not None:
        return _outcome(*build(path, release, source=str(path)))
    if release is None:
        here = installed()
        if here is None:
            raise RecordingError(
                "expected an installed flashinfer-python to model; found none (or a source "
                f"build, which names no release). Fix: `{RECORD_COMMAND} RELEASE` or "
                f"`{RECORD_COMMAND} --path FILE`"
            )
        release, package = here
        if _is_shipped(release):
            return _shipped_outcome(release)
        existing = local_releases().get(release)
        if existing is not None and existing.fingerprint == installed_fingerprint(package):
            return _outcome(existing, False)
        return _outcome(*build(package, release, source=f"installed: {package}"))
    try:
        release = str(Version(release))
    except ValueError as error:
        raise RecordingError(
            f"expected a PEP 440 release such as 0.7.4; found {describe(release)}"
        ) from error
    if _is_shipped(release):
        return _shipped_outcome(release)
    existing = local_releases().get(release)
    if existing is not None:
        return _outcome(existing, False)
    fetched = download(release)
    return _outcome(*build(fetched, release, source=f"package index: {fetched.name}"))


def known_model(release: str) -> bool:
    """True when fi-compat now answers for ``release`` (shipped or modelled here)."""
    return _spelled(release) is not None


def _is_shipped(release: str) -> bool:
    return release in shipped_names() and not is_left_out(release)


def _shipped_outcome(release: str) -> dict[str, Any]:
    return {
        "release": release,
        "action": "shipped",
        "source": "fi-compat's shipped data",
        "folder": None,
        "previous": None,
    }


def _outcome(local: Local, made: bool) -> dict[str, Any]:
    forget()
    action = "modelled" if made else "cached"
    known = known_releases()
    at = known.index(local.release) if local.release in known else 0
    return {
        "release": local.release,
        "action": action,
        "source": local.source,
        "folder": str(local.folder),
        "previous": known[at - 1] if at > 0 else None,
    }


def forget() -> None:
    """Drop what this process read of the known releases, after one was modelled here."""
    forget_local()
    for cached in (
        _load,
        _introduced_in,
        _module_introduced_in,
        keyword_introduced_in,
        member_introduced_in,
        opened,
        modules_of,
        module_record,
    ):
        cached.cache_clear()


def _neighbours(wanted: Version | None, available: tuple[str, ...]) -> str:
    """Where an unknown release falls among the known ones, and how to model it."""
    if wanted is None:
        return ", which is not a PEP 440 version"
    below = [name for name in available if Version(name) < wanted]
    above = [name for name in available if Version(name) > wanted]
    return (
        f", unknown here (nearest: {below[-1] if below else 'none'} below, "
        f"{above[0] if above else 'none'} above). Fix: `{RECORD_COMMAND} {wanted}`, or "
        f"install it"
    )


def _document(name: str) -> Any:
    """The record of the release ``name`` as decoded JSON, from the store (uncached: see
    :func:`_load`)."""
    return opened().record(name)


@functools.cache
def _load(name: str) -> ReleaseRecord:
    return parse_record(_document(name), ModuleTables(name))


@renamed_keyword("version", "release", until="0.4.0")
def load_release(release: str) -> ReleaseRecord:
    """The recorded signatures of one release.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    release
        A release string such as ``"0.6.5"`` or ``"0.7.2.post1"`` (compared as a
        :class:`packaging.version.Version`, so ``"0.7.2post1"`` works too). Spelled
        ``version=`` before fi-compat 0.3.0 (still taken, with a ``DeprecationWarning``).

    Raises
    ------
    UnknownReleaseError
        No signature file ships for that release (a ``LookupError``).
    """
    return _load(canonical_release(release))


def introduced_in(module: str, name: str) -> str | None:
    """The first recorded release whose ``module`` binds ``name``, or None when none does.

    Releases are taken in version order over :func:`available_releases`; answers are
    cached for the process.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    module
        A module's dotted name (``flashinfer.comm``, ``flashinfer.fused_moe``): every
        module of every release is recorded.
    name
        A public name of that module (``"MoeAlltoAll"``).

    Raises
    ------
    InvalidArgumentError
        ``module`` or ``name`` is not a non-empty str.
    """
    require_str("module", module, nonempty=True)
    require_str("name", name, nonempty=True)
    return _introduced_in(module, name)


@functools.cache
def _introduced_in(module: str, name: str) -> str | None:
    return _first(lambda record: name in record.public_names(module))


def module_introduced_in(module: str) -> str | None:
    """The first recorded release that ships ``module`` (``"flashinfer.comm.mapping"``), or
    None when none does.

    .. versionadded:: 0.3.0

    Raises
    ------
    InvalidArgumentError
        ``module`` is not a non-empty str.
    """
    require_str("module", module, nonempty=True)
    return _module_introduced_in(module)


@functools.cache
def _module_introduced_in(module: str) -> str | None:
    from fi_compat._records import _store

    return _store.module_introduced_in(module)


@functools.cache
def keyword_introduced_in(qualname: str, keyword: str) -> str | None:
    """The first recorded release whose ``qualname`` accepts ``keyword`` (see
    :meth:`ReleaseRecord.accepts`), or None when none does. Cached for the process."""
    return _first(lambda record: record.accepts(qualname, keyword))


@functools.cache
def member_introduced_in(enum: str, member: str) -> str | None:
    """The first recorded release whose ``flashinfer.comm`` enum ``enum`` has ``member``, or
    None when none does. Cached for the process."""

    def has(record: ReleaseRecord) -> bool:
        found = record.comm_enums.get(enum)
        return found is not None and member in found.members

    return _first(has)


def _first(has: Callable[[ReleaseRecord], bool]) -> str | None:
    """The first recorded final release, in version order, for which ``has`` is true; the
    first pre-release only when no final release has it yet (:func:`finals_first`). A diff,
    which walks every release, cites the pre-release."""
    for release in finals_first(available_releases()):
        if has(load_release(release)):
            return release
    return None


def workspace_kinds(record: ReleaseRecord) -> dict[str, str]:
    """Workspace class name -> the backend the unified factory builds it for ("" for the base).

    Read from the record: the class the factory's return annotation names is the base;
    the concrete class defined next to the factory is TRT-LLM's, the one the factory
    builds but ``flashinfer.comm`` does not export is MNNVL CuTe DSL's (0.7.2.post1), and
    the other exported one is MNNVL's. Empty for a release without the unified API.
    """
    factory = record.comm_function(UNIFIED_FACTORY.key)
    if factory is None:
        return {}
    kinds: dict[str, str] = {}
    for name in record.workspace_classes:
        cls = record.comm_class(name)
        if cls is None:
            continue
        if name in WORKSPACE.names:
            kinds[name] = ""
        elif cls.exported is False:
            kinds[name] = "mnnvl-cutedsl"
        elif cls.defined_in == factory.defined_in:
            kinds[name] = "trtllm"
        else:
            kinds[name] = "mnnvl"
    return kinds
