"""``fi-compat diff A B``: every difference an engine can meet between two releases.

Read from the recorded releases alone: neither release is installed or imported. Exits 0
whatever the changes (a list of changes is an answer, not an error), 2 for a bad command
line (a release without a record included), 141 when stdout's reader goes away.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from fi_compat.cli._output import write_err, write_out

__all__ = ["register", "run"]


def __dir__() -> list[str]:
    return list(__all__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``diff`` subcommand."""
    parser = subparsers.add_parser(
        "diff",
        help="list what changes between two recorded FlashInfer releases",
        description="List every difference an engine can meet between two recorded "
        "FlashInfer releases: names, parameters, attention backends and their split "
        "reach, import hazards and fi-compat's per-release behaviour, each with the "
        "release where it changed.",
        epilog="Exit status: 0 fine, 2 bad command line (a release without a record "
        "included), 141 stdout closed early (128 + SIGPIPE).",
    )
    parser.add_argument("old", metavar="A", help="the release moved from, e.g. 0.6.8")
    parser.add_argument("new", metavar="B", help="the release moved to, e.g. 0.7.2.post1")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument(
        "--category",
        metavar="NAME,...",
        default="",
        help="only these categories: breaks, behaviour, determinism, available",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Diff, print."""
    from fi_compat.errors import UnknownReleaseError
    from fi_compat.upgrade import diff_releases, render_diff
    from fi_compat.upgrade._diff import DIFF_CATEGORIES

    names = [name.strip() for name in str(args.category).split(",") if name.strip()]
    known = {category.key: category for category in DIFF_CATEGORIES}
    unknown = [name for name in names if name not in known]
    if unknown:
        write_err(
            f"fi-compat diff: unknown category {unknown[0]!r}; expected one of {', '.join(known)}"
        )
        return 2
    categories = [known[name] for name in names] or list(DIFF_CATEGORIES)
    try:
        diff = diff_releases(str(args.old), str(args.new))
    except UnknownReleaseError as error:
        write_err(f"fi-compat diff: {error}")
        return 2
    if args.json:
        document = diff.to_dict()
        document["changes"] = [
            change
            for change in document["changes"]
            if change["category"] in {category.value for category in categories}
        ]
        write_out(json.dumps(document, indent=2) + "\n")
    else:
        write_out(render_diff(diff, categories=categories))
    return 0
