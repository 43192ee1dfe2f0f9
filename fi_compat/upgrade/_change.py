"""One difference between two releases (a :class:`Change`), and how the comparison makes one.

:class:`Comparing` holds what every part of the comparison shares: the two releases and the
history between them, a change of one fact cited at the release where the fact took its new
value (:meth:`Comparing.change`), every path an engine meets it at (:meth:`Comparing.paths`),
and the changes of one fact, computed once (:meth:`Comparing.about`). The parts that compare
names, parameters and behaviour (:mod:`fi_compat.upgrade._compare`,
:mod:`fi_compat.upgrade._compare_parameters`, :mod:`fi_compat.upgrade._compare_behaviour`)
build on it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fi_compat._frozen import picklable
from fi_compat._records._facts import Facts, Key
from fi_compat._records._history import History
from fi_compat._signature import Status
from fi_compat.upgrade._behaviour import Answer
from fi_compat.upgrade._kinds import Category, as_json

__all__ = ["Change", "Comparing"]


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
        return as_json(self)


def _plain(value: Any) -> Any:
    """A fact's value as JSON: tuples become lists, fi-compat's answers their sentence, a
    keyword's acceptance its value."""
    if isinstance(value, Answer):
        return value.text
    if isinstance(value, Status):
        return value.value
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


class Comparing:
    """What every part of the comparison of two releases shares (see the module docstring);
    :class:`~fi_compat.upgrade._compare.Comparison` is the whole."""

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
        #: (:func:`fi_compat.upgrade._diff.importers`): where else a change of a
        #: definition is met.
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
        #: (target, module) -> what :meth:`Comparison.presence` and
        #: :meth:`Comparison.presence_introduced_in` answered: a scan asks about the same
        #: path at each of its uses, and the answer depends on the two releases alone.
        self._presences: dict[tuple[str, str], Any] = {}
        self._introduced: dict[tuple[str, str], str | None] = {}

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
        """Add the change :meth:`change` makes of these to :attr:`changes`."""
        self.changes.append(self.change(kind, category, subject, detail, key, cite, parameter))

    # -------------------------------------------------------------------- one key

    def key(self, key: Key) -> None:
        """Compare the fact at ``key``: where the releases differ, the method named for the
        key's kind (``_name`` for ``("name", ...)``, ``_params``, ``_hazard``, ...) adds
        its changes; a kind no part compares adds none."""
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
        """List the bindings' changes held back by :meth:`bind`: the bindings of one
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

    def bind(self, change: Change, key: Key) -> None:
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
        return self.old.has(module, name) or self.new.has(module, name)

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
                if facts.has(module, name)
            }
            found = self._homes[module, name] = frozenset(homes or {module})
        return found
