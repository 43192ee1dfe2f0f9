"""The one comparison of two releases, for the diff and the scan alike: presence, names, moves.

:class:`Comparison` turns each difference of two releases' facts into a
:class:`~fi_compat.upgrade.Change`: the names, modules, methods, enum members and moves here,
the parameters in :mod:`fi_compat.upgrade._compare_parameters`, what a release does in
:mod:`fi_compat.upgrade._compare_behaviour`; and it says what a dotted path an engine names
leads to on each release, and what changed of it (:meth:`Comparison.presence`). No other
code compares two releases.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from fi_compat._records._facts import Key
from fi_compat._records._resolve import ABSENT, FOREIGN, PRESENT, UNKNOWN, Resolved, resolve
from fi_compat.upgrade._change import Change
from fi_compat.upgrade._compare_behaviour import BehaviourChanges
from fi_compat.upgrade._compare_parameters import ParameterChanges
from fi_compat.upgrade._kinds import Category

__all__ = ["Comparison", "Presence"]


class Presence(NamedTuple):
    """What a dotted path an engine names leads to on each release
    (:func:`~fi_compat._records._resolve.resolve`), and what changed of it: ``kind`` is
    ``"name-added"`` (the new release has what the old one lacks), ``"name-missing"`` (the
    new one lacks it), ``"unknown"`` (a record cannot tell), ``"foreign"`` (not FlashInfer's
    API: a tensor a function returns), or None (there on both)."""

    old: Resolved
    new: Resolved
    kind: str | None


class Comparison(ParameterChanges, BehaviourChanges):
    """The one comparison of two releases: every difference of their facts as a
    :class:`~fi_compat.upgrade.Change`, asked by subject.

    :func:`~fi_compat.upgrade.diff_releases` lists it (``listing=True``: FlashInfer's own
    names only, each definition once at its shortest path, a positional change where a
    parameter moved); ``fi-compat scan`` asks it about each use's subject (``listing=False``:
    every path as the use names it) and applies the use's context.
    """

    def _first(self, what: str, name: str, before: Any, after: Any) -> bool:
        """True the first time this change of ``name`` is met (later: another importer)."""
        said = (what, name, before, after)
        if said in self._said:
            return False
        self._said.add(said)
        return True

    def flashinfers(self, module: str, name: str) -> bool:
        """True when ``module.name`` is FlashInfer's own in a release that binds it
        (:meth:`~fi_compat._records._facts.Facts.flashinfers`)."""
        return self.old.flashinfers(module, name) or self.new.flashinfers(module, name)

    def bound_on_both(self, module: str, name: str) -> bool:
        """True when both releases bind ``name`` in ``module``."""
        return self.old.has(module, name) and self.new.has(module, name)

    def _name(self, key: Key, before: Any, after: Any) -> None:
        _, module, name = key
        if self.listing and not self.flashinfers(module, name):
            return
        path = f"{module}.{name}"
        if before is None:
            where = self.new.get(("defined", module, name))
            home = f" (defined in {where})" if where and where != module else ""
            change = self.change(
                "name-added", Category.AVAILABLE, path, f"{module} binds {name}{home}", key
            )
        elif after is None:
            change = self.change(
                "name-missing",
                Category.BREAKS,
                path,
                f"{module} no longer binds {name}: `from {module} import {name}` raises "
                "ImportError",
                key,
            )
        else:
            change = self.change(
                "name-kind",
                Category.BREAKS,
                path,
                f"{name} is now a {after}, no longer a {before}",
                key,
            )
        self.bind(change, key)

    def _module(self, key: Key, before: Any, after: Any) -> None:
        module = key[1]
        if before is None:
            found = self.new.module(module)
            count = sum(1 for name in (found.names if found else ()) if not name.startswith("_"))
            detail = f"new module: `import {module}` works ({count} public names)"
            self.add("name-added", Category.AVAILABLE, module, detail, key)
        else:
            self.add(
                "name-missing",
                Category.BREAKS,
                module,
                f"{module} is gone: `import {module}` raises ModuleNotFoundError",
                key,
            )

    def moved(self, module: str, name: str) -> Change | None:
        """The move of the definition ``module`` binds as ``name`` to another module
        (``name-moved``: importing it still works), or None where it did not move."""
        found = self.about(("defined", module, name))
        return next((change for change in found if change.kind == "name-moved"), None)

    def _defined(self, key: Key, before: Any, after: Any) -> None:
        _, module, name = key
        if not (before and after):
            return  # a home the record does not give is no move (a value's: name-kind says it)
        if self.listing and (
            not self.flashinfers(module, name) or not self._first("moved", name, before, after)
        ):
            return
        if not self.bound_on_both(module, name):
            return
        self.add(
            "name-moved",
            Category.BEHAVIOUR,
            f"{module}.{name}",
            f"{name} is now defined in {after}, no longer in {before}; importing it from "
            f"{module} still works, its __module__ (and what pickles name) changes",
            key,
        )

    def _conditional(self, key: Key, before: Any, after: Any) -> None:
        _, module, name = key
        home = self.new.get(("defined", module, name)) or module
        if self.listing and (
            not self.flashinfers(module, name) or not self._first("guard", name, home, after)
        ):
            return
        if not self.bound_on_both(module, name):
            return
        detail = (
            f"{module} binds {name} only when a guarded import succeeds"
            if after
            else f"{module} now binds {name} unconditionally"
        )
        self.add("name-conditional", Category.BEHAVIOUR, f"{module}.{name}", detail, key)

    def _method(self, key: Key, before: Any, after: Any) -> None:
        _, owner, name = key
        if not self.bound_on_both(*owner.rsplit(".", 1)):
            return
        if after:
            self.add("name-added", Category.AVAILABLE, f"{owner}.{name}", f"new method {name}", key)
        else:
            self.add(
                "name-missing",
                Category.BREAKS,
                f"{owner}.{name}",
                f"no longer has {name}: using it raises AttributeError",
                key,
            )

    def _member(self, key: Key, before: Any, after: Any) -> None:
        _, path, member = key
        if before is None:
            self.add("name-added", Category.AVAILABLE, f"{path}.{member}", f"= {after}", key)
        elif after is None:
            self.add(
                "name-missing",
                Category.BREAKS,
                f"{path}.{member}",
                f"no longer has {member} (was {before})",
                key,
            )
        else:
            self.add(
                "member-value",
                Category.BEHAVIOUR,
                f"{path}.{member}",
                f"is now {after}, no longer {before}",
                key,
            )

    # -------------------------------------------------------------------- presence

    def presence(self, target: str, module: str) -> Presence:
        """Where ``target`` leads on each release (``module``: the part of it known to be a
        module), and what changed of it (:class:`Presence`)."""
        known: Presence | None = self._presences.get((target, module))
        if known is None:
            known = self._presences[target, module] = self._presence(target, module)
        return known

    def _presence(self, target: str, module: str) -> Presence:
        old, new = resolve(self.old, target, module), resolve(self.new, target, module)
        states = (old.state, new.state)
        if FOREIGN in states:
            return Presence(old, new, "foreign")
        if states == (UNKNOWN, UNKNOWN):
            return Presence(old, new, "unknown")
        # The records list a class's public methods, instance attributes and enum members,
        # not its every attribute: one that only the old release's record lists is gone,
        # one that only the new release's lists is new.
        if new.state == ABSENT or (new.member and old.state == PRESENT):
            where = new.missing or target
            if old.state == UNKNOWN and where != target:
                # What fails on the new release is a part of the path (a module it does not
                # ship): the old release's record of that part is what decides.
                at = resolve(self.old, where, module if where.startswith(module) else "flashinfer")
                old = at if at.state == PRESENT else old
            return Presence(old, new, "name-missing")
        if new.state == PRESENT and (old.state == ABSENT or old.unseen or old.member):
            return Presence(old, new, "name-added")
        return Presence(old, new, "unknown" if UNKNOWN in states else None)

    def presence_introduced_in(self, target: str, module: str) -> str | None:
        """The release from which what ``target`` names is there, missing or unknown as on
        the new release; None where it is so on the old release too."""
        if (target, module) not in self._introduced:
            cited = self.history.cite(lambda facts: resolve(facts, target, module).state)
            self._introduced[target, module] = cited[0] if cited else None
        return self._introduced[target, module]
