"""Every difference an engine can meet between two recorded releases.

:func:`diff_releases` compares the facts of two releases (:mod:`fi_compat.upgrade._facts`)
and turns each fact whose value differs into a :class:`Change`, citing the release where the
fact took its new value (walking the recorded releases in between). Nothing is installed
or imported: the records, the measured split reach and the measured per-call sizes are the
only sources.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from packaging.version import Version

from fi_compat._arguments import require_str
from fi_compat._frozen import picklable
from fi_compat._surface import IMPORT_HAZARDS
from fi_compat.upgrade._facts import (
    MAPPINGS,
    Answer,
    Facts,
    Key,
    accepts,
    changed_keys,
    parameter,
    positional,
    var_keyword,
)
from fi_compat.upgrade._history import History, history
from fi_compat.upgrade._kinds import Category

__all__ = ["DIFF_CATEGORIES", "Change", "Comparison", "ReleaseDiff", "diff_releases"]


_ORDER = {category: index for index, category in enumerate(Category)}
#: The categories a change can take, in the order a diff lists them (a diff neither judges
#: uses nor lists the unchanged).
DIFF_CATEGORIES = (Category.BREAKS, Category.BEHAVIOUR, Category.DETERMINISM, Category.AVAILABLE)
_VAR = ("VAR_POSITIONAL", "VAR_KEYWORD")


@picklable
@dataclass(frozen=True)
class Change:
    """One difference between two releases.

    .. versionadded:: 0.3.0

    Attributes
    ----------
    kind
        What changed: the id of a :class:`~fi_compat.upgrade.Rule` in
        :data:`~fi_compat.upgrade.RULES` (``"name-missing"``, ``"keyword-added"``,
        ``"import-hazard"``), the vocabulary ``fi-compat scan`` judges uses in.
    category
        How it touches an engine's code (:class:`~fi_compat.upgrade.Category`): breaks,
        changes behaviour, loses determinism or newly available.
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
    parameter
        For a change of one parameter of a callable (a keyword taken or refused, a default,
        a rename: its old name), the parameter's name; None otherwise.
    paths
        Every dotted path an engine can import what changed from, in either release: the
        subject first, then the module that defines the name and every module that
        re-exports it (``flashinfer.trtllm_fp4_block_scale_moe``,
        ``flashinfer.fused_moe.trtllm_fp4_block_scale_moe``,
        ``flashinfer.fused_moe.core.trtllm_fp4_block_scale_moe``), shortest first; for a
        method or an enum member, each path of its class with the member's name. For a name
        that modules start or stop binding (or bind as another kind), each binding of the
        same definition that did so at that release: one change, not one per module. Only
        the subject for a module that comes or goes; empty where the subject is no dotted
        path (an import hazard, split reach, a mapping). Added in fi-compat 0.3.0.
    """

    kind: str
    category: Category
    subject: str
    detail: str
    release: str | None
    last_before: str | None
    old: Any
    new: Any
    parameter: str | None = None
    paths: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The change as the JSON output documents it."""
        return {
            "kind": self.kind,
            "category": self.category.value,
            "subject": self.subject,
            "detail": self.detail,
            "release": self.release,
            "last_before": self.last_before,
            "old": self.old,
            "new": self.new,
            "parameter": self.parameter,
            "paths": list(self.paths),
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

    def by_category(self, category: Category) -> tuple[Change, ...]:
        """The changes of one category, in the order of :attr:`changes`."""
        return tuple(change for change in self.changes if change.category is category)

    def to_dict(self) -> dict[str, Any]:
        """The diff as ``fi-compat diff --json`` prints it (schema ``diff.schema.json``)."""
        from fi_compat._version import __version__

        return {
            "schema": 1,
            "tool": {"name": "fi-compat", "version": __version__},
            "old": self.old,
            "new": self.new,
            "releases": list(self.releases),
            "summary": {
                category.key: len(self.by_category(category)) for category in DIFF_CATEGORIES
            },
            "changes": [change.to_dict() for change in self.changes],
            "notes": list(self.notes),
        }


# ------------------------------------------------------------------------------ reading


def _plain(value: Any) -> Any:
    """A fact's value as JSON: tuples become lists, fi-compat's answers their sentence."""
    if isinstance(value, Answer):
        return value.text
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def _moved(before: Sequence[str], after: Sequence[str]) -> list[str]:
    """The positional parameters on both sides that sit at another position in ``after``."""
    return [name for name in before if name in after and before.index(name) != after.index(name)]


def _owner(path: str) -> str:
    return path.rpartition(".")[0]


class Comparison:
    """The one comparison of two releases: every difference of their facts as a
    :class:`Change`, asked by subject.

    :func:`diff_releases` lists it (``listing=True``: FlashInfer's own names only, each
    definition once at its shortest path, a positional change where a parameter moved);
    ``fi-compat scan`` asks it about each use's subject (``listing=False``: every path as
    the use names it) and applies the use's context. No other code compares two releases.
    """

    def __init__(
        self,
        steps: History,
        *,
        listing: bool = False,
        importers: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.history = steps
        self.old, self.new = steps.old, steps.new
        self.listing = listing
        #: name -> every module whose binding of it changed, shortest first
        #: (:func:`importers`): where else a change of a definition is met.
        self.importers: Mapping[str, Sequence[str]] = importers or {}
        self._homes: dict[tuple[str, str], frozenset[str]] = {}
        self._bound: dict[tuple[str, str], tuple[str, ...]] = {}
        self.changes: list[Change] = []
        #: (name, before, after) of each move or guard change said: one line per definition,
        #: at its shortest path (the keys come shortest first), not one per importer.
        self._said: set[tuple[str, str, Any, Any]] = set()
        self._about: dict[Key, tuple[Change, ...]] = {}
        #: (kind, home, name, release, old, new) -> the changes of that definition's
        #: bindings, one per module, listed as one change by :meth:`finish`.
        self._bindings: dict[tuple[Any, ...], list[Change]] = {}

    def change(
        self,
        kind: str,
        category: Category,
        subject: str,
        detail: str,
        key: Key,
        cite: Any = None,
        parameter: str | None = None,
    ) -> Change:
        """A change of the fact at ``key`` (or of what ``cite`` reads), citing the release
        where it took its new value; ``release`` is None where both ends agree."""

        def value(facts: Facts) -> Hashable:
            found: Hashable = facts.get(key)
            return found

        read = cite or value
        before, after = read(self.old), read(self.new)
        cited = self.history.cite(read, key) if before != after else None
        return Change(
            kind,
            category,
            subject,
            detail,
            cited[0] if cited else None,
            cited[1] if cited else None,
            _plain(before),
            _plain(after),
            parameter,
            self.paths(key, subject),
        )

    def add(
        self,
        kind: str,
        category: Category,
        subject: str,
        detail: str,
        key: Key,
        cite: Any = None,
        parameter: str | None = None,
    ) -> None:
        self.changes.append(self.change(kind, category, subject, detail, key, cite, parameter))

    # -------------------------------------------------------------------- one key

    def key(self, key: Key) -> None:
        before, after = self.old.get(key), self.new.get(key)
        if before == after:
            return
        handler = getattr(self, f"_{key[0]}", None)
        if handler is not None:
            handler(key, before, after)

    def about(self, key: Key) -> tuple[Change, ...]:
        """Every change of the fact at ``key`` (``("params", path)``, ``("hazard", name)``,
        ...), computed once."""
        found = self._about.get(key)
        if found is None:
            saved, self.changes = self.changes, []
            bindings, self._bindings = self._bindings, {}
            try:
                self.key(key)
                self.finish()
                found = tuple(self.changes)
            finally:
                self.changes, self._bindings = saved, bindings
            self._about[key] = found
        return found

    def finish(self) -> None:
        """List the bindings' changes held back by :meth:`_bind`: the bindings of one
        definition that came, went or changed kind at the same release are one change,
        under the first (shortest) path, naming every path in :attr:`Change.paths`."""
        for group in self._bindings.values():
            first = group[0]
            if len(group) == 1:
                self.changes.append(first)
                continue
            others = len(group) - 1
            both = f"and the {'other module' if others == 1 else f'{others} other modules'} listed"
            module, _, name = first.subject.rpartition(".")
            if first.kind == "name-added":
                detail = first.detail.replace(f"{module} binds", f"{module} {both} bind", 1)
            elif first.kind == "name-missing":
                detail = (
                    f"{module} {both} no longer bind {name}: `from {module} import {name}` "
                    "raises ImportError, as does the import from each"
                )
            else:
                detail = f"{first.detail}, at every path listed"
            self.changes.append(
                replace(first, detail=detail, paths=tuple(change.subject for change in group))
            )
        self._bindings = {}

    def _bind(self, change: Change, key: Key) -> None:
        """Hold back the change of one module's binding (``key``: ``("name", module,
        name)``) until :meth:`finish` lists it with the other bindings of the same
        definition that changed alike; listed at once outside a diff's listing."""
        if not self.listing:
            self.changes.append(change)
            return
        _, module, name = key
        home = (
            self.new.get(("defined", module, name))
            or self.old.get(("defined", module, name))
            or module
        )
        group = (change.kind, home, name, change.release, repr(change.old), repr(change.new))
        self._bindings.setdefault(group, []).append(change)

    def paths(self, key: Key, subject: str) -> tuple[str, ...]:
        """Every path a change of the fact at ``key``, listed under ``subject``, is met at
        (:attr:`Change.paths`): the subject, then each other binding of the same
        definition that :attr:`importers` holds."""
        kind = key[0]
        if kind in ("name", "module"):
            return (subject,)  # one module's own binding, or the module itself
        if kind in ("defined", "conditional"):
            found, suffix = self.bindings(key[1], key[2]), ""
        elif kind in ("params", "method", "member"):
            module, _, name = key[1].rpartition(".")
            suffix = f".{key[2]}" if kind != "params" else ""
            if kind == "params" and not self.binds(module, name):
                # a method's parameters: the method of every binding of its class
                module, _, name = module.rpartition(".")
                suffix = f".{key[1].rpartition('.')[2]}"
            found = self.bindings(module, name)
        else:
            return ()  # a hazard, a backend's split reach, a mapping: no importable path
        others = (f"{path}{suffix}" for path in found)
        return (subject, *(path for path in others if path != subject))

    def binds(self, module: str, name: str) -> bool:
        """True when ``module`` binds ``name`` in either release."""
        return any(facts.get(("name", module, name)) is not None for facts in (self.old, self.new))

    def bindings(self, module: str, name: str) -> tuple[str, ...]:
        """The paths (``module.name``) of every binding of the definition ``module.name``
        holds (defined where either release defines it), from :attr:`importers`, shortest
        first; empty where it holds none."""
        found = self._bound.get((module, name))
        if found is None:
            homes = self.homes(module, name)
            found = tuple(
                f"{where}.{name}"
                for where in self.importers.get(name, ())
                if homes & self.homes(where, name)
            )
            self._bound[module, name] = found
        return found

    def homes(self, module: str, name: str) -> frozenset[str]:
        """Where ``module.name`` is defined in either release (both homes of a definition
        that moved, so that its bindings are found from either), or ``module`` where
        neither says."""
        found = self._homes.get((module, name))
        if found is None:
            homes = {
                facts.get(("defined", module, name)) or module
                for facts in (self.old, self.new)
                if facts.get(("name", module, name)) is not None
            }
            found = self._homes[module, name] = frozenset(homes or {module})
        return found

    # -------------------------------------------------------------------- by subject

    def keyword(self, path: str, keyword: str) -> Change | None:
        """Whether the callable at ``path`` takes ``keyword`` on each release (``old``/``new``
        are ``"supported"``, ``"unsupported"`` or ``"unknown"``: declared, refused, or taken
        by a ``**kwargs`` whose use the records cannot prove); None where both take it, or
        neither record can tell. A keyword neither takes is a change whose ``release`` is
        None."""

        def value(facts: Facts) -> Hashable:
            return accepts(facts, path, keyword)

        before, after = value(self.old), value(self.new)
        if before == after != "unsupported" or (before, after) == ("unknown", "supported"):
            return None  # taken on both (or unknown on both: nothing to say)
        key: Key = ("params", path)
        if after == "unsupported":
            detail = (
                f"takes {keyword}= on neither release"
                if before == "unsupported"
                else f"no longer takes {keyword}: calls passing it raise TypeError"
            )
            return self.change(
                "keyword-missing", Category.BREAKS, path, detail, key, value, keyword
            )
        if after == "supported":
            return self.change(
                "keyword-added",
                Category.AVAILABLE,
                path,
                f"takes {keyword}= (raises TypeError on {self.old.release})",
                key,
                value,
                keyword,
            )
        return self.change(
            "keyword-unverified",
            Category.BEHAVIOUR,
            path,
            f"no longer declares {keyword}; **kwargs takes it without a known use",
            key,
            value,
            keyword,
        )

    def positional(self, path: str) -> Change | None:
        """The positional parameters of the callable at ``path`` on each release (``old``,
        ``new``), where they differ; None where they do not."""
        before, after = positional(self.old, path), positional(self.new, path)
        if before is None or after is None or before == after:
            return None
        moved = _moved(before, after)
        detail = (
            f"positional parameters are now ({', '.join(after)}), no longer ({', '.join(before)})"
        )
        if moved:
            detail += f": a positional call passes {moved[0]}'s value elsewhere"
        return self.change(
            "positional-shift",
            Category.BREAKS,
            path,
            detail,
            ("params", path),
            lambda facts: positional(facts, path),
        )

    def renamed_to(self, path: str, keyword: str) -> str | None:
        """The name ``keyword``'s parameter of ``path`` goes by on the new release, where it
        was only renamed in place (``parameter-renamed``); None otherwise."""
        for change in self.about(("params", path)):
            if change.kind == "parameter-renamed" and change.parameter == keyword:
                return str(change.new[0]) if change.new else None
        return None

    def lands_alike(self, path: str, count: int) -> bool:
        """Whether the first ``count`` positional arguments of a call of ``path`` land on the
        same parameters on both releases (a parameter renamed in place counts as the same:
        the value still lands where it did)."""
        before = (positional(self.old, path) or ())[:count]
        after = (positional(self.new, path) or ())[:count]
        if before == after:
            return True
        if len(before) != len(after):
            return False
        renames = {
            change.parameter: change.new[0]
            for change in self.about(("params", path))
            if change.kind == "parameter-renamed" and change.new
        }
        return all(o == n or renames.get(o) == n for o, n in zip(before, after, strict=True))

    def declares(self, path: str, keyword: str) -> Change | None:
        """The change of the callable at ``path`` that adds or removes its parameter
        ``keyword`` (what ``"keyword" in inspect.signature(f).parameters`` answers); None
        where both releases declare it or neither does."""
        for change in self.about(("params", path)):
            if change.kind == "parameter-renamed" and keyword in (change.old or ()) + (
                change.new or ()
            ):
                return change
            if change.parameter == keyword and (change.old is None) != (change.new is None):
                return change
        return None

    def hazard(self, hazard: str) -> Change | None:
        """The import hazard ``hazard`` where it appears or ends (``old``/``new``: whether it
        holds); None where both releases agree."""
        found = self.about(("hazard", hazard))
        return found[0] if found and bool(found[0].old) != bool(found[0].new) else None

    def split(self, family: str, backend: str | None) -> Change | None:
        """The measured split reach of ``family`` with ``backend`` (None: each release's
        default backend) on each release, where it differs; None where it does not, or where
        either release is unmeasured."""
        if not (self.old.measured and self.new.measured):
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
        self._bind(change, key)

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

    def _defined(self, key: Key, before: Any, after: Any) -> None:
        _, module, name = key
        if self.listing and (
            not self.flashinfers(module, name) or not self._first("moved", name, before, after)
        ):
            return
        if (
            self.old.get(("name", module, name)) is None
            or self.new.get(("name", module, name)) is None
        ):
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
        self.add("name-conditional", Category.BEHAVIOUR, f"{module}.{name}", detail, key)

    def _params(self, key: Key, before: Any, after: Any) -> None:
        path = key[1]
        if before is None or after is None:
            return  # the callable itself came or went: the name or method change says so
        if self.listing and not self._canonical(_owner(path) if self._is_method(path) else path):
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
                Category.BREAKS,
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
                # the name the parameter goes by on each release
                return tuple(n for n in (name, other) if parameter(facts, path, n) is not None)

            self.add(
                "parameter-renamed",
                Category.BREAKS,
                path,
                f"{name} is now called {other}: calls passing {name}= raise TypeError",
                ("params", path),
                value,
                name,
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
                    "required-missing",
                    Category.BREAKS,
                    path,
                    f"new required parameter {name}: calls without it raise TypeError",
                    key,
                    value,
                    name,
                )
            else:
                detail = (
                    f"takes {name}= (default {default})"
                    if default is not None
                    else f"takes *{name}"
                    if kind == "VAR_POSITIONAL"
                    else f"takes **{name}"
                )
                self.add("keyword-added", Category.AVAILABLE, path, detail, key, value, name)
            return
        if after is None:
            taken = self.keyword(path, name)  # what a call passing it meets now
            reach = "supported" if taken is None else taken.new
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
                "keyword-missing",
                Category.BREAKS if reach == "unsupported" else Category.BEHAVIOUR,
                path,
                detail,
                key,
                value,
                name,
            )
            return
        (old_kind, old_default), (new_kind, new_default) = before, after
        if old_kind != new_kind:
            self.add(
                "parameter-kind",
                Category.BREAKS,
                path,
                f"{name} is now {new_kind.lower()}, no longer {old_kind.lower()}",
                key,
                value,
                name,
            )
            if old_default is None or old_default == new_default:
                return  # a kind change that keeps its default (or never had one) is all
        if old_default is not None and new_default is None:
            self.add(
                "required-missing",
                Category.BREAKS,
                path,
                f"{name} is now required (its default was {old_default})",
                key,
                value,
                name,
            )
        elif old_default is None and new_default is not None:
            self.add(
                "parameter-optional",
                Category.AVAILABLE,
                path,
                f"{name} is now optional (default {new_default})",
                key,
                value,
                name,
            )
        else:
            self.add(
                "default-changed",
                Category.BEHAVIOUR,
                path,
                f"{name}'s default is now {new_default}, no longer {old_default}",
                key,
                value,
                name,
            )

    def _is_method(self, path: str) -> bool:
        owner = _owner(path)
        name = path.rpartition(".")[2]
        return any(facts.get(("method", owner, name)) is not None for facts in (self.old, self.new))

    def _positional(self, path: str) -> None:
        change = self.positional(path)
        if change is not None and _moved(change.old, change.new):
            self.changes.append(change)  # listed where a parameter moved

    def _method(self, key: Key, before: Any, after: Any) -> None:
        _, owner, name = key
        if self.listing and not self._canonical(owner):
            return
        if self.old.get(("name", *tuple(owner.rsplit(".", 1)))) is None:
            return
        if self.new.get(("name", *tuple(owner.rsplit(".", 1)))) is None:
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
        if self.listing and not self._canonical(path):
            return
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
        if not (self.old.measured and self.new.measured) or before is None or after is None:
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


def _sort_key(change: Change) -> tuple[int, Version, str, str, str]:
    release = Version(change.release) if change.release else Version("0")
    return _ORDER[change.category], release, change.subject, change.kind, change.detail


def importers(keys: Iterable[Key]) -> dict[str, list[str]]:
    """Name -> every module whose binding of a name so spelled changed between the two
    releases, in the order ``keys`` give them (shortest module first).

    :func:`changed_keys` gives a name's keys in every module where its record differs,
    and a changed definition changes the record of every module that re-exports it; so
    the modules binding one definition whose change is listed are all here, read off the
    keys the diff walks anyway (:meth:`Comparison.bindings` keeps those of the definition).
    """
    found: dict[str, list[str]] = {}
    for key in keys:
        if key[0] == "defined":
            found.setdefault(key[2], []).append(key[1])
    return found


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
    keys = list(changed_keys(steps.old, steps.new))
    differ = Comparison(steps, listing=True, importers=importers(keys))
    for key in keys:
        differ.key(key)
    differ.finish()
    notes = []
    for facts in (steps.old, steps.new):
        if not facts.measured:
            notes.append(
                f"split reach was not measured for {facts.release}: backend changes are not listed"
            )
        if facts.get(("sizes_measured",)) is False and facts.get(("mapping", "per_call_sizes")):
            notes.append(
                f"per-call sizes were not measured for {facts.release}: their change is not listed"
            )
    return ReleaseDiff(
        steps.old.release,
        steps.new.release,
        steps.releases,
        tuple(sorted(differ.changes, key=_sort_key, reverse=False)),
        tuple(notes),
    )
