"""What the recorded release says lives where: every object of a fake and its bindings.

:func:`_collect` reads a :class:`~fi_compat.testing.ReleaseRecord` into a :class:`_Registry`
of :class:`_Entry` objects: each function, class, enum and outside name of the fake, the
module the release defines it in and every module that binds it (the attention families,
the public names of ``flashinfer.comm`` and ``flashinfer.comm.mnnvl``, the workspace
classes with the backend each serves, ``fast_decode_plan``, the MNNVL strategy enum). The
source generator (:mod:`fi_compat.testing._generator`) writes one module per entry of it.
The testing guide, ``docs/guide/testing.md``, says what the fake holds.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fi_compat._records import (
    ClassRecord,
    FunctionRecord,
    NameRecord,
    ReleaseRecord,
    workspace_kinds,
)
from fi_compat._surface import (
    ATTENTION_MODULES,
    COMM,
    COMM_NAMED_MODULES,
    DECODE,
    FLASHINFER,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    symbol_named,
)
from fi_compat.testing._objects import inside, served, unmodelled_reason
from fi_compat.testing._workspaces import Strategy


@dataclass
class Entry:
    """One object of the fake: what it is, where the release defines it, where it is bound."""

    handle: str
    name: str
    defined_in: str
    kind: str
    function: FunctionRecord | None = None
    cls: ClassRecord | None = None
    members: Mapping[str, Any] | None = None
    bindings: dict[str, set[str]] = field(default_factory=dict)
    #: For a workspace class: the backend it serves ("" for the base class).
    workspace: str | None = None
    #: A module-level function the release gives an object as ``self``.
    takes_self: bool = False
    #: For an attention family: its name, and whether it is (or derives from) the decode
    #: wrapper, whose ``plan`` checks tensor cores.
    family: str | None = None
    decode: bool = False
    #: For a name imported from outside the release: the module it comes from, and
    #: whether the name is that module itself (``import os``).
    outside: str | None = None
    outside_module: bool = False
    #: Bindings made on first access (module -> public names): the names only the
    #: attention backends' modules list (``ATTENTION_MODULES``), so a fake imports the
    #: modules defining them only when engine code reaches for one.
    lazy: dict[str, set[str]] = field(default_factory=dict)
    #: For a value the release assigns: its recorded literal (Python source), bound as is;
    #: else why the fake leaves it unbound (``unmodelled``), so that an engine's
    #: ``getattr(module, name, default)`` falls back as it would where the name is absent.
    literal: str | None = None
    unmodelled: str | None = None


def value_of(entry: Entry, found: NameRecord) -> None:
    """Give ``entry``, a value of the release, what its name record ``found`` says of it:
    its literal, or why the fake leaves it unbound."""
    entry.literal = found.literal
    entry.unmodelled = unmodelled_reason(found)


_STRONGER = {"value": 0, "module": 1, "function": 2, "class": 3, "enum": 4}


def _merge_classes(old: ClassRecord | None, new: ClassRecord | None) -> ClassRecord | None:
    if old is None or new is None:
        return old or new
    methods = dict(old.methods)
    for name, method in new.methods.items():
        if methods.get(name) is None:
            methods[name] = method
    return dataclasses.replace(
        old,
        methods=methods,
        bases=old.bases or new.bases,
        module=old.module or new.module,
        plan_forwards_to=old.plan_forwards_to or new.plan_forwards_to,
        bcast_root_is_group_local=(
            new.bcast_root_is_group_local
            if old.bcast_root_is_group_local is None
            else old.bcast_root_is_group_local
        ),
        exported=old.exported if old.exported is not None else new.exported,
        attributes=old.attributes or new.attributes,
        family_bases=old.family_bases or new.family_bases,
        aliases=old.aliases or new.aliases,
    )


class Registry:
    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], Entry] = {}
        #: Modules a module-kind name binds: module -> {public name: target module}.
        self.module_names: dict[str, dict[str, str]] = {}
        #: The same, bound on first access (see :attr:`_Entry.lazy`).
        self.lazy_module_names: dict[str, dict[str, str]] = {}
        self._index: dict[str, list[Entry]] | None = None
        self._classes: dict[str, list[Entry]] | None = None
        self._enums: dict[str, Entry] | None = None

    def add(
        self,
        defined_in: str,
        name: str,
        kind: str,
        *,
        function: FunctionRecord | None = None,
        cls: ClassRecord | None = None,
        members: Mapping[str, Any] | None = None,
    ) -> Entry:
        self._index = self._classes = self._enums = None
        key = (defined_in, name)
        entry = self.entries.get(key)
        if entry is None:
            entry = Entry(f"_fi_{len(self.entries)}", name, defined_in, kind)
            self.entries[key] = entry
            entry.bindings.setdefault(defined_in, set()).add(name)
        elif _STRONGER[kind] > _STRONGER[entry.kind]:
            entry.kind = kind
        entry.function = entry.function or function
        entry.cls = _merge_classes(entry.cls, cls)
        entry.members = entry.members if entry.members is not None else members
        return entry

    def bind(self, entry: Entry, module: str, name: str, *, lazy: bool = False) -> None:
        self._index = self._classes = self._enums = None
        (entry.lazy if lazy else entry.bindings).setdefault(module, set()).add(name)

    def in_module(self, module: str) -> list[Entry]:
        """The entries ``module`` defines or binds (eagerly or lazily), in registry order
        (computed once for all modules, until the next :meth:`add` or :meth:`bind`)."""
        if self._index is None:
            index: dict[str, list[Entry]] = {}
            for entry in self.entries.values():
                for name in {entry.defined_in, *entry.bindings, *entry.lazy}:
                    index.setdefault(name, []).append(entry)
            self._index = index
        return self._index.get(module, [])

    def classes_by_name(self) -> dict[str, list[Entry]]:
        """Each name a class or enum is defined or bound under -> those entries."""
        if self._classes is None:
            found: dict[str, list[Entry]] = {}
            for entry in self.entries.values():
                if entry.kind in ("class", "enum"):
                    bound = {n for names in entry.bindings.values() for n in names}
                    for name in {entry.name} | bound:
                        found.setdefault(name, []).append(entry)
            self._classes = found
        return self._classes

    def enums_by_name(self) -> dict[str, Entry]:
        """Each name an enum (``enum.Enum``) is defined or bound under -> its entry
        (computed once, until the next :meth:`add` or :meth:`bind`; every module a build
        writes asks)."""
        if self._enums is None:
            self._enums = {
                name: entries[0]
                for name, entries in self.classes_by_name().items()
                if enum_base_of(entries[0]) is not None
            }
        return self._enums


def _workspace_backends(record: ReleaseRecord) -> dict[str, str]:
    """Workspace class name -> the backend the factory builds it for ("" for the base)."""
    return workspace_kinds(record)


def collect(record: ReleaseRecord) -> Registry:
    """Every object of the fake, from the record."""
    registry = Registry()
    decode = _decode_families(record)
    families = [(name, record.attention_family(name)) for name in record.attention_families]
    for name, wrapper in [*sorted(record.attention.items()), *families]:
        if wrapper is not None:
            entry = registry.add(wrapper.defined_in, name, "class", cls=wrapper)
            entry.family = name
            entry.decode = name in decode
            # On first use: a fake whose test never touches attention does not import the
            # modules defining the wrappers (and everything they define).
            registry.bind(entry, FLASHINFER, name, lazy=True)
    if record.comm_exists:
        for name, func in sorted(record.comm_functions.items()):
            if func is not None:
                entry = registry.add(func.defined_in, func.name, "function", function=func)
                registry.bind(entry, COMM, name)
        for name, constants in sorted(record.comm_enums.items()):
            if constants is not None:
                entry = registry.add(constants.defined_in, name, "class", members=constants.members)
                registry.bind(entry, COMM, name)
        backends = _workspace_backends(record)
        for name, cls in sorted(record.comm_classes.items()):
            if cls is None:
                continue
            entry = registry.add(cls.defined_in, name, "class", cls=cls)
            entry.workspace = backends.get(name)
            if symbol_named(name) is TORCH_DIST_BACKEND:
                registry.bind(entry, cls.module or cls.defined_in, name)
            elif cls.exported is not False:
                registry.bind(entry, COMM, name)
        for module in COMM_NAMED_MODULES:
            for name, found in sorted(record.public_names(module).items()):
                if not served(found, _served_names(record, module)):
                    _add_name(registry, module, name, found)
    for module in ATTENTION_MODULES:
        for name, found in sorted(record.public_names(module).items()):
            if not served(found, _served_names(record, module)):
                _add_name(registry, module, name, found, lazy=True)
    _add_strategy_enum(registry)
    plan = record.fast_decode_plan
    if plan is not None:
        entry = registry.add(plan.defined_in, plan.name, "function", function=plan)
        entry.takes_self = True
        # Every release that has it (0.4.0+) also exports it from the top level.
        registry.bind(entry, FLASHINFER, plan.name, lazy=True)
    return registry


def _decode_families(record: ReleaseRecord) -> set[str]:
    """The decode wrapper and the attention families derived from it (``family_bases``)."""
    found = {DECODE.key}
    grown = True
    while grown:
        grown = False
        for name in record.attention_families:
            cls = record.attention_family(name)
            if name not in found and cls is not None and found & set(cls.family_bases):
                found.add(name)
                grown = True
    return found


def _add_strategy_enum(registry: Registry) -> None:
    """The MNNVL strategy enum its workspace's ``strategy=`` defaults to, when no recorded
    module lists it (``flashinfer.comm`` does not export it): defined next to the
    workspace, with the members every release from 0.6.0 gives it."""
    known = {
        name
        for entry in registry.entries.values()
        if entry.kind in ("class", "enum")
        for name in {entry.name} | {n for names in entry.bindings.values() for n in names}
    }
    for entry in list(registry.entries.values()):
        if entry.workspace != "mnnvl" or entry.cls is None:
            continue
        for method in entry.cls.methods.values():
            parameter = None if method is None else method.parameter("strategy")
            if parameter is None or parameter.default is None:
                continue
            try:
                node = ast.parse(parameter.default, mode="eval").body
            except SyntaxError:
                continue
            if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name):
                continue
            name = node.value.id
            if name in known:
                continue
            record = ClassRecord(name, entry.defined_in, ("Enum",), {})
            members = {member.name: member.value for member in Strategy}
            registry.add(entry.defined_in, name, "enum", cls=record, members=members)
            known.add(name)


def _served_names(record: ReleaseRecord, module: str) -> tuple[str, ...] | str | None:
    found = record.module(module)
    return found.served if found is not None else None


def _add_name(
    registry: Registry, module: str, name: str, found: Any, *, lazy: bool = False
) -> None:
    kind, defined_in = found.kind, found.defined_in
    if kind == "module" and inside(defined_in):
        names = registry.lazy_module_names if lazy else registry.module_names
        names.setdefault(module, {})[name] = defined_in
        return
    if defined_in is None:
        entry = registry.add(module, name, "value")
        value_of(entry, found)
        registry.bind(entry, module, name, lazy=lazy)
        return
    if not inside(defined_in):
        # From outside the release: the object itself where that imports nothing new.
        entry = registry.add(module, name, "value")
        entry.outside = defined_in
        entry.outside_module = kind == "module"
        registry.bind(entry, module, name, lazy=lazy)
        return
    if kind == "module":
        kind, defined_in = "value", module
    own = name
    if kind == "function" and found.function is not None:
        own = found.function.name
    members = found.enum.members if kind == "enum" and found.enum is not None else None
    entry = registry.add(
        defined_in, own, kind, function=found.function, cls=found.cls, members=members
    )
    if kind == "value" and found.kind == "value":
        value_of(entry, found)
    registry.bind(entry, module, name, lazy=lazy)


_ENUM_BASES = {
    "Enum": "_fi_enum.Enum",
    "IntEnum": "_fi_enum.IntEnum",
    "IntFlag": "_fi_enum.IntFlag",
    "Flag": "_fi_enum.Flag",
}


def enum_base_of(entry: Entry) -> str | None:
    """The :mod:`enum` class a recorded enum derives from; None for a class that only
    holds constants (``AllReduceFusionPattern``: the record calls both kinds "enum")."""
    if entry.kind != "enum" or entry.cls is None:
        return None
    for base in entry.cls.bases:
        name = base.rpartition(".")[2]
        if name in _ENUM_BASES:
            return _ENUM_BASES[name]
        if name == "StrEnum":
            return "str, _fi_enum.Enum"
    return None


def eager_modules(registry: Registry) -> set[str]:
    """The modules a fake imports on entry: those binding or defining an object that some
    module binds eagerly, and the targets of eager module names; a module reached only
    through a lazy binding (:attr:`_Entry.lazy`) is imported when engine code reaches it."""
    modules: set[str] = set()
    for entry in registry.entries.values():
        if not entry.lazy or len(entry.bindings) > 1:
            modules |= set(entry.bindings) | {entry.defined_in}
    for module, names in registry.module_names.items():
        modules |= {module, *names.values()}
    return modules


def workspace_classes_of(registry: Registry) -> dict[str, tuple[str, str]]:
    """Backend -> (module, name) of its workspace class."""
    return {
        entry.workspace: (entry.defined_in, entry.name)
        for entry in registry.entries.values()
        if entry.workspace and entry.kind == "class"
    }


def factory_options_of(record: ReleaseRecord) -> tuple[str, ...]:
    """The factory's keyword-only parameters (0.7.2.post1: the MNNVL CuTe DSL options)."""
    factory = record.comm_function(UNIFIED_FACTORY.key)
    if factory is None:
        return ()
    return tuple(p.name for p in factory.parameters if p.kind == "KEYWORD_ONLY")
