"""The probe's findings as a report: a JSON-ready dict, readable text, and ``--require``.

Data flows one way: :mod:`fi_compat.capabilities` probes, this module describes, and
:mod:`fi_compat.cli` prints.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from fi_compat._arguments import describe, require_instance, require_str, require_strs
from fi_compat._measured import why_unmeasured
from fi_compat._requirements import table as _requirements
from fi_compat._requirements.attention import Served, deterministic_answers
from fi_compat._requirements.comm import (
    checkpoint_support,
    dropin_support,
    factory_support,
    passed_through,
    pattern_support,
    size_support,
)
from fi_compat._requirements.names import (
    checkpoint_feature,
    deterministic_feature,
    dropin_feature,
    factory_feature,
    pattern_feature,
    size_feature,
)
from fi_compat._signature import Shape, Support
from fi_compat._surface import (
    ATTENTION_FAMILIES,
    COMM,
    FLASHINFER,
    TORCH_DIST_BACKEND,
)
from fi_compat.attention import _reach
from fi_compat.capabilities import Capabilities
from fi_compat.errors import InvalidArgumentError, UnknownRequirementError, explain
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


REQUIREMENTS: Mapping[str, tuple[tuple[str, str, str], ...]] = _requirements.GATE_REQUIREMENTS
"""``--require`` short names and the probed items each one stands for, as
``(section, owner, keyword)``: the keyword gates of :data:`fi_compat._surface.GATES`.

.. versionadded:: 0.2.0
"""

REQUIREMENT_NAMES: Mapping[str, tuple[tuple[str, str, str], ...]] = MappingProxyType(
    _requirements.requirement_names()
)
"""Every name ``--require`` accepts, and the items each stands for: the short names of
:data:`REQUIREMENTS`, the flags ``flashinfer``, ``comm``, ``unified_api`` and
``legacy_api`` (an API is missing too where its fused call's probed signature lacks a
keyword fi-compat passes: a source build with another signature, refused when a workspace
is created), ``bcast_root_is_group_local``, and ``<owner>.<keyword>`` for every answer
the report prints, bare (as in its ``comm`` and ``attention`` tables) and qualified (as in
its ``signatures`` section, e.g.
``flashinfer.comm.allreduce_fusion.trigger_completion_at_end``); and, each the ``feature``
of the typed error the refusal it foretells raises:

- ``dropin:allreduce_fusion.<argument>`` for each argument of fi-compat's drop-in
  ``allreduce_fusion`` (met where a non-default value runs on the installed release);
- ``dropin:create_allreduce_fusion_workspace.<option>`` for each option of the drop-in
  factory (``gpus_per_node``, ``comm_backend``, ``force_oneshot_support``, ``group`` and
  the keyword-only options of FlashInfer 0.7.2.post1; met where the factory the drop-in
  picks takes a non-default value: the unified one as its probed signature says, the
  legacy one as fi-compat maps it; a refused ``group`` or unified ``comm_backend`` keeps
  the gate name ``group`` / ``comm_backend`` as its ``feature``);
- ``AllReduceFusionPattern.<member>`` for each member of
  :class:`fi_compat.comm.AllReduceFusionPattern` (met where the installed release's own
  enum, as recorded, has it; unknown for a release fi-compat has not recorded);
- ``reference:AllReduceFusionPattern.<member>``, what a reference workspace refuses of
  that pattern: missing on every release (the unfused path runs only ``kAllReduce`` and
  ``kARResidualRMSNorm``, without quantization or MoE arguments), the reason saying what
  it takes;
- ``per_call_sizes:<kind>`` and ``checkpointing:<kind>`` for each kind of fused workspace
  (``trtllm``, ``mnnvl``, ``mnnvl-cutedsl``, ``legacy``, and ``reference`` for
  checkpointing; met where such a workspace serves calls of other sizes than its own, or
  has FlashInfer's ``checkpoint_prepare`` and ``checkpoint_restore``);
- ``deterministic:<Family>:<backend>`` for each wrapper family and backend the split-reach
  measurement lists in some release (``default`` for a class without ``backend=``,
  ``fast_decode_plan`` for the decode fast plan; met exactly where
  :func:`fi_compat.attention.deterministic_wrapper` serves a wrapper of that family built
  with that backend, and ``use_tensor_cores=True`` for decode);
- ``fast_decode_plan``: the installed release has ``flashinfer.decode.fast_decode_plan``
  (0.4.0+), which :class:`fi_compat.attention.AttentionPlanner` built with
  ``fast_decode=True`` needs;
- ``torch.distributed``: this Python's torch has it; a reference workspace of several
  processes also needs it initialized, a state of that process the report cannot see.

The JSON report's ``requirements`` lists every one with its answer. Nothing else.
(``per_call_sizes:``, ``checkpointing:`` and ``deterministic:`` names since fi-compat
0.3.0; ``dropin:create_allreduce_fusion_workspace.``, ``AllReduceFusionPattern.``,
``reference:``, ``fast_decode_plan`` and ``torch.distributed`` since 0.3.0 too.)

.. versionadded:: 0.2.0
"""


#: The prefix the ``signatures`` section puts before an owner of each table.
_COMM_PREFIX = f"{COMM}."
_ATTENTION_PREFIX = f"{FLASHINFER}."


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
        families[family] = {"plan_takes": facts.plan_accepts, "backends": backends}
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
        "requirements": _requirements.answers(capabilities),
        "passed_through": passed_through(capabilities),
    }


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
            raise _requirements.unknown_requirement(name)
    return names


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
    state = _requirements.Answers(capabilities)
    lacking: list[str] = []
    for raw in names:
        name = raw.strip()
        if name not in REQUIREMENT_NAMES:
            raise _requirements.unknown_requirement(name)
        lacking += _requirements.lacking(name, state)
    return lacking


#: How :func:`render_text` paints a cell: ``paint(role, text)`` returns ``text`` as it
#: should appear. The role is what the cell means: the answer word it holds (``text``
#: itself) or, for a hazard's ``[severity]`` tag, the severity.
_Paint = Callable[[str, str], str]


def _plain(role: str, text: str) -> str:
    """The plain style: every cell as it is."""
    return text


def _answer(paint: _Paint, word: str, width: int = 0) -> str:
    """``word``, an answer, painted as what it says and padded to ``width`` by its plain
    length (escapes take no room on the screen)."""
    return paint(word, word) + " " * (width - len(word))


def _row(paint: _Paint, name: str, word: str, reason: str) -> str:
    """An answer line: a name, the answer and why."""
    return f"    {name:<26} {_answer(paint, word, 12)} {reason}"


def _render_refused(
    paint: _Paint,
    head: str,
    answers: Mapping[str, Support],
    every: str,
    lead: str = "a non-default value of these is refused",
) -> list[str]:
    """The names among ``answers`` that are not met, one line each, under ``head``."""
    refused = [
        _row(paint, name.rpartition(".")[2], support.status.value, support.reason)
        for name, support in answers.items()
        if not support.supported
    ]
    if not refused:
        return [f"  {head}  {every}"]
    return [f"  {head}  {lead}:", *refused]


def _render_dropin(paint: _Paint, capabilities: Capabilities) -> list[str]:
    """The drop-in's arguments and factory options that a non-default value cannot take,
    and the patterns the installed release lacks."""
    patterns = _render_refused(
        paint,
        pattern_feature("<member>"),
        pattern_support(capabilities),
        "every pattern runs",
        "these are refused",
    )
    return [
        *_render_refused(
            paint,
            dropin_feature("<argument>"),
            dropin_support(capabilities),
            "every argument runs",
        ),
        *_render_refused(
            paint,
            factory_feature("<option>"),
            factory_support(capabilities),
            "every option is taken",
        ),
        *patterns,
    ]


def _render_passed(capabilities: Capabilities) -> list[str]:
    """The values the installed release takes that fi-compat passes unadapted."""
    found = {name: values for name, values in passed_through(capabilities).items() if values}
    head = "  values fi-compat does not know, passed to FlashInfer as given:"
    if not found:
        return [f"{head} none"]
    return [head, *(f"    {name:<26} {', '.join(values)}" for name, values in found.items())]


def _render_kinds(paint: _Paint, head: str, answers: Mapping[str, Support]) -> list[str]:
    """One line per kind of workspace: its answer and why."""
    lines = [f"  {head}"]
    for name, support in answers.items():
        lines.append(_row(paint, name.partition(":")[2], support.status.value, support.reason))
    return lines


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _render_reach(paint: _Paint, capabilities: Capabilities) -> list[str]:
    """The split-reach section: per family and backend, what a deterministic run gets."""
    release = capabilities.flashinfer.version
    section = _split_reach(capabilities, deterministic_answers(capabilities))
    lines = [
        "",
        "deterministic runs, per family and backend "
        f"({deterministic_feature('<Family>', '<backend>')}; measured split reach)",
    ]
    if not section["measured"]:
        hint = why_unmeasured(release)
        return [
            *lines,
            f"  flashinfer {release or 'unknown'} was not measured: a deterministic planner "
            "or wrapper refuses every wrapper" + (f" ({hint})" if hint else ""),
        ]
    for family, facts in section["families"].items():
        lines.append(f"  {family}")
        for backend, answer in sorted(facts["backends"].items()):
            run = _answer(paint, answer["deterministic"], 8)
            lines.append(f"    {backend:<20} {run} {answer['why']}")
    return lines


def render_text(
    capabilities: Capabilities, *, paint: Callable[[str, str], str] | None = None
) -> str:
    """The report for people.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    capabilities
        What :func:`fi_compat.get_capabilities` found.
    paint
        ``paint(role, text)`` styles each cell that holds an answer as the line is built
        (``fi-compat report`` passes ANSI colour on a terminal): ``role`` is the answer
        word, which is also ``text`` (``supported``, ``unsupported``, ``unknown``,
        ``served``, ``refused``, ``yes``, ``no``, ``available``, ``unavailable``), or a
        hazard's severity (``error``, ``warning``, ``info``) for its ``[severity]`` tag.
        Columns are aligned by the plain text, so what ``paint`` adds (escapes) moves
        nothing; names, reasons and messages are never painted. ``None`` (the default)
        leaves every cell plain. (``paint`` since fi-compat 0.3.0.)

    Raises
    ------
    InvalidArgumentError
        ``capabilities`` is not a :class:`~fi_compat.capabilities.Capabilities`, or
        ``paint`` is neither None nor callable.
    """
    _check_capabilities(capabilities)
    if paint is not None and not callable(paint):
        raise InvalidArgumentError(
            explain(
                "paint to be None or a callable paint(role, text) -> str",
                describe(paint),
                fix="pass a function of the role and the text, or None for plain text",
            )
        )
    style = _plain if paint is None else paint
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
        f"  (CUDA available: {_answer(style, _yes(torch.cuda_available))}"
        + (f", CUDA {torch.cuda_version}" if torch.cuda_version else "")
        + ")"
    )
    lines += ["", f"{COMM:<17} {_answer(style, 'available' if comm.available else 'unavailable')}"]
    if comm.error:
        lines.append(f"  error:          {comm.error}")
    lines.append(
        f"  unified API: {_answer(style, _yes(comm.unified_api))}"
        f"    legacy API: {_answer(style, _yes(comm.legacy_api))}"
        f"    {TORCH_DIST_BACKEND.key}: {comm.torch_dist_backend or 'none'}"
    )
    for title, table in (("", comm.kwargs), ("attention", capabilities.attention)):
        if title:
            lines += ["", title]
        for owner, answers in table.items():
            lines.append(f"  {owner}")
            for keyword, support in answers.items():
                lines.append(_row(style, keyword, support.status.value, support.reason))
        if not title:
            lines += _render_dropin(style, capabilities)
            lines += _render_kinds(
                style,
                f"{size_feature('<kind>')}  calls of other sizes than the workspace's:",
                size_support(capabilities),
            )
            lines += _render_kinds(
                style,
                f"{checkpoint_feature('<kind>')}  checkpoint_prepare/checkpoint_restore:",
                checkpoint_support(capabilities),
            )
            lines += _render_passed(capabilities)
    lines += _render_reach(style, capabilities) if info.installed else []
    found = hazards(capabilities)
    lines += ["", "hazards" if found else "hazards           none known"]
    for hazard in found:
        severity = hazard.severity.value
        lines.append(f"  {style(severity, f'[{severity}]')} {hazard.id}: {hazard.message}")
    return "\n".join(lines) + "\n"
