"""Every module of a release and every name it binds: the whole surface engines can import.

:mod:`.record` records what fi-compat adapts (comm, the attention wrappers); this module
records everything else an engine may reach. A module is *recorded* when a user can import
it from the wheel: every module or package under ``flashinfer`` whose dotted path has no
``_private`` segment, but for ``flashinfer.data`` (vendored third-party sources FlashInfer
ships as data: CUTLASS's Python packages, which import as their own top-level names, never
as ``flashinfer.data...``). Engines import ``flashinfer.jit``, ``flashinfer.cute_dsl`` and
``flashinfer.fused_moe.core``: public means importable, not listed in FlashInfer's
``__all__``.

A private module (a ``_private`` segment) is recorded too, as shipped and nothing more: its
record is ``unreadable`` with :data:`PRIVATE` as the reason, so the tools can tell a private
module a release does not ship (``flashinfer.mla._sparse_mla_sm120`` on a release whose
``flashinfer.mla`` is a plain module) from one whose names they cannot tell.

For each module the record holds every name its import binds, private ones included
(engines call ``flashinfer.utils._get_range_buf``), each as :func:`.names.name_record`
makes it; ``__all__`` when it is a literal; what a module ``__getattr__`` serves; and the
star imports from outside the release, which may bind names the source cannot tell
(``open``). A name re-exported from a recorded module where it has the very same record is
stored as a reference to it (``same``), so that a function reached as ``flashinfer.X``,
``flashinfer.fused_moe.X`` and ``flashinfer.fused_moe.core.X`` is written once. A module
the recorder cannot read (a syntax error, a resolution that does not end) is recorded as
``unreadable`` with the reason, and the tools answer "unknown" for it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping

from fi_compat._recorder.names import name_record
from fi_compat._recorder.resolve import MAX_DEPTH, Module, Package
from fi_compat._recorder.signatures import Recorder
from fi_compat._recorder.trees import walk
from fi_compat._records._format import JSONRecord
from fi_compat.errors import RecordingError

__all__ = [
    "PACKAGE_DATA",
    "PRIVATE",
    "is_private_module",
    "is_recorded_module",
    "module_surface",
    "module_tables",
    "recorded_modules",
    "surface",
]


#: The part of the wheel that is data, not modules of FlashInfer's (see the docstring).
PACKAGE_DATA = "flashinfer.data"
_GETATTR = "__getattr__"
#: What a module ``__getattr__`` that serves names the source cannot list is recorded as.
ANY = "*"


#: Why a private module's names are not recorded (its record is "unreadable" with this).
PRIVATE = "a private module: the records say that the release ships it, not the names it binds"


def _data(name: str) -> bool:
    return name == PACKAGE_DATA or name.startswith(f"{PACKAGE_DATA}.")


def _private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def is_recorded_module(name: str) -> bool:
    """``name`` is a module the surface records with its names (see the module docstring)."""
    return not _data(name) and not _private(name)


def is_private_module(name: str) -> bool:
    """``name`` is a private module of the release: recorded as shipped, names unread."""
    return not _data(name) and _private(name)


def _literal_names(value: ast.expr | None) -> set[str] | None:
    """The strings of a literal collection (``{"a", "b"}``, ``frozenset({...})``, a dict's
    keys), or None when ``value`` is not one."""
    if value is None:
        return None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and len(value.args) == 1:
        if value.func.id in ("frozenset", "set", "tuple", "list", "dict"):
            return _literal_names(value.args[0])
        return None
    if isinstance(value, ast.Dict):
        keys = value.keys
    elif isinstance(value, ast.Set | ast.List | ast.Tuple):
        keys = list(value.elts)
    else:
        return None
    names: set[str] = set()
    for key in keys:
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return None
        names.add(key.value)
    return names


def _module_constant(module: Module, name: str) -> set[str] | None:
    """The strings of the module-level literal collection ``name``, or None."""
    for binding in reversed(module.bindings.get(name, [])):
        node = binding.node
        if isinstance(node, ast.Assign | ast.AnnAssign):
            return _literal_names(node.value)
    return None


def served_names(module: Module) -> list[str] | str | None:
    """What the module's ``__getattr__`` serves: the names it tests its argument against
    (``name == "x"``, ``name in {"x", ...}``, ``name in _TABLE`` for a module-level literal
    table), sorted; ``"*"`` when it tests anything else or nothing; None without one."""
    bindings = module.bindings.get(_GETATTR, [])
    func = next((b.node for b in reversed(bindings) if isinstance(b.node, ast.FunctionDef)), None)
    if func is None:
        return None
    positional = [*func.args.posonlyargs, *func.args.args]
    if not positional:
        return ANY
    argument = positional[0].arg
    served: set[str] = set()
    for node in walk(func):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        left, right, op = node.left, node.comparators[0], node.ops[0]
        if not (isinstance(left, ast.Name) and left.id == argument):
            continue
        if isinstance(op, ast.Eq | ast.NotEq):
            if not (isinstance(right, ast.Constant) and isinstance(right.value, str)):
                return ANY
            served.add(right.value)
        elif isinstance(op, ast.In | ast.NotIn):
            found = _literal_names(right)
            if found is None and isinstance(right, ast.Name):
                found = _module_constant(module, right.id)
            if found is None:
                return ANY
            served |= found
        else:
            return ANY
    return sorted(served) if served else ANY


def bound_names(package: Package, name: str, depth: int = 0) -> tuple[set[str], list[str]]:
    """Every name ``import name`` binds in the module's namespace, private ones included,
    and the star-imported modules outside the release (whose names the source cannot tell).

    A star import binds the target's ``__all__``, else its names without a leading ``_``.
    Names bound for type checkers only are left out; ``__all__`` entries are added (an
    entry nothing binds is recorded too, with no definition: importing it fails, which is
    FlashInfer's to answer at run time).
    """
    module = package.get(name)
    if module is None or depth > MAX_DEPTH:
        return set(), []
    names = {
        bound
        for bound, bindings in module.bindings.items()
        if not all(b.annotation_only for b in bindings)
    }
    opened: list[str] = []
    for star in module.star_imports:
        target = package.get(star)
        if target is None:
            opened.append(star)
            continue
        if target.all_names is not None:
            names.update(target.all_names)
            continue
        starred, more = bound_names(package, star, depth + 1)
        names.update(bound for bound in starred if not bound.startswith("_"))
        opened += more
    if module.all_names is not None:
        names.update(module.all_names)
    return names, opened


def module_surface(recorder: Recorder, name: str) -> JSONRecord:
    """One module's record: ``names`` (name -> NAME), and ``all``, ``open``, ``getattr``
    where they apply; ``{"unreadable": reason}`` when the module cannot be read."""
    package = recorder.package
    try:
        module = package.get(name)
        assert module is not None, name
        if module.replaced_at is not None:
            return {
                "unreadable": f"line {module.replaced_at}: sys.modules[__name__] = ...: the "
                "import hands out another module, whose names this source does not tell"
            }
        names, opened = bound_names(package, name)
        table: dict[str, JSONRecord] = {}
        for bound in sorted(names):
            record = name_record(recorder, name, bound)
            if package.conditional(name, bound):
                record["conditional"] = True
            table[bound] = record
        served = served_names(module)
    except (RecordingError, RecursionError) as error:
        return {"unreadable": f"{type(error).__name__}: {error}"}
    found: JSONRecord = {"names": table}
    if module.all_names is not None:
        found["all"] = sorted(set(module.all_names))
    if opened:
        found["open"] = sorted(set(opened))
    if served is not None:
        found["getattr"] = served
    return found


def _shared(tables: dict[str, JSONRecord]) -> None:
    """Replace each re-export whose record equals the defining module's by ``same``."""
    for module, found in tables.items():
        for name, record in found.get("names", {}).items():
            home = record.get("defined_in")
            kind = record["kind"]
            if home == module or home not in tables or kind not in ("function", "class", "enum"):
                continue
            own = record["function"]["qualname"] if kind == "function" else None
            own = own or name
            target = tables[home].get("names", {}).get(own)
            if target is None or "same" in target:
                continue
            compared = {key: value for key, value in record.items() if key != "conditional"}
            original = {key: value for key, value in target.items() if key != "conditional"}
            if compared != original:
                continue
            shared: JSONRecord = {"kind": kind, "defined_in": home, "same": own}
            if record.get("conditional"):
                shared["conditional"] = True
            found["names"][name] = shared


def recorded_modules(package: Package) -> list[str]:
    """The release's recorded modules (:func:`is_recorded_module`), sorted."""
    return sorted(name for name in package.source.files if is_recorded_module(name))


def module_tables(
    package: Package, modules: Iterable[str], recorder: Recorder | None = None
) -> dict[str, JSONRecord]:
    """:func:`module_surface` of each of ``modules``: one part of :func:`surface`, which a
    builder may make in parts, in processes of their own. ``recorder``: one of ``package``'s
    to share with the other parts this process makes (what it has recorded is not recorded
    again); by default a new one."""
    recorder = Recorder(package) if recorder is None else recorder
    return {name: module_surface(recorder, name) for name in modules}


def surface(
    package: Package, tables: Mapping[str, JSONRecord] | None = None
) -> dict[str, JSONRecord]:
    """Every recorded module of the release -> :func:`module_surface`, re-exports shared.

    ``tables``: every recorded module's :func:`module_tables`, where they were made already
    (in parts); by default they are made here.
    """
    if tables is None:
        tables = module_tables(package, recorded_modules(package))
    found = {name: tables[name] for name in sorted(tables)}  # _shared reads in this order
    _shared(found)
    for name in sorted(package.source.files):
        if is_private_module(name):
            found[name] = {"unreadable": PRIVATE}
    return found
