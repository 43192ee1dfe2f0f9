"""A scan (:func:`scan_tree`): the uses of the scanned trees, judged against two releases.

:func:`scan_tree` checks its arguments, has the engine's source read
(:func:`fi_compat._engine_source.read_trees`: every use of FlashInfer in the trees, and the
files that could not be read), has each use judged against the two releases
(:mod:`fi_compat.upgrade._judge`) and returns the :class:`ScanResult` the renderers
(:mod:`fi_compat.upgrade._report`) write.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fi_compat._arguments import describe, require_bool, require_instance, require_str
from fi_compat._engine_source import Diagnostic, read_trees
from fi_compat._frozen import picklable
from fi_compat.errors import InvalidArgumentError, explain
from fi_compat.upgrade._behaviour import history
from fi_compat.upgrade._judge import Finding, judge
from fi_compat.upgrade._kinds import Category, as_json

__all__ = ["ScanResult", "scan_tree"]

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
            "diagnostics": [as_json(diagnostic) for diagnostic in self.diagnostics],
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
    scanned = read_trees(*(path for _, path in given))
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
