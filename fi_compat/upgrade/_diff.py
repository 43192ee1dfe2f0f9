"""Every difference an engine can meet between two recorded releases.

:func:`diff_releases` compares the facts of two releases (:mod:`fi_compat.upgrade._facts`)
and turns each fact whose value differs into a :class:`Change`, citing the release where the
fact took its new value (walking the recorded releases in between). Nothing is installed
or imported: the records, the measured split reach and the measured per-call sizes are the
only sources.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from fi_compat._arguments import require_str
from fi_compat._frozen import picklable
from fi_compat._surface import IMPORT_HAZARDS
from fi_compat.upgrade._facts import (
    MAPPINGS,
    Facts,
    Key,
    accepts,
    changed_keys,
    parameter,
    positional,
    var_keyword,
)
from fi_compat.upgrade._history import History, history

__all__ = ["Change", "ReleaseDiff", "Severity", "diff_releases"]


class Severity(str, enum.Enum):
    """How a :class:`Change` can touch an engine's code, most severe first.

    .. versionadded:: 0.3.0
    """

    #: Code that ran on the old release can fail on the new one.
    BREAKING = "breaking"
    #: The same code runs and does something else.
    BEHAVIOUR = "behaviour"
    #: An attention backend stops handing the split settings to the kernel.
    DETERMINISM = "determinism"
    #: Something new the code can use (or stop working around).
    ADDED = "added"

    def __str__(self) -> str:
        return self.value


_ORDER = {severity: index for index, severity in enumerate(Severity)}
_VAR = ("VAR_POSITIONAL", "VAR_KEYWORD")


@picklable
@dataclass(frozen=True)
class Change:
    """One difference between two releases.

    .. versionadded:: 0.3.0

    Attributes
    ----------
    kind
        What changed, e.g. ``"name-removed"``, ``"parameter-added"``, ``"hazard-ended"``;
        the upgrade guide lists every kind.
    severity
        See :class:`Severity`.
    subject
        The dotted path the change is about (``flashinfer.comm.create_allreduce_fusion_workspace``),
        a hazard's name, ``family:backend`` for split reach, or a mapping's key.
    detail
        One sentence for people.
    release
        The first release (towards the new one) with the new state; None when the
        state at the old release already matched (never for a listed change).
    last_before
        The release just before :attr:`release` on the way, which still had the old state.
    old, new
        The fact's value at each end (JSON-compatible; None where absent).
    """

    kind: str
    severity: Severity
    subject: str
    detail: str
    release: str | None
    last_before: str | None
    old: Any
    new: Any

    def to_json(self) -> dict[str, Any]:
        """The change as the JSON output documents it."""
        return {
            "kind": self.kind,
            "severity": self.severity.value,
            "subject": self.subject,
            "detail": self.detail,
            "release": self.release,
            "last_before": self.last_before,
            "old": self.old,
            "new": self.new,
        }


@picklable
@dataclass(frozen=True)
class ReleaseDiff:
    """The changes from one recorded release to another, most severe first.

    .. versionadded:: 0.3.0
    """

    old: str
    new: str
    releases: tuple[str, ...]
    changes: tuple[Change, ...]
    notes: tuple[str, ...]

    def by_severity(self, severity: Severity) -> tuple[Change, ...]:
        """The changes of one severity, in the order of :attr:`changes`."""
        return tuple(change for change in self.changes if change.severity is severity)

    def to_json(self) -> dict[str, Any]:
        """The diff as ``fi-compat diff --json`` prints it (schema ``diff.schema.json``)."""
        from fi_compat._version import __version__

        return {
            "schema": 1,
            "tool": {"name": "fi-compat", "version": __version__},
            "old": self.old,
            "new": self.new,
            "releases": list(self.releases),
            "summary": {severity.value: len(self.by_severity(severity)) for severity in Severity},
            "changes": [change.to_json() for change in self.changes],
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------ reading


def _plain(value: Any) -> Any:
    """A fact's value as JSON: tuples become lists."""
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def _owner(path: str) -> str:
    return path.rpartition(".")[0]


class _Differ:
    def __init__(self, steps: History) -> None:
        self.history = steps
        self.old, self.new = steps.old, steps.new
        self.changes: list[Change] = []
        #: (name, before, after) of each move or guard change said: one line per definition,
        #: at its shortest path (the keys come shortest first), not one per importer.
        self._said: set[tuple[str, str, Any, Any]] = set()

    def add(
        self,
        kind: str,
        severity: Severity,
        subject: str,
        detail: str,
        key: Key,
        cite: Any = None,
    ) -> None:
        def value(facts: Facts) -> Hashable:
            found: Hashable = facts.get(key)
            return found

        read = cite or value
        cited = self.history.cite(read, key)
        self.changes.append(
            Change(
                kind,
                severity,
                subject,
                detail,
                cited[0] if cited else None,
                cited[1] if cited else None,
                _plain(read(self.old)),
                _plain(read(self.new)),
            )
        )

    # -------------------------------------------------------------------- one key

    def key(self, key: Key) -> None:
        before, after = self.old.get(key), self.new.get(key)
        if before == after:
            return
        handler = getattr(self, f"_{key[0]}", None)
        if handler is not None:
            handler(key, before, after)

    def _first(self, what: str, name: str, before: Any, after: Any) -> bool:
        """True the first time this change of ``name`` is met (later: another importer)."""
        said = (what, name, before, after)
        if said in self._said:
            return False
        self._said.add(said)
        return True

    def _canonical(self, path: str) -> bool:
        """True for the path a name's facts are listed under (not a re-export of it)."""
        facts = self.new if path in self.new.canonical else self.old
        return facts.canonical.get(path, path) == path

    def flashinfers(self, module: str, name: str) -> bool:
        """True when ``module.name`` is FlashInfer's own in a release that binds it: defined in
        FlashInfer, not a module or object it imports (``contextlib``, ``ABC``, ``Optional``),
        which a release may stop importing without changing its API."""
        for facts in (self.old, self.new):
            if facts.get(("name", module, name)) is not None:
                home = facts.get(("defined", module, name)) or module
                if home == "flashinfer" or home.startswith("flashinfer."):
                    return True
        return False

    def _name(self, key: Key, before: Any, after: Any) -> None:
        _, module, name = key
        if not self.flashinfers(module, name):
            return
        path = f"{module}.{name}"
        if before is None:
            where = self.new.get(("defined", module, name))
            home = f" (defined in {where})" if where and where != module else ""
            self.add("name-added", Severity.ADDED, path, f"{module} binds {name}{home}", key)
        elif after is None:
            self.add(
                "name-removed",
                Severity.BREAKING,
                path,
                f"{module} no longer binds {name}: `from {module} import {name}` raises "
                "ImportError",
                key,
            )
        else:
            self.add(
                "name-kind",
                Severity.BREAKING,
                path,
                f"{name} is now a {after}, no longer a {before}",
                key,
            )

    def _module(self, key: Key, before: Any, after: Any) -> None:
        module = key[1]
        if before is None:
            found = self.new.module(module)
            count = sum(1 for name in (found.names if found else ()) if not name.startswith("_"))
            detail = f"new module: `import {module}` works ({count} public names)"
            self.add("module-added", Severity.ADDED, module, detail, key)
        else:
            self.add(
                "module-removed",
                Severity.BREAKING,
                module,
                f"{module} is gone: `import {module}` raises ModuleNotFoundError",
                key,
            )

    def _defined(self, key: Key, before: Any, after: Any) -> None:
        _, module, name = key
        if not self.flashinfers(module, name) or not self._first("moved", name, before, after):
            return
        if (
            self.old.get(("name", module, name)) is None
            or self.new.get(("name", module, name)) is None
        ):
            return
        self.add(
            "name-moved",
            Severity.BEHAVIOUR,
            f"{module}.{name}",
            f"{name} is now defined in {after}, no longer in {before}; importing it from "
            f"{module} still works, its __module__ (and what pickles name) changes",
            key,
        )

    def _conditional(self, key: Key, before: Any, after: Any) -> None:
        _, module, name = key
        home = self.new.get(("defined", module, name)) or module
        if not self.flashinfers(module, name) or not self._first("guard", name, home, after):
            return
        if (
            self.old.get(("name", module, name)) is None
            or self.new.get(("name", module, name)) is None
        ):
            return
        detail = (
            f"{module} binds {name} only when a guarded import succeeds"
            if after
            else f"{module} now binds {name} unconditionally"
        )
        self.add("name-conditional", Severity.BEHAVIOUR, f"{module}.{name}", detail, key)

    def _params(self, key: Key, before: Any, after: Any) -> None:
        path = key[1]
        if before is None or after is None:
            return  # the callable itself came or went: the name or method change says so
        if not self._canonical(_owner(path) if self._is_method(path) else path):
            return
        old = {name: (kind, default) for name, kind, default in before}
        new = {name: (kind, default) for name, kind, default in after}
        renamed = self._renamed(path, before, after, old, new)
        for name in (*old, *(name for name in new if name not in old)):
            if old.get(name) != new.get(name) and name not in renamed:
                self._parameter(path, name, old.get(name), new.get(name))
        self._positional(path)
        if var_keyword(self.old, path) and not var_keyword(self.new, path):
            self.add(
                "kwargs-removed",
                Severity.BREAKING,
                path,
                "no longer takes **kwargs: keywords it did not declare raise TypeError",
                key,
                lambda facts: var_keyword(facts, path),
            )

    def _renamed(
        self,
        path: str,
        before: tuple[tuple[str, str, str | None], ...],
        after: tuple[tuple[str, str, str | None], ...],
        old: dict[str, tuple[str, str | None]],
        new: dict[str, tuple[str, str | None]],
    ) -> set[str]:
        """Report each parameter that only changed its name (gone from one position, a new
        name at the same position with the same kind and default); the names involved. A
        required parameter counts only when it is the one parameter that changed: several
        required ones replaced at once are a new signature, not renames."""
        involved: set[str] = set()
        gone = [name for name in old if name not in new]
        for index, (name, kind, default) in enumerate(before):
            if name in new or index >= len(after):
                continue
            other, other_kind, other_default = after[index]
            if other in old or (other_kind, other_default) != (kind, default):
                continue
            if default is None and len(gone) > 1:
                continue
            involved.update((name, other))

            def value(facts: Facts, name: str = name, other: str = other) -> Hashable:
                return parameter(facts, path, name), parameter(facts, path, other)

            self.add(
                "parameter-renamed",
                Severity.BREAKING,
                path,
                f"{name} is now called {other}: calls passing {name}= raise TypeError",
                ("params", path),
                value,
            )
        return involved

    def _parameter(
        self,
        path: str,
        name: str,
        before: tuple[str, str | None] | None,
        after: tuple[str, str | None] | None,
    ) -> None:
        key: Key = ("params", path)

        def value(facts: Facts) -> Hashable:
            return parameter(facts, path, name)

        if before is None:
            assert after is not None
            kind, default = after
            if default is None and kind not in _VAR:
                self.add(
                    "parameter-required",
                    Severity.BREAKING,
                    path,
                    f"new required parameter {name}: calls without it raise TypeError",
                    key,
                    value,
                )
            else:
                detail = (
                    f"takes {name}= (default {default})"
                    if default is not None
                    else f"takes *{name}"
                    if kind == "VAR_POSITIONAL"
                    else f"takes **{name}"
                )
                self.add("parameter-added", Severity.ADDED, path, detail, key, value)
            return
        if after is None:
            reach = accepts(self.new, path, name) if var_keyword(self.new, path) else "unsupported"
            if reach == "supported":
                target = self.new.get(("forwards", path))
                detail = (
                    f"no longer declares {name}; its **kwargs passes it on to {target}, which "
                    "takes it by keyword (passing it by position no longer works)"
                )
            elif reach == "unknown":
                detail = f"no longer declares {name}; **kwargs takes it without a known use"
            else:
                detail = f"no longer takes {name}: calls passing it raise TypeError"
            self.add(
                "parameter-removed",
                Severity.BREAKING if reach == "unsupported" else Severity.BEHAVIOUR,
                path,
                detail,
                key,
                value,
            )
            return
        (old_kind, old_default), (new_kind, new_default) = before, after
        if old_kind != new_kind:
            self.add(
                "parameter-kind",
                Severity.BREAKING,
                path,
                f"{name} is now {new_kind.lower()}, no longer {old_kind.lower()}",
                key,
                value,
            )
            if old_default is None or new_default is not None:
                return  # a kind change that keeps a default (or never had one) is all
        if old_default is not None and new_default is None:
            self.add(
                "parameter-required",
                Severity.BREAKING,
                path,
                f"{name} is now required (its default was {old_default})",
                key,
                value,
            )
        elif old_default is None and new_default is not None:
            self.add(
                "parameter-optional",
                Severity.ADDED,
                path,
                f"{name} is now optional (default {new_default})",
                key,
                value,
            )
        else:
            self.add(
                "parameter-default",
                Severity.BEHAVIOUR,
                path,
                f"{name}'s default is now {new_default}, no longer {old_default}",
                key,
                value,
            )

    def _is_method(self, path: str) -> bool:
        owner = _owner(path)
        name = path.rpartition(".")[2]
        return any(facts.get(("method", owner, name)) is not None for facts in (self.old, self.new))

    def _positional(self, path: str) -> None:
        before, after = positional(self.old, path), positional(self.new, path)
        assert before is not None
        assert after is not None
        shared = [name for name in before if name in after]
        moved = [name for name in shared if before.index(name) != after.index(name)]
        if not moved:
            return
        self.add(
            "positional-order",
            Severity.BREAKING,
            path,
            f"positional parameters are now ({', '.join(after)}), no longer "
            f"({', '.join(before)}): a positional call passes {moved[0]}'s value elsewhere",
            ("params", path),
            lambda facts: positional(facts, path),
        )

    def _method(self, key: Key, before: Any, after: Any) -> None:
        _, owner, name = key
        if not self._canonical(owner):
            return
        if self.old.get(("name", *tuple(owner.rsplit(".", 1)))) is None:
            return
        if self.new.get(("name", *tuple(owner.rsplit(".", 1)))) is None:
            return
        if after:
            self.add("method-added", Severity.ADDED, f"{owner}.{name}", f"new method {name}", key)
        else:
            self.add(
                "method-removed",
                Severity.BREAKING,
                f"{owner}.{name}",
                f"no longer has {name}: using it raises AttributeError",
                key,
            )

    def _member(self, key: Key, before: Any, after: Any) -> None:
        _, path, member = key
        if not self._canonical(path):
            return
        if before is None:
            self.add("member-added", Severity.ADDED, f"{path}.{member}", f"= {after}", key)
        elif after is None:
            self.add(
                "member-removed",
                Severity.BREAKING,
                f"{path}.{member}",
                f"no longer has {member} (was {before})",
                key,
            )
        else:
            self.add(
                "member-value",
                Severity.BEHAVIOUR,
                f"{path}.{member}",
                f"is now {after}, no longer {before}",
                key,
            )

    def _hazard(self, key: Key, before: Any, after: Any) -> None:
        hazard = key[1]
        entry = IMPORT_HAZARDS[hazard]
        modules = " / ".join(f"import {module}" for module in entry.modules)
        holding = self.new if after else self.old
        raises = entry.raises(holding.get(("hazard_python", hazard)))
        cited = self.history.cite(lambda facts: facts.get(key))
        last = cited[1] if cited else self.old.release
        if after:
            evidence = self.new.evidence.get(hazard) or "no evidence recorded"
            self.add(
                "hazard-appeared",
                Severity.BREAKING,
                hazard,
                f"{modules}: {raises} ({evidence})",
                key,
            )
        else:
            evidence = self.old.evidence.get(hazard) or "no evidence recorded"
            self.add(
                "hazard-ended",
                Severity.BEHAVIOUR,
                hazard,
                f"{modules}: no longer {raises}; it did up to {last} ({evidence})",
                key,
            )

    def _backend(self, key: Key, before: Any, after: Any) -> None:
        _, family, backend = key
        subject = f"{family}:{backend}"
        if not (self.old.measured and self.new.measured):
            return
        if before is None:
            self.add(
                "backend-added",
                Severity.ADDED,
                subject,
                f"new backend (split settings: {after})",
                key,
            )
        elif after is None:
            self.add(
                "backend-removed",
                Severity.BREAKING,
                subject,
                f"backend {backend!r} is no longer measured for {family}",
                key,
            )
        elif before == "reaches":
            self.add(
                "split-lost",
                Severity.DETERMINISM,
                subject,
                f"the split settings no longer reach the kernel ({after})",
                key,
            )
        elif after == "reaches":
            self.add(
                "split-gained",
                Severity.ADDED,
                subject,
                f"the split settings now reach the kernel (was {before})",
                key,
            )
        else:
            self.add(
                "split-changed",
                Severity.BEHAVIOUR,
                subject,
                f"split settings: {after}, no longer {before}",
                key,
            )

    def _default_backend(self, key: Key, before: Any, after: Any) -> None:
        if not (self.old.measured and self.new.measured) or before is None or after is None:
            return
        self.add(
            "default-backend",
            Severity.BEHAVIOUR,
            key[1],
            f"the default backend is now {after!r}, no longer {before!r}",
            key,
        )

    def _mapping(self, key: Key, before: Any, after: Any) -> None:
        name = key[1]
        self.add(
            "mapping-changed",
            Severity.BEHAVIOUR,
            name,
            f"{MAPPINGS[name]}: {after or 'nothing (not applicable)'}; "
            f"was {before or 'nothing (not applicable)'}",
            key,
        )


def _sort_key(change: Change) -> tuple[int, Version, str, str, str]:
    release = Version(change.release) if change.release else Version("0")
    return _ORDER[change.severity], release, change.subject, change.kind, change.detail


def diff_releases(old: str, new: str) -> ReleaseDiff:
    """Every difference an engine can meet moving from release ``old`` to ``new``.

    .. versionadded:: 0.3.0

    Parameters
    ----------
    old, new
        Recorded flashinfer-python releases (``"0.6.8"``, ``"0.7.2.post1"``); ``new`` may be
        the older one (a downgrade).

    Raises
    ------
    InvalidArgumentError
        ``old`` or ``new`` is not a str.
    UnknownReleaseError
        Either has no record (a ``LookupError``).
    """
    require_str("old", old, nonempty=True)
    require_str("new", new, nonempty=True)
    steps = history(old, new)
    differ = _Differ(steps)
    for key in changed_keys(steps.old, steps.new):
        differ.key(key)
    notes = []
    for facts in (steps.old, steps.new):
        if not facts.measured:
            notes.append(
                f"split reach was not measured for {facts.release}: backend changes are not listed"
            )
    return ReleaseDiff(
        steps.old.release,
        steps.new.release,
        steps.releases,
        tuple(sorted(differ.changes, key=_sort_key, reverse=False)),
        tuple(notes),
    )
