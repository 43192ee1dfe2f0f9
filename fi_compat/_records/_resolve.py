"""Where a dotted path an engine's code names leads in one recorded release.

:func:`resolve` follows a path the way Python would on the release, through what its facts
(:mod:`fi_compat._records._facts`) hold: a module, the names it binds (before a submodule of
the same name), an instance of a class built at import, the class a function is annotated to
return, a class's methods and attributes, what a ``__getattr__`` the records follow hands
out, an enum's members. The answer is one of :data:`PRESENT`, :data:`ABSENT`,
:data:`UNKNOWN` (the records cannot tell: :func:`unknown_reason` says why) or
:data:`FOREIGN` (not FlashInfer's: a tensor a function returns).
"""

from __future__ import annotations

from dataclasses import dataclass

from fi_compat._records._facts import Facts

__all__ = [
    "ABSENT",
    "FOREIGN",
    "MODULE_ATTRIBUTES",
    "PRESENT",
    "UNKNOWN",
    "Resolved",
    "resolve",
    "unknown_reason",
]

#: What a path leads to on a release: there, provably not there, or not known to the records.
PRESENT, ABSENT, UNKNOWN = "present", "absent", "unknown"
#: Not FlashInfer's: an attribute of what a function returns where its recorded return
#: annotation names no class of its module (a tensor, a tuple): nothing to judge.
FOREIGN = "foreign"

#: What every module imported from a file has, whatever its release: Python sets them.
MODULE_ATTRIBUTES = frozenset(
    {
        "__name__",
        "__doc__",
        "__file__",
        "__spec__",
        "__loader__",
        "__package__",
        "__dict__",
        "__builtins__",
        "__cached__",
    }
)


@dataclass(frozen=True)
class Resolved:
    """Where a dotted path leads in one release: ``state``, the path of the callable or
    class it was last found at (``callable``), what it is, and the part found missing
    (``unseen`` where that is a module the release does not ship, ``member`` where it is
    an attribute the class's or enum's record does not list); ``binding`` is the module and
    name the path's first name is bound at (where ``defined`` is read), None for a module or
    a name no binding holds."""

    state: str
    callable: str | None = None
    kind: str | None = None
    missing: str | None = None
    defined: str | None = None
    unseen: bool = False
    member: bool = False
    reason: str | None = None
    binding: tuple[str, str] | None = None


def resolve(facts: Facts, target: str, module: str) -> Resolved:
    """Where ``target`` leads on the release ``facts`` describe; ``module`` is the part of
    it known to be a module (from the use's import)."""
    parts = target.split(".")
    depth = module.count(".") + 1
    # Python finds what a module binds before a submodule of that name: a package whose
    # __init__ runs ``from .selective_state_update import selective_state_update`` hands out
    # the function, not the module.
    while depth < len(parts) and facts.ships(".".join(parts[: depth + 1])):
        if facts.get(("name", ".".join(parts[:depth]), parts[depth])) is not None:
            break
        depth += 1
    current = ".".join(parts[:depth])
    if not facts.ships(current):
        # Every module of the release is recorded (private ones as shipped).
        return Resolved(ABSENT, missing=current, unseen=True)
    if depth == len(parts):
        return Resolved(PRESENT, kind="module")
    name = parts[depth]
    path = f"{current}.{name}"
    kind = facts.get(("name", current, name))
    defined = facts.get(("defined", current, name))
    if name in MODULE_ATTRIBUTES:
        return Resolved(PRESENT, kind="attribute")
    if kind is None and name.startswith("__") and name.endswith("__"):
        # The records leave a module's dunders out (``__version__``, ``__all__``,
        # ``__path__``): not recorded is not absent.
        return Resolved(UNKNOWN, missing=path)
    if kind is None:
        found = facts.module(current)
        binds = found.binds(name) if found is not None else None
        if binds is None:  # unreadable, private, or names its source cannot list
            why = found.unreadable if found is not None else None
            return Resolved(UNKNOWN, missing=path, reason=f"{current}: {why}" if why else None)
        if binds:  # served by the module's __getattr__: there, of unrecorded shape
            return Resolved(PRESENT, kind="value", defined=current)
        return Resolved(ABSENT, missing=path)
    instance = facts.get(("instance", path)) if kind == "value" else None
    if instance is not None and depth + 1 < len(parts):
        path, kind = instance, "class"  # ``cudart = CudaRTLibrary()``: its attributes
    for attribute in parts[depth + 1 :]:
        if kind in ("function", "method"):
            returned = facts.get(("returns", path))
            # the module a returned class is named in: the function's, or the method's class's
            owner = path.rpartition(".")[0]
            owner_module = owner if kind == "function" else owner.rpartition(".")[0]
            if returned is not None and owner_module:
                returned = str(returned).strip("'\"")
                if facts.get(("name", owner_module, returned)) == "class":
                    # what the function returns: an instance of that class
                    path, kind = f"{owner_module}.{returned}", "class"
                elif returned and returned != "None":
                    return Resolved(FOREIGN, callable=path)
        if kind == "class":
            member = _class_member(facts, path, attribute, defined)
            if isinstance(member, Resolved):
                return member
            path, kind = member, "method"
            continue
        if kind == "enum":
            if facts.get(("member", path, attribute)) is not None:
                return Resolved(PRESENT, kind="member", defined=defined)
            return Resolved(UNKNOWN, callable=path, missing=f"{path}.{attribute}", member=True)
        return Resolved(UNKNOWN, callable=path, missing=f"{path}.{attribute}")
    return Resolved(PRESENT, callable=path, kind=kind, defined=defined, binding=(current, name))


def _class_member(facts: Facts, path: str, attribute: str, defined: str | None) -> str | Resolved:
    """``attribute`` of an instance of the class at ``path``: the method's path to go on
    with, or where it leads (present, served by a ``__getattr__`` the records follow or not,
    or not listed by the class's record)."""
    if facts.get(("method", path, attribute)):
        return f"{path}.{attribute}"
    if facts.get(("attribute", path, attribute)) or facts.subclass_has(path, attribute):
        return Resolved(PRESENT, kind="attribute", defined=defined)
    served = facts.get(("getattr", path))
    if isinstance(served, str):
        # a lazy proxy of another class: its names are that class's
        if facts.get(("method", served, attribute)):
            return f"{served}.{attribute}"
        if facts.get(("attribute", served, attribute)):
            return Resolved(PRESENT, kind="attribute", defined=defined)
    if served or facts.subclass_serves(path):
        # not known present, and not known absent: never a break
        return Resolved(
            UNKNOWN,
            callable=path,
            missing=f"{path}.{attribute}",
            reason=f"{path} (or a class derived from it) may hand out {attribute} "
            "through a __getattr__ the records do not follow,",
        )
    return Resolved(UNKNOWN, callable=path, missing=f"{path}.{attribute}", member=True)


def unknown_reason(found: Resolved) -> str:
    """Why the records cannot tell what a use meets (:data:`UNKNOWN`)."""
    missing = found.missing or "it"
    if found.reason is not None:
        return found.reason
    if found.member:
        return f"the records of {found.callable} list no {missing.rpartition('.')[2]}"
    if found.callable is not None:
        return f"the records do not describe what {found.callable} holds or returns"
    return f"the records cannot tell whether {missing} is there"
