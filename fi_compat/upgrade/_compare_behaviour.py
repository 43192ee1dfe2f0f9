"""The comparison of what two releases do: import hazards, split reach, default backends and
fi-compat's own mappings."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from fi_compat._records._facts import Facts, Key
from fi_compat._surface import IMPORT_HAZARDS
from fi_compat.upgrade._behaviour import MAPPINGS
from fi_compat.upgrade._change import Change, Comparing
from fi_compat.upgrade._kinds import Category

__all__ = ["BehaviourChanges"]


class BehaviourChanges(Comparing):
    """The changes of what a release does beyond its names and parameters."""

    @property
    def measured(self) -> bool:
        """True when both releases' split reach was measured."""
        return all(facts.get(("reach_measured",)) for facts in (self.old, self.new))

    def hazard(self, hazard: str) -> Change | None:
        """The import hazard ``hazard`` where it appears or ends (``old``/``new``: whether it
        holds); None where both releases agree."""
        found = self.about(("hazard", hazard))
        return found[0] if found and bool(found[0].old) != bool(found[0].new) else None

    def split(self, family: str, backend: str | None) -> Change | None:
        """The measured split reach of ``family`` with ``backend`` (None: each release's
        default backend) on each release, where it differs; None where it does not, or where
        either release is unmeasured."""
        if not self.measured:
            return None

        def verdict(facts: Facts) -> Hashable:
            name = backend or facts.get(("default_backend", family)) or "default"
            found: Hashable = facts.get(("backend", family, name))
            return found

        before, after = verdict(self.old), verdict(self.new)
        if before == after:
            return None
        subject = f"{family}:{backend or 'default'}"
        key: Key = ("backend", family, backend or "default")
        if before is None:
            kind, category, detail = (
                "backend-added",
                Category.AVAILABLE,
                f"new backend (split settings: {after})",
            )
        elif after is None:
            kind, category, detail = (
                "backend-missing",
                Category.BREAKS,
                f"backend {backend or 'default'!r} is no longer measured for {family}",
            )
        elif before == "reaches":
            kind, category, detail = (
                "split-lost",
                Category.DETERMINISM,
                f"the split settings no longer reach the kernel ({after})",
            )
        elif after == "reaches":
            kind, category, detail = (
                "split-gained",
                Category.AVAILABLE,
                f"the split settings now reach the kernel (was {before})",
            )
        else:
            kind, category, detail = (
                "split-changed",
                Category.BEHAVIOUR,
                f"split settings: {after}, no longer {before}",
            )
        return self.change(kind, category, subject, detail, key, verdict)

    def raises(self, hazard: str, holds: bool) -> str:
        """What importing a module ``hazard`` is met at raises, on the end it holds on
        (``holds``: the new release)."""
        holding = self.new if holds else self.old
        return IMPORT_HAZARDS[hazard].raises(holding.get(("hazard_python", hazard)))

    def _hazard(self, key: Key, before: Any, after: Any) -> None:
        hazard = key[1]
        modules = " / ".join(f"import {module}" for module in IMPORT_HAZARDS[hazard].modules)
        raises = self.raises(hazard, bool(after))
        cited = self.history.cite(lambda facts: facts.get(key))
        last = cited[1] if cited else self.old.release
        if after:
            evidence = self.new.evidence.get(hazard) or "no evidence recorded"
            self.add(
                "import-hazard",
                Category.BREAKS,
                hazard,
                f"{modules}: {raises} ({evidence})",
                key,
            )
        else:
            evidence = self.old.evidence.get(hazard) or "no evidence recorded"
            self.add(
                "import-hazard",
                Category.BEHAVIOUR,
                hazard,
                f"{modules}: no longer {raises}; it did up to {last} ({evidence})",
                key,
            )

    def _backend(self, key: Key, before: Any, after: Any) -> None:
        _, family, backend = key
        change = self.split(family, backend)
        if change is not None:
            self.changes.append(change)

    def _default_backend(self, key: Key, before: Any, after: Any) -> None:
        if not self.measured or before is None or after is None:
            return
        self.add(
            "default-backend",
            Category.BEHAVIOUR,
            key[1],
            f"the default backend is now {after!r}, no longer {before!r}",
            key,
        )

    def _mapping(self, key: Key, before: Any, after: Any) -> None:
        name = key[1]
        if name == "per_call_sizes" and not all(
            facts.get(("sizes_measured",)) is not False for facts in (self.old, self.new)
        ):
            return  # an unmeasured release's rule is fi-compat's refusal, not a change (notes)
        self.add(
            "mapping-changed",
            Category.BEHAVIOUR,
            name,
            f"{MAPPINGS[name]}: {after or 'nothing (not applicable)'}; "
            f"was {before or 'nothing (not applicable)'}",
            key,
        )
