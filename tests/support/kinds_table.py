"""The upgrade guide's table of kinds, rendered from :data:`fi_compat.upgrade.RULES`.

``diff`` and ``scan`` speak one vocabulary; the guide lists it once, between
``<!-- kinds: start -->`` and ``<!-- kinds: end -->`` in ``docs/guide/upgrade.md``, and
``tests/upgrade/test_guide.py`` compares that table with this rendering::

    python -m tests.support.kinds_table --write   # rewrite the guide's table
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from fi_compat.upgrade import RULES
from tests.support.marked import block, with_block

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "upgrade.md"
START, END = "<!-- kinds: start -->", "<!-- kinds: end -->"


def render() -> str:
    """The table: one row per kind, with its categories and the commands that give it."""
    lines = [
        "| kind | categories | diff | scan | what it says |",
        "| --- | --- | --- | --- | --- |",
    ]
    for rule in RULES.values():
        categories = ", ".join(category.value for category in rule.categories)
        marks = ["yes" if command in rule.commands else "" for command in ("diff", "scan")]
        lines.append(f"| `{rule.id}` | {categories} | {marks[0]} | {marks[1]} | {rule.summary} |")
    return "\n".join(lines) + "\n"


def table_in(text: str) -> str:
    """The table between the markers of ``text``."""
    return block(text, START, END)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the guide's table")
    args = parser.parse_args(argv)
    text = GUIDE.read_text(encoding="utf-8")
    if not args.write:
        sys.stdout.write(render())
        return 0 if table_in(text) == render() else 1
    GUIDE.write_text(with_block(text, START, END, render()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
