"""The ``--require`` table and its answers, for :mod:`fi_compat.report`.

Every name ``fi-compat report --require`` accepts, the items each stands for as
``(section, owner, keyword)``, and what each answers on the installed release: met, or what
is missing and why. The names are spelled by :mod:`~fi_compat._requirements.names`; the
answers of the named sections come from :mod:`~fi_compat._requirements.comm` and
:mod:`~fi_compat._requirements.attention`. :mod:`fi_compat.report` publishes the table
(:data:`fi_compat.report.REQUIREMENT_NAMES`) and documents it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from fi_compat._requirements.attention import (
    deterministic_names,
    deterministic_support,
    fast_plan_support,
)
from fi_compat._requirements.comm import (
    DROPIN_ARGUMENTS,
    FACTORY_OPTIONS,
    PATTERN_MEMBERS,
    api_call_gap,
    checkpoint_support,
    dropin_support,
    factory_support,
    pattern_support,
    reference_support,
    size_support,
    torch_distributed_support,
)
from fi_compat._requirements.names import (
    BCAST,
    CHECKPOINT_KINDS,
    FAST_PLAN,
    FLAGS,
    GATE_ITEMS,
    LEGACY_API,
    SIZE_KINDS,
    TORCH_DISTRIBUTED,
    UNIFIED_API,
    checkpoint_feature,
    deterministic_feature,
    dropin_feature,
    factory_feature,
    keyword_features,
    pattern_feature,
    reference_feature,
    size_feature,
)
from fi_compat._signature import Status, Support
from fi_compat._surface import (
    COMM,
    DECODE,
    FLASHINFER,
    GATES,
    LEGACY_FUSION,
    PLAN,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
)
from fi_compat.capabilities import ATTENTION_PROBES, COMM_PROBES, Capabilities
from fi_compat.errors import UnknownRequirementError, explain

__all__ = [
    "GATE_REQUIREMENTS",
    "Answers",
    "ProbedItem",
    "answers",
    "lacking",
    "requirement_names",
    "unknown_requirement",
]

#: One probed item a name stands for: ``(section, owner, keyword)``.
ProbedItem = tuple[str, str, str]

GATE_REQUIREMENTS: Mapping[str, tuple[ProbedItem, ...]] = MappingProxyType(
    {
        name: tuple(
            ("comm" if owner in COMM_PROBES else "attention", owner, keyword)
            for owner, keyword in pairs
        )
        for name, pairs in GATE_ITEMS.items()
    }
)
"""The keyword gates' short names (``fi_compat.report.REQUIREMENTS``)."""

#: Names of one answer each, not of a family: the decode fast plan, and torch.distributed
#: (a reference workspace of several processes needs it).
_SINGLE = (FAST_PLAN, TORCH_DISTRIBUTED)

#: The answer tables the report prints, each with the prefix its ``signatures`` section
#: puts before an owner: ``(section, prefix, {owner: keywords})``.
_TABLES: tuple[tuple[str, str, Mapping[str, tuple[str, ...]]], ...] = (
    ("comm", f"{COMM}.", COMM_PROBES),
    ("attention", f"{FLASHINFER}.", ATTENTION_PROBES),
)


def requirement_names() -> dict[str, tuple[ProbedItem, ...]]:
    """Every ``--require`` name -> the items it stands for (the named sections' items are
    ``(section, name, "")``)."""
    names: dict[str, tuple[ProbedItem, ...]] = dict(GATE_REQUIREMENTS)
    names.update({flag: (("flag", flag, ""),) for flag in FLAGS})
    names[BCAST] = (("bcast", BCAST, ""),)
    for section, named in (
        ("dropin", [dropin_feature(name) for name in DROPIN_ARGUMENTS]),
        ("factory", [factory_feature(name) for name in FACTORY_OPTIONS]),
        ("pattern", [pattern_feature(member) for member in PATTERN_MEMBERS]),
        ("reference", [reference_feature(member) for member in PATTERN_MEMBERS]),
        ("sizes", [size_feature(kind) for kind in SIZE_KINDS]),
        ("checkpoint", [checkpoint_feature(kind) for kind in CHECKPOINT_KINDS]),
        ("deterministic", deterministic_names()),
        ("single", _SINGLE),
    ):
        names.update({name: ((section, name, ""),) for name in named})
    for section, prefix, table in _TABLES:
        for owner, keywords in table.items():
            for keyword in keywords:
                item = ((section, owner, keyword),)
                names.update(dict.fromkeys(keyword_features(prefix, owner, keyword), item))
    return names


def unknown_requirement(name: str) -> UnknownRequirementError:
    """The error for a ``--require`` name that is not in the table, naming what was given."""
    short = ", ".join([*GATE_REQUIREMENTS, *FLAGS, BCAST, *_SINGLE])
    what = f"unknown requirement {name!r}" + (" (an empty item)" if not name else "")
    return UnknownRequirementError(
        explain(
            f"a name that fi-compat report prints: {short}, <owner>.<keyword> from its "
            "comm, attention or signatures section, such as "
            f"{DECODE.key}.{PLAN}.fixed_split_size or "
            f"{UNIFIED_FUSION.dotted}.trigger_completion_at_end, "
            f"{dropin_feature('<argument>')} or {factory_feature('<option>')} for an "
            f"argument of fi-compat's drop-in {UNIFIED_FUSION.key} or an option of its "
            f"{UNIFIED_FACTORY.key}, {pattern_feature('<member>')} or "
            f"{reference_feature('<member>')} for a fusion pattern, "
            f"{size_feature('<kind>')} or {checkpoint_feature('<kind>')} for a kind of "
            f"workspace ({', '.join(SIZE_KINDS)}), or "
            f"{deterministic_feature('<Family>', '<backend>')} for a family and backend "
            "of its split-reach section",
            what,
            fix="spell the name as fi-compat report prints it, one per comma-separated item",
        )
    )


def _single_support(caps: Capabilities) -> Mapping[str, Support]:
    return {
        FAST_PLAN: fast_plan_support(caps),
        TORCH_DISTRIBUTED: torch_distributed_support(caps),
    }


#: The answer function of each section whose requirements are computed together.
_NAMED: Mapping[str, Callable[[Capabilities], Mapping[str, Support]]] = MappingProxyType(
    {
        "dropin": dropin_support,
        "factory": factory_support,
        "pattern": pattern_support,
        "reference": reference_support,
        "sizes": size_support,
        "checkpoint": checkpoint_support,
        "deterministic": deterministic_support,
        "single": _single_support,
    }
)

_Flags = dict[str, tuple[bool, str | None]]


def _api_flag(caps: Capabilities, flag: str, present: bool, absent_why: str) -> tuple[bool, str]:
    """An API flag: present, and its fused call takes what fi-compat passes."""
    if not present:
        return False, caps.comm.error or absent_why
    gap = api_call_gap(caps, flag)
    return (gap is None), gap or ""


def _flags(capabilities: Capabilities) -> _Flags:
    comm = capabilities.comm
    return {
        "flashinfer": (
            capabilities.flashinfer.importable,
            capabilities.flashinfer.import_error
            or ("the probe is still running" if capabilities.flashinfer.probe_in_progress else None)
            or "not installed",
        ),
        "comm": (comm.available, comm.error),
        UNIFIED_API: _api_flag(
            capabilities, UNIFIED_API, comm.unified_api, f"no {UNIFIED_FACTORY.key}"
        ),
        LEGACY_API: _api_flag(capabilities, LEGACY_API, comm.legacy_api, f"no {LEGACY_FUSION.key}"),
    }


class Answers:
    """What each requirement of one :class:`~fi_compat.capabilities.Capabilities` answers;
    each named section computed once, when first asked."""

    def __init__(self, capabilities: Capabilities) -> None:
        self.capabilities = capabilities
        self.flags = _flags(capabilities)
        self._answers: dict[str, Mapping[str, Support]] = {}

    def named(self, section: str, name: str) -> Support:
        """The answer for ``name`` of the named section ``section``."""
        answers = self._answers.get(section)
        if answers is None:
            answers = self._answers[section] = _NAMED[section](self.capabilities)
        return answers[name]


def _lookup(capabilities: Capabilities, section: str, owner: str, keyword: str) -> Support:
    if section == "bcast":
        return capabilities.comm.bcast_root_is_group_local
    table = capabilities.comm.kwargs if section == "comm" else capabilities.attention
    return table[owner][keyword]


def lacking(name: str, state: Answers) -> list[str]:
    """What requirement ``name`` (a key of :func:`requirement_names`) lacks; empty if met."""
    capabilities = state.capabilities
    found: list[str] = []
    for section, owner, keyword in _NAMES[name]:
        if section == "flag":
            present, why = state.flags[owner]
            if not present:
                found.append(f"{owner}: unavailable ({why})")
            continue
        if section in _NAMED:
            support = state.named(section, owner)
            if not support.supported:
                found.append(f"{name}: {support.status.value} ({support.reason})")
            continue
        support = _lookup(capabilities, section, owner, keyword)
        if support.status is Status.SUPPORTED:
            continue
        if section == "bcast":
            found.append(f"{owner}: {support.status.value} ({support.reason})")
            continue
        gate = GATES.get(keyword)
        since = f"; needs FlashInfer {gate.introduced_in}+" if gate else ""
        found.append(f"{owner}({keyword}=): {support.status.value} ({support.reason}{since})")
    return found


def answers(capabilities: Capabilities) -> dict[str, dict[str, str]]:
    """Every name ``--require`` accepts, with what it would answer: met or missing, and why."""
    state = Answers(capabilities)
    result = {}
    for name in _NAMES:
        found = lacking(name, state)
        result[name] = (
            {"status": "missing", "reason": "; ".join(found)}
            if found
            else {"status": "met", "reason": ""}
        )
    return result


_NAMES: Mapping[str, tuple[ProbedItem, ...]] = MappingProxyType(requirement_names())
