"""Two recorded releases: those between them, the facts that differ, and where each changed.

:func:`releases_between` walks the recorded releases from one to another;
:func:`changed_keys` gives the facts (:mod:`fi_compat._records._facts`) whose values may
differ between two releases, read off the store's identity of each name's record; a
:class:`History` cites the release where a fact took the value it has at the newer end.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass

from packaging.version import Version

from fi_compat._records import canonical_release, shipped_releases
from fi_compat._records._facts import Facts, Key, facts_of
from fi_compat._records._store import alike, position
from fi_compat._surface import NAMED_MODULES

__all__ = ["History", "changed_keys", "history", "releases_between"]


def releases_between(first: str, last: str) -> list[str]:
    """The recorded releases from ``first`` to ``last``, both included, in version order
    (reversed when ``first`` is the newer).

    Between two final releases the walk takes the final releases only: engines move from
    final to final, and a change is cited at the first final release that has it (0.6.8,
    not 0.6.8rc1). Where either end is a pre-release, every release between is taken.
    """
    start, end = Version(canonical_release(first)), Version(canonical_release(last))
    low, high = sorted((start, end))
    every = start.is_prerelease or end.is_prerelease
    found = [
        name
        for name in shipped_releases()
        if low <= Version(name) <= high
        and (every or not Version(name).is_prerelease or Version(name) in (low, high))
    ]
    return found if start <= end else found[::-1]


@dataclass(frozen=True)
class History:
    """Every recorded release from ``old`` to ``new``, in that order (older first when
    ``old`` is the older release; a downgrade walks them newest first).

    Each entry is a release's :class:`Facts` or its release string, whose facts ``read``
    gives when a citation first needs them (:meth:`step`): a diff passes most releases
    between by the span of a stored record, without reading them.
    """

    entries: tuple[Facts | str, ...]
    read: Callable[[str], Facts] = facts_of

    def step(self, index: int) -> Facts:
        """The facts of the entry at ``index`` (read once per process)."""
        entry = self.entries[index]
        return entry if isinstance(entry, Facts) else self.read(entry)

    @functools.cached_property
    def releases(self) -> tuple[str, ...]:
        """The releases walked, in order."""
        return tuple(entry if isinstance(entry, str) else entry.release for entry in self.entries)

    @property
    def upgrade(self) -> bool:
        """True unless the new release is older than the old one (a downgrade)."""
        return self.new.version >= self.old.version

    @property
    def old(self) -> Facts:
        return self.step(0)

    @property
    def new(self) -> Facts:
        return self.step(len(self.entries) - 1)

    def cite(
        self, value: Callable[[Facts], Hashable], key: Key | None = None
    ) -> tuple[str, str] | None:
        """Where ``value`` took the value it has at ``new``: ``(first release with it, the
        last release before, with another)``, walking back from ``new``; None when it has
        that value at ``old`` too.

        With the ``key`` the value is read from, a step whose records hold the very same
        stored record for that key as a later step with the value (:meth:`Facts.span`) is
        passed without reading the value: one stored record is one value.
        """
        releases = self.releases
        wanted = value(self.new)
        index = len(releases) - 1
        span = self.new.span(key) if key is not None else None
        while index > 0:
            if span is not None and position(releases[index - 1]) in span:
                index -= 1  # the same stored record: the same value
                continue
            before = self.step(index - 1)
            if value(before) != wanted:
                break
            span = before.span(key) if key is not None else None
            index -= 1
        if index == 0:
            return None
        return releases[index], releases[index - 1]


def history(old: str, new: str, read: Callable[[str], Facts] = facts_of) -> History:
    """The :class:`History` from ``old`` to ``new`` (recorded release strings), each
    release's facts given by ``read``.

    Raises
    ------
    UnknownReleaseError
        Either release has no record.
    """
    between = releases_between(old, new)
    # Both ends are read now (an unknown release fails here); the steps between when cited.
    ends = {0, len(between) - 1}
    return History(
        tuple(read(release) if at in ends else release for at, release in enumerate(between)),
        read,
    )


def _rank(module: str) -> tuple[int, int, str]:
    order = NAMED_MODULES.index(module) if module in NAMED_MODULES else len(NAMED_MODULES)
    return module.count("."), order, module


def changed_keys(old: Facts, new: Facts) -> Iterator[Key]:
    """Every key whose value may differ between ``old`` and ``new``, each once.

    The release-wide facts (:attr:`Facts.table`) are all given. A module one release ships
    and the other does not is one ``("module", module)`` key; in a module both ship, a
    public name is compared only where the store holds different records of it (one stored
    record is one set of facts), with its entry's keys at the path the diff lists it
    under: the shortest module binding the definition that changed.
    """
    seen: set[Key] = set()

    def once(keys: Iterable[Key]) -> Iterator[Key]:
        for key in keys:
            if key not in seen:
                seen.add(key)
                yield key

    yield from once(key for facts in (old, new) for key in facts.table)
    # (home, name) -> the modules where that definition's name changed
    changed: dict[tuple[str, str], list[str]] = {}
    # shortest paths first: a change said once is said at the path engines use
    for module in sorted(old.modules() | new.modules(), key=_rank):
        before, after = old.module(module), new.module(module)
        if before is None or after is None:
            if not _inside_another(module, old, new):
                yield from once([("module", module)])
            continue
        if alike(module, before.release, after.release):
            continue  # one stored record of every name: nothing to compare
        for name in sorted(set(before.names) | set(after.names)):
            if name.startswith("_"):
                continue
            version = before.version(name)  # one stored record: the same facts
            if version is not None and version == after.version(name):
                continue
            yield from once(
                (("name", module, name), ("defined", module, name), ("conditional", module, name))
            )
            home = new.get(("defined", module, name)) or old.get(("defined", module, name))
            changed.setdefault((home or module, name), []).append(module)
    for (_, name), modules in sorted(changed.items()):
        listed = f"{min(modules, key=_rank)}.{name}"
        for facts in (old, new):
            yield from once(facts.build(listed))


def _inside_another(module: str, old: Facts, new: Facts) -> bool:
    """True when a package holding ``module`` also came or went between the releases
    (its change says it all)."""
    parts = module.split(".")
    for end in range(1, len(parts)):
        package = ".".join(parts[:end])
        if (old.module(package) is None) != (new.module(package) is None):
            return True
    return False
