"""``fi-compat scan PATH [PATH ...] --from A --to B``: what source trees meet between two
releases.

A static scan: the tree is read, never imported. Exit status: 0 when nothing breaks, 1 when
some use breaks on the new release (for CI), 2 for a bad command line (a path that does
not exist, a release without a record, an installed release without one), 141 when
stdout's reader goes away. A file that cannot be read or parsed is reported (text: "not
scanned"; JSON: ``diagnostics``; SARIF: a tool notification) and does not change the
status unless ``--strict`` is given, which makes it 1 as well.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from fi_compat.cli._output import write_err, write_out

__all__ = ["register", "run"]

#: ``--to installed``: the release the probe finds.
INSTALLED = "installed"


def __dir__() -> list[str]:
    return list(__all__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``scan`` subcommand."""
    parser = subparsers.add_parser(
        "scan",
        help="find every use of FlashInfer in a source tree and judge it against two releases",
        description="Read a source tree (never importing it) for every use of FlashInfer: "
        "imports, attribute chains, calls and their keywords, backend strings, "
        "inspect.signature probes and hasattr/getattr guards; judge each against two "
        "recorded releases.",
        epilog="Exit status: 0 nothing breaks, 1 something breaks on the new release (or, "
        "with --strict, a file could not be scanned), 2 bad command line, 141 stdout "
        "closed early (128 + SIGPIPE).",
    )
    parser.add_argument(
        "path",
        metavar="PATH",
        nargs="+",
        help="a source directory or file; several are read together (an engine and the "
        "kernel package it imports FlashInfer through)",
    )
    parser.add_argument(
        "--from", dest="old", metavar="A", required=True, help="the release moved from"
    )
    parser.add_argument(
        "--to",
        dest="new",
        metavar="B",
        required=True,
        help=f"the release moved to, or {INSTALLED!r} for the one installed here",
    )
    parser.add_argument(
        "--fi-compat",
        dest="fi_compat",
        action="store_true",
        help="judge flashinfer.comm uses as fi_compat.comm serves them after the import swap",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON for machines")
    output.add_argument("--sarif", action="store_true", help="print a SARIF 2.1.0 log")
    parser.add_argument("--all", action="store_true", help="also list the uses that are unchanged")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a file could not be scanned"
    )
    parser.set_defaults(func=run)


def _installed() -> tuple[str | None, str]:
    """The installed FlashInfer's release as the probe reports it, or None and why not."""
    from fi_compat.capabilities import get_capabilities
    from fi_compat.cli._report import import_torch_quietly, stdout_to_stderr

    with stdout_to_stderr():
        import_torch_quietly()
        found = get_capabilities().flashinfer
    if not found.installed:
        return None, "no FlashInfer is installed here"
    if found.version is None:
        return None, f"the installed FlashInfer reports no release ({found.import_error})"
    return found.version, ""


def run(args: argparse.Namespace) -> int:
    """Scan, judge, print; the status says whether something breaks."""
    from fi_compat.errors import InvalidArgumentError, UnknownReleaseError
    from fi_compat.upgrade import render_scan, scan_tree, to_sarif

    new = str(args.new)
    if new == INSTALLED:
        found, why = _installed()
        if found is None:
            write_err(f"fi-compat scan: --to installed: {why}")
            return 2
        new = found
    try:
        paths = [str(path) for path in args.path]
        result = scan_tree(
            paths[0] if len(paths) == 1 else paths,
            str(args.old),
            new,
            fi_compat=bool(args.fi_compat),
        )
    except (InvalidArgumentError, UnknownReleaseError) as error:
        write_err(f"fi-compat scan: {error}")
        return 2
    if args.json:
        document = result.to_dict()
        if not args.all:
            document["findings"] = [f for f in document["findings"] if f["category"] != "unchanged"]
        write_out(json.dumps(document, indent=2) + "\n")
    elif args.sarif:
        write_out(json.dumps(to_sarif(result, show_unchanged=bool(args.all)), indent=2) + "\n")
    else:
        write_out(render_scan(result, show_unchanged=bool(args.all)))
    if result.breaks or (args.strict and result.diagnostics):
        return 1
    return 0
