"""Each use of FlashInfer in an engine's code, judged against two recorded releases.

:func:`judge` takes the uses :mod:`fi_compat.upgrade._scan` read and the
:class:`~fi_compat.upgrade._history.History` between two releases, and returns one
:class:`Finding` per use (two where a use meets both a name and an import hazard): which
:class:`Category` it falls in, the rule that put it there, and the release where the fact
it rests on changed. With ``fi_compat=True`` the uses of ``flashinfer.comm`` are judged as
they run after the import swap to ``fi_compat.comm``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from fi_compat._frozen import picklable
from fi_compat._records import introduced_in
from fi_compat._surface import (
    COMM,
    IMPORT_HAZARDS,
    NAMED_MODULES,
    PATTERN,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
)
from fi_compat.upgrade._diff import Change, Comparison
from fi_compat.upgrade._facts import (
    Facts,
    accepts,
    parameter,
    positional,
)
from fi_compat.upgrade._history import History
from fi_compat.upgrade._kinds import RULES, Category, Rule
from fi_compat.upgrade._scan import Use

__all__ = ["RULES", "Category", "Finding", "Rule", "judge"]


@picklable
@dataclass(frozen=True)
class Finding:
    """One judged use.

    .. versionadded:: 0.3.0

    Attributes
    ----------
    path, line, column, end_line, end_column
        Where the use is (relative to the scanned root; 1-based).
    scope
        The enclosing ``Class.function`` (``"<module>"`` at module level).
    kind
        The use's kind (``"import"``, ``"call"``, ``"attribute"``, ``"backend"``,
        ``"signature"``, ``"guard"``).
    target
        The dotted path used (``flashinfer.comm.allreduce_fusion``).
    category, rule, message
        The verdict, the :data:`RULES` id behind it and one sentence for people.
    release
        The release where the fact the verdict rests on changed (towards the new
        release); None when it did not change.
    """

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    scope: str
    kind: str
    target: str
    category: Category
    rule: str
    message: str
    release: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The finding as the JSON output documents it."""
        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "scope": self.scope,
            "kind": self.kind,
            "target": self.target,
            "category": self.category.value,
            "rule": self.rule,
            "message": self.message,
            "release": self.release,
        }


# ----------------------------------------------------------------------------- resolving

_PRESENT, _ABSENT, _UNKNOWN = "present", "absent", "unknown"
#: Not FlashInfer's: an attribute of what a function returns where its recorded return
#: annotation names no class of its module (a tensor, a tuple): nothing to judge.
_FOREIGN = "foreign"

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
class _Resolved:
    """Where a dotted path leads in one release: ``state``, the path its facts are kept
    under (``callable``), what it is, and the part found missing."""

    state: str
    callable: str | None = None
    kind: str | None = None
    missing: str | None = None
    defined: str | None = None
    unseen: bool = False
    member: bool = False
    reason: str | None = None


def _resolve(facts: Facts, target: str, module: str) -> _Resolved:
    parts = target.split(".")
    depth = module.count(".") + 1
    # Python finds what a module binds before a submodule of that name: a package whose
    # __init__ runs ``from .selective_state_update import selective_state_update`` hands out
    # the function, not the module.
    while depth < len(parts) and facts.module_seen(".".join(parts[: depth + 1])):
        if facts.get(("name", ".".join(parts[:depth]), parts[depth])) is not None:
            break
        depth += 1
    current = ".".join(parts[:depth])
    recorded = facts.record is not None  # every module of the release is recorded
    if not facts.module_seen(current):
        # With every module recorded (private ones as shipped), a module the release does
        # not ship is absent; otherwise only the seven modules with name tables are known.
        state = _ABSENT if recorded or current in NAMED_MODULES else _UNKNOWN
        return _Resolved(state, missing=current, unseen=True)
    if depth == len(parts):
        return _Resolved(_PRESENT, kind="module")
    name = parts[depth]
    path = f"{current}.{name}"
    kind = facts.get(("name", current, name))
    defined = facts.get(("defined", current, name))
    if name in MODULE_ATTRIBUTES:
        return _Resolved(_PRESENT, kind="attribute")
    if kind is None and name.startswith("__") and name.endswith("__"):
        # The records leave a module's dunders out (``__version__``, ``__all__``,
        # ``__path__``): not recorded is not absent.
        return _Resolved(_UNKNOWN, missing=path)
    if kind is None and recorded:
        found = facts.module(current)
        binds = found.binds(name) if found is not None else None
        if binds is None:  # unreadable, private, or names its source cannot list
            why = found.unreadable if found is not None else None
            return _Resolved(_UNKNOWN, missing=path, reason=f"{current}: {why}" if why else None)
        if binds:  # served by the module's __getattr__: there, of unrecorded shape
            return _Resolved(_PRESENT, kind="value", defined=current)
        return _Resolved(_ABSENT, missing=path)
    if kind is None:
        exported = facts.canonical.get(path)
        if exported is None:
            # Absent from a recorded name table; elsewhere the module may re-export it.
            return _Resolved(_ABSENT if current in NAMED_MODULES else _UNKNOWN, missing=path)
        module_of, _, name_of = exported.rpartition(".")
        kind = facts.get(("name", module_of, name_of))
        defined = current
        path = exported
    else:
        path = facts.canonical.get(path, path)
    instance = facts.get(("instance", path)) if kind == "value" else None
    if instance is not None and depth + 1 < len(parts):
        # ``cudart = CudaRTLibrary()``: its attributes are the class's
        path, kind = facts.canonical.get(instance, instance), "class"
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
                    path = facts.canonical.get(
                        f"{owner_module}.{returned}", f"{owner_module}.{returned}"
                    )
                    kind = "class"
                elif returned and returned != "None":
                    return _Resolved(_FOREIGN, callable=path)
        if kind == "class":
            member = _class_member(facts, path, attribute, defined)
            if isinstance(member, _Resolved):
                return member
            path, kind = member, "method"
            continue
        if kind == "enum":
            if facts.get(("member", path, attribute)) is not None:
                return _Resolved(_PRESENT, kind="member", defined=defined)
            return _Resolved(_UNKNOWN, callable=path, missing=f"{path}.{attribute}", member=True)
        return _Resolved(_UNKNOWN, callable=path, missing=f"{path}.{attribute}")
    return _Resolved(_PRESENT, callable=path, kind=kind, defined=defined)


def _class_member(facts: Facts, path: str, attribute: str, defined: str | None) -> str | _Resolved:
    """``attribute`` of an instance of the class at ``path``: the method's path to go on
    with, or where it leads (present, served by a ``__getattr__`` the records follow or not,
    or not listed by the class's record)."""
    if facts.get(("method", path, attribute)):
        return f"{path}.{attribute}"
    if facts.get(("attribute", path, attribute)) or facts.subclass_has(path, attribute):
        return _Resolved(_PRESENT, kind="attribute", defined=defined)
    served = facts.get(("getattr", path))
    if isinstance(served, str):
        # a lazy proxy of another class: its names are that class's
        delegate = facts.canonical.get(served, served)
        if facts.get(("method", delegate, attribute)):
            return f"{delegate}.{attribute}"
        if facts.get(("attribute", delegate, attribute)):
            return _Resolved(_PRESENT, kind="attribute", defined=defined)
    if served or facts.subclass_serves(path):
        # not known present, and not known absent: never a break
        return _Resolved(
            _UNKNOWN,
            callable=path,
            missing=f"{path}.{attribute}",
            reason=f"{path} (or a class derived from it) may hand out {attribute} "
            "through a __getattr__ the records do not follow,",
        )
    return _Resolved(_UNKNOWN, callable=path, missing=f"{path}.{attribute}", member=True)


# ----------------------------------------------------------------------------- judging

#: Exception -> the handler names that catch it.
_CAUGHT_BY = {
    "AssertionError": {"AssertionError", "Exception", "BaseException", ""},
    "ModuleNotFoundError": {"ModuleNotFoundError", "ImportError", "Exception", "BaseException", ""},
    "RuntimeError": {"RuntimeError", "Exception", "BaseException", ""},
    "TypeError": {"TypeError", "Exception", "BaseException", ""},
}
#: fi_compat.comm's drop-ins: served on every release with 0.7.2.post1's parameters.
_DROPINS = (UNIFIED_FACTORY.key, UNIFIED_FUSION.key, PATTERN.key)
#: Keyword -> the mapping that says what fi-compat does where the release lacks it.
_MAPPED_KEYWORDS = {
    "group": "group",
    "trigger_completion_at_end": "early_completion",
    "weight_bias": "weight_bias",
}


class _Judge:
    def __init__(self, steps: History, fi_compat: bool) -> None:
        self.history = steps
        self.old, self.new = steps.old, steps.new
        #: The one comparison of the two releases, asked about each use's subject.
        self.compare = Comparison(steps)
        self.fi_compat = fi_compat
        self.findings: list[Finding] = []
        self.hazards_seen: set[tuple[str, str, str]] = set()

    def since(self, release: str | None) -> str:
        """``from R`` on the way up, ``on R down to B`` on the way down: the releases from
        the cited one to the new one, all of which share the new state (a fact can come
        back further down, so nothing is said of the releases past the new one)."""
        release = release or self.new.release
        if self.history.upgrade:
            return f"from {release}"
        if release == self.new.release:
            return f"on {release}"
        return f"on {release} down to {self.new.release}"

    def mapped_since(self, mapping: str) -> str | None:
        """The release from which fi-compat's answer for ``mapping`` is the new one's."""
        found = self.compare.about(("mapping", mapping))
        return found[0].release if found else None

    def cite(self, value: Any) -> str | None:
        cited = self.history.cite(value)
        return cited[0] if cited else None

    def add(
        self, use: Use, category: Category, rule: str, message: str, release: Any = None
    ) -> None:
        self.findings.append(
            Finding(
                use.path,
                use.line,
                use.column,
                use.end_line,
                use.end_column,
                use.scope,
                use.kind,
                use.target,
                category,
                rule,
                message,
                release,
            )
        )

    def swapped(self, use: Use) -> bool:
        return self.fi_compat and (use.target == COMM or use.target.startswith(f"{COMM}."))

    # ------------------------------------------------------------------------ one use

    def use(self, use: Use) -> None:
        before = len(self.findings)
        if use.kind == "import":
            self.hazards(use)
        self.verdict(use, hazard=len(self.findings) > before)

    def verdict(self, use: Use, *, hazard: bool) -> None:
        """The finding about what ``use`` names (none where an import hazard already said
        all there is, or where neither release's record knows the name)."""
        old = _resolve(self.old, use.target, use.module)
        new = _resolve(self.new, use.target, use.module)
        if self.swapped(use) and self.dropin(use, new):
            return
        if _FOREIGN in (old.state, new.state):
            return  # a tensor or another value FlashInfer returns: not its API
        if old.state == _UNKNOWN and new.state == _UNKNOWN:
            self.add(
                use,
                Category.UNVERIFIED,
                "unverified",
                f"{use.target}: {_unknown_reason(new)} on both {self.old.release} and "
                f"{self.new.release}",
            )
            return
        # The records list a class's public methods, instance attributes and enum
        # members, not its every attribute: one that only the old release's record lists
        # is gone, one that only the new release's lists is new.
        if new.state == _ABSENT or (new.member and old.state == _PRESENT):
            self.missing(use, old, new)
            return
        if use.kind == "guard":
            self.guard(use, old, new)
            return
        if new.state == _PRESENT and (old.state == _ABSENT or old.unseen or old.member):
            what = "module" if new.kind == "module" else "name"
            self.add(
                use,
                Category.AVAILABLE,
                "name-added",
                f"{use.target}: this {what} is missing on {self.old.release}"
                + (f" (no record of {old.missing} there)" if old.unseen else "")
                + f", present on {self.new.release}",
                self.cite(lambda facts: _resolve(facts, use.target, use.module).state),
            )
            return
        if _UNKNOWN in (old.state, new.state):
            unknown, release = (new, self.new) if new.state == _UNKNOWN else (old, self.old)
            self.add(
                use,
                Category.UNVERIFIED,
                "unverified",
                f"{use.target}: {_unknown_reason(unknown)} on {release.release}",
            )
            return
        if new.state != _PRESENT or old.state != _PRESENT:
            return
        if self.swapped(use) and self.torch_dist_backend(use):
            return
        if use.kind == "call" and new.callable is not None:
            if self.call(use, new.callable):
                return
        elif use.kind == "backend":
            if self.backend(use):
                return
        elif use.kind == "signature" and self.signature(use, new.callable):
            return
        if old.defined and new.defined and old.defined != new.defined and use.kind == "import":
            self.add(
                use,
                Category.BEHAVIOUR,
                "name-moved",
                f"{use.target.rpartition('.')[2]} is defined in {new.defined} on "
                f"{self.new.release} (in {old.defined} on {self.old.release}); this import "
                "still works",
                self.cite(lambda facts: _resolve(facts, use.target, use.module).defined),
            )
            return
        if not hazard:
            self.add(
                use, Category.UNCHANGED, "unchanged", f"{use.target}: the same on both releases"
            )

    def missing(self, use: Use, old: _Resolved, new: _Resolved) -> None:
        where = new.missing or use.target
        if old.state == _UNKNOWN and where != use.target:
            # What fails on the new release is a part of the path (a module it does not
            # ship): the old release's record of that part is what decides.
            at = _resolve(
                self.old, where, use.module if where.startswith(use.module) else "flashinfer"
            )
            if at.state == _PRESENT:
                old = at
        cited = self.cite(lambda facts: _resolve(facts, use.target, use.module).state)
        if old.state == _PRESENT:
            history = f"present on {self.old.release}, missing {self.since(cited)}"
        else:
            history = f"missing on both {self.old.release} and {self.new.release}"
        if use.kind == "guard":
            category = Category.BEHAVIOUR if old.state == _PRESENT else Category.UNCHANGED
            rule = "guard-flips" if old.state == _PRESENT else "unchanged"
            self.add(use, category, rule, f"{where}: the guard answers False ({history})", cited)
            return
        if self.swapped(use) and self.new.module_seen(where.rpartition(".")[0]):
            # a name of a comm module: the drop-in answers for it (a member of FlashInfer's
            # own class stays FlashInfer's AttributeError, below)
            module, _, name = where.rpartition(".")
            # NameUnavailableError says which side of the change the release is on: on the
            # way up from a release with the name, the release that removed it (cited as
            # here); otherwise the release introduced_in gives, and so does this.
            first = introduced_in(module, name) if module in NAMED_MODULES else None
            if old.state == _PRESENT and self.history.upgrade and cited:
                said = f" saying {cited} removed it"
            else:
                said = f" naming {first}, the first release with it" if first else ""
            self.add(
                use,
                Category.BEHAVIOUR if use.guarded else Category.BREAKS,
                "fi-compat-refuses",
                f"{where} ({history}): fi_compat.comm raises NameUnavailableError "
                f"(an AttributeError; ImportError from a from-import){said}",
                cited,
            )
            return
        exception = "ImportError" if use.kind == "import" else "AttributeError"
        if use.kept_guard is not None and old.state == _PRESENT and not use.guarded:
            self.add(
                use,
                Category.UNVERIFIED,
                "unverified",
                f"{where} ({history}): this file keeps a guard's answer about it in "
                f"{use.kept_guard}; whether that answer keeps this use from running is not "
                "read",
                cited,
            )
        elif old.state == _UNKNOWN:
            self.add(
                use,
                Category.UNVERIFIED,
                "unverified",
                f"{where}: missing on {self.new.release}, and on {self.old.release} "
                f"{_unknown_reason(old)}: whether this bump changes anything is not known",
            )
        elif old.state != _PRESENT:
            # It fails on both releases alike: not a change this bump makes.
            self.add(
                use,
                Category.UNCHANGED,
                "unchanged",
                f"{where} ({history}): raises {exception} on both"
                + ("; caught here" if use.guarded else ""),
            )
        elif use.guarded:
            self.add(
                use,
                Category.BEHAVIOUR,
                "name-missing",
                f"{where} ({history}): the {exception} is caught here, so the guarded path "
                "is skipped",
                cited,
            )
        else:
            self.add(
                use,
                Category.BREAKS,
                "name-missing",
                f"{where} ({history}): raises {exception}",
                cited,
            )

    def guard(self, use: Use, old: _Resolved, new: _Resolved) -> None:
        before, after = old.state == _PRESENT, new.state == _PRESENT
        if before == after or new.state == _UNKNOWN:
            self.add(
                use, Category.UNCHANGED, "unchanged", f"{use.target}: the guard answers the same"
            )
            return
        cited = self.cite(lambda facts: _resolve(facts, use.target, use.module).state)
        self.add(
            use,
            Category.AVAILABLE,
            "guard-flips",
            f"{use.target}: the guard answers True on {self.new.release} (False on "
            f"{self.old.release}), so the guarded path runs",
            cited,
        )

    # ------------------------------------------------------------------------ hazards

    def hazards(self, use: Use) -> None:
        for hazard, entry in IMPORT_HAZARDS.items():
            modules = entry.modules
            if not any(use.target == m or use.target.startswith(f"{m}.") for m in modules):
                continue
            # Said at the first import of each function (or of the module's top level) that
            # meets it: a later import in the same function only runs if that one did.
            if (use.path, use.scope, hazard) in self.hazards_seen:
                continue
            change = self.compare.hazard(hazard)
            if change is None:
                continue
            before, after = bool(change.old), bool(change.new)
            self.hazards_seen.add((use.path, use.scope, hazard))
            holding = self.new if after else self.old
            raises = entry.raises(holding.get(("hazard_python", hazard)))
            cited = (change.release, change.last_before) if change.release else None
            module = modules[0]
            if self.swapped(use):
                self.add(
                    use,
                    Category.UNCHANGED,
                    "fi-compat-maps",
                    f"import {module} {raises} on "
                    f"{self.old.release if before else self.new.release}; `import "
                    "fi_compat.comm` never raises, and get_capabilities().comm.error says why",
                    cited[0] if cited else None,
                )
                continue
            if after:
                caught = all(use.catches & _CAUGHT_BY[name] for name in entry.exceptions)
                self.add(
                    use,
                    Category.BEHAVIOUR if caught else Category.BREAKS,
                    "import-hazard",
                    f"import {module} {raises} "
                    f"{self.since(cited[0] if cited else None)}"
                    + ("; the handler here catches it" if caught else "; nothing here catches it"),
                    cited[0] if cited else None,
                )
            else:
                last = cited[1] if cited else self.old.release
                self.add(
                    use,
                    Category.BEHAVIOUR,
                    "import-hazard",
                    f"import {module} no longer {raises} (it did up to {last})",
                    cited[0] if cited else None,
                )

    # ------------------------------------------------------------------------ calls

    def call(self, use: Use, path: str) -> bool:
        """Judge a call's keywords and arity by what the comparison says of its callable;
        True when a finding was added."""
        found = False
        for keyword in use.keywords:
            change = self.compare.keyword(path, keyword)
            if change is not None:
                found = self.keyword(use, path, keyword, change) or found
        if use.star:
            return found
        passed = set(use.keywords) | set((positional(self.new, path) or ())[: use.positional])
        for change in self.compare.about(("params", path)):
            if change.kind == "required-missing" and change.parameter not in passed:
                found = True
                self.add(
                    use,
                    Category.BREAKS,
                    "required-missing",
                    f"{path}: requires {change.parameter} on {self.new.release}, which this "
                    "call does not pass",
                    change.release,
                )
        shift = self.compare.positional(path) if use.positional else None
        if shift is not None and not self.compare.lands_alike(path, use.positional):
            found = True
            self.add(
                use,
                Category.BREAKS,
                "positional-shift",
                f"{path}: the {use.positional} positional arguments go to "
                f"({', '.join(shift.new[: use.positional])}) on {self.new.release}, to "
                f"({', '.join(shift.old[: use.positional])}) on {self.old.release}",
                shift.release,
            )
        for change in self.compare.about(("params", path)):
            if change.kind == "default-changed" and change.parameter not in passed:
                found = True
                self.add(
                    use,
                    Category.BEHAVIOUR,
                    "default-changed",
                    f"{path}: {change.parameter} defaults to {change.new[1]} on "
                    f"{self.new.release} ({change.old[1]} on {self.old.release}) and this call "
                    "leaves it out",
                    change.release,
                )
        return found

    def keyword(self, use: Use, path: str, keyword: str, change: Change) -> bool:
        """Judge one keyword of a call by the comparison's change of it; True when a finding
        was added."""
        before, after = change.old, change.new
        if after == "unsupported" and before == "unsupported":
            if use.guarded:
                # Taken on neither release, under a guard the reading cannot evaluate
                # (SGLang calls fast_decode_plan's keywords on a begin_forward it swapped).
                self.add(
                    use,
                    Category.UNVERIFIED,
                    "unverified",
                    f"{path}({keyword}=...): taken on neither {self.old.release} nor "
                    f"{self.new.release}, under a guard (hasattr, getattr, a signature probe "
                    "or a try) whose answer the reading cannot know: what the call reaches "
                    "there is not read",
                )
            else:  # it fails alike on both releases: not something this bump changes
                self.add(
                    use,
                    Category.UNCHANGED,
                    "unchanged",
                    f"{path}({keyword}=...): taken on neither {self.old.release} nor "
                    f"{self.new.release}; the call raises TypeError on both",
                )
            return True
        if after == "unsupported":
            history = (
                f"taken on {self.old.release}, not {self.since(change.release)}"
                if before == "supported"
                else f"taken by **kwargs on {self.old.release} (where it goes is not "
                f"recorded), not {self.since(change.release)}"
            )
            renamed = self.compare.renamed_to(path, keyword)
            hint = f" (it is called {renamed} there)" if renamed else ""
            caught = bool(use.catches & _CAUGHT_BY["TypeError"])
            self.add(
                use,
                Category.BEHAVIOUR if caught else Category.BREAKS,
                "keyword-missing",
                f"{path}({keyword}=...): {history}; the call raises TypeError{hint}"
                + (
                    ", which the handler here catches: the code it guards does not run"
                    if caught
                    else ""
                ),
                change.release,
            )
            return True
        if after == "supported":
            self.add(
                use,
                Category.AVAILABLE,
                "keyword-added",
                f"{path}({keyword}=...): taken {self.since(change.release)} "
                f"(raises TypeError on {self.old.release})",
                change.release,
            )
            return True
        self.add(
            use,
            Category.BEHAVIOUR,
            "keyword-unverified",
            f"{path}({keyword}=...): on {self.new.release} only a **kwargs takes it, "
            "and the record cannot prove where it goes",
            change.release,
        )
        return True

    def signature(self, use: Use, path: str | None) -> bool:
        if path is None:
            return False
        if use.keyword is None:
            changes = self.compare.about(("params", path))
            if not changes:
                return False
            latest = max((c.release for c in changes if c.release), key=Version, default=None)
            self.add(
                use,
                Category.BEHAVIOUR,
                "signature-probe",
                f"inspect.signature({path}) gives other parameters on {self.new.release}",
                latest,
            )
            return True
        keyword = use.keyword
        change = self.compare.declares(path, keyword)
        if change is None:
            return False
        after_has = parameter(self.new, path, keyword) is not None
        self.add(
            use,
            Category.BEHAVIOUR,
            "signature-probe",
            f"{keyword!r} in inspect.signature({path}).parameters is {after_has} on "
            f"{self.new.release} ({not after_has} on {self.old.release})",
            change.release,
        )
        return True

    # ------------------------------------------------------------------------ backends

    def backend(self, use: Use) -> bool:
        family = use.target.rpartition(".")[2]
        change = self.compare.split(family, use.backend)
        if change is None:
            return False
        named = use.backend or "its default backend"
        if change.kind == "backend-missing":
            if use.backend is None or family not in _measured_families(self.new):
                return False
            self.add(
                use,
                Category.BREAKS,
                "backend-missing",
                f"{family}(backend={use.backend!r}): not a backend of {self.new.release}",
                change.release,
            )
            return True
        if change.kind == "split-lost":
            self.add(
                use,
                Category.DETERMINISM,
                "split-lost",
                f"{family} with {named}: fixed_split_size/disable_split_kv {change.new} on "
                f"{self.new.release} (reach the kernel on {self.old.release})",
                change.release,
            )
            return True
        if change.kind == "split-gained":
            self.add(
                use,
                Category.AVAILABLE,
                "split-gained",
                f"{family} with {named}: the split settings reach the kernel on "
                f"{self.new.release} ({change.old} on {self.old.release})",
                change.release,
            )
            return True
        return False

    # ------------------------------------------------------------------------ fi-compat

    def dropin(self, use: Use, new: _Resolved) -> bool:
        """Judge a use of a drop-in of ``fi_compat.comm``; True when it was one."""
        parts = use.target.split(".")
        if len(parts) < 3 or ".".join(parts[:2]) != COMM or parts[2] not in _DROPINS:
            return False
        name = parts[2]
        if name == UNIFIED_FACTORY.key and parts[3:4] in (
            ["checkpoint_prepare"],
            ["checkpoint_restore"],
        ):
            answer = self.new.get(("mapping", "checkpointing"))
            raises = answer is not None and answer.action == "raises"
            self.add(
                use,
                Category.BEHAVIOUR if raises else Category.UNCHANGED,
                "fi-compat-maps",
                f"FusionWorkspace.{parts[3]} on {self.new.release}: {answer}",
                self.mapped_since("checkpointing"),
            )
            return True
        if use.kind != "call" or len(parts) != 3 or name == PATTERN.key:
            served = (
                f"FusionWorkspace.{'.'.join(parts[3:])}: fi-compat's workspace"
                if name == UNIFIED_FACTORY.key and len(parts) > 3
                else f"fi_compat.comm.{'.'.join(parts[2:])}: fi-compat's drop-in"
            )
            self.add(
                use,
                Category.UNCHANGED,
                "fi-compat-maps",
                f"{served}, on every release",
            )
            return True
        path = f"{COMM}.{name}"
        before = len(self.findings)
        for keyword in use.keywords:
            if keyword not in _dropin_parameters(name):
                self.add(
                    use,
                    Category.BREAKS,
                    "fi-compat-refuses",
                    f"fi_compat.comm.{name}({keyword}=...): the drop-in takes no such "
                    "keyword; the call raises TypeError",
                )
                continue
            if accepts(self.new, path, keyword) == "supported":
                continue
            mapping = _MAPPED_KEYWORDS.get(keyword)
            answer = self.new.get(("mapping", mapping)) if mapping else None
            if mapping is not None and answer is not None:
                self.add(
                    use,
                    Category.BEHAVIOUR,
                    "fi-compat-maps",
                    f"fi_compat.comm.{name}({keyword}=...) on {self.new.release}: {answer}",
                    self.mapped_since(mapping),
                )
            else:
                self.add(
                    use,
                    Category.BEHAVIOUR,
                    "fi-compat-refuses",
                    f"fi_compat.comm.{name}({keyword}=...): {self.new.release} has no "
                    "counterpart; fi-compat leaves it out at its default and raises "
                    "CapabilityMissingError for any other value",
                )
        if use.star:
            taken = ", ".join(sorted(_dropin_parameters(name)))
            self.add(
                use,
                Category.UNVERIFIED,
                "unverified",
                f"fi_compat.comm.{name}(**...): the keywords this call passes through * or ** "
                f"are not read; the drop-in takes {taken}, and any other raises TypeError",
            )
        elif len(self.findings) == before:
            self.add(
                use,
                Category.UNCHANGED,
                "fi-compat-maps",
                f"fi_compat.comm.{name}: fi-compat's drop-in passes every keyword this call "
                f"uses to {self.new.release}",
            )
        return True

    def torch_dist_backend(self, use: Use) -> bool:
        if use.target.rpartition(".")[2] != TORCH_DIST_BACKEND.key:
            return False
        answer = self.new.get(("mapping", "bcast_root"))
        if answer is None:
            return False
        self.add(
            use,
            Category.BEHAVIOUR if answer.action == "maps" else Category.UNCHANGED,
            "fi-compat-maps",
            f"fi_compat.comm.mnnvl.{TORCH_DIST_BACKEND.key} on {self.new.release}: bcast's "
            "group-local "
            f"root: {answer}",
            self.mapped_since("bcast_root"),
        )
        return True


def _unknown_reason(found: _Resolved) -> str:
    """Why the records cannot tell what a use meets (:data:`_UNKNOWN`)."""
    missing = found.missing or "it"
    if found.reason is not None:
        return found.reason
    if found.member:
        return f"the records of {found.callable} list no {missing.rpartition('.')[2]}"
    if found.callable is not None:
        return f"the records do not describe what {found.callable} holds or returns"
    return f"the records cannot tell whether {missing} is there"


@functools.cache
def _dropin_parameters(name: str) -> frozenset[str]:
    """The keywords fi-compat's drop-in ``name`` takes, read from the drop-in itself."""
    import inspect

    from fi_compat.comm import _dropin

    return frozenset(inspect.signature(getattr(_dropin, name)).parameters)


@functools.cache
def _measured_families(facts: Facts) -> frozenset[str]:
    return frozenset(key[1] for key in facts.table if key[0] == "default_backend")  # eager


def judge(uses: Iterable[Use], steps: History, *, fi_compat: bool = False) -> list[Finding]:
    """One finding (or more) per use that the records can judge, in the uses' order."""
    judging = _Judge(steps, fi_compat)
    for use in uses:
        judging.use(use)
    return judging.findings
