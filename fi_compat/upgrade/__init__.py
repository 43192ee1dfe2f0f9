"""Upgrade preview: what an engine's code meets between two FlashInfer releases.

Two questions, both answered from the recorded releases alone (nothing is installed,
imported or run, FlashInfer included):

- :func:`diff_releases`: every difference an engine can meet between two releases (names,
  parameters, attention backends and their split reach, import hazards, fi-compat's own
  per-release behaviour), each citing the release where it changed;
- :func:`scan_tree`: every use of FlashInfer in a source tree, read statically, judged
  against both releases.

Both speak one vocabulary: a :class:`Category` and a kind of :data:`RULES`.

``fi-compat diff`` and ``fi-compat scan`` are their command lines; the upgrade guide
(``docs/guide/upgrade.md``) shows both on an engine's bump.

.. versionadded:: 0.3.0
"""

from __future__ import annotations

from fi_compat._engine_source import Diagnostic
from fi_compat.upgrade._change import Change
from fi_compat.upgrade._diff import ReleaseDiff, diff_releases
from fi_compat.upgrade._judge import Finding
from fi_compat.upgrade._kinds import RULES, Category, Rule
from fi_compat.upgrade._report import render_diff, render_scan, to_sarif
from fi_compat.upgrade._scan import ScanResult, scan_tree

__all__ = [
    "RULES",
    "Category",
    "Change",
    "Diagnostic",
    "Finding",
    "ReleaseDiff",
    "Rule",
    "ScanResult",
    "diff_releases",
    "render_diff",
    "render_scan",
    "scan_tree",
    "to_sarif",
]


def __dir__() -> list[str]:
    return list(__all__)
