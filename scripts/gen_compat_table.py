"""Print (or write into README.md) the FlashInfer compatibility table.

The table is generated from the recorded release signatures in
``fi_compat/testing/signatures/``; ``tests/testing/test_table.py`` fails when the README's
copy (between ``<!-- compat-table:start -->`` and ``<!-- compat-table:end -->``) drifts.

Usage::

    python scripts/gen_compat_table.py           # print the table
    python scripts/gen_compat_table.py --write   # replace the block in README.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fi_compat.testing._table import TABLE_END, TABLE_START, compat_table

README = Path(__file__).resolve().parent.parent / "README.md"


def replace_block(text: str, table: str) -> str:
    """``text`` with the content between the markers replaced by ``table``."""
    start = text.index(TABLE_START) + len(TABLE_START)
    end = text.index(TABLE_END)
    return text[:start] + "\n" + table + text[end:]


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update README.md in place")
    args = parser.parse_args(argv)
    table = compat_table()
    if not args.write:
        sys.stdout.write(table)
        return 0
    text = README.read_text(encoding="utf-8")
    README.write_text(replace_block(text, table), encoding="utf-8")
    print(f"updated {README}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
