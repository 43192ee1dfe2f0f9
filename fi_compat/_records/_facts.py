"""One recorded release as facts keyed so that two releases compare: what it has and takes.

:func:`facts_of` reads a release's record (:func:`fi_compat._records.load_release`) and
its modules from the store (:mod:`fi_compat._records._store`); nothing here imports
FlashInfer. A key is a tuple whose first item names its kind:

``("name", module, name)``
    The name's kind (``"function"``, ``"class"``, ``"enum"``, ``"module"``, ``"value"``)
    where ``import module`` binds it.
``("defined", module, name)`` / ``("conditional", module, name)``
    Where that name is defined; whether every binding of it sits under a guard.
``("module", module)``
    True where the release ships the module.
``("params", path)``
    ``(name, kind, default)`` of each parameter of the callable at ``path`` (a dotted
    ``module.function``, ``module.Class`` for its constructor, or ``module.Class.method``),
    ``self`` left out (:meth:`Facts.parameter`, :meth:`Facts.positional` and
    :meth:`Facts.var_keyword` read it); ``("returns", path)`` its return annotation, and
    ``("forwards", path)`` where it provably passes ``**kwargs`` on (a method of the same
    class). ``("method", path, name)`` is true for each recorded method of the class at
    ``path``, ``("attribute", path, name)`` for each attribute its instances get by
    construction, and ``("bases", path)`` holds the names of its base classes.
``("getattr", path)``
    Where the class at ``path`` defines ``__getattr__`` (its instances hand out names its
    record does not list): the release's class whose names it hands out, or True where the
    records cannot tell.
``("instance", path)``
    For a value built at import from one of the release's classes: that class's path.
``("member", path, member)``
    The value of one member of the enum at ``path`` (source text when not a literal).
``("hazard", hazard)`` / ``("hazard_python", hazard)``
    Whether the import hazard holds (:class:`fi_compat.hazards.Hazard` names them); the
    first Python it does not hold on, for one that depends on the Python version.

The hazards are the release-wide facts of :attr:`Facts.table`, to which a reader may join
facts of its own (:meth:`Facts.joined`); a name's facts are read when first asked.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from packaging.version import Version

from fi_compat._records import (
    ClassRecord,
    FunctionRecord,
    HazardRecord,
    ModuleRecord,
    NameRecord,
    ParameterRecord,
    ReleaseRecord,
    keyword_acceptance,
    load_release,
)
from fi_compat._records._store import shipping
from fi_compat._signature import Status
from fi_compat._surface import IMPORT_HAZARDS

__all__ = ["Facts", "Key", "facts_of"]

#: A fact's key; see the module docstring.
Key = tuple[str, ...]

_SELF = ("self", "cls")
_POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
_STATIC = ("staticmethod",)
#: The facts read off a name's shape, and where in the shape.
_NAME_FACTS = {"name": 0, "defined": 1, "conditional": 2}
#: The kinds of fact built on first use (:meth:`Facts.build`).
_BUILT_ON_USE = frozenset(
    {
        "params",
        "returns",
        "forwards",
        "method",
        "attribute",
        "bases",
        "member",
        "instance",
        "getattr",
    }
)


@dataclass(frozen=True, eq=False)
class Facts:
    """The facts of one release (see the module docstring), with the evidence of its hazards.

    Built from the release's typed record (:func:`facts_of`), the facts of a name are read
    when first asked: a release has tens of thousands of names, and a diff or a scan asks
    about a few. ``table`` holds the release-wide facts; ``built`` the facts of each name
    built so far, and ``paths`` the keys each path's entry added there.
    """

    release: str
    record: ReleaseRecord
    table: Mapping[Key, Any]
    evidence: Mapping[str, str | None]
    built: dict[Key, Any] = field(default_factory=dict)
    paths: dict[str, tuple[Key, ...]] = field(default_factory=dict)
    cache: dict[Any, Any] = field(default_factory=dict)

    @property
    def version(self) -> Version:
        """The release as a :class:`packaging.version.Version`."""
        return Version(self.release)

    def joined(self, table: Mapping[Key, Any]) -> Facts:
        """These facts with the release-wide facts ``table`` added (what a reader knows of
        the release beyond its record); the facts of its names are shared."""
        return replace(self, table={**self.table, **table})

    def module(self, module: str) -> ModuleRecord | None:
        """The release's record of ``module`` (None without it)."""
        modules: dict[str, ModuleRecord | None] = self.cache.setdefault("modules", {})
        if module not in modules:
            modules[module] = self.record.module(module)
        return modules[module]

    def modules(self) -> frozenset[str]:
        """Every module the release ships."""
        found: frozenset[str] | None = self.cache.get("all_modules")
        if found is None:
            found = self.cache["all_modules"] = frozenset(self.record.names)
        return found

    def ships(self, module: str) -> bool:
        """True when the release ships ``module``."""
        return module in self.modules()

    def get(self, key: Key) -> Any:
        """The value of ``key``, or None when the release has no such fact."""
        kind = key[0]
        if kind in _NAME_FACTS:
            found = self.module(key[1])
            shape = found.shape(key[2]) if found is not None else None
            if shape is None:
                return None
            value = shape[_NAME_FACTS[kind]]
            return value if value or kind != "conditional" else None
        if kind == "module":
            return True if self.ships(key[1]) else None
        if kind in _BUILT_ON_USE:
            path = key[1]
            if path not in self.paths:
                self.build(path)
                owner = path.rpartition(".")[0]
                if owner and owner not in self.paths:
                    self.build(owner)
            return self.built.get(key)
        return self.table.get(key)

    def build(self, path: str) -> tuple[Key, ...]:
        """Build (once) the facts of the name at ``path``; the keys they hold."""
        found = self.paths.get(path)
        if found is not None:
            return found
        facts: dict[Key, Any] = {}
        module, _, name = path.rpartition(".")
        record = self.module(module) if module else None
        if record is not None and name in record.names:
            entry = record.names[name]
            _entry(facts, path, entry, self._extra(entry))
        self.built.update(facts)
        keys = self.paths[path] = tuple(facts)
        return keys

    def _extra(self, entry: NameRecord) -> ClassRecord | None:
        """The class record fi-compat keeps of a comm class or an attention wrapper (with
        the methods it adapts, private ones included), for a class of that name."""
        if entry.cls is None:
            return None
        record, name = self.record, entry.name
        return (
            record.comm_classes.get(name) or record.attention.get(name) or record.families.get(name)
        )

    def span(self, key: Key) -> frozenset[int] | None:
        """The store positions of the releases whose records give ``key`` the very facts
        they give it here (each holds the same stored record), or None where the store
        cannot tell (a release-wide fact, a class fi-compat adapts)."""
        if key[0] == "module":
            return shipping(key[1], self.ships(key[1]))
        if key[0] not in _NAME_FACTS and key[0] not in _BUILT_ON_USE:
            return None
        located = self._located(key)
        if located is None:
            return None
        found, name = located
        return found.span(name)

    def _located(self, key: Key) -> tuple[ModuleRecord, str] | None:
        """The module record and name a per-name key is read from (None for a class
        fi-compat adapts, whose per-release record adds methods, or a path not found)."""
        if key[0] in _NAME_FACTS:
            found = self.module(key[1])
            return None if found is None else (found, key[2])
        module, _, name = key[1].rpartition(".")
        found = self.module(module) if module else None
        if found is None:  # a method's path: the class is one level up
            module, _, name = module.rpartition(".")
            found = self.module(module) if module else None
            if found is None:
                return None
        record = self.record
        if name in record.comm_classes or name in record.attention or name in record.families:
            return None
        return found, name

    def has(self, module: str, name: str) -> bool:
        """True when ``module`` binds ``name`` on the release."""
        return self.get(("name", module, name)) is not None

    def flashinfers(self, module: str, name: str) -> bool:
        """True when ``module`` binds ``name`` and it is FlashInfer's own: defined in
        FlashInfer, not a module or object it imports (``contextlib``, ``ABC``,
        ``Optional``), which a release may stop importing without changing its API."""
        if not self.has(module, name):
            return False
        home = self.get(("defined", module, name)) or module
        return home == "flashinfer" or home.startswith("flashinfer.")

    # ------------------------------------------------------------------ classes

    def subclass_has(self, path: str, name: str) -> bool:
        """True when a recorded class of the same module that derives from the class at
        ``path`` has the method or attribute ``name`` (a factory annotated to return the
        base class hands out one of those)."""
        members: frozenset[str] | None = self.cache.get(("members", path))
        if members is None:
            derived = self._derived(path)
            members = self.cache["members", path] = frozenset(
                key[2]
                for key in list(self.built)
                if key[0] in ("method", "attribute") and key[1] in derived
            )
        return name in members

    def subclass_serves(self, path: str) -> bool:
        """True when a recorded class that derives from the class at ``path``, in its
        module or in the module that defines it, defines ``__getattr__``: it may hand out
        names no record lists."""
        module, _, name = path.rpartition(".")
        home = self.get(("defined", module, name)) or module
        return any(
            self.get(("getattr", derived))
            for where in {path, f"{home}.{name}"}
            for derived in self._derived(where)
        )

    def _derived(self, path: str) -> frozenset[str]:
        """The recorded classes of the module of ``path`` that derive from the class there."""
        found: frozenset[str] | None = self.cache.get(("derived", path))
        if found is None:
            module, _, name = path.rpartition(".")
            record = self.module(module)
            for other in record.names if record is not None else ():
                if (record.shape(other) or ("",))[0] == "class":  # type: ignore[union-attr]
                    self.build(f"{module}.{other}")
            found = self.cache["derived", path] = frozenset(
                key[1]
                for key, bases in list(self.built.items())
                if key[0] == "bases" and name in bases and key[1].rpartition(".")[0] == module
            )
        return found

    # ------------------------------------------------------------------ callables

    def parameter(self, path: str, name: str) -> tuple[str, str | None] | None:
        """``(kind, default)`` of parameter ``name`` of the callable at ``path``, or None."""
        for found, kind, default in self.get(("params", path)) or ():
            if found == name:
                return kind, default
        return None

    def positional(self, path: str) -> tuple[str, ...] | None:
        """The names the callable at ``path`` takes by position, in order; None without it."""
        params = self.get(("params", path))
        if params is None:
            return None
        return tuple(name for name, kind, _ in params if kind in _POSITIONAL)

    def var_keyword(self, path: str) -> bool | None:
        """Whether the callable at ``path`` takes ``**kwargs``; None without it."""
        params = self.get(("params", path))
        if params is None:
            return None
        return any(kind == "VAR_KEYWORD" for _, kind, _ in params)

    def function(self, path: str) -> FunctionRecord | None:
        """The callable at ``path`` as its facts give it (parameters without ``self``, the
        method its ``**kwargs`` provably reaches), or None without it."""
        params = self.get(("params", path))
        if params is None:
            return None
        return FunctionRecord(
            qualname=path,
            defined_in=path.rpartition(".")[0],
            decorators=(),
            parameters=tuple(
                ParameterRecord(name, kind, default) for name, kind, default in params
            ),
            forwards_kwargs_to=self.get(("forwards", path)),
        )

    def acceptance(self, path: str, keyword: str) -> Status:
        """Does the callable at ``path`` accept ``keyword``? The records' one walk
        (:func:`fi_compat._records.keyword_acceptance`, which
        :meth:`~fi_compat._records.ReleaseRecord.acceptance` answers with), over the facts of
        the callable and of the methods its ``**kwargs`` reaches; ``UNKNOWN`` without a
        record of the callable."""
        function = self.function(path)
        if function is None:
            return Status.UNKNOWN
        owner = path.rpartition(".")[0]
        return keyword_acceptance(function, keyword, lambda name: self.function(f"{owner}.{name}"))


def _parameters(function: FunctionRecord, *, method: bool) -> list[ParameterRecord]:
    parameters = list(function.parameters)
    static = any(decorator in _STATIC for decorator in function.decorators)
    if method and not static and parameters and parameters[0].name in _SELF:
        parameters = parameters[1:]
    return parameters


def _callable(table: dict[Key, Any], path: str, function: FunctionRecord, method: bool) -> None:
    table["params", path] = tuple(
        (parameter.name, parameter.kind, parameter.default)
        for parameter in _parameters(function, method=method)
    )
    if function.returns:
        table["returns", path] = function.returns
    target = function.forwards_kwargs_to
    if target is not None and "." not in target and not function.forwards_kwargs_drops:
        table["forwards", path] = target


def _class(table: dict[Key, Any], path: str, data: ClassRecord, extra: ClassRecord | None) -> None:
    methods = dict(data.methods)
    for name, method in (extra.methods if extra is not None else {}).items():
        methods.setdefault(name, method)
    table["bases", path] = tuple(base.rpartition(".")[2] for base in data.bases)
    if data.has_getattr:
        table["getattr", path] = data.delegates_to or True
    for attribute in data.attributes:
        table["attribute", path, attribute] = True
    for name, method in methods.items():
        if method is None:
            continue
        if name == "__init__":
            _callable(table, path, method, method=True)  # the constructor, as engines call it
            continue
        _callable(table, f"{path}.{name}", method, method=True)
        table["method", path, name] = True


def _entry(table: dict[Key, Any], path: str, entry: NameRecord, extra: ClassRecord | None) -> None:
    """The facts of one name (a function, a class, an enum) at ``path``."""
    if entry.function is not None:
        _callable(table, path, entry.function, method=False)
    if entry.cls is not None:
        _class(table, path, entry.cls, extra)
    if entry.enum is not None:
        for member, value in entry.enum.members.items():
            table["member", path, member] = value
    if entry.instance_of is not None:
        table["instance", path] = entry.instance_of


@functools.cache
def facts_of(release: str) -> Facts:
    """The facts of a recorded release (cached for the process).

    Raises
    ------
    UnknownReleaseError
        No record ships for ``release``.
    """
    record = load_release(release)
    table: dict[Key, Any] = {}
    evidence = {}
    for hazard in IMPORT_HAZARDS:
        found: HazardRecord = getattr(record, hazard)
        table["hazard", hazard] = found.value
        evidence[hazard] = found.evidence
        if found.python is not None:
            table["hazard_python", hazard] = found.python
    return Facts(record.release, record, table, evidence)
