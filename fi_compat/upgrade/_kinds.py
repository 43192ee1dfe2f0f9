"""The one vocabulary of the upgrade preview: categories and kinds, for ``diff`` and ``scan``.

A :class:`~fi_compat.upgrade.Change` of ``fi-compat diff`` and a
:class:`~fi_compat.upgrade.Finding` of ``fi-compat scan`` say the same fact in the same words:
each has a :class:`Category` (how it touches an engine's code) and a kind, the id of a
:class:`Rule` in :data:`RULES` (what changed). ``diff`` says it of a release's name, ``scan``
of an engine's use of it; a kind either command cannot give says so in :attr:`Rule.commands`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["RULES", "Category", "Rule", "as_json"]


class Category(str, enum.Enum):
    """How a change, or what a use meets on the new release, touches an engine's code, most
    severe first.

    .. versionadded:: 0.3.0
    """

    #: Fails on the new release (a missing name, method or keyword): exit status 1.
    BREAKS = "breaks"
    #: Runs, and does something else (a guard flips, a default or a mapping changes).
    BEHAVIOUR = "changes behaviour"
    #: An attention backend stops handing the split settings to the kernel.
    DETERMINISM = "loses determinism"
    #: The records or the reading cannot tell what the use meets (the message says why):
    #: never a break, never a pass.
    UNVERIFIED = "unverified"
    #: Something the old release lacked, which the code uses, is there now.
    AVAILABLE = "newly available"
    #: The same on both releases.
    UNCHANGED = "unchanged"

    def __str__(self) -> str:
        return self.value

    @property
    def key(self) -> str:
        """The category's one-word name: the JSON ``summary`` key and what ``--category``
        takes (``breaks``, ``behaviour``, ``determinism``, ``unverified``, ``available``,
        ``unchanged``)."""
        return self.name.lower()


@dataclass(frozen=True)
class Rule:
    """One kind of change: its id (a change's ``kind``, a finding's ``rule`` and its SARIF
    ``ruleId``), what it says, the categories it takes (the first gives the SARIF rule's
    default level) and the commands that give it (``"diff"``, ``"scan"``).

    .. versionadded:: 0.3.0
    """

    id: str
    summary: str
    categories: tuple[Category, ...]
    commands: tuple[str, ...] = ("diff", "scan")


_B, _C, _D, _V, _A, _U = (
    Category.BREAKS,
    Category.BEHAVIOUR,
    Category.DETERMINISM,
    Category.UNVERIFIED,
    Category.AVAILABLE,
    Category.UNCHANGED,
)
_DIFF, _SCAN = ("diff",), ("scan",)

#: Every kind, by id.
RULES: dict[str, Rule] = {
    rule.id: rule
    for rule in (
        Rule(
            "name-missing",
            "A module, name, method or enum member is missing on the new release: importing "
            "or reading it raises ImportError or AttributeError (behaviour only where the "
            "scanned code catches it or tests it with hasattr)",
            (_B, _C),
        ),
        Rule(
            "name-added",
            "A module, name, method or enum member the old release lacks is there on the new one",
            (_A,),
        ),
        Rule(
            "name-moved",
            "A name is now defined in another module: importing it still works, its "
            "__module__ (and what pickles record) changes",
            (_C,),
        ),
        Rule("name-kind", "A name is now another kind of object", (_B,), _DIFF),
        Rule(
            "name-conditional",
            "A name is now bound only when a guarded import succeeds, or now always",
            (_C,),
            _DIFF,
        ),
        Rule(
            "keyword-missing",
            "A callable no longer takes a keyword: a call passing it raises TypeError "
            "(behaviour where its **kwargs still takes it, or where the scanned code "
            "catches the TypeError)",
            (_B, _C),
        ),
        Rule(
            "keyword-added",
            "A callable takes a keyword (or *args, **kwargs) the old release does not",
            (_A,),
        ),
        Rule(
            "keyword-unverified",
            "A keyword now reaches only a **kwargs whose use the record cannot prove",
            (_C,),
            _SCAN,
        ),
        Rule(
            "parameter-renamed",
            "A parameter keeps its position, kind and default under another name: calls "
            "passing the old name raise TypeError",
            (_B,),
            _DIFF,
        ),
        Rule(
            "required-missing",
            "A parameter is now required (new without a default, or its default gone): a "
            "call that does not pass it raises TypeError",
            (_B,),
        ),
        Rule("parameter-optional", "A required parameter now has a default", (_A,), _DIFF),
        Rule(
            "parameter-kind",
            "A parameter is now positional-only, keyword-only, or otherwise of another kind",
            (_B,),
            _DIFF,
        ),
        Rule(
            "default-changed",
            "A parameter's default changed (for a call that leaves it out)",
            (_C,),
        ),
        Rule(
            "positional-shift",
            "The positional parameters are in another order: a positional argument lands on "
            "another parameter",
            (_B,),
        ),
        Rule(
            "kwargs-removed",
            "A callable no longer takes **kwargs: keywords it does not declare raise TypeError",
            (_B,),
            _DIFF,
        ),
        Rule("member-value", "An enum member has another value", (_C,), _DIFF),
        Rule(
            "import-hazard",
            "An import meets an import hazard (CUDA runtime, triton, GPU query, Python "
            "version) on one release only (behaviour where it ends, or where the scanned "
            "code catches it)",
            (_B, _C),
        ),
        Rule("backend-added", "A family has a new measured attention backend", (_A,), _DIFF),
        Rule(
            "backend-missing",
            "An attention backend is not a (measured) backend of its family on the new release",
            (_B,),
        ),
        Rule(
            "split-lost",
            "The backend stops handing fixed_split_size/disable_split_kv to the kernel",
            (_D,),
        ),
        Rule("split-gained", "The backend starts handing the split settings on", (_A,)),
        Rule(
            "split-changed",
            "A backend's split-reach verdict changed otherwise (e.g. unmeasured to dropped)",
            (_C,),
            _DIFF,
        ),
        Rule("default-backend", "A family's default backend changed", (_C,), _DIFF),
        Rule(
            "mapping-changed",
            "What fi-compat does for the release changed (group=, weight_bias, ...)",
            (_C,),
            _DIFF,
        ),
        Rule(
            "guard-flips",
            "A hasattr/getattr guard answers otherwise on the new release",
            (_C, _A),
            _SCAN,
        ),
        Rule(
            "signature-probe",
            "An inspect.signature probe answers otherwise on the new release",
            (_C,),
            _SCAN,
        ),
        Rule(
            "fi-compat-maps",
            "After the swap to fi_compat.comm, fi-compat serves or maps what the release lacks",
            (_C, _U),
            _SCAN,
        ),
        Rule(
            "fi-compat-refuses",
            "After the swap to fi_compat.comm, fi-compat raises a typed error for it",
            (_B, _C),
            _SCAN,
        ),
        Rule(
            "unverified",
            "A use the records cannot judge on one release or both, or a call whose ** "
            "keywords the reading cannot see: the reason is said",
            (_V,),
            _SCAN,
        ),
        Rule(
            "unchanged",
            "The use meets the same on both releases (a failure included: not this bump's)",
            (_U,),
            _SCAN,
        ),
    )
}
"""Every kind of ``fi-compat diff`` and rule of ``fi-compat scan``, by id; the upgrade guide
has a table of them.

.. versionadded:: 0.3.0
"""


def as_json(record: Any) -> dict[str, Any]:
    """A record's fields (a :class:`~fi_compat.upgrade.Change`, a
    :class:`~fi_compat.upgrade.Finding`, a :class:`~fi_compat.upgrade.Diagnostic`) as its
    JSON object: in field order, a :class:`Category` as its value, a tuple as a list."""
    return {item.name: _json(getattr(record, item.name)) for item in fields(record)}


def _json(value: Any) -> Any:
    if isinstance(value, Category):
        return value.value
    return list(value) if isinstance(value, tuple) else value
