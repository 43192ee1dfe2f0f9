"""Print (or write into README.md) the FlashInfer compatibility and split-reach tables.

The compatibility table is generated from the recorded release signatures in
``fi_compat/testing/signatures/``, the split-reach table from the measurements in
``fi_compat/attention/reach.json``; ``tests/testing/test_table.py`` fails when the README's
copy of either (between its ``<!-- ...:start -->`` and ``<!-- ...:end -->`` markers) drifts.

Usage::

    python scripts/gen_compat_table.py           # print the table
    python scripts/gen_compat_table.py --write   # replace the block in README.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fi_compat.testing._table import (
    REACH_END,
    REACH_START,
    TABLE_END,
    TABLE_START,
    compat_table,
    reach_table,
)

README = Path(__file__).resolve().parent.parent / "README.md"


def replace_block(
    text: str, table: str, start_marker: str = TABLE_START, end_marker: str = TABLE_END
) -> str:
    """``text`` with the content between the markers replaced by ``table``."""
    start = text.index(start_marker) + len(start_marker)
    end = text.index(end_marker)
    return text[:start] + "\n" + table + text[end:]


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update README.md in place")
    args = parser.parse_args(argv)
    table = compat_table()
    reach = reach_table()
    if not args.write:
        sys.stdout.write(table + "\n" + reach)
        return 0
    text = README.read_text(encoding="utf-8")
    text = replace_block(text, table)
    text = replace_block(text, reach, REACH_START, REACH_END)
    README.write_text(text, encoding="utf-8")
    print(f"updated {README}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
