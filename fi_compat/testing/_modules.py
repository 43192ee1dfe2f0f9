"""Every recorded module of a release in the fake: what each binds beyond the registry.

A release's record holds every module it ships (about 1900 for 0.7.2.post1, from 85 for
0.2.9) and every name each one binds, private ones included
(:meth:`~fi_compat._records.ReleaseRecord.module`). The registry
(:mod:`fi_compat.testing._registry`) holds the objects the fake models (``flashinfer.comm``,
the attention families, the public names of the seven named modules); :class:`_Modules`
adds the rest one module at a time, when the fake first imports that module, so that a test
pays only for the modules it reaches:

* :meth:`_Modules.outline` reads a module's names, without building their records, into an
  :class:`_Outline`: which names it binds beyond the registry, what its ``__getattr__``
  serves, its ``__all__``, and whether it could be read at all. That is all a module the
  fake imports on entry needs: the rest is bound on first access to one of those names;
* :meth:`_Modules.plan` reads the records of those names into a :class:`_Plan`: the objects
  the module defines (generated there like the registry's) and the names it takes from
  another module (bound on first access, so importing a package imports none of its
  submodules);
* :meth:`_Modules.lookup` resolves a name in a module's namespace as Python would (a base
  class, an enum a default names);
* :meth:`_Modules.serving` finds the module holding a name that a module ``__getattr__``
  serves (the record lists the names, not where they come from).

The testing guide, ``docs/guide/testing.md``, says what the fake holds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

from fi_compat._records import ModuleRecord, NameRecord, ReleaseRecord
from fi_compat._surface import FLASHINFER
from fi_compat.testing._objects import inside, served, unmodelled_reason
from fi_compat.testing._registry import Entry, Registry

__all__ = ["MODULE_ATTRIBUTES", "Modules", "Outline", "Plan"]

#: Names a module's record may list that the fake does not bind from the record: what Python
#: sets on every module, and what generated code writes itself (``__all__`` from
#: :attr:`_Outline.all_names`, ``__getattr__`` and ``__dir__`` from the bindings made on
#: first access and what the release's ``__getattr__`` serves).
MODULE_ATTRIBUTES = frozenset(
    {
        "__all__",
        "__annotations__",
        "__builtins__",
        "__cached__",
        "__dir__",
        "__doc__",
        "__file__",
        "__getattr__",
        "__loader__",
        "__name__",
        "__package__",
        "__path__",
        "__spec__",
    }
)
#: ``from __future__ import annotations`` binds this name in most modules of a release; every
#: generated module imports it too.
_FUTURE = "__future__"
_ANNOTATIONS = "annotations"
_VERSION = "__version__"


@dataclass
class Outline:
    """What a module binds beyond the registry, read from its names alone (no name record
    is built): enough to write a module whose other objects are made on first use.

    Attributes
    ----------
    module
        The module's dotted name.
    names
        Every name :class:`_Plan` binds (defines, aliases or takes from elsewhere).
    submodules
        Those of :attr:`names` that are the module's submodule of the same name.
    served
        What the release's module ``__getattr__`` serves: the names, ``"*"`` when its source
        does not list them, None without one.
    getattr
        The module has a ``__getattr__`` in the release.
    all_names
        Its ``__all__``: the literal one, or for one its source does not spell as a literal,
        its public names; None without one.
    unreadable
        Why the recorder could not read the module (its names are unknown); None when it could.
    annotations
        The module binds ``annotations`` (``from __future__ import annotations``).
    version
        The release, for a module that binds ``__version__``.
    """

    module: str
    names: frozenset[str] = frozenset()
    submodules: frozenset[str] = frozenset()
    served: tuple[str, ...] | Literal["*"] | None = None
    getattr: bool = False
    all_names: tuple[str, ...] | None = None
    unreadable: str | None = None
    annotations: bool = False
    version: str | None = None


@dataclass
class Plan:
    """How the fake binds each name of :attr:`outline`.

    Attributes
    ----------
    outline
        The module's :class:`_Outline`.
    defined
        The objects the module defines, as registry entries kept out of the registry
        (functions, classes and enums the generator writes with their recorded signatures;
        values and names from outside the release, as the registry's).
    aliases
        Name -> the name of an object of :attr:`defined` it also binds (``foo = bar``).
    lazy
        Name -> (module, its name there), bound on first access; the name None for a
        module itself.
    unmodelled
        Name -> why the fake leaves it unbound: a value the release assigns whose value its
        source does not tell (``"computed at import"``); reading it raises
        ``AttributeError`` saying so, which ``getattr(module, name, default)`` turns into
        the default.
    """

    outline: Outline
    defined: list[Entry] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)
    lazy: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    unmodelled: dict[str, str] = field(default_factory=dict)

    @property
    def module(self) -> str:
        """The module's dotted name."""
        return self.outline.module


class Modules:
    """The recorded modules of one fake: each module's :class:`_Outline` and :class:`_Plan`,
    made on first use (a build renders a module once) and kept for the build, and the
    answers of :meth:`serving`, kept for the build too."""

    def __init__(self, record: ReleaseRecord, registry: Registry, modules: frozenset[str]) -> None:
        self.record = record
        self.registry = registry
        self.modules = modules
        self._outlines: dict[str, Outline] = {}
        self._plans: dict[str, Plan] = {}
        self._served: dict[tuple[str, str], tuple[str, str | None] | None] = {}
        self._looked_up: dict[tuple[str, str], Entry | None] = {}
        #: Each package -> the last parts of its submodules' names.
        self.children: dict[str, set[str]] = {}
        for name in modules:
            if "." in name:
                package, _, child = name.rpartition(".")
                self.children.setdefault(package, set()).add(child)
        #: Every module by depth, then by name: the order :meth:`serving` searches in.
        self._by_depth = sorted(modules, key=lambda name: (name.count("."), name))
        self._handles = 0
        self._lock = threading.RLock()

    # -- one module ------------------------------------------------------------------------

    def outline(self, module: str) -> Outline:
        """What ``module`` binds beyond the registry, from its names alone."""
        with self._lock:
            found = self._outlines.get(module)
            if found is None:
                found = self._outlines[module] = self._make_outline(module)
            return found

    def plan(self, module: str) -> Plan:
        """How ``module`` binds the names its record lists and the registry does not bind."""
        with self._lock:
            found = self._plans.get(module)
            if found is None:
                found = self._plans[module] = self._make_plan(module)
            return found

    def _make_outline(self, module: str) -> Outline:
        recorded = self._module(module)
        if recorded is None:
            return Outline(module)
        if recorded.unreadable is not None:
            return Outline(module, unreadable=recorded.unreadable)
        listed = recorded.all_names
        if listed is None and "__all__" in recorded.names:
            # An __all__ the source does not spell as a literal: its public names.
            listed = tuple(sorted(name for name in recorded.names if not name.startswith("_")))
        taken = self._taken(module)
        names: set[str] = set()
        submodules: set[str] = set()
        annotations = version = False
        for name in recorded.names:
            if name in taken or name in MODULE_ATTRIBUTES:
                continue
            if name == _VERSION:
                version = True
                continue
            shape = recorded.shape(name)
            home = shape[1] if shape is not None else None
            if name == _ANNOTATIONS and home == _FUTURE:
                annotations = True
                continue
            names.add(name)
            if shape is not None and shape[0] == "module" and home == f"{module}.{name}":
                submodules.add(name)
        return Outline(
            module,
            frozenset(names),
            frozenset(submodules),
            served=recorded.served,
            getattr="__getattr__" in recorded.names or recorded.served is not None,
            all_names=listed,
            annotations=annotations,
            version=self.record.release if version else None,
        )

    def _make_plan(self, module: str) -> Plan:
        outline = self.outline(module)
        plan = Plan(outline)
        recorded = self._module(module)
        if recorded is None or not outline.names:
            return plan
        own_names: set[str] = set()
        for name in recorded.names:
            if name in outline.names:
                self._bind(plan, name, recorded, own_names)
        return plan

    def _taken(self, module: str) -> set[str]:
        """The names the registry's part of ``module`` defines or binds (eagerly or lazily)."""
        registry = self.registry
        taken: set[str] = set()
        for entry in registry.in_module(module):
            if entry.defined_in == module:
                taken.add(entry.name)
            taken |= entry.bindings.get(module, set()) | entry.lazy.get(module, set())
        taken |= set(registry.module_names.get(module, {}))
        taken |= set(registry.lazy_module_names.get(module, {}))
        return taken

    def _bind(self, plan: Plan, name: str, recorded: ModuleRecord, own_names: set[str]) -> None:
        """Add ``name`` of ``recorded`` to ``plan``: defined there, taken from another
        module on first access, or from outside the release (``own_names``: the names of the
        objects defined there so far)."""
        module = plan.module
        recorded_names = recorded.names
        found = recorded_names[name]
        kind, home = found.kind, found.defined_in
        if kind == "module":
            if home is not None and home in self.modules:
                plan.lazy[name] = (home, None)
            else:
                # A module outside the release is the module itself where that imports
                # nothing new (os, typing); a private module the fake lacks is a StandIn.
                outside = None if inside(home) else home
                plan.defined.append(self._outside(name, module, outside, is_module=True))
            return
        if served(found, recorded.served):
            return  # the module's __getattr__ serves it (see _runtime._lazy)
        reason = unmodelled_reason(found)
        if reason is not None:  # a value of the release the record cannot tell
            plan.unmodelled[name] = reason
            return
        if home is None or not inside(home):
            plan.defined.append(self._outside(name, module, home, is_module=False))
            return
        if home != module:
            target = self._home_of(module, name, home, found)
            if target is not None:
                plan.lazy[name] = target
                return
        own = _own_names(name, found)[0] if home == module else name
        if own != name and own in recorded_names and not _same(recorded_names[own], found):
            own = name  # ``own`` is bound to something else there: define it as ``name``
        if own in own_names:
            plan.aliases[name] = own
            return
        own_names.add(own)
        entry = self._entry(own, module, kind)
        entry.function = found.function
        entry.cls = found.cls
        entry.members = found.enum.members if kind == "enum" and found.enum is not None else None
        entry.literal = found.literal
        entry.bindings[module].add(name)
        plan.defined.append(entry)
        if own != name:
            plan.aliases[name] = own

    def _outside(self, name: str, module: str, home: str | None, *, is_module: bool) -> Entry:
        entry = self._entry(name, module, "value")
        entry.outside = home
        entry.outside_module = is_module
        return entry

    def _entry(self, name: str, module: str, kind: str) -> Entry:
        self._handles += 1
        return Entry(f"_fi_m{self._handles}", name, module, kind, bindings={module: {name}})

    def _home_of(
        self, module: str, name: str, home: str, found: NameRecord
    ) -> tuple[str, str] | None:
        """Where the fake takes ``name`` (bound in ``module``, defined in ``home``) from:
        ``home`` when the fake has that module and it binds the name there; else the nearest
        recorded package above it that binds it from there (``flashinfer.mla`` for what
        ``flashinfer.mla._core``, a module the records leave out, defines); None when only
        ``module`` itself can define it."""
        candidates = _own_names(name, found)
        if home in self.modules:
            holder = self._module(home)
            for own in candidates:
                if (home, own) in self.registry.entries:
                    return home, own
                if holder is not None and own in holder.names:
                    return home, own
        package = home
        while "." in package:
            package = package.rpartition(".")[0]
            if package == module or not package.startswith(FLASHINFER):
                return None
            holder = self._module(package)
            if holder is None or holder.unreadable is not None:
                continue
            for own in candidates:
                shape = holder.shape(own)
                if shape is not None and shape[1] == home:
                    return package, own
        return None

    def _module(self, module: str) -> ModuleRecord | None:
        return self.record.module(module) if module in self.modules else None

    # -- names in a namespace ----------------------------------------------------------------

    def lookup(self, module: str, name: str) -> Entry | None:
        """The object ``name`` is in ``module``'s namespace, as an entry naming where the fake
        holds it (for a base class or an enum a default names); None when the record does
        not tell (or the name is the module's own definition: the writer has it)."""
        key = (module, name)
        with self._lock:
            if key not in self._looked_up:
                self._looked_up[key] = self._look_up(module, name)
            return self._looked_up[key]

    def _look_up(self, module: str, name: str) -> Entry | None:
        target = self.plan(module).lazy.get(name)
        if target is None:
            return None
        home, own = target
        recorded = self._module(module)
        found = recorded.names.get(name) if recorded is not None else None
        if own is None or found is None:
            return None
        for entry in self.registry.in_module(home):
            if entry.defined_in == home and entry.name == own:
                return entry
        entry = self._entry(own, home, found.kind)
        entry.cls = found.cls
        entry.members = found.enum.members if found.enum is not None else None
        return entry

    # -- what a module __getattr__ serves ----------------------------------------------------

    def serving(self, module: str, name: str) -> tuple[str, str | None] | None:
        """Where the name ``module``'s ``__getattr__`` serves is bound: the module that binds
        ``name`` nearest below ``module``'s package (fewest dots, then by name; 0.6.14's
        ``flashinfer.comm`` serves the function ``all_gather_matmul`` of its subpackage of
        that name); else any other module of the release binding it, by name; one that
        binds it to something the fake has before one whose record cannot tell it (0.7.4's
        ``flashinfer`` serves ``prims_ts_bf16_moe``, the function its PrimTS module defines,
        which ``flashinfer.fused_moe`` binds through a ``__getattr__`` of its own); else its
        submodule ``name``; else a module binding it in a way the record cannot tell but
        not serving it too. None when none is (answers kept for the build)."""
        key = (module, name)
        with self._lock:
            if key in self._served:
                return self._served[key]
        found = self._search(module, name)
        with self._lock:
            self._served[key] = found
        return found

    def _search(self, module: str, name: str) -> tuple[str, str | None] | None:
        package = module if module in self.children else module.rpartition(".")[0]
        below = package + "."
        # The modules below the package first, then the others; each part by depth, then
        # by name (the order of :attr:`_by_depth`, kept by the partition).
        order = [c for c in self._by_depth if c.startswith(below)]
        order += [c for c in self._by_depth if not c.startswith(below)]
        unknown: str | None = None  # a module binding it in a way its source does not show
        for candidate in order:
            if candidate == module:
                continue
            recorded = self._module(candidate)
            if recorded is not None and name in recorded.names:
                if unmodelled_reason(recorded.names[name]) is None:
                    return candidate, name
                unknown = unknown or candidate
        submodule = f"{module}.{name}"
        if submodule in self.modules:
            return submodule, None
        if unknown is not None and not self._serves(unknown, name):
            return unknown, name  # which says, on use, why the fake does not have it
        return None

    def _serves(self, module: str, name: str) -> bool:
        """``module``'s ``__getattr__`` serves ``name`` (looking it up there would search
        again, and two such modules would send each other round)."""
        recorded = self._module(module)
        return recorded is not None and served(recorded.names[name], recorded.served)


def _same(one: NameRecord, other: NameRecord) -> bool:
    """The two records describe the same object (one is bound under the other's name)."""
    return (one.kind, one.function, one.cls, one.enum, one.literal) == (
        other.kind,
        other.function,
        other.cls,
        other.enum,
        other.literal,
    )


def _own_names(name: str, found: NameRecord) -> list[str]:
    """The names ``found`` may have in its defining module, likeliest first: a function's
    ``def`` name, a class's or enum's recorded name, then ``name``."""
    names: list[str] = []
    for own in (
        found.function.name if found.function is not None else None,
        found.cls.name if found.cls is not None else None,
        found.enum.name if found.enum is not None else None,
        name,
    ):
        if own is not None and own not in names and own.isidentifier():
            names.append(own)
    return names
