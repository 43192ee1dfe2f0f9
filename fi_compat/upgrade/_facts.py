"""One recorded release as a flat table of facts, keyed so that two releases compare.

The diff and the scan both read releases through this table, built from the shipped record
(:mod:`fi_compat._records`), the measured split reach (``attention/reach.json``) and the
measured per-call sizes (``comm/sizes.json``); nothing here imports FlashInfer. A key is a
tuple whose first item names its kind:

``("name", module, name)``
    The name's kind (``"function"``, ``"class"``, ``"enum"``, ``"module"``, ``"value"``)
    where ``import module`` binds it.
``("defined", module, name)`` / ``("conditional", module, name)``
    Where that name is defined; whether every binding of it sits under a guard.
``("params", path)``
    ``(name, kind, default)`` of each parameter of the callable at ``path`` (a dotted
    ``module.function``, ``module.Class`` for its constructor, or ``module.Class.method``),
    ``self`` left out (:func:`parameter`, :func:`positional` and :func:`var_keyword` read
    it); ``("returns", path)`` its return annotation, and ``("forwards", path)`` where it
    provably passes ``**kwargs`` on (a method of the same class). ``("method", path, name)``
    is true for each recorded method of the class at ``path``, ``("attribute", path, name)``
    for each attribute its instances get by construction, and ``("bases", path)`` holds the
    names of its base classes.
``("getattr", path)``
    Where the class at ``path`` defines ``__getattr__`` (its instances hand out names its
    record does not list): the release's class whose names it hands out, or True where the
    records cannot tell.
``("instance", path)``
    For a value built at import from one of the release's classes: that class's path.
``("member", path, member)``
    The value of one member of the enum at ``path`` (source text when not a literal).
``("hazard", hazard)``
    Whether the import hazard holds (:class:`fi_compat.hazards.Hazard` names them).
``("backend", family, backend)``
    The measured split-reach verdict of one attention backend, for measured releases.
``("mapping", key)``
    What fi-compat does on this release where the release alone is not enough
    (:data:`MAPPINGS`), as an :class:`Answer`: what it does, as data, and the sentence.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from packaging.version import Version

from fi_compat._records import (
    ClassRecord,
    FunctionRecord,
    HazardRecord,
    ModuleRecord,
    NameRecord,
    ParameterRecord,
    ReleaseRecord,
    SupportAnswer,
    canonical_release,
    keyword_support,
    load_release,
)
from fi_compat._records._store import alike, shipping
from fi_compat._surface import (
    COMM,
    IMPORT_HAZARDS,
    LEGACY_FACTORY,
    LEGACY_FUSION,
    MNNVL_MODULE,
    NAMED_MODULES,
    TORCH_DIST_BACKEND,
    TRTLLM_WORKSPACE,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
    WORKSPACE,
)

__all__ = [
    "MAPPINGS",
    "Answer",
    "Facts",
    "Key",
    "accepts",
    "changed_keys",
    "facts_of",
    "function_of",
    "parameter",
    "positional",
    "releases_between",
    "var_keyword",
]

#: A fact's key; see the module docstring.
Key = tuple[str, ...]

#: fi-compat's per-release behaviour that the diff follows: key -> what it describes.
MAPPINGS: Mapping[str, str] = {
    "api": "which allreduce-fusion API fi-compat's factory builds on",
    "group": f"how {UNIFIED_FACTORY.key}'s group= reaches FlashInfer",
    "early_completion": f"what {UNIFIED_FUSION.key}(trigger_completion_at_end=False) does",
    "weight_bias": f"what {UNIFIED_FUSION.key}(weight_bias=...) does",
    "bcast_root": f"how {TORCH_DIST_BACKEND.key}.bcast reads a group-local root",
    "checkpointing": "what FusionWorkspace.checkpoint_prepare() does",
    "per_call_sizes": "whether a TRT-LLM workspace serves calls of other sizes that fit",
}


class Answer(NamedTuple):
    """What fi-compat does for one of :data:`MAPPINGS` on one release.

    ``action`` is what the scan compares: ``"passes"`` (FlashInfer takes it as it is),
    ``"maps"`` (fi-compat carries it another way), ``"omits"`` (left out at its default;
    any other value raises :class:`~fi_compat.errors.CapabilityMissingError`), ``"raises"``
    (fi-compat raises a typed error); ``text`` says it for people (the diff prints it)."""

    action: str
    text: str

    def __str__(self) -> str:
        return self.text


_SELF = ("self", "cls")
_POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
_STATIC = ("staticmethod",)


@dataclass(frozen=True, eq=False)
class Facts:
    """The facts of one release (see the module docstring), with the evidence of its hazards.

    Built from the release's typed record (:func:`facts_of`), the facts of a name are read
    when first asked: a release has tens of thousands of names, and a diff or a scan asks
    about a few. :attr:`canonical` maps each path of a name (``flashinfer.decode.X``), and
    the path of its definition (``flashinfer.comm.comm_backend.TorchDistBackend``), to the
    path its facts are listed under in the diff: the shortest module that binds it. A Facts
    made without a record (``record=None``) holds ``table`` and ``paths`` as given.
    """

    release: str
    table: dict[Key, Any]
    evidence: Mapping[str, str | None]
    paths: Mapping[str, str] | None
    measured: bool
    record: ReleaseRecord | None = None
    #: Path -> the keys its entry added to ``table`` (built on first use).
    built: dict[str, tuple[Key, ...]] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def version(self) -> Version:
        """The release as a :class:`packaging.version.Version`."""
        return Version(self.release)

    def module(self, module: str) -> ModuleRecord | None:
        """The release's record of ``module`` (None without a record, or without it)."""
        if self.record is None:
            return None
        modules: dict[str, ModuleRecord | None] = self._cache.setdefault("modules", {})
        if module not in modules:
            modules[module] = self.record.module(module)
        return modules[module]

    def modules(self) -> frozenset[str]:
        """Every module the release ships (those the table names, without a record)."""
        found: frozenset[str] | None = self._cache.get("all_modules")
        if found is None:
            if self.record is not None:
                found = frozenset(self.record.names)
            else:
                found = frozenset(key[1] for key in self.table if key[0] == "name")
            self._cache["all_modules"] = found
        return found

    def get(self, key: Key) -> Any:
        """The value of ``key``, or None when the release has no such fact."""
        kind = key[0]
        if self.record is not None and kind in _NAME_FACTS:
            found = self.module(key[1])
            shape = found.shape(key[2]) if found is not None else None
            if shape is None:
                return None
            value = shape[_NAME_FACTS[kind]]
            return value if value or kind != "conditional" else None
        if kind == "module":
            return True if key[1] in self.modules() else None
        if self.record is not None and kind in _BUILT_ON_USE:
            path = key[1]
            if path not in self.built:
                self.build(path)
                owner = path.rpartition(".")[0]
                if owner and owner not in self.built:
                    self.build(owner)
        return self.table.get(key)

    def build(self, path: str) -> tuple[Key, ...]:
        """Build (once) the facts of the name at ``path``; the keys they hold."""
        found = self.built.get(path)
        if found is not None:
            return found
        facts: dict[Key, Any] = {}
        module, _, name = path.rpartition(".")
        record = self.module(module) if module else None
        if record is not None and name in record.names:
            entry = record.names[name]
            _entry(facts, path, entry, self._extra(entry))
        self.table.update(facts)
        keys = tuple(facts)
        self.built[path] = keys
        return keys

    def _extra(self, entry: NameRecord) -> ClassRecord | None:
        """The class record fi-compat keeps of a comm class or an attention wrapper (with
        the methods it adapts, private ones included), for a class of that name."""
        if entry.cls is None or self.record is None:
            return None
        record = self.record
        name = entry.name
        return (
            record.comm_classes.get(name) or record.attention.get(name) or record.families.get(name)
        )

    def span(self, key: Key) -> frozenset[int] | None:
        """The store positions of the releases whose records give ``key`` the very facts
        they give it here (a superset of nothing: each holds the same stored record), or
        None where :meth:`identity` has none."""
        if self.record is not None and key[0] == "module":
            return shipping(key[1], key[1] in self.modules())
        if self.record is None or (key[0] not in _NAME_FACTS and key[0] not in _BUILT_ON_USE):
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
        assert record is not None
        if name in record.comm_classes or name in record.attention or name in record.families:
            return None
        return found, name

    def name_keys(self, module: str, name: str) -> tuple[Key, ...]:
        """The keys of the name ``module.name`` (its kind, home, guard)."""
        return (("name", module, name), ("defined", module, name), ("conditional", module, name))

    @property
    def canonical(self) -> Mapping[str, str]:
        """Each path of a name -> the path its facts are kept under: as given, for a
        Facts made without a record; none for a recorded release, whose facts are read at
        any path (the diff lists a change under the shortest path that changed,
        :func:`changed_keys`)."""
        return self.paths if self.paths is not None else _NO_PATHS

    def subclass_has(self, path: str, name: str) -> bool:
        """True when a recorded class of the same module that derives from the class at
        ``path`` has the method or attribute ``name`` (a factory annotated to return the
        base class hands out one of those)."""
        return name in _subclass_members(self, path)

    def subclass_serves(self, path: str) -> bool:
        """True when a recorded class that derives from the class at ``path``, in its
        module or in the module that defines it, defines ``__getattr__``: it may hand out
        names no record lists."""
        module, _, name = path.rpartition(".")
        home = self.get(("defined", module, name)) or module
        return any(
            self.get(("getattr", derived))
            for where in {path, f"{home}.{name}"}
            for derived in _derived(self, where)
        )

    def module_seen(self, module: str) -> bool:
        """True when the release ships ``module`` (or, without a record, when its table
        names the module, a module-kind name or a definition's home)."""
        if self.record is not None:
            return module in self.modules()
        return module in _seen_modules(self)


#: The facts read off a name's shape, and where in the shape.
_NAME_FACTS = {"name": 0, "defined": 1, "conditional": 2}


_NO_PATHS: Mapping[str, str] = {}


@functools.cache
def _seen_modules(facts: Facts) -> frozenset[str]:
    seen: set[str] = set()
    for key, value in facts.table.items():
        if key[0] == "name":
            seen.add(key[1])
            if value == "module":
                seen.add(f"{key[1]}.{key[2]}")
        elif key[0] == "defined" and value:
            seen.add(value)
    for module in list(seen):
        parts = module.split(".")
        seen.update(".".join(parts[:end]) for end in range(1, len(parts)))
    return frozenset(seen)


@functools.cache
def _derived(facts: Facts, path: str) -> frozenset[str]:
    """The recorded classes of the module of ``path`` that derive from the class there."""
    module, _, name = path.rpartition(".")
    if facts.record is not None:
        found = facts.module(module)
        if found is not None:
            for other in found.names:
                if (found.shape(other) or ("",))[0] == "class":
                    facts.build(f"{module}.{other}")
    return frozenset(
        key[1]
        for key, bases in list(facts.table.items())
        if key[0] == "bases" and name in bases and key[1].rpartition(".")[0] == module
    )


@functools.cache
def _subclass_members(facts: Facts, path: str) -> frozenset[str]:
    derived = _derived(facts, path)
    return frozenset(
        key[2]
        for key in list(facts.table)
        if key[0] in ("method", "attribute") and key[1] in derived
    )


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


def parameter(facts: Facts, path: str, name: str) -> tuple[str, str | None] | None:
    """``(kind, default)`` of parameter ``name`` of the callable at ``path``, or None."""
    for found, kind, default in facts.get(("params", path)) or ():
        if found == name:
            return kind, default
    return None


def function_of(facts: Facts, path: str) -> FunctionRecord | None:
    """The callable at ``path`` as its facts give it (parameters without ``self``, the
    method its ``**kwargs`` provably reaches), or None without it."""
    params = facts.get(("params", path))
    if params is None:
        return None
    return FunctionRecord(
        qualname=path,
        defined_in=path.rpartition(".")[0],
        decorators=(),
        parameters=tuple(ParameterRecord(name, kind, default) for name, kind, default in params),
        forwards_kwargs_to=facts.get(("forwards", path)),
    )


def accepts(facts: Facts, path: str, keyword: str) -> SupportAnswer:
    """``"supported"``, ``"unsupported"`` or ``"unknown"``: does the callable at ``path``
    take ``keyword``? The records' own walk (:func:`fi_compat._records.keyword_support`, which
    :meth:`~fi_compat._records.ReleaseRecord.support` answers with), over the facts of the
    callable and of the methods its ``**kwargs`` reaches; ``"unknown"`` without a record of
    the callable."""
    function = function_of(facts, path)
    if function is None:
        return "unknown"
    owner = path.rpartition(".")[0]

    def method(name: str) -> FunctionRecord | None:
        return function_of(facts, f"{owner}.{name}")

    return keyword_support(function, keyword, method)


def positional(facts: Facts, path: str) -> tuple[str, ...] | None:
    """The names the callable at ``path`` takes by position, in order; None without it."""
    params = facts.get(("params", path))
    if params is None:
        return None
    return tuple(name for name, kind, _ in params if kind in _POSITIONAL)


def var_keyword(facts: Facts, path: str) -> bool | None:
    """Whether the callable at ``path`` takes ``**kwargs``; None without it."""
    params = facts.get(("params", path))
    if params is None:
        return None
    return any(kind == "VAR_KEYWORD" for _, kind, _ in params)


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


def _rank(module: str) -> tuple[int, int, str]:
    order = NAMED_MODULES.index(module) if module in NAMED_MODULES else len(NAMED_MODULES)
    return module.count("."), order, module


#: What fi-compat does with a keyword the release lacks and leaves at its default.
_OMITTED = Answer("omits", "left out at 0.0; any other value raises CapabilityMissingError")


def _mappings(facts: Facts) -> None:
    table, release = facts.table, facts.release

    def has(module: str, name: str) -> bool:
        return facts.get(("name", module, name)) is not None

    def takes(path: str, keyword: str) -> bool:
        return parameter(facts, path, keyword) is not None

    factory = f"{COMM}.{UNIFIED_FACTORY.key}"
    fusion = f"{COMM}.{UNIFIED_FUSION.key}"
    unified = has(COMM, UNIFIED_FACTORY.key) and has(COMM, UNIFIED_FUSION.key)
    legacy = has(COMM, LEGACY_FACTORY.key) and has(COMM, LEGACY_FUSION.key)
    api = "unified" if unified else "legacy" if legacy else "none"
    table["mapping", "api"] = Answer("passes" if api != "none" else "raises", api)
    if unified:
        table["mapping", "group"] = (
            Answer("passes", "passed to the factory")
            if takes(factory, "group")
            else Answer("maps", "carried by comm_backend (the factory takes no group=)")
        )
        table["mapping", "early_completion"] = (
            Answer("passes", f"passed to {UNIFIED_FUSION.key}")
            if takes(fusion, "trigger_completion_at_end")
            else Answer(
                "maps",
                f"honoured on TRT-LLM workspaces through {LEGACY_FUSION.key}; "
                "MNNVL completes at the end",
            )
        )
        table["mapping", "weight_bias"] = (
            Answer("passes", f"passed to {UNIFIED_FUSION.key}")
            if takes(fusion, "weight_bias")
            else _OMITTED
        )
    elif legacy:
        table["mapping", "group"] = Answer("maps", "passed to the legacy factory's group=")
        table["mapping", "early_completion"] = Answer("maps", f"passed to {LEGACY_FUSION.key}")
        table["mapping", "weight_bias"] = _OMITTED
    backend = next(
        (
            facts.get(("defined", module, TORCH_DIST_BACKEND.key))
            for module in (MNNVL_MODULE, COMM)
            if has(module, TORCH_DIST_BACKEND.key)
        ),
        None,
    )
    if backend is not None:
        local = table.get(("bcast_group_local",))
        table["mapping", "bcast_root"] = (
            Answer("passes", "FlashInfer maps it to a global rank")
            if local
            else Answer("maps", f"fi-compat's {TORCH_DIST_BACKEND.key} maps it to a global rank")
        )
    if unified:
        checkpointing = any(
            facts.get(("method", f"{COMM}.{name}", "checkpoint_prepare"))
            for name in (WORKSPACE.key, TRTLLM_WORKSPACE)
        )
        table["mapping", "checkpointing"] = (
            Answer("passes", "FlashInfer's checkpoint_prepare")
            if checkpointing
            else Answer("raises", "raises NotImplementedError (CheckpointUnsupportedError)")
        )
        from fi_compat._measured import releases as measured_releases
        from fi_compat.comm._sizes import rule_of

        # Without a measurement the rule is the honest refusal, not a change of the release's.
        table["sizes_measured",] = release in measured_releases("sizes")
        rule, _ = rule_of(release, "trtllm")
        table["mapping", "per_call_sizes"] = (
            Answer("passes", "served when tokens x hidden size fit")
            if rule == "product"
            else Answer(
                "raises", "only the workspace's own sizes (CallSizeUnsupportedError otherwise)"
            )
        )
    table.pop(("bcast_group_local",), None)


def _reach(table: dict[Key, Any], release: str) -> bool:
    from fi_compat.attention._reach import reach_data

    entry = reach_data().get(release)
    if entry is None:
        return False
    for family, data in entry.items():
        for backend, measured in data.get("backends", {}).items():
            table["backend", family, backend] = measured["verdict"]
        table["default_backend", family] = data.get("default_backend")
    return True


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
    backend = record.torch_dist_backend
    table["bcast_group_local",] = backend.bcast_root_is_group_local if backend else None
    evidence = {}
    for hazard in IMPORT_HAZARDS:
        found: HazardRecord = getattr(record, hazard)
        table["hazard", hazard] = found.value
        evidence[hazard] = found.evidence
        if found.python is not None:
            table["hazard_python", hazard] = found.python
    measured = _reach(table, record.release)
    facts = Facts(record.release, table, evidence, None, measured, record)
    _mappings(facts)
    return facts


def releases_between(first: str, last: str) -> list[str]:
    """The recorded releases from ``first`` to ``last``, both included, in version order
    (reversed when ``first`` is the newer).

    Between two final releases the walk takes the final releases only: engines move from
    final to final, and a change is cited at the first final release that has it (0.6.8,
    not 0.6.8rc1). Where either end is a pre-release, every release between is taken.
    """
    from fi_compat._records import shipped_releases

    start, end = Version(canonical_release(first)), Version(canonical_release(last))
    low, high = sorted((start, end))
    every = start.is_prerelease or end.is_prerelease
    found = [
        name
        for name in shipped_releases()
        if low <= Version(name) <= high
        and (every or not Version(name).is_prerelease or Version(name) in (low, high))
    ]
    return found if start <= end else found[::-1]


def changed_keys(old: Facts, new: Facts) -> Iterator[Key]:
    """Every key whose value may differ between ``old`` and ``new``, each once.

    A module one release ships and the other does not is one ``("module", module)`` key;
    in a module both ship, a public name is compared only where the store holds different
    records of it (one stored record is one set of facts), with its entry's keys at the
    path the diff lists it under. The release-wide facts (hazards, backends, fi-compat's
    mappings) are all given.
    """
    seen: set[Key] = set()

    def once(keys: Iterable[Key]) -> Iterator[Key]:
        for key in keys:
            if key not in seen:
                seen.add(key)
                yield key

    yield from once(key for facts in (old, new) for key in facts.table if key[0] not in _PER_NAME)
    recorded = old.record is not None and new.record is not None
    # (home, name) -> the modules where that definition's name changed
    changed: dict[tuple[str, str], list[str]] = {}
    # shortest paths first: a change said once is said at the path engines use
    for module in sorted(old.modules() | new.modules(), key=_rank):
        before, after = old.module(module), new.module(module)
        if recorded and (before is None) != (after is None):
            if not _inside_another(module, old, new):
                yield from once([("module", module)])
            continue
        if recorded:
            assert before is not None
            assert after is not None
            if alike(module, before.release, after.release):
                continue  # one stored record of every name: nothing to compare
            names = set(before.names) | set(after.names)
        else:
            names = {key[2] for f in (old, new) for key in f.table if key[:2] == ("name", module)}
        for name in sorted(names):
            if recorded and name.startswith("_"):
                continue
            if before is not None and after is not None:
                version = before.version(name)  # one stored record: the same facts
                if version is not None and version == after.version(name):
                    continue
            yield from once(old.name_keys(module, name))
            home = new.get(("defined", module, name)) or old.get(("defined", module, name))
            changed.setdefault((home or module, name), []).append(module)
    for (_, name), modules in sorted(changed.items()):
        listed = f"{min(modules, key=_rank)}.{name}"
        listed = new.canonical.get(listed, old.canonical.get(listed, listed))
        for facts in (old, new):
            yield from once(facts.build(listed))
    if not recorded:
        yield from once(key for facts in (old, new) for key in facts.table)


def _inside_another(module: str, old: Facts, new: Facts) -> bool:
    """True when a package holding ``module`` also came or went between the releases
    (its change says it all)."""
    parts = module.split(".")
    for end in range(1, len(parts)):
        package = ".".join(parts[:end])
        if (old.module(package) is None) != (new.module(package) is None):
            return True
    return False


#: The kinds of key that belong to one name (:meth:`Facts.name_keys` and its entry).
_PER_NAME = frozenset({"name", "defined", "conditional"}) | _BUILT_ON_USE
