"""The renderers of a diff and a scan: text for people, and SARIF 2.1.0 for a scan.

Each writes what :class:`~fi_compat.upgrade.ReleaseDiff` or
:class:`~fi_compat.upgrade.ScanResult` holds and computes nothing (their JSON is their own
``to_dict``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fi_compat._arguments import describe, require_bool, require_instance
from fi_compat.errors import InvalidArgumentError, explain
from fi_compat.upgrade._diff import DIFF_CATEGORIES, ReleaseDiff
from fi_compat.upgrade._kinds import RULES, Category
from fi_compat.upgrade._scan import ScanResult

__all__ = ["SARIF_SCHEMA", "render_diff", "render_scan", "to_sarif"]

#: The SARIF schema the ``--sarif`` output declares.
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVELS = {
    Category.BREAKS: "error",
    Category.BEHAVIOUR: "warning",
    Category.DETERMINISM: "warning",
    Category.UNVERIFIED: "note",
    Category.AVAILABLE: "note",
    Category.UNCHANGED: "none",
}


# ----------------------------------------------------------------------------- text


def _require_result(result: object, show_unchanged: object) -> None:
    require_instance("result", result, ScanResult, "a ScanResult")
    require_bool("show_unchanged", show_unchanged)


def render_scan(result: ScanResult, *, show_unchanged: bool = False) -> str:
    """The result as text, as ``fi-compat scan`` prints it: the findings grouped by file
    (unchanged ones only with ``show_unchanged``), the files not scanned, a summary line.

    .. versionadded:: 0.3.0

    Raises
    ------
    InvalidArgumentError
        ``result`` is not a :class:`ScanResult`, or ``show_unchanged`` not a bool.
    """
    _require_result(result, show_unchanged)
    lines = [
        f"flashinfer {result.old} -> {result.new}"
        + (" (after the swap to fi_compat.comm)" if result.fi_compat else "")
        + f": {result.files} {'file' if result.files == 1 else 'files'} scanned under "
        + ", ".join(result.roots or (result.root,))
    ]
    current = None
    for finding in result.findings:
        if finding.category is Category.UNCHANGED and not show_unchanged:
            continue
        if finding.path != current:
            current = finding.path
            lines += ["", finding.path]
        cited = f" [{finding.release}]" if finding.release else ""
        lines.append(
            f"  {finding.line}:{finding.column}: {finding.category.value}: {finding.message}"
            f" ({finding.rule}){cited}"
        )
    if result.diagnostics:
        lines += ["", "not scanned:"]
        lines += [
            f"  {d.path}" + (f":{d.line}" if d.line else "") + f": {d.message}"
            for d in result.diagnostics
        ]
    counts = ", ".join(f"{result.count(category)} {category.value}" for category in Category)
    unread = len(result.diagnostics)
    lines += ["", f"{counts}; {unread} {'file' if unread == 1 else 'files'} not scanned"]
    return "\n".join(lines) + "\n"


def render_diff(diff: ReleaseDiff, *, categories: Iterable[Category] = DIFF_CATEGORIES) -> str:
    """The diff as text, as ``fi-compat diff`` prints it: a section per category (only
    those in ``categories``), each change with the release it cites and, after its
    subject, every other path it is met at (``(also ...)``, :attr:`Change.paths`).

    .. versionadded:: 0.3.0

    Raises
    ------
    InvalidArgumentError
        ``diff`` is not a :class:`ReleaseDiff`, or ``categories`` not an iterable of
        :class:`Category` (a lone str included).
    """
    require_instance("diff", diff, ReleaseDiff, "a ReleaseDiff")
    if isinstance(categories, (str, bytes)) or not isinstance(categories, Iterable):
        raise InvalidArgumentError(
            explain("categories to be an iterable of Category", describe(categories))
        )
    wanted = set()
    for category in categories:
        require_instance("every item of categories", category, Category, "a Category")
        wanted.add(category)
    lines = [
        f"flashinfer {diff.old} -> {diff.new}: {len(diff.releases)} recorded "
        f"{'release' if len(diff.releases) == 1 else 'releases'}, {len(diff.changes)} "
        f"{'change' if len(diff.changes) == 1 else 'changes'}"
    ]
    for category in DIFF_CATEGORIES:
        if category not in wanted:
            continue
        changes = diff.by_category(category)
        if not changes:
            continue
        lines += ["", f"{category.value[:1].upper()}{category.value[1:]} ({len(changes)})"]
        for change in changes:
            also = f" (also {', '.join(change.paths[1:])})" if len(change.paths) > 1 else ""
            lines.append(
                f"  {change.release or '-':<13} {change.subject}{also}: {change.detail} "
                f"({change.kind})"
            )
    for note in diff.notes:
        lines += ["", f"note: {note}"]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- SARIF


@functools.cache
def _rules() -> tuple[Mapping[str, Any], ...]:
    return tuple(
        {
            "id": rule.id,
            "name": "".join(part.title() for part in rule.id.split("-")),
            "shortDescription": {"text": rule.summary},
            "defaultConfiguration": {"level": _LEVELS[rule.categories[0]]},
            "properties": {"categories": [category.value for category in rule.categories]},
        }
        for rule in RULES.values()
        if "scan" in rule.commands  # the rules a finding can name
    )


def to_sarif(result: ScanResult, *, show_unchanged: bool = False) -> dict[str, Any]:
    """The result as a SARIF 2.1.0 log, as ``fi-compat scan --sarif`` prints it: one run,
    a result per finding (unchanged ones only with ``show_unchanged``, at level ``none``),
    each file that could not be scanned as a tool notification. Paths are relative to the
    ``SRCROOT`` base, the scanned directory.

    .. versionadded:: 0.3.0

    Raises
    ------
    InvalidArgumentError
        ``result`` is not a :class:`ScanResult`, or ``show_unchanged`` not a bool.
    """
    from fi_compat._version import __version__

    _require_result(result, show_unchanged)
    index = {rule["id"]: position for position, rule in enumerate(_rules())}
    root = Path(result.root).resolve()
    base = root if root.is_dir() else root.parent
    results = []
    for finding in result.findings:
        if finding.category is Category.UNCHANGED and not show_unchanged:
            continue
        location: dict[str, Any] = {
            "physicalLocation": {
                "artifactLocation": {"uri": finding.path, "uriBaseId": "SRCROOT"},
                "region": {
                    "startLine": finding.line,
                    "startColumn": finding.column,
                    "endLine": finding.end_line,
                    "endColumn": finding.end_column,
                },
            }
        }
        if finding.scope != "<module>":
            location["logicalLocations"] = [
                {"fullyQualifiedName": finding.scope, "kind": "function"}
            ]
        results.append(
            {
                "ruleId": finding.rule,
                "ruleIndex": index[finding.rule],
                "level": _LEVELS[finding.category],
                "message": {"text": finding.message},
                "locations": [location],
                "properties": {
                    "category": finding.category.value,
                    "target": finding.target,
                    "release": finding.release,
                },
            }
        )
    notifications = [
        {
            "level": "warning",
            "message": {"text": f"{d.path}: {d.message}"},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": d.path, "uriBaseId": "SRCROOT"},
                        **({"region": {"startLine": d.line}} if d.line else {}),
                    }
                }
            ],
        }
        for d in result.diagnostics
    ]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "fi-compat",
                        "version": __version__,
                        "rules": list(_rules()),
                    }
                },
                "originalUriBaseIds": {"SRCROOT": {"uri": base.as_uri() + "/"}},
                "invocations": [
                    {
                        "executionSuccessful": True,
                        "toolExecutionNotifications": notifications,
                    }
                ],
                "results": results,
                "properties": {"old": result.old, "new": result.new, "fiCompat": result.fi_compat},
            }
        ],
    }
