"""``fi-compat report``: what the installed FlashInfer supports.

Exits 0 whatever FlashInfer does (a broken FlashInfer is a finding, not a crash), 1 when
``--require`` names something missing, 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="probe the installed FlashInfer and report what it supports",
        description="Probe the installed FlashInfer and report what it supports.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument(
        "--require",
        metavar="NAME,...",
        default="",
        help="exit 1 unless every named capability is supported, e.g. "
        "group,trigger_completion_at_end,fixed_split_size",
    )
    parser.set_defaults(func=run)


def _import_torch_quietly() -> None:
    # Loading torch first lets the report say whether CUDA is available; a broken torch
    # is simply reported as such by the probe.
    try:
        importlib.import_module("torch")
    except Exception:
        return


def run(args: argparse.Namespace) -> int:
    """Probe, print, and check ``--require``."""
    from fi_compat.capabilities import get_capabilities
    from fi_compat.report import UnknownRequirementError, build_report, missing, render_text

    names = [name for name in str(args.require).split(",") if name.strip()]
    _import_torch_quietly()
    capabilities = get_capabilities()
    try:
        lacking = missing(capabilities, names)
    except UnknownRequirementError as error:
        print(f"fi-compat report: {error}", file=sys.stderr)
        return 2
    if args.json:
        report = build_report(capabilities)
        if names:
            report["require"] = {"names": names, "missing": lacking}
        print(json.dumps(report, indent=2, sort_keys=False))
    else:
        sys.stdout.write(render_text(capabilities))
    if lacking:
        print("fi-compat report: required capabilities are missing:", file=sys.stderr)
        for entry in lacking:
            print(f"  - {entry}", file=sys.stderr)
        return 1
    return 0
