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
``("member", path, member)``
    The value of one member of the enum at ``path`` (source text when not a literal).
``("hazard", hazard)``
    Whether the import hazard holds (:class:`fi_compat.hazards.Hazard` names them).
``("backend", family, backend)``
    The measured split-reach verdict of one attention backend, for measured releases.
``("mapping", key)``
    What fi-compat does on this release where the release alone is not enough
    (:data:`MAPPINGS`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from fi_compat._records import _canonical, _document, raw_name_tables
from fi_compat._surface import (
    COMM,
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
    "HAZARD_MODULES",
    "MAPPINGS",
    "Facts",
    "Key",
    "accepts",
    "facts_of",
    "keys_of",
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

#: The import hazards: record key -> the modules whose import (or a submodule's) meets it.
HAZARD_MODULES: Mapping[str, tuple[str, ...]] = {
    "comm_requires_cuda_runtime": (COMM,),
    "comm_requires_triton": (COMM,),
    "import_queries_gpu": ("flashinfer",),
}

_SELF = ("self", "cls")
#: How many ``**kwargs`` forwards :func:`accepts` follows (as the records' own reader does).
_MAX_FORWARDS = 4
_POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
_STATIC = ("staticmethod",)


@dataclass(frozen=True, eq=False)
class Facts:
    """The facts of one release (see the module docstring), with the evidence of its hazards.

    ``canonical`` maps each recorded path of a name (``flashinfer.decode.X``), and the path
    of its definition (``flashinfer.comm.comm_backend.TorchDistBackend``), to the path its
    facts are kept under in the diff: the shortest recorded module that binds it.
    """

    release: str
    table: dict[Key, Any]
    evidence: Mapping[str, str | None]
    canonical: Mapping[str, str]
    measured: bool
    #: Name path -> (its record entry, the extra class record): the facts of a callable,
    #: class or enum are built on the first question about it (most releases of a diff are
    #: only asked about the few facts that changed).
    pending: dict[str, tuple[Mapping[str, Any], Mapping[str, Any] | None]] = field(
        default_factory=dict
    )

    @property
    def version(self) -> Version:
        """The release as a :class:`packaging.version.Version`."""
        return Version(self.release)

    def get(self, key: Key) -> Any:
        """The value of ``key``, or None when the release has no such fact."""
        found = self.table.get(key)
        if found is None and self.pending and key[0] in _BUILT_ON_USE:
            path = key[1]
            for name in (path, path.rpartition(".")[0]):
                entry = self.pending.pop(name, None)
                if entry is not None:
                    _entry(self.table, name, *entry)
                    return self.table.get(key)
        return found

    def items(self) -> Mapping[Key, Any]:
        """Every fact of the release (those not built yet are built first)."""
        while self.pending:
            name, entry = self.pending.popitem()
            _entry(self.table, name, *entry)
        return self.table

    def subclass_has(self, path: str, name: str) -> bool:
        """True when a recorded class of the same module that derives from the class at
        ``path`` has the method or attribute ``name`` (a factory annotated to return the
        base class hands out one of those)."""
        return name in _subclass_members(self, path)

    def module_seen(self, module: str) -> bool:
        """True when the record knows ``module`` exists in this release: a recorded name
        table, a module-kind name, or the home of a recorded definition."""
        return module in _seen_modules(self)


@functools.cache
def _seen_modules(facts: Facts) -> frozenset[str]:
    seen: set[str] = set()
    for key, value in facts.table.items():  # names and homes are never pending
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
def _subclass_members(facts: Facts, path: str) -> frozenset[str]:
    module, _, name = path.rpartition(".")
    derived = {
        key[1]
        for key, bases in facts.items().items()
        if key[0] == "bases" and name in bases and key[1].rpartition(".")[0] == module
    }
    return frozenset(
        key[2] for key in facts.items() if key[0] in ("method", "attribute") and key[1] in derived
    )


def _parameters(function: Mapping[str, Any], *, method: bool) -> list[Mapping[str, Any]]:
    parameters = list(function["parameters"])
    static = any(decorator in _STATIC for decorator in function.get("decorators", ()))
    if method and not static and parameters and parameters[0]["name"] in _SELF:
        parameters = parameters[1:]
    return parameters


def _callable(table: dict[Key, Any], path: str, function: Mapping[str, Any], method: bool) -> None:
    table["params", path] = tuple(
        (parameter["name"], parameter["kind"], parameter.get("default"))
        for parameter in _parameters(function, method=method)
    )
    if function.get("returns"):
        table["returns", path] = function["returns"]
    target = function.get("forwards_kwargs_to")
    if target is not None and "." not in target and not function.get("forwards_kwargs_drops"):
        table["forwards", path] = target


def parameter(facts: Facts, path: str, name: str) -> tuple[str, str | None] | None:
    """``(kind, default)`` of parameter ``name`` of the callable at ``path``, or None."""
    for found, kind, default in facts.get(("params", path)) or ():
        if found == name:
            return kind, default
    return None


def accepts(facts: Facts, path: str, keyword: str, depth: int = 0) -> str:
    """``"yes"``, ``"no"`` or ``"unknown"``: does the callable at ``path`` take ``keyword``,
    following a proven ``**kwargs`` forward to a method of the same class (as
    :meth:`fi_compat._records.ReleaseRecord.support` does)?"""
    if facts.get(("params", path)) is None:
        return "unknown"
    found = parameter(facts, path, keyword)
    if found is not None:
        return "no" if found[0] in ("POSITIONAL_ONLY", "VAR_POSITIONAL") else "yes"
    if not var_keyword(facts, path):
        return "no"
    target = facts.get(("forwards", path))
    if target is None or depth > _MAX_FORWARDS:
        return "unknown"
    owner = path.rpartition(".")[0]
    return accepts(facts, f"{owner}.{target}", keyword, depth + 1)


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


def _class(
    table: dict[Key, Any], path: str, data: Mapping[str, Any], extra: Mapping[str, Any] | None
) -> None:
    methods = dict(data.get("methods", {}))
    for name, method in (extra or {}).get("methods", {}).items():
        methods.setdefault(name, method)
    for alias, target in data.get("aliases", {}).items():
        methods.setdefault(alias, methods.get(target))
    table["bases", path] = tuple(base.rpartition(".")[2] for base in data.get("bases", ()))
    for attribute in data.get("attributes", ()):
        table["attribute", path, attribute] = True
    for name, method in methods.items():
        if method is None:
            continue
        if name == "__init__":
            _callable(table, path, method, method=True)  # the constructor, as engines call it
            continue
        _callable(table, f"{path}.{name}", method, method=True)
        table["method", path, name] = True


#: The kinds of fact built on first use (:attr:`Facts.pending`).
_BUILT_ON_USE = frozenset(
    {"params", "returns", "forwards", "method", "attribute", "bases", "member"}
)


def _entry(
    table: dict[Key, Any],
    path: str,
    entry: Mapping[str, Any],
    extra: Mapping[str, Any] | None,
) -> None:
    """The facts of one name's record entry (a function, a class, an enum) at ``path``."""
    if entry.get("function"):
        _callable(table, path, entry["function"], method=False)
    if entry.get("class"):
        _class(table, path, entry["class"], extra)
    if entry.get("enum"):
        for member, value in entry["enum"]["members"].items():
            table["member", path, member] = value


def _rank(module: str) -> tuple[int, int]:
    order = NAMED_MODULES.index(module) if module in NAMED_MODULES else len(NAMED_MODULES)
    return module.count("."), order


def _mappings(facts: Facts) -> None:
    table, release = facts.table, facts.release

    def has(module: str, name: str) -> bool:
        return ("name", module, name) in table

    def takes(path: str, keyword: str) -> bool:
        return parameter(facts, path, keyword) is not None

    factory = f"{COMM}.{UNIFIED_FACTORY.key}"
    fusion = f"{COMM}.{UNIFIED_FUSION.key}"
    unified = has(COMM, UNIFIED_FACTORY.key) and has(COMM, UNIFIED_FUSION.key)
    legacy = has(COMM, LEGACY_FACTORY.key) and has(COMM, LEGACY_FUSION.key)
    table["mapping", "api"] = "unified" if unified else "legacy" if legacy else "none"
    if unified:
        table["mapping", "group"] = (
            "passed to the factory"
            if takes(factory, "group")
            else "carried by comm_backend (the factory takes no group=)"
        )
        table["mapping", "early_completion"] = (
            f"passed to {UNIFIED_FUSION.key}"
            if takes(fusion, "trigger_completion_at_end")
            else f"honoured on TRT-LLM workspaces through {LEGACY_FUSION.key}; "
            "MNNVL completes at the end"
        )
        table["mapping", "weight_bias"] = (
            f"passed to {UNIFIED_FUSION.key}"
            if takes(fusion, "weight_bias")
            else "left out at 0.0; any other value raises CapabilityMissingError"
        )
    elif legacy:
        table["mapping", "group"] = "passed to the legacy factory's group="
        table["mapping", "early_completion"] = f"passed to {LEGACY_FUSION.key}"
        table["mapping", "weight_bias"] = (
            "left out at 0.0; any other value raises CapabilityMissingError"
        )
    backend = next(
        (
            table.get(("defined", module, TORCH_DIST_BACKEND.key))
            for module in (MNNVL_MODULE, COMM)
            if has(module, TORCH_DIST_BACKEND.key)
        ),
        None,
    )
    if backend is not None:
        local = table.get(("bcast_group_local",))
        table["mapping", "bcast_root"] = (
            "FlashInfer maps it to a global rank"
            if local
            else f"fi-compat's {TORCH_DIST_BACKEND.key} maps it to a global rank"
        )
    if unified:
        checkpointing = any(
            facts.get(("method", f"{COMM}.{name}", "checkpoint_prepare"))
            for name in (WORKSPACE.key, TRTLLM_WORKSPACE)
        )
        table["mapping", "checkpointing"] = (
            "FlashInfer's checkpoint_prepare"
            if checkpointing
            else "raises NotImplementedError (CheckpointUnsupportedError)"
        )
        from fi_compat.comm._sizes import rule_of

        rule, _ = rule_of(release, "trtllm")
        table["mapping", "per_call_sizes"] = (
            "served when tokens x hidden size fit"
            if rule == "product"
            else "only the workspace's own sizes (CallSizeUnsupportedError otherwise)"
        )
    table.pop(("bcast_group_local",), None)


def _reach(table: dict[Key, Any], release: str) -> bool:
    from fi_compat.attention._reach import _data

    entry = _data().get(release)
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
    release = _canonical(release)
    doc = _document(release)
    table: dict[Key, Any] = {}
    # (defining module, name) -> the recorded modules that bind it.
    homes: dict[tuple[str, str], list[str]] = {}
    classes: dict[str, Mapping[str, Any]] = {
        **{k: v for k, v in doc["comm"].get("classes", {}).items() if v},
        **{k: v for k, v in doc.get("attention", {}).items() if v},
        **{k: v for k, v in doc.get("attention_families", {}).items() if v},
    }
    tables = raw_name_tables(doc)
    for module, names in tables.items():
        for name, entry in names.items():
            table["name", module, name] = entry["kind"]
            table["defined", module, name] = entry.get("defined_in")
            if entry.get("conditional"):
                table["conditional", module, name] = True
            homes.setdefault((entry.get("defined_in") or module, name), []).append(module)
    canonical: dict[str, str] = {}
    pending: dict[str, tuple[Mapping[str, Any], Mapping[str, Any] | None]] = {}
    for (home, name), modules in homes.items():
        best = min(modules, key=_rank)
        for module in modules:
            canonical[f"{module}.{name}"] = f"{best}.{name}"
        canonical.setdefault(f"{home}.{name}", f"{best}.{name}")
        # A name's callables, methods and members are kept once, under its canonical path
        # (the scan and the diff both look them up there), and built on first use.
        pending[f"{best}.{name}"] = (tables[best][name], classes.get(name))
    backend_class = doc["comm"].get("classes", {}).get(TORCH_DIST_BACKEND.key) or {}
    table["bcast_group_local",] = backend_class.get("bcast_root_is_group_local")
    hazards = doc["import"]
    evidence = {}
    for hazard in HAZARD_MODULES:
        table["hazard", hazard] = bool(hazards[hazard]["value"])
        evidence[hazard] = hazards[hazard].get("evidence")
    measured = _reach(table, release)
    facts = Facts(release, table, evidence, canonical, measured, pending)
    _mappings(facts)
    return facts


def releases_between(first: str, last: str) -> list[str]:
    """The recorded releases from ``first`` to ``last``, both included, in version order
    (reversed when ``first`` is the newer)."""
    from fi_compat._records import _available

    start, end = Version(_canonical(first)), Version(_canonical(last))
    low, high = sorted((start, end))
    found = [name for name in _available() if low <= Version(name) <= high]
    return found if start <= end else found[::-1]


def keys_of(*facts: Facts) -> Iterable[Key]:
    """Every key any of ``facts`` holds, once."""
    seen: set[Key] = set()
    for one in facts:
        for key in one.items():
            if key not in seen:
                seen.add(key)
                yield key
