"""The documentation's generated tables, and the markers that hold their copies.

The pages hold copies between markers: the compatibility table
(:func:`fi_compat.testing.compat_table`, ``<!-- compat-table:start -->`` /
``<!-- compat-table:end -->``), the measured split reach (``reach-table``) and, in the
migration guides, each engine's fusion-policy table (``<!-- policy-table:<engine>:start -->``
/ ``<!-- policy-table:<engine>:end -->``, from the cases of :mod:`tools.policy_cases`).
:func:`refresh` regenerates every block, ``scripts/gen_compat_table.py --write`` writes the
result, and a test and the documentation build (``docs/hooks.py``) fail when a copy differs
from it. Nothing here ships in the wheel.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence

from fi_compat._surface import ATTENTION_FAMILIES
from fi_compat.attention import _reach
from fi_compat.errors import InvalidArgumentError, explain
from fi_compat.policy import Deployment, DeploymentRefusedError, RuleId, decide_fusion
from fi_compat.testing import compat_table
from tools.policy_cases import ENGINES, Column

__all__ = [
    "REACH_END",
    "REACH_START",
    "TABLE_END",
    "TABLE_START",
    "policy_markers",
    "policy_table",
    "reach_table",
    "refresh",
]

TABLE_START = "<!-- compat-table:start -->"
TABLE_END = "<!-- compat-table:end -->"
REACH_START = "<!-- reach-table:start -->"
REACH_END = "<!-- reach-table:end -->"


def _spans(verdicts: Sequence[str | None], releases: Sequence[str]) -> str:
    """``"reaches 0.4.0 to 0.5.3; dropped 0.6.0 to 0.6.3"``: runs of one verdict, absent skipped."""
    parts: list[str] = []
    start = 0
    for index in range(1, len(verdicts) + 1):
        if index < len(verdicts) and verdicts[index] == verdicts[start]:
            continue
        verdict = verdicts[start]
        if verdict is not None:
            first, last = releases[start], releases[index - 1]
            parts.append(f"{verdict} {first}" + (f" to {last}" if last != first else ""))
        start = index
    return "; ".join(parts)


def reach_table() -> str:
    """The attention guide's table of measured split-setting reach, per family and backend.

    From ``fi_compat/_measured/reach.json``: each cell lists runs of consecutive measured
    releases with one verdict. A family refused on every backend of every release is one
    row.
    """
    releases = _reach.measured_releases()
    lines = [
        f"Measured on {len(releases)} flashinfer-python releases ({releases[0]} to "
        f"{releases[-1]}) by `make measure-reach`. Deterministic inference accepts only "
        "*reaches*, and never `auto` (see above), nor a class that hands its base `auto` "
        "(marked: it resolves `auto` in every `plan`).",
        "",
        "| Family | Backend | Split settings at the kernel |",
        "| --- | --- | --- |",
    ]
    for family in (*ATTENTION_FAMILIES, _reach.FAST_DECODE_PLAN):
        facts = [_reach.family_reach(release, family) for release in releases]
        backends = sorted(
            {backend for fact in facts if fact is not None for backend in fact.backends},
            key=lambda name: (name != "fa2", name == "auto", name),
        )
        rows = []
        for backend in backends:
            verdicts = [
                None
                if fact is None or backend not in fact.backends
                else str(fact.backends[backend].verdict)
                for fact in facts
            ]
            rows.append((backend, verdicts))
        present = [verdict for _, verdicts in rows for verdict in verdicts if verdict is not None]
        if present and set(present) == {"refused"}:
            first = next(r for r, f in zip(releases, facts, strict=True) if f is not None)
            lines.append(
                f"| `{family}` | all | refused {first} to {releases[-1]}: its `plan` cannot "
                "take the split settings |"
            )
            continue
        inherits = any(
            fact is not None and fact.backend_attribute is None and fact.default_backend == "auto"
            for fact in facts
        )
        for backend, verdicts in rows:
            shown = f"`{backend}`" + (" (resolves `auto`)" if inherits else "")
            lines.append(f"| `{family}` | {shown} | {_spans(verdicts, releases)} |")
    return "\n".join(lines) + "\n"


def policy_markers(engine: str) -> tuple[str, str]:
    """The start and end markers of ``engine``'s policy table."""
    return f"<!-- policy-table:{engine}:start -->", f"<!-- policy-table:{engine}:end -->"


# An issue or pull request a reason cites, e.g. "flashinfer-ai/flashinfer#2204".
_CITED = re.compile(r"[\w.-]+/[\w.-]+#\d+")


def _refusal_reason(message: str) -> str:
    """The engine's reason in a refusal's message, shortened to its first sentence."""
    _, found, reason = message.partition("refuses to start: ")
    text = reason if found else message
    end = text.find(". ")
    return text[: end + 1] if end >= 0 else text.split(" (rule ")[0]


def _cite(column: Column, rule: RuleId, reason: str) -> str:
    source = column.sources.get(rule)
    if source is None:
        cited = _CITED.findall(reason)
        source = ", ".join(cited) if cited else None
    return f" ({source})" if source else ""


def _policy_cell(column: Column, deployment: Deployment) -> str:
    """What ``column``'s rule set decides for ``deployment``, as a Markdown table cell."""
    try:
        decision = decide_fusion(deployment, column.rules)
    except DeploymentRefusedError as error:
        message = str(error)
        rule = RuleId(error.rule)
        return (
            f'refused: `{rule.value}`: "{_refusal_reason(message)}"{_cite(column, rule, message)}'
        )
    cell = f"{'on' if decision.enabled else 'off'}: `{decision.rule.value}`"
    if decision.backend is not None:
        cell += f", backend `{decision.backend}`"
    cell += _cite(column, decision.rule, decision.reason)
    if decision.warnings:
        count = len(decision.warnings)
        cell += f"; {count} warning" + ("s" if count > 1 else "")
        if all(column.enable_flag in warning for warning in decision.warnings):
            cell += f" naming `{column.enable_flag}`"
    return cell


def policy_table(engine: str) -> str:
    """The migration guide's table of ``engine``'s cases, decided by both rule sets.

    Every cell comes from :func:`fi_compat.policy.decide_fusion` on the case's deployment
    (``tools/policy_cases.py``): *on* or *off* with the deciding rule and the backend
    the engine runs, or *refused* with the engine's reason; then the code the rule
    follows, and how many warnings the decision carries and the flag they name.
    """
    table = ENGINES[engine]
    first, second = table.columns
    lines = [
        f"Generated by `decide_fusion` for each deployment, with {first.title} and with "
        f"{second.title}: *on* or *off* and the deciding rule, or *refused* and the engine's "
        "reason; in parentheses, the code the rule follows (or the issue its reason cites).",
        "",
        f"| deployment | {first.title} | {second.title} |",
        "| --- | --- | --- |",
    ]
    for case in table.cases:
        cells = [case.label] + [_policy_cell(column, case.deployment) for column in table.columns]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def refresh(text: str) -> str:
    """``text`` with every generated block between its markers replaced by the current table.

    A block is the text between a start marker and the next end marker of its kind; the
    content becomes a newline followed by the table. Text without markers is returned as is.

    Raises
    ------
    InvalidArgumentError
        A start marker without its end marker after it, or an end marker without a start.
    """
    generated: list[tuple[str, str, Callable[[], str]]] = [
        (TABLE_START, TABLE_END, compat_table),
        (REACH_START, REACH_END, reach_table),
    ]
    for engine in ENGINES:
        start, end = policy_markers(engine)
        generated.append((start, end, functools.partial(policy_table, engine)))
    for start_marker, end_marker, make in generated:
        if start_marker not in text and end_marker not in text:
            continue
        head, *blocks = text.split(start_marker)
        if end_marker in head or any(block.count(end_marker) != 1 for block in blocks):
            raise InvalidArgumentError(
                explain(
                    f"{start_marker} and {end_marker} in pairs, in that order",
                    "an unpaired or misordered marker",
                    fix="give every start marker one end marker after it",
                )
            )
        table = make()
        text = head + "".join(
            start_marker + "\n" + table + block[block.index(end_marker) :] for block in blocks
        )
    return text
