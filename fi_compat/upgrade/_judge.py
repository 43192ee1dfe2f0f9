"""Each use of FlashInfer judged against two releases: what the comparison says, in its context.

:func:`judge` takes the uses :mod:`fi_compat._engine_source` read and the
:class:`~fi_compat._records._history.History` between two releases, and returns one
:class:`Finding` per use (two where a use meets both a name and an import hazard): which
:class:`~fi_compat.upgrade.Category` it falls in, the rule that put it there, and the
release where the fact it rests on changed. What changed of what the use names is the
comparison's answer (:mod:`fi_compat.upgrade._compare`: its presence, a move, a keyword, a
positional shift, a hazard, split reach); the judge applies the use's context (a guard or a
handler around it, its keywords, how many positional arguments it passes). With
``fi_compat=True`` the uses of ``flashinfer.comm`` are judged as they run after the import
swap to ``fi_compat.comm`` (:mod:`fi_compat.upgrade._swapped`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from fi_compat._engine_source import Use, catches, under
from fi_compat._frozen import picklable
from fi_compat._records import introduced_in
from fi_compat._records._history import History
from fi_compat._records._resolve import PRESENT, UNKNOWN, Resolved, unknown_reason
from fi_compat._surface import COMM, IMPORT_HAZARDS, NAMED_MODULES
from fi_compat.upgrade._behaviour import measured_families
from fi_compat.upgrade._change import Change
from fi_compat.upgrade._compare import Comparison
from fi_compat.upgrade._kinds import Category, as_json
from fi_compat.upgrade._swapped import Swap

__all__ = ["Finding", "judge"]


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
        return as_json(self)


# ----------------------------------------------------------------------------- judging

#: What a finding says of where its use is: the use's own fields.
_WHERE = ("path", "line", "column", "end_line", "end_column", "scope", "kind", "target")


class _Judge:
    def __init__(self, steps: History, fi_compat: bool) -> None:
        self.history = steps
        self.old, self.new = steps.old, steps.new
        #: The one comparison of the two releases, asked about each use's subject.
        self.compare = Comparison(steps)
        #: What fi_compat.comm serves, for the uses the swap reaches (``fi_compat``).
        self.swap = Swap(self.compare)
        self.fi_compat = fi_compat
        self.findings: list[Finding] = []
        self.hazards_seen: set[tuple[str, str, str]] = set()

    def cited_range(self, release: str | None) -> str:
        """``from R`` on the way up, ``on R down to B`` on the way down: the releases from
        the cited one to the new one, all of which share the new state (a fact can come
        back further down, so nothing is said of the releases past the new one)."""
        release = release or self.new.release
        if self.history.upgrade:
            return f"from {release}"
        if release == self.new.release:
            return f"on {release}"
        return f"on {release} down to {self.new.release}"

    def presence_introduced_in(self, use: Use) -> str | None:
        """The release from which what ``use`` names is there, missing or unknown as on the
        new release (:meth:`Comparison.presence_introduced_in`)."""
        return self.compare.presence_introduced_in(use.target, use.module)

    def add(
        self, use: Use, category: Category, rule: str, message: str, release: Any = None
    ) -> None:
        where = {name: getattr(use, name) for name in _WHERE}
        self.findings.append(
            Finding(**where, category=category, rule=rule, message=message, release=release)
        )

    def swapped(self, use: Use) -> bool:
        return self.fi_compat and under(use.target, COMM)

    # ------------------------------------------------------------------------ one use

    def use(self, use: Use) -> None:
        before = len(self.findings)
        if use.kind == "import":
            self.hazards(use)
        self.verdict(use, hazard=len(self.findings) > before)

    def verdict(self, use: Use, *, hazard: bool) -> None:
        """The finding about what ``use`` names (none where an import hazard already said
        all there is, or where neither release's record knows the name): what the
        comparison says of its presence (:meth:`Comparison.presence`), in the use's context."""
        presence = self.compare.presence(use.target, use.module)
        old, new = presence.old, presence.new
        if self.swapped(use):
            served = self.swap.dropin(use)
            if served is not None:
                for verdict in served:
                    self.add(use, *verdict)
                return
        if presence.kind == "foreign":
            return  # a tensor or another value FlashInfer returns: not its API
        if old.state == UNKNOWN and new.state == UNKNOWN:
            self.add(
                use,
                Category.UNVERIFIED,
                "unverified",
                f"{use.target}: {unknown_reason(new)} on both {self.old.release} and "
                f"{self.new.release}",
            )
            return
        if presence.kind == "name-missing":
            self.missing(use, old, new)
            return
        if use.kind == "guard":
            self.guard(use, old, new)
            return
        if presence.kind == "name-added":
            what = "module" if new.kind == "module" else "name"
            self.add(
                use,
                Category.AVAILABLE,
                "name-added",
                f"{use.target}: this {what} is missing on {self.old.release}"
                + (f" (no record of {old.missing} there)" if old.unseen else "")
                + f", present on {self.new.release}",
                self.presence_introduced_in(use),
            )
            return
        if presence.kind == "unknown":
            unknown, release = (new, self.new) if new.state == UNKNOWN else (old, self.old)
            self.add(
                use,
                Category.UNVERIFIED,
                "unverified",
                f"{use.target}: {unknown_reason(unknown)} on {release.release}",
            )
            return
        backend = self.swap.torch_dist_backend(use) if self.swapped(use) else None
        if backend is not None:
            self.add(use, *backend)
            return
        if use.kind == "call" and new.callable is not None:
            if self.call(use, new.callable):
                return
        elif use.kind == "backend":
            if self.backend(use):
                return
        elif use.kind == "signature" and self.signature(use, new.callable):
            return
        moved = (
            self.compare.moved(*new.binding)
            if use.kind == "import" and new.binding is not None
            else None
        )
        if moved is not None:
            self.add(
                use,
                moved.category,
                moved.kind,
                f"{use.target.rpartition('.')[2]} is defined in {moved.new} on "
                f"{self.new.release} (in {moved.old} on {self.old.release}); this import "
                "still works",
                moved.release,
            )
            return
        if not hazard:
            self.add(
                use, Category.UNCHANGED, "unchanged", f"{use.target}: the same on both releases"
            )

    def missing(self, use: Use, old: Resolved, new: Resolved) -> None:
        where = new.missing or use.target
        cited = self.presence_introduced_in(use)
        if old.state == PRESENT:
            history = f"present on {self.old.release}, missing {self.cited_range(cited)}"
        else:
            history = f"missing on both {self.old.release} and {self.new.release}"
        if use.kind == "guard":
            category = Category.BEHAVIOUR if old.state == PRESENT else Category.UNCHANGED
            rule = "guard-flips" if old.state == PRESENT else "unchanged"
            self.add(use, category, rule, f"{where}: the guard answers False ({history})", cited)
            return
        if self.swapped(use) and self.new.ships(where.rpartition(".")[0]):
            # a name of a comm module: the drop-in answers for it (a member of FlashInfer's
            # own class stays FlashInfer's AttributeError, below)
            module, _, name = where.rpartition(".")
            # NameUnavailableError says which side of the change the release is on: on the
            # way up from a release with the name, the release that removed it (cited as
            # here); otherwise the release introduced_in gives, and so does this.
            first = introduced_in(module, name) if module in NAMED_MODULES else None
            if old.state == PRESENT and self.history.upgrade and cited:
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
        if use.kept_guard is not None and old.state == PRESENT and not use.guarded:
            self.add(
                use,
                Category.UNVERIFIED,
                "unverified",
                f"{where} ({history}): this file keeps a guard's answer about it in "
                f"{use.kept_guard}; whether that answer keeps this use from running is not "
                "read",
                cited,
            )
        elif old.state == UNKNOWN:
            self.add(
                use,
                Category.UNVERIFIED,
                "unverified",
                f"{where}: missing on {self.new.release}, and on {self.old.release} "
                f"{unknown_reason(old)}: whether this bump changes anything is not known",
            )
        elif old.state != PRESENT:
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

    def guard(self, use: Use, old: Resolved, new: Resolved) -> None:
        before, after = old.state == PRESENT, new.state == PRESENT
        if before == after or new.state == UNKNOWN:
            self.add(
                use, Category.UNCHANGED, "unchanged", f"{use.target}: the guard answers the same"
            )
            return
        cited = self.presence_introduced_in(use)
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
            if not any(under(use.target, module) for module in entry.modules):
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
            raises = self.compare.raises(hazard, after)
            module = entry.modules[0]
            if self.swapped(use):
                self.add(
                    use,
                    Category.UNCHANGED,
                    "fi-compat-maps",
                    f"import {module} {raises} on "
                    f"{self.old.release if before else self.new.release}; `import "
                    "fi_compat.comm` never raises, and get_capabilities().comm.error says why",
                    change.release,
                )
                continue
            if after:
                caught = all(catches(use.catches, name) for name in entry.exceptions)
                self.add(
                    use,
                    Category.BEHAVIOUR if caught else Category.BREAKS,
                    "import-hazard",
                    f"import {module} {raises} {self.cited_range(change.release)}"
                    + ("; the handler here catches it" if caught else "; nothing here catches it"),
                    change.release,
                )
            else:
                self.add(
                    use,
                    Category.BEHAVIOUR,
                    "import-hazard",
                    f"import {module} no longer {raises} "
                    f"(it did up to {change.last_before or self.old.release})",
                    change.release,
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
        passed = set(use.keywords) | set((self.new.positional(path) or ())[: use.positional])
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
                f"taken on {self.old.release}, not {self.cited_range(change.release)}"
                if before == "supported"
                else f"taken by **kwargs on {self.old.release} (where it goes is not "
                f"recorded), not {self.cited_range(change.release)}"
            )
            renamed = self.compare.renamed_to(path, keyword)
            hint = f" (it is called {renamed} there)" if renamed else ""
            caught = catches(use.catches, "TypeError")
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
                f"{path}({keyword}=...): taken {self.cited_range(change.release)} "
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
        change = self.compare.acceptance_change(path, keyword)
        if change is None:
            return False
        after_has = self.new.parameter(path, keyword) is not None
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
            if use.backend is None or family not in measured_families(self.new):
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


def judge(uses: Iterable[Use], steps: History, *, fi_compat: bool = False) -> list[Finding]:
    """One finding (or more) per use that the records can judge, in the uses' order."""
    judging = _Judge(steps, fi_compat)
    for use in uses:
        judging.use(use)
    return judging.findings
