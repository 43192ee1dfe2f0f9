"""The diff (:func:`diff_releases`): every difference an engine can meet between two releases.

:func:`diff_releases` lists what the comparison (:mod:`fi_compat.upgrade._compare`) finds
between the facts of two releases (:mod:`fi_compat._records._facts`, with
:mod:`fi_compat.upgrade._behaviour`'s): each fact whose value
differs, as a :class:`Change` citing the release where the fact took its new value. Nothing
is installed or imported: the records, the measured split reach and the measured per-call
sizes are the only sources.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from fi_compat._arguments import require_str
from fi_compat._frozen import picklable
from fi_compat._records._facts import Key
from fi_compat._records._history import changed_keys
from fi_compat.upgrade._behaviour import history
from fi_compat.upgrade._change import Change
from fi_compat.upgrade._compare import Comparison
from fi_compat.upgrade._kinds import Category

__all__ = ["DIFF_CATEGORIES", "ReleaseDiff", "diff_releases"]

_ORDER = {category: index for index, category in enumerate(Category)}
#: The categories a change can take, in the order a diff lists them (a diff neither judges
#: uses nor lists the unchanged).
DIFF_CATEGORIES = (Category.BREAKS, Category.BEHAVIOUR, Category.DETERMINISM, Category.AVAILABLE)


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


def _sort_key(change: Change) -> tuple[int, Version, str, str, str]:
    release = Version(change.release) if change.release else Version("0")
    return _ORDER[change.category], release, change.subject, change.kind, change.detail


def importers(keys: Iterable[Key]) -> dict[str, list[str]]:
    """Name -> every module whose binding of a name so spelled changed between the two
    releases, in the order ``keys`` give them (shortest module first).

    :func:`changed_keys` gives a name's keys in every module where its record differs,
    and a changed definition changes the record of every module that re-exports it; so
    the modules binding one definition whose change is listed are all here, read off the
    keys the diff walks anyway (:meth:`~fi_compat.upgrade._change.Comparing.bindings`
    keeps those of the definition).
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
        if not facts.get(("reach_measured",)):
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
        tuple(sorted(differ.changes, key=_sort_key)),
        tuple(notes),
    )
