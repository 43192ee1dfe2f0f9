"""The probe's findings as a report: a JSON-ready dict, readable text, and ``--require``.

Data flows one way: :mod:`fi_compat.capabilities` probes, this module describes, and
:mod:`fi_compat.cli` prints.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from fi_compat._arguments import require_instance, require_str, require_strs
from fi_compat._signature import Shape, Status, Support
from fi_compat._surface import (
    ATTENTION_FAMILIES,
    COMM,
    DECODE,
    FLASHINFER,
    GATES,
    LEGACY_FUSION,
    PLAN,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
)
from fi_compat.attention import _reach
from fi_compat.attention._served import (
    Served,
    deterministic_answers,
    deterministic_names,
    deterministic_support,
)
from fi_compat.attention._vouch import deterministic_feature
from fi_compat.capabilities import ATTENTION_PROBES, COMM_PROBES, Capabilities
from fi_compat.comm._factory import dropin_feature
from fi_compat.comm._sizes import SIZE_KINDS, size_feature, size_support
from fi_compat.comm._taken import (
    CHECKPOINT_KINDS,
    DROPIN_ARGUMENTS,
    checkpoint_feature,
    checkpoint_support,
    dropin_support,
)
from fi_compat.errors import UnknownRequirementError, explain
from fi_compat.hazards import hazards

__all__ = [
    "REQUIREMENTS",
    "REQUIREMENT_NAMES",
    "UnknownRequirementError",
    "build_report",
    "missing",
    "parse_requirements",
    "render_text",
]


def __dir__() -> list[str]:
    return list(__all__)


REQUIREMENTS: Mapping[str, tuple[tuple[str, str, str], ...]] = MappingProxyType(
    {
        gate.key: tuple(
            ("comm" if owner in COMM_PROBES else "attention", owner, str(keyword))
            for owner, keyword in gate.items
        )
        for gate in GATES.values()
        if gate.keyword
    }
)
"""``--require`` short names and the probed items each one stands for, as
``(section, owner, keyword)``: the keyword gates of :data:`fi_compat._surface.GATES`.

.. versionadded:: 0.2.0
"""

#: ``--require`` names that are flags rather than keyword arguments.
_FLAGS = ("flashinfer", "comm", "unified_api", "legacy_api")

#: The answer tables the report prints, each with the prefix its ``signatures`` section
#: puts before an owner: ``(section, prefix, {owner: keywords})``.
_COMM_PREFIX = f"{COMM}."
_ATTENTION_PREFIX = f"{FLASHINFER}."
_TABLES: tuple[tuple[str, str, Mapping[str, tuple[str, ...]]], ...] = (
    ("comm", _COMM_PREFIX, COMM_PROBES),
    ("attention", _ATTENTION_PREFIX, ATTENTION_PROBES),
)

_BCAST = "bcast_root_is_group_local"


def _requirement_names() -> dict[str, tuple[tuple[str, str, str], ...]]:
    names: dict[str, tuple[tuple[str, str, str], ...]] = dict(REQUIREMENTS)
    names.update({flag: (("flag", flag, ""),) for flag in _FLAGS})
    names[_BCAST] = (("bcast", _BCAST, ""),)
    names.update({dropin_feature(name): (("dropin", name, ""),) for name in DROPIN_ARGUMENTS})
    for section, named in (
        ("sizes", [size_feature(kind) for kind in SIZE_KINDS]),
        ("checkpoint", [checkpoint_feature(kind) for kind in CHECKPOINT_KINDS]),
        ("deterministic", deterministic_names()),
    ):
        names.update({name: ((section, name, ""),) for name in named})
    for section, prefix, table in _TABLES:
        for owner, keywords in table.items():
            for keyword in keywords:
                item = ((section, owner, keyword),)
                names[f"{owner}.{keyword}"] = item
                names[f"{prefix}{owner}.{keyword}"] = item
    return names


REQUIREMENT_NAMES: Mapping[str, tuple[tuple[str, str, str], ...]] = MappingProxyType(
    _requirement_names()
)
"""Every name ``--require`` accepts, and the items each stands for: the short names of
:data:`REQUIREMENTS`, the flags ``flashinfer``, ``comm``, ``unified_api`` and
``legacy_api``, ``bcast_root_is_group_local``, and ``<owner>.<keyword>`` for every answer
the report prints, bare (as in its ``comm`` and ``attention`` tables) and qualified (as in
its ``signatures`` section, e.g.
``flashinfer.comm.allreduce_fusion.trigger_completion_at_end``), and
``dropin:allreduce_fusion.<argument>`` for each argument of fi-compat's drop-in
``allreduce_fusion`` (met where a non-default value runs on the installed release),
``per_call_sizes:<kind>`` and ``checkpointing:<kind>`` for each kind of fused workspace
(``trtllm``, ``mnnvl``, ``mnnvl-cutedsl``, ``legacy``; met where such a workspace serves
calls of other sizes than its own, or has FlashInfer's ``checkpoint_prepare`` and
``checkpoint_restore``), and ``deterministic:<Family>:<backend>`` for each wrapper family
and backend the split-reach measurement lists in some release (``default`` for a class
without ``backend=``, ``fast_decode_plan`` for the decode fast plan; met exactly where
:func:`fi_compat.attention.deterministic_wrapper` serves a wrapper of that family built
with that backend, and ``use_tensor_cores=True`` for decode). Each is the ``feature`` of
the typed error the refusal raises. The JSON report's ``requirements`` lists every one
with its answer. Nothing else. (``per_call_sizes:``, ``checkpointing:`` and
``deterministic:`` names since fi-compat 0.3.0.)

.. versionadded:: 0.2.0
"""


def _check_capabilities(capabilities: object) -> None:
    require_instance(
        "capabilities",
        capabilities,
        Capabilities,
        "a Capabilities",
        fix="pass fi_compat.get_capabilities()",
    )


def _shape_dict(shape: Shape) -> dict[str, Any]:
    return {
        "keywords": sorted(shape.keywords) if shape.keywords is not None else None,
        "via": list(shape.via),
        "open_ended": shape.open_ended,
        "error": shape.error,
    }


def _answers(table: Mapping[str, Mapping[str, Support]]) -> dict[str, dict[str, dict[str, str]]]:
    return {
        owner: {keyword: support.to_dict() for keyword, support in answers.items()}
        for owner, answers in table.items()
    }


#: Every family the split-reach section lists, the decode fast plan last.
_REACH_FAMILIES: tuple[str, ...] = (*ATTENTION_FAMILIES, _reach.FAST_DECODE_PLAN)


def _split_reach(capabilities: Capabilities, served: Mapping[str, Served]) -> dict[str, Any]:
    """Per family and backend, what the measurement of the installed release saw the
    settings do, and what a deterministic run gets (``served`` or ``refused``, and why)."""
    release = capabilities.flashinfer.version
    families: dict[str, Any] = {}
    for family in _REACH_FAMILIES:
        facts = _reach.family_reach(release, family)
        if facts is None:
            continue
        backends: dict[str, Any] = {}
        for backend, answer in facts.backends.items():
            run = served[deterministic_feature(family, backend)]
            backends[backend] = {
                "verdict": str(answer.verdict),
                "detail": answer.detail,
                "deterministic": "served" if run.served else "refused",
                "why": run.why,
            }
        families[family] = {"plan_takes": facts.plan_takes, "backends": backends}
    return {"measured": bool(families), "release": release, "families": families}


def build_report(capabilities: Capabilities) -> dict[str, Any]:
    """Everything the probe found, as plain JSON-ready data.

    .. versionadded:: 0.2.0

    Raises
    ------
    InvalidArgumentError
        ``capabilities`` is not a :class:`~fi_compat.capabilities.Capabilities`.
    """
    _check_capabilities(capabilities)
    info = capabilities.flashinfer
    comm = capabilities.comm
    return {
        "fi_compat": {"version": capabilities.fi_compat_version},
        "flashinfer": {
            "installed": info.installed,
            "version": info.version,
            "source_build": info.source_build,
            "import_error": info.import_error,
            "location": info.location,
        },
        "torch": {
            "version": capabilities.torch.version,
            "cuda_available": capabilities.torch.cuda_available,
            "cuda_version": capabilities.torch.cuda_version,
        },
        "comm": {
            "available": comm.available,
            "error": comm.error,
            "unified_api": comm.unified_api,
            "legacy_api": comm.legacy_api,
            "kwargs": _answers(comm.kwargs),
            "torch_dist_backend": comm.torch_dist_backend,
            "bcast_root_is_group_local": comm.bcast_root_is_group_local.to_dict(),
        },
        "attention": _answers(capabilities.attention),
        "split_reach": _split_reach(capabilities, deterministic_answers(capabilities)),
        "signatures": {
            f"{prefix}{name}": _shape_dict(shape)
            for prefix, shapes in (
                (_COMM_PREFIX, comm.shapes),
                (_ATTENTION_PREFIX, capabilities.attention_shapes),
            )
            for name, shape in shapes.items()
        },
        "hazards": [hazard.to_dict() for hazard in hazards(capabilities)],
        "requirements": _requirements(capabilities),
    }


def _unknown_requirement(name: str) -> UnknownRequirementError:
    short = ", ".join([*REQUIREMENTS, *_FLAGS, _BCAST])
    what = f"unknown requirement {name!r}" + (" (an empty item)" if not name else "")
    return UnknownRequirementError(
        explain(
            f"a name that fi-compat report prints: {short}, <owner>.<keyword> from its "
            "comm, attention or signatures section, such as "
            f"{DECODE.key}.{PLAN}.fixed_split_size or "
            f"{UNIFIED_FUSION.dotted}.trigger_completion_at_end, or "
            f"{dropin_feature('<argument>')} for an argument of fi-compat's drop-in "
            f"{UNIFIED_FUSION.key}, {size_feature('<kind>')} or {checkpoint_feature('<kind>')} "
            f"for a kind of workspace ({', '.join(SIZE_KINDS)}), or "
            f"{deterministic_feature('<Family>', '<backend>')} for a family and backend "
            "of its split-reach section",
            what,
            fix="spell the name as fi-compat report prints it, one per comma-separated item",
        )
    )


def parse_requirements(text: str) -> list[str]:
    """The names in a comma-separated ``--require`` value, checked against the table.

    An empty ``text`` names nothing; an empty item (``"group,,comm"``) is an error.

    .. versionadded:: 0.2.0

    Raises
    ------
    UnknownRequirementError
        For an empty item or a name not in :data:`REQUIREMENT_NAMES`.
    InvalidArgumentError
        ``text`` is not a str.
    """
    require_str("the --require value", text)
    if text == "":
        return []
    names = [item.strip() for item in text.split(",")]
    for name in names:
        if name not in REQUIREMENT_NAMES:
            raise _unknown_requirement(name)
    return names


def _lookup(capabilities: Capabilities, section: str, owner: str, keyword: str) -> Support:
    if section == "bcast":
        return capabilities.comm.bcast_root_is_group_local
    table = capabilities.comm.kwargs if section == "comm" else capabilities.attention
    return table[owner][keyword]


def missing(capabilities: Capabilities, names: Iterable[str]) -> list[str]:
    """The requirements among ``names`` that the installed FlashInfer does not meet.

    Each entry says what is missing and why. ``unknown`` counts as missing: CI that
    requires a capability must not pass on a guess.

    .. versionadded:: 0.2.0

    Raises
    ------
    UnknownRequirementError
        For a name that is not in :data:`REQUIREMENT_NAMES` (an empty one included).
    InvalidArgumentError
        ``capabilities`` is not a :class:`~fi_compat.capabilities.Capabilities`, or
        ``names`` is a str or holds something that is not one.
    """
    _check_capabilities(capabilities)
    names = require_strs("names", names)
    flags = _flags(capabilities)
    named = _Named(capabilities)
    lacking: list[str] = []
    for raw in names:
        name = raw.strip()
        if name not in REQUIREMENT_NAMES:
            raise _unknown_requirement(name)
        lacking += _lacking(capabilities, name, flags, named)
    return lacking


_Flags = dict[str, tuple[bool, str | None]]

#: The answer function of each section whose requirements are computed together.
_NAMED: Mapping[str, Callable[[Capabilities], Mapping[str, Support]]] = MappingProxyType(
    {
        "dropin": dropin_support,
        "sizes": size_support,
        "checkpoint": checkpoint_support,
        "deterministic": deterministic_support,
    }
)


class _Named:
    """The answers of :data:`_NAMED`'s sections, each computed once, when first asked."""

    def __init__(self, capabilities: Capabilities) -> None:
        self._capabilities = capabilities
        self._answers: dict[str, Mapping[str, Support]] = {}

    def __call__(self, section: str, name: str) -> Support:
        answers = self._answers.get(section)
        if answers is None:
            answers = self._answers[section] = _NAMED[section](self._capabilities)
        return answers[name]


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
        "unified_api": (comm.unified_api, comm.error or f"no {UNIFIED_FACTORY.key}"),
        "legacy_api": (comm.legacy_api, comm.error or f"no {LEGACY_FUSION.key}"),
    }


def _lacking(
    capabilities: Capabilities,
    name: str,
    flags: _Flags,
    named: _Named,
) -> list[str]:
    """What requirement ``name`` (a key of :data:`REQUIREMENT_NAMES`) lacks; empty if met."""
    lacking: list[str] = []
    for section, owner, keyword in REQUIREMENT_NAMES[name]:
        if section == "flag":
            present, why = flags[owner]
            if not present:
                lacking.append(f"{owner}: unavailable ({why})")
            continue
        if section in _NAMED:
            support = named(section, dropin_feature(owner) if section == "dropin" else owner)
            if not support.supported:
                lacking.append(f"{name}: {support.status.value} ({support.reason})")
            continue
        support = _lookup(capabilities, section, owner, keyword)
        if support.status is Status.SUPPORTED:
            continue
        if section == "bcast":
            lacking.append(f"{owner}: {support.status.value} ({support.reason})")
            continue
        gate = GATES.get(keyword)
        since = f"; needs FlashInfer {gate.introduced_in}+" if gate else ""
        lacking.append(f"{owner}({keyword}=): {support.status.value} ({support.reason}{since})")
    return lacking


def _requirements(capabilities: Capabilities) -> dict[str, dict[str, str]]:
    """Every name ``--require`` accepts, with what it would answer: met or missing, and why."""
    flags = _flags(capabilities)
    named = _Named(capabilities)
    answers = {}
    for name in REQUIREMENT_NAMES:
        lacking = _lacking(capabilities, name, flags, named)
        answers[name] = (
            {"status": "missing", "reason": "; ".join(lacking)}
            if lacking
            else {"status": "met", "reason": ""}
        )
    return answers


def _render_dropin(capabilities: Capabilities) -> list[str]:
    """The drop-in ``allreduce_fusion``'s arguments that a non-default value cannot take."""
    refused = [
        f"    {name.rpartition('.')[2]:<26} {support.status.value:<12} {support.reason}"
        for name, support in dropin_support(capabilities).items()
        if not support.supported
    ]
    head = f"  {dropin_feature('<argument>')}"
    if not refused:
        return [f"{head}  every argument runs"]
    return [f"{head}  a non-default value of these is refused:", *refused]


def _render_kinds(head: str, answers: Mapping[str, Support]) -> list[str]:
    """One line per kind of workspace: its answer and why."""
    lines = [f"  {head}"]
    for name, support in answers.items():
        kind = name.partition(":")[2]
        lines.append(f"    {kind:<26} {support.status.value:<12} {support.reason}")
    return lines


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _render_reach(capabilities: Capabilities) -> list[str]:
    """The split-reach section: per family and backend, what a deterministic run gets."""
    release = capabilities.flashinfer.version
    section = _split_reach(capabilities, deterministic_answers(capabilities))
    lines = [
        "",
        "deterministic runs, per family and backend "
        f"({deterministic_feature('<Family>', '<backend>')}; measured split reach)",
    ]
    if not section["measured"]:
        return [
            *lines,
            f"  flashinfer {release or 'unknown'} was not measured: a deterministic planner "
            "or wrapper refuses every wrapper",
        ]
    for family, facts in section["families"].items():
        lines.append(f"  {family}")
        for backend, answer in sorted(facts["backends"].items()):
            lines.append(f"    {backend:<20} {answer['deterministic']:<8} {answer['why']}")
    return lines


def render_text(capabilities: Capabilities) -> str:
    """The report for people.

    .. versionadded:: 0.2.0

    Raises
    ------
    InvalidArgumentError
        ``capabilities`` is not a :class:`~fi_compat.capabilities.Capabilities`.
    """
    _check_capabilities(capabilities)
    info = capabilities.flashinfer
    comm = capabilities.comm
    torch = capabilities.torch
    lines = [f"fi-compat {capabilities.fi_compat_version}", ""]
    if not info.installed:
        lines.append("flashinfer        not installed")
    else:
        version = info.version or "unknown version"
        if info.source_build:
            version += " (source build: version not trusted)"
        lines.append(f"flashinfer        {version}")
        if info.location:
            lines.append(f"                  {info.location}")
        if info.import_error:
            lines.append(f"  import error:   {info.import_error}")
    lines.append(
        f"torch             {torch.version or 'not installed'}"
        f"  (CUDA available: {_yes(torch.cuda_available)}"
        + (f", CUDA {torch.cuda_version}" if torch.cuda_version else "")
        + ")"
    )
    lines += ["", f"{COMM:<17} {'available' if comm.available else 'unavailable'}"]
    if comm.error:
        lines.append(f"  error:          {comm.error}")
    lines.append(
        f"  unified API: {_yes(comm.unified_api)}    legacy API: {_yes(comm.legacy_api)}"
        f"    {TORCH_DIST_BACKEND.key}: {comm.torch_dist_backend or 'none'}"
    )
    for title, table in (("", comm.kwargs), ("attention", capabilities.attention)):
        if title:
            lines += ["", title]
        for owner, answers in table.items():
            lines.append(f"  {owner}")
            for keyword, support in answers.items():
                lines.append(f"    {keyword:<26} {support.status.value:<12} {support.reason}")
        if not title:
            lines += _render_dropin(capabilities)
            lines += _render_kinds(
                f"{size_feature('<kind>')}  calls of other sizes than the workspace's:",
                size_support(capabilities),
            )
            lines += _render_kinds(
                f"{checkpoint_feature('<kind>')}  checkpoint_prepare/checkpoint_restore:",
                checkpoint_support(capabilities),
            )
    lines += _render_reach(capabilities) if info.installed else []
    found = hazards(capabilities)
    lines += ["", "hazards" if found else "hazards           none known"]
    lines += [f"  [{hazard.severity.value}] {hazard.id}: {hazard.message}" for hazard in found]
    return "\n".join(lines) + "\n"
