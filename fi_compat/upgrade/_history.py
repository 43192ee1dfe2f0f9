"""The recorded releases between two, and the release where a fact took its new value."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from fi_compat._records._store import position
from fi_compat.upgrade._facts import Facts, Key, facts_of, releases_between

__all__ = ["History", "history"]


@dataclass(frozen=True)
class History:
    """The facts of every recorded release from ``old`` to ``new``, in that order (older
    first when ``old`` is the older release; a downgrade walks them newest first)."""

    steps: tuple[Facts, ...]

    @property
    def upgrade(self) -> bool:
        """True unless the new release is older than the old one (a downgrade)."""
        return self.new.version >= self.old.version

    @property
    def old(self) -> Facts:
        return self.steps[0]

    @property
    def new(self) -> Facts:
        return self.steps[-1]

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
        wanted = value(self.new)
        index = len(self.steps) - 1
        span = self.new.span(key) if key is not None else None
        while index > 0:
            before = self.steps[index - 1]
            if span is not None and position(before.release) in span:
                index -= 1  # the same stored record: the same value
                continue
            if value(before) != wanted:
                break
            span = before.span(key) if key is not None else None
            index -= 1
        if index == 0:
            return None
        return self.steps[index].release, self.steps[index - 1].release


def history(old: str, new: str) -> History:
    """The :class:`History` from ``old`` to ``new`` (recorded release strings).

    Raises
    ------
    UnknownReleaseError
        Either release has no record.
    """
    return History(tuple(facts_of(release) for release in releases_between(old, new)))
