"""Each use of FlashInfer in an engine's code, judged against two recorded releases.

:func:`judge` takes the uses :mod:`fi_compat.upgrade._scan` read and the
:class:`~fi_compat.upgrade._history.History` between two releases, and returns one
:class:`Finding` per use (two where a use meets both a name and an import hazard): which
:class:`Category` it falls in, the rule that put it there, and the release where the fact
it rests on changed. With ``fi_compat=True`` the uses of ``flashinfer.comm`` are judged as
they run after the import swap to ``fi_compat.comm``.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

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
from fi_compat.upgrade._facts import (
    Facts,
    accepts,
    parameter,
    positional,
)
from fi_compat.upgrade._history import History
from fi_compat.upgrade._scan import Use

__all__ = ["RULES", "Category", "Finding", "Rule", "judge"]


class Category(str, enum.Enum):
    """What a use meets on the new release, most severe first.

    .. versionadded:: 0.3.0
    """

    #: Fails on the new release (a missing name, method or keyword): exit status 1.
    BREAKS = "breaks"
    #: Runs, and does something else (a guard flips, a default or a mapping changes).
    BEHAVIOUR = "changes behaviour"
    #: An attention backend stops handing the split settings to the kernel.
    DETERMINISM = "loses determinism"
    #: The records or the reading cannot tell what the use meets (the message says why):
    #: never a break, never a pass.
    UNVERIFIED = "unverified"
    #: Something the old release lacked, which the code uses, is there now.
    AVAILABLE = "newly available"
    #: The same on both releases.
    UNCHANGED = "unchanged"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Rule:
    """One rule of the scan: its id (a SARIF ``ruleId``), what it checks, and the categories
    it assigns (some rules assign several; the first gives the SARIF rule's default level).

    .. versionadded:: 0.3.0
    """

    id: str
    summary: str
    categories: tuple[Category, ...]


_B, _C, _D, _V, _A, _U = (
    Category.BREAKS,
    Category.BEHAVIOUR,
    Category.DETERMINISM,
    Category.UNVERIFIED,
    Category.AVAILABLE,
    Category.UNCHANGED,
)

#: Every rule, by id.
RULES: dict[str, Rule] = {
    rule.id: rule
    for rule in (
        Rule(
            "name-missing",
            "An imported or read name, module, method or member is missing on the new "
            "release (behaviour only where a try/except or hasattr guard catches it)",
            (_B, _C),
        ),
        Rule(
            "unverified",
            "A use neither release's records can judge, or a call whose ** keywords the "
            "reading cannot see: the reason is said",
            (_V,),
        ),
        Rule("name-added", "A name the code uses is missing on the old release only", (_A,)),
        Rule("name-moved", "A name the code uses is now defined in another module", (_C,)),
        Rule(
            "keyword-missing",
            "A call passes a keyword the new release does not take (behaviour only where a "
            "try/except around it catches the TypeError)",
            (_B, _C),
        ),
        Rule("keyword-added", "A call passes a keyword only the new release takes", (_A,)),
        Rule(
            "keyword-unverified",
            "A keyword now reaches only a **kwargs whose use the record cannot prove",
            (_C,),
        ),
        Rule("required-missing", "A call lacks a parameter the new release requires", (_B,)),
        Rule(
            "positional-shift",
            "A positional argument lands on another parameter on the new release",
            (_B,),
        ),
        Rule(
            "default-changed",
            "A parameter the call leaves out has another default on the new release",
            (_C,),
        ),
        Rule(
            "backend-missing",
            "A backend string given to an attention wrapper is not a backend of the new release",
            (_B,),
        ),
        Rule(
            "split-lost",
            "The wrapper's backend stops handing fixed_split_size/disable_split_kv to the kernel",
            (_D,),
        ),
        Rule("split-gained", "The wrapper's backend starts handing the split settings on", (_A,)),
        Rule(
            "import-hazard",
            "An import meets an import hazard (CUDA runtime, triton, GPU query) on one "
            "release only",
            (_B, _C),
        ),
        Rule(
            "guard-flips", "A hasattr/getattr guard answers otherwise on the new release", (_C, _A)
        ),
        Rule(
            "signature-probe",
            "An inspect.signature probe answers otherwise on the new release",
            (_C,),
        ),
        Rule(
            "fi-compat-maps",
            "After the swap to fi_compat.comm, fi-compat serves or maps what the release lacks",
            (_C, _U),
        ),
        Rule(
            "fi-compat-refuses",
            "After the swap to fi_compat.comm, fi-compat raises a typed error for it",
            (_B, _C),
        ),
        Rule("unchanged", "The use meets the same on both releases", (_U,)),
    )
}
"""Every rule of ``fi-compat scan``, by id (the SARIF ``ruleId``); the upgrade guide has a
table of them.

.. versionadded:: 0.3.0
"""


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

    def to_json(self) -> dict[str, Any]:
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


def _resolve(facts: Facts, target: str, module: str) -> _Resolved:
    parts = target.split(".")
    depth = module.count(".") + 1
    while depth < len(parts) and facts.module_seen(".".join(parts[: depth + 1])):
        depth += 1
    current = ".".join(parts[:depth])
    recorded = facts.record is not None  # every module of the release is recorded
    if not facts.module_seen(current):
        # With every module recorded, a module the release does not ship is absent;
        # otherwise only the seven modules with name tables are known everywhere.
        state = _ABSENT if recorded or current in NAMED_MODULES else _UNKNOWN
        if recorded and _private_submodule(current):
            state = _UNKNOWN  # a private module: the records leave those out
        return _Resolved(state, missing=current, unseen=True)
    following = parts[depth] if depth < len(parts) else None
    if recorded and following is not None and _private_submodule(f"{current}.{following}"):
        # Not bound and not a recorded module: maybe a private submodule, which the records
        # leave out (``flashinfer.mla._sparse_mla_sm120``): importing it may well work.
        found = facts.module(current)
        if found is not None and following not in found.names:
            return _Resolved(_UNKNOWN, missing=f"{current}.{following}")
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
        if binds is None:  # unreadable, or names its source cannot list
            return _Resolved(_UNKNOWN, missing=path)
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
    for attribute in parts[depth + 1 :]:
        if kind == "class":
            if facts.get(("method", path, attribute)):
                path, kind = f"{path}.{attribute}", "method"
                continue
            if facts.get(("attribute", path, attribute)) or facts.subclass_has(path, attribute):
                return _Resolved(_PRESENT, kind="attribute", defined=defined)
            return _Resolved(_UNKNOWN, callable=path, missing=f"{path}.{attribute}", member=True)
        if kind == "enum":
            if facts.get(("member", path, attribute)) is not None:
                return _Resolved(_PRESENT, kind="member", defined=defined)
            return _Resolved(_UNKNOWN, callable=path, missing=f"{path}.{attribute}", member=True)
        if kind in ("function", "method"):
            returned = facts.get(("returns", path))
            owner_module = path.rpartition(".")[0] if kind == "function" else None
            if returned is not None and owner_module is not None:
                returned = str(returned).strip("'\"")
                if facts.get(("name", owner_module, returned)) == "class":
                    path = facts.canonical.get(
                        f"{owner_module}.{returned}", f"{owner_module}.{returned}"
                    )
                    kind = "class"
                    if facts.get(("method", path, attribute)):
                        path, kind = f"{path}.{attribute}", "method"
                        continue
                    if facts.get(("attribute", path, attribute)) or facts.subclass_has(
                        path, attribute
                    ):
                        return _Resolved(_PRESENT, kind="attribute", defined=defined)
                    return _Resolved(
                        _UNKNOWN, callable=path, missing=f"{path}.{attribute}", member=True
                    )
                if returned and returned != "None":
                    return _Resolved(_FOREIGN, callable=path)
            return _Resolved(_UNKNOWN, callable=path, missing=f"{path}.{attribute}")
        return _Resolved(_UNKNOWN, callable=path, missing=f"{path}.{attribute}")
    return _Resolved(_PRESENT, callable=path, kind=kind, defined=defined)


def _required(facts: Facts, path: str, use: Use) -> set[str]:
    params = facts.get(("params", path)) or ()
    passed = set(use.keywords)
    passed.update((positional(facts, path) or ())[: use.positional])
    return {
        name
        for name, kind, default in params
        if default is None and kind not in ("VAR_POSITIONAL", "VAR_KEYWORD") and name not in passed
    }


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
        self.fi_compat = fi_compat
        self.findings: list[Finding] = []
        self.hazards_seen: set[tuple[str, str]] = set()

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
        if self.swapped(use):
            module, _, name = where.rpartition(".")
            # NameUnavailableError names the release introduced_in gives, and so does this.
            first = introduced_in(module, name) if module in NAMED_MODULES else None
            self.add(
                use,
                Category.BEHAVIOUR if use.guarded else Category.BREAKS,
                "fi-compat-refuses",
                f"{where} ({history}): fi_compat.comm raises NameUnavailableError "
                f"(an AttributeError; ImportError from a from-import)"
                + (f" naming {first}, the first release with it" if first else ""),
                cited,
            )
            return
        exception = "ImportError" if use.kind == "import" else "AttributeError"
        if use.guarded and old.state != _PRESENT:
            self.add(
                use,
                Category.UNCHANGED,
                "unchanged",
                f"{where} ({history}): the {exception} is caught here on both",
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

    def _renamed_only(self, path: str, before: tuple[str, ...], after: tuple[str, ...]) -> bool:
        """True when the positional parameters a call fills differ only by names changed in
        place (same position, kind and default, the old name gone, the new one new): each
        value still lands where it did (``_get_cache_buf``'s ``bytes`` became ``num_bytes``
        in 0.7.x), so a positional call is unchanged; a keyword call meets the rename."""
        if len(before) != len(after):
            return False
        for old_name, new_name in zip(before, after, strict=True):
            if old_name == new_name:
                continue
            if old_name in after or new_name in before:
                return False  # a parameter that moved: values land elsewhere
            was, now = parameter(self.old, path, old_name), parameter(self.new, path, new_name)
            if was is None or now is None or was != now:
                return False
        return True

    # ------------------------------------------------------------------------ hazards

    def hazards(self, use: Use) -> None:
        for hazard, entry in IMPORT_HAZARDS.items():
            modules = entry.modules
            if not any(use.target == m or use.target.startswith(f"{m}.") for m in modules):
                continue
            if (use.path, hazard) in self.hazards_seen:
                continue
            before = bool(self.old.get(("hazard", hazard)))
            after = bool(self.new.get(("hazard", hazard)))
            if before == after:
                continue
            self.hazards_seen.add((use.path, hazard))
            holding = self.new if after else self.old
            raises = entry.raises(holding.get(("hazard_python", hazard)))
            cited = self.history.cite(_hazard_of(hazard))
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
        """Judge a call's keywords and arity; True when a finding was added."""
        found = False
        for keyword in use.keywords:
            before = accepts(self.old, path, keyword)
            after = accepts(self.new, path, keyword)
            if before == after and after != "unsupported":
                continue

            def value(facts: Facts, keyword: str = keyword) -> Hashable:
                return accepts(facts, path, keyword)

            cited = self.cite(value) if before != after else None
            found = True
            if after == "unsupported" and before != "supported" and use.guarded:
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
            elif after == "unsupported":
                history = (
                    f"taken on {self.old.release}, not {self.since(cited)}"
                    if before == "supported"
                    else f"taken on neither {self.old.release} nor {self.new.release}"
                )
                renamed = _renamed_to(self.old, self.new, path, keyword)
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
                    cited,
                )
            elif after == "supported" and before == "unsupported":
                self.add(
                    use,
                    Category.AVAILABLE,
                    "keyword-added",
                    f"{path}({keyword}=...): taken {self.since(cited)} "
                    f"(raises TypeError on {self.old.release})",
                    cited,
                )
            elif after == "supported":
                found = False
            else:
                self.add(
                    use,
                    Category.BEHAVIOUR,
                    "keyword-unverified",
                    f"{path}({keyword}=...): on {self.new.release} only a **kwargs takes it, "
                    "and the record cannot prove where it goes",
                    cited,
                )
        if use.star:
            return found
        newly = _required(self.new, path, use) - _required(self.old, path, use)
        for name in sorted(newly):
            found = True
            self.add(
                use,
                Category.BREAKS,
                "required-missing",
                f"{path}: requires {name} on {self.new.release}, which this call does not pass",
                self.cite(lambda facts, name=name: parameter(facts, path, name)),
            )
        if use.positional:
            before_order = (positional(self.old, path) or ())[: use.positional]
            after_order = (positional(self.new, path) or ())[: use.positional]
            if before_order != after_order and not self._renamed_only(
                path, before_order, after_order
            ):
                found = True
                self.add(
                    use,
                    Category.BREAKS,
                    "positional-shift",
                    f"{path}: the {use.positional} positional arguments go to "
                    f"({', '.join(after_order)}) on {self.new.release}, to "
                    f"({', '.join(before_order)}) on {self.old.release}",
                    self.cite(lambda facts: (positional(facts, path) or ())[: use.positional]),
                )
        passed = set(use.keywords) | set((positional(self.new, path) or ())[: use.positional])
        for name, _, default in self.new.get(("params", path)) or ():
            was = parameter(self.old, path, name)
            if name in passed or was is None or default is None or was[1] is None:
                continue
            if was[1] != default:
                found = True
                self.add(
                    use,
                    Category.BEHAVIOUR,
                    "default-changed",
                    f"{path}: {name} defaults to {default} on {self.new.release} "
                    f"({was[1]} on {self.old.release}) and this call leaves it out",
                    self.cite(lambda facts, name=name: parameter(facts, path, name)),
                )
        return found

    def signature(self, use: Use, path: str | None) -> bool:
        if path is None:
            return False
        if use.keyword is None:
            before = self.old.get(("params", path))
            after = self.new.get(("params", path))
            if before == after:
                return False
            self.add(
                use,
                Category.BEHAVIOUR,
                "signature-probe",
                f"inspect.signature({path}) gives other parameters on {self.new.release}",
                self.cite(lambda facts: facts.get(("params", path))),
            )
            return True
        keyword = use.keyword
        before_has = parameter(self.old, path, keyword) is not None
        after_has = parameter(self.new, path, keyword) is not None
        if before_has == after_has:
            return False
        self.add(
            use,
            Category.BEHAVIOUR,
            "signature-probe",
            f"{keyword!r} in inspect.signature({path}).parameters is {after_has} on "
            f"{self.new.release} ({before_has} on {self.old.release})",
            self.cite(lambda facts: parameter(facts, path, keyword) is not None),
        )
        return True

    # ------------------------------------------------------------------------ backends

    def backend(self, use: Use) -> bool:
        family = use.target.rpartition(".")[2]
        if not (self.old.measured and self.new.measured):
            return False

        def verdict(facts: Facts) -> Hashable:
            backend = use.backend or facts.get(("default_backend", family)) or "default"
            found: Hashable = facts.get(("backend", family, backend))
            return found

        before, after = verdict(self.old), verdict(self.new)
        named = use.backend or "its default backend"
        measured = family in _measured_families(self.new)
        if after is None and before is not None and measured and use.backend is not None:
            self.add(
                use,
                Category.BREAKS,
                "backend-missing",
                f"{family}(backend={use.backend!r}): not a backend of {self.new.release}",
                self.cite(verdict),
            )
            return True
        if before == "reaches" and after not in ("reaches", None):
            self.add(
                use,
                Category.DETERMINISM,
                "split-lost",
                f"{family} with {named}: fixed_split_size/disable_split_kv {after} on "
                f"{self.new.release} (reach the kernel on {self.old.release})",
                self.cite(verdict),
            )
            return True
        if after == "reaches" and before not in ("reaches", None):
            self.add(
                use,
                Category.AVAILABLE,
                "split-gained",
                f"{family} with {named}: the split settings reach the kernel on "
                f"{self.new.release} ({before} on {self.old.release})",
                self.cite(verdict),
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
            raises = answer is not None and "NotImplementedError" in answer
            self.add(
                use,
                Category.BEHAVIOUR if raises else Category.UNCHANGED,
                "fi-compat-maps",
                f"FusionWorkspace.{parts[3]} on {self.new.release}: {answer}",
                self.cite(_mapping_of("checkpointing")),
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
                    self.cite(_mapping_of(mapping)),
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
            Category.BEHAVIOUR if answer.startswith("fi-compat") else Category.UNCHANGED,
            "fi-compat-maps",
            f"fi_compat.comm.mnnvl.{TORCH_DIST_BACKEND.key} on {self.new.release}: bcast's "
            "group-local "
            f"root: {answer}",
            self.cite(_mapping_of("bcast_root")),
        )
        return True


def _private_submodule(module: str) -> bool:
    """True when ``module`` may be a private submodule the records leave out: a segment
    after the top level starts with ``_`` (not a dunder). The records do not say which
    modules are packages, so any module may hold one."""
    return any(part.startswith("_") and not part.startswith("__") for part in module.split(".")[1:])


def _unknown_reason(found: _Resolved) -> str:
    """Why the records cannot tell what a use meets (:data:`_UNKNOWN`)."""
    missing = found.missing or "it"
    if found.member:
        return f"the records of {found.callable} list no {missing.rpartition('.')[2]}"
    if found.callable is not None:
        return f"the records do not describe what {found.callable} holds or returns"
    if found.unseen or _private_submodule(missing):
        return f"{missing} may be a private module, which the records leave out,"
    return f"the records cannot tell whether {missing} is there"


def _renamed_to(old: Facts, new: Facts, path: str, keyword: str) -> str | None:
    """The name ``keyword``'s parameter has in ``new``: the one at its position with its
    kind and default, where ``old`` has no parameter of that name; None when there is none
    (the diff's ``parameter-renamed``)."""
    before, after = old.get(("params", path)) or (), new.get(("params", path)) or ()
    index = next((i for i, (name, _, _) in enumerate(before) if name == keyword), None)
    if index is None or index >= len(after):
        return None
    name, kind, default = after[index]
    if parameter(old, path, name) is not None or (kind, default) != before[index][1:]:
        return None
    return str(name)


def _mapping_of(key: str) -> Callable[[Facts], Hashable]:
    def value(facts: Facts) -> Hashable:
        found: Hashable = facts.get(("mapping", key))
        return found

    return value


def _hazard_of(hazard: str) -> Callable[[Facts], Hashable]:
    def value(facts: Facts) -> Hashable:
        found: Hashable = facts.get(("hazard", hazard))
        return found

    return value


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
