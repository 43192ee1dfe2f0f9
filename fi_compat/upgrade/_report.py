"""A scan's result, and how it is written: text for people, JSON, and SARIF 2.1.0."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fi_compat._arguments import describe, require_bool, require_instance, require_str
from fi_compat._frozen import picklable
from fi_compat.errors import InvalidArgumentError, explain
from fi_compat.upgrade._diff import DIFF_CATEGORIES, ReleaseDiff
from fi_compat.upgrade._history import history
from fi_compat.upgrade._judge import Finding, judge
from fi_compat.upgrade._kinds import RULES, Category
from fi_compat.upgrade._scan import Diagnostic
from fi_compat.upgrade._tree import scan_paths

__all__ = [
    "SARIF_SCHEMA",
    "ScanResult",
    "render_diff",
    "render_scan",
    "scan_tree",
    "to_sarif",
]

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
_CATEGORY_ORDER = {category: index for index, category in enumerate(Category)}


@picklable
@dataclass(frozen=True)
class ScanResult:
    """What :func:`scan_tree` found.

    .. versionadded:: 0.3.0

    Attributes
    ----------
    root
        What the findings' paths are relative to: the scanned directory or file, as
        given; for several, the deepest directory holding them all.
    old, new
        The two releases judged against (``new`` is the installed release's for
        ``--to installed``).
    fi_compat
        True when ``flashinfer.comm`` uses were judged as ``fi_compat.comm`` serves them.
    files
        How many ``*.py`` files were looked at.
    findings
        Every judged use, by file, line and column.
    diagnostics
        Every file that could not be read or parsed, with why.
    roots
        Every directory or file scanned, as given (``(root,)`` for one).
    """

    root: str
    old: str
    new: str
    fi_compat: bool
    files: int
    findings: tuple[Finding, ...]
    diagnostics: tuple[Diagnostic, ...]
    roots: tuple[str, ...] = ()

    @property
    def breaks(self) -> bool:
        """True when some finding is :attr:`Category.BREAKS` (``fi-compat scan`` exits 1)."""
        return any(finding.category is Category.BREAKS for finding in self.findings)

    def count(self, category: Category) -> int:
        """How many findings fall in ``category``."""
        return sum(1 for finding in self.findings if finding.category is category)

    def to_dict(self) -> dict[str, Any]:
        """The result as ``fi-compat scan --json`` prints it (schema ``scan.schema.json``)."""
        from fi_compat._version import __version__

        return {
            "schema": 1,
            "tool": {"name": "fi-compat", "version": __version__},
            "root": self.root,
            "roots": list(self.roots or (self.root,)),
            "old": self.old,
            "new": self.new,
            "fi_compat": self.fi_compat,
            "files": self.files,
            "summary": {category.key: self.count(category) for category in Category},
            "findings": [finding.to_dict() for finding in self.findings],
            "diagnostics": [
                {
                    "path": diagnostic.path,
                    "message": diagnostic.message,
                    "line": diagnostic.line,
                    "column": diagnostic.column,
                }
                for diagnostic in self.diagnostics
            ],
        }


def _path(name: str, root: object) -> Path:
    """``root`` as a path that exists, or the typed error saying why not."""
    require_instance(name, root, (str, os.PathLike), "a str or os.PathLike")
    try:
        path = Path(cast("str | os.PathLike[str]", root))
        found = path.exists()
    except (TypeError, ValueError, OSError) as error:  # bytes from __fspath__, a NUL byte
        raise InvalidArgumentError(
            explain(f"{name} to be a path the system can look up", f"{describe(root)} ({error})")
        ) from None
    if not found:
        raise InvalidArgumentError(
            explain(f"{name} to name an existing directory or file", describe(str(path)))
        )
    return path


def _roots(root: object) -> list[tuple[str, Path]]:
    """``root`` (one path, or a non-empty list or tuple of them) as given and as paths."""
    if isinstance(root, (str, os.PathLike)):
        return [(str(root), _path("root", root))]
    if not isinstance(root, (list, tuple)) or not root:
        raise InvalidArgumentError(
            explain(
                "root to be a str or os.PathLike, or a non-empty list or tuple of them",
                describe(root),
            )
        )
    return [(str(item), _path("every item of root", item)) for item in root]


def scan_tree(
    root: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    old: str,
    new: str,
    *,
    fi_compat: bool = False,
) -> ScanResult:
    """Scan ``root`` for uses of FlashInfer and judge each against releases ``old`` and
    ``new``.

    .. versionadded:: 0.3.0

    Parameters
    ----------
    root
        A directory (every ``*.py``/``*.pyi`` file under it, symbolic links to directories
        not followed) or one file; or a list or tuple of them (an engine and the kernel
        package it imports FlashInfer through). Paths in the result are relative to the
        one root, or to the deepest directory holding them all.
    old, new
        Recorded flashinfer-python releases.
    fi_compat
        Judge ``flashinfer.comm`` uses as they run after the import swap to
        ``fi_compat.comm``.

    Raises
    ------
    InvalidArgumentError
        ``root`` is not a str or path, or a non-empty list or tuple of them, or names
        something that does not exist; ``old`` or ``new`` is not a non-empty str;
        ``fi_compat`` is not a bool.
    UnknownReleaseError
        ``old`` or ``new`` has no record.
    """
    given = _roots(root)
    require_str("old", old, nonempty=True)
    require_str("new", new, nonempty=True)
    require_bool("fi_compat", fi_compat)
    steps = history(old, new)
    scanned = scan_paths(*(path for _, path in given))
    findings = judge(scanned.uses, steps, fi_compat=fi_compat)
    findings.sort(key=lambda f: (f.path, f.line, f.column, _CATEGORY_ORDER[f.category], f.rule))
    return ScanResult(
        given[0][0] if len(given) == 1 else str(scanned.base),
        steps.old.release,
        steps.new.release,
        fi_compat,
        scanned.files,
        tuple(findings),
        tuple(sorted(scanned.diagnostics, key=lambda d: d.path)),
        tuple(name for name, _ in given),
    )


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
        since = f" [{finding.release}]" if finding.release else ""
        lines.append(
            f"  {finding.line}:{finding.column}: {finding.category.value}: {finding.message}"
            f" ({finding.rule}){since}"
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
