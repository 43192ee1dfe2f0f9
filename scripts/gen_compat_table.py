"""Print the generated tables (compatibility, split reach, fusion policy), or write them.

The compatibility table is generated from the recorded release signatures in
``fi_compat/_records/``, the split-reach table from the measurements in
``fi_compat/_measured/reach.json``, and the migration guides' policy tables from the
decisions of the engines' rule sets on the cases of ``tools/policy_cases.py``.
Copies live in the files of :data:`TARGETS`, between ``<!-- compat-table:start -->`` /
``<!-- compat-table:end -->`` (and ``reach-table``, ``policy-table:<engine>``) markers.
``tests/testing/test_table.py`` fails when a copy drifts, and so does ``mkdocs build``
(``docs/hooks.py``).

Usage::

    python scripts/gen_compat_table.py           # print the tables
    python scripts/gen_compat_table.py --write   # regenerate every copy in TARGETS
    python scripts/gen_compat_table.py --check   # exit 1 naming the copies that drifted
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repository's tools/ draws the tables
    sys.path.insert(0, str(ROOT))

from fi_compat.testing import compat_table  # noqa: E402
from tools.doc_tables import policy_table, reach_table, refresh  # noqa: E402
from tools.policy_cases import ENGINES  # noqa: E402

#: Every file that holds a generated table, relative to the repository root.
TARGETS = (
    "docs/releases.md",
    "docs/guide/attention.md",
    "docs/migration/sglang.md",
    "docs/migration/vllm.md",
)


def stale(root: Path = ROOT) -> list[str]:
    """The files of :data:`TARGETS` whose generated blocks differ from the current tables."""
    return [
        name
        for name in TARGETS
        if refresh(text := (root / name).read_text(encoding="utf-8")) != text
    ]


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    """Entry point; ``root`` is the repository whose :data:`TARGETS` are read and written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="regenerate every copy in place")
    mode.add_argument("--check", action="store_true", help="exit 1 when a copy drifted")
    args = parser.parse_args(argv)
    if args.check:
        drifted = stale(root)
        for name in drifted:
            print(f"{name}: generated table drifted", file=sys.stderr)
        return 1 if drifted else 0
    if not args.write:
        policy = "".join("\n" + policy_table(engine) for engine in ENGINES)
        sys.stdout.write(compat_table() + "\n" + reach_table() + policy)
        return 0
    for name in TARGETS:
        path = root / name
        text = path.read_text(encoding="utf-8")
        new = refresh(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
