"""The generated tables: FlashInfer compatibility, split reach, and the engines' fusion policy.

README.md and the documentation pages hold copies between ``<!-- compat-table:start -->`` /
``<!-- compat-table:end -->`` (and ``reach-table``) markers; the migration guides hold the
policy tables between ``<!-- policy-table:<engine>:start -->`` /
``<!-- policy-table:<engine>:end -->`` markers. :func:`refresh` regenerates them,
``scripts/gen_compat_table.py --write`` writes the result, and a test and the
documentation build (``docs/hooks.py``) fail when a copy differs from it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from packaging.version import Version

from fi_compat._arguments import require_strs
from fi_compat._records import ReleaseRecord, available_releases, load_release
from fi_compat._surface import (
    ATTENTION_FAMILIES,
    COMM,
    DECODE,
    FLASHINFER,
    GATES,
    PLAN,
    PLAN_IMPL,
    TORCH_DIST_BACKEND,
)
from fi_compat.errors import DeploymentRefusedError, InvalidArgumentError, explain
from fi_compat.policy._cases import ENGINES, Column
from fi_compat.policy._deployment import Deployment, RuleId
from fi_compat.policy._rules import decide_fusion

__all__ = [
    "CAPABILITIES",
    "REACH_END",
    "REACH_START",
    "TABLE_END",
    "TABLE_START",
    "Capability",
    "compat_table",
    "reach_table",
    "refresh",
]

TABLE_START = "<!-- compat-table:start -->"
TABLE_END = "<!-- compat-table:end -->"
REACH_START = "<!-- reach-table:start -->"
REACH_END = "<!-- reach-table:end -->"


@dataclass(frozen=True)
class Capability:
    """One row: a label (Markdown) and the test on a recorded release."""

    label: str
    present: Callable[[ReleaseRecord], bool]


def _backend_in(module: str) -> Callable[[ReleaseRecord], bool]:
    def present(record: ReleaseRecord) -> bool:
        backend = record.torch_dist_backend
        return backend is not None and backend.module == module

    return present


def _has(gate: str) -> Callable[[ReleaseRecord], bool]:
    return lambda record: record.has(gate)


def _accepts(owner: str, keyword: str) -> Callable[[ReleaseRecord], bool]:
    return lambda record: record.accepts(owner, keyword)


def _forwards(record: ReleaseRecord) -> bool:
    wrapper = record.wrapper(DECODE.key)
    return wrapper is not None and wrapper.plan_forwards_to == PLAN_IMPL


def _bcast_local(record: ReleaseRecord) -> bool:
    backend = record.torch_dist_backend
    return bool(backend is not None and backend.bcast_root_is_group_local)


def _gate_rows() -> list[Capability]:
    """A row per API gate and per item of every keyword gate, in the order of the gates."""
    rows: list[Capability] = []
    for gate in GATES.values():
        if gate.hazard is not None:
            continue
        if not gate.keyword:
            rows.append(Capability(gate.summary, _has(gate.key)))
            continue
        for owner, keyword in gate.items:
            assert keyword is not None  # a keyword gate's items all name one
            rows.append(Capability(f"`{keyword}=` on `{owner}`", _accepts(owner, keyword)))
    return rows


def _rows() -> tuple[Capability, ...]:
    rows = _gate_rows()
    rows.append(Capability(f"`{DECODE.key}.{PLAN}(**kwargs)` forwards to `{PLAN_IMPL}`", _forwards))
    rows += [
        Capability(f"`{TORCH_DIST_BACKEND.key}` in `{home.module}`", _backend_in(home.module))
        for home in reversed(TORCH_DIST_BACKEND.homes)
    ]
    rows += [
        Capability(f"`{TORCH_DIST_BACKEND.key}.bcast` treats `root` as group-local", _bcast_local),
        Capability(
            f"Hazard: `import {COMM}` needs a loaded CUDA runtime (`AssertionError`)",
            lambda r: r.comm_requires_cuda_runtime.value,
        ),
        Capability(
            f"Hazard: `import {FLASHINFER}` queries GPU 0", lambda r: r.import_queries_gpu.value
        ),
        Capability(
            f"Hazard: `import {COMM}` needs `triton`", lambda r: r.comm_requires_triton.value
        ),
    ]
    return tuple(rows)


#: The rows of the table, in order.
CAPABILITIES: tuple[Capability, ...] = _rows()


def _runs(flags: Sequence[bool], releases: Sequence[str]) -> list[tuple[str, str]]:
    runs: list[tuple[str, str]] = []
    start: int | None = None
    for index, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = index
        elif not flag and start is not None:
            runs.append((releases[start], releases[index - 1]))
            start = None
    return runs


def compat_table(releases: Sequence[str] | None = None) -> str:
    """The Markdown table (with a one-line legend), ending in a newline.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    releases
        Releases to consider; by default every shipped record.

    Raises
    ------
    InvalidArgumentError
        ``releases`` is empty, a str, or holds something that is not one.
    UnknownReleaseError
        A release is not recorded.
    """
    names = list(require_strs("releases", releases)) if releases is not None else []
    if releases is None:  # every final release: a pre-release is not a row of its own
        names = [name for name in available_releases() if not Version(name).is_prerelease]
    elif not names:
        raise InvalidArgumentError(
            explain("at least one release", "an empty list", fix="leave releases out for all")
        )
    records = [load_release(name) for name in names]
    newest = names[-1]
    lines = [
        f"Derived from the recorded signatures of {len(names)} flashinfer-python releases "
        f"({names[0]} to {newest}). *First* is the first release that has it, *last* the "
        f"last one (— when {newest} still has it).",
        "",
        "| Capability | First | Last |",
        "| --- | --- | --- |",
    ]
    for capability in CAPABILITIES:
        flags = [capability.present(record) for record in records]
        runs = _runs(flags, names)
        if not runs:
            lines.append(f"| {capability.label} | never | — |")
            continue
        first = runs[0][0]
        last = "—" if runs[-1][1] == newest else runs[-1][1]
        span = slice(names.index(first), names.index(runs[-1][1]) + 1)
        gaps = _runs([not flag for flag in flags[span]], names[span])
        note = "".join(f" (absent from {start} to {end})" for start, end in gaps)
        lines.append(f"| {capability.label} | {first} | {last}{note} |")
    return "\n".join(lines) + "\n"


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
    """The README's table of measured split-setting reach, per family and backend.

    From ``fi_compat/attention/reach.json``: each cell lists runs of consecutive measured
    releases with one verdict. A family refused on every backend of every release is one
    row.
    """
    from fi_compat.attention import _reach

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


def _policy_markers(engine: str) -> tuple[str, str]:
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


def _policy_table(engine: str) -> str:
    """The migration guide's table of ``engine``'s cases, decided by both rule sets.

    Every cell comes from :func:`fi_compat.policy.decide_fusion` on the case's deployment
    (``fi_compat/policy/_cases.py``): *on* or *off* with the deciding rule and the backend
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
        start, end = _policy_markers(engine)
        generated.append((start, end, functools.partial(_policy_table, engine)))
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
