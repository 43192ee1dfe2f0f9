"""The recorded releases between two, and the release where a fact took its new value."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from fi_compat._records._store import position
from fi_compat.upgrade._facts import Facts, Key, facts_of, releases_between

__all__ = ["History", "history"]


@dataclass(frozen=True)
class History:
    """Every recorded release from ``old`` to ``new``, in that order (older first when
    ``old`` is the older release; a downgrade walks them newest first).

    Each entry is a release's :class:`Facts` or its release string, whose facts are read
    when a citation first needs them (:meth:`step`): a diff passes most releases between
    by the span of a stored record, without reading them.
    """

    entries: tuple[Facts | str, ...]

    def step(self, index: int) -> Facts:
        """The facts of the entry at ``index`` (read once per process)."""
        entry = self.entries[index]
        return entry if isinstance(entry, Facts) else facts_of(entry)

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


def history(old: str, new: str) -> History:
    """The :class:`History` from ``old`` to ``new`` (recorded release strings).

    Raises
    ------
    UnknownReleaseError
        Either release has no record.
    """
    between = releases_between(old, new)
    # Both ends are read now (an unknown release fails here); the steps between when cited.
    ends = {0, len(between) - 1}
    return History(
        tuple(facts_of(release) if at in ends else release for at, release in enumerate(between))
    )
