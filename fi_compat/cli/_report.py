"""``fi-compat report``: what the installed FlashInfer supports.

Exits 0 whatever FlashInfer does (a broken or hostile FlashInfer is a finding, not a
crash), 1 when ``--require`` names something that is not definitely supported, 2 for a
bad command line (an unknown or empty ``--require`` name included), and 141 when stdout's
reader goes away (see :mod:`fi_compat.cli`).

Whatever FlashInfer writes to stdout while it is imported (``print()``, ``os.write(1,
...)``, C ``printf``) goes to stderr instead, so ``--json`` output always parses.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from fi_compat._surface import DECODE, PLAN
from fi_compat.cli._colour import palette
from fi_compat.cli._output import write_err, write_out

__all__ = ["register", "run"]


def __dir__() -> list[str]:
    return list(__all__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="probe the installed FlashInfer and report what it supports",
        description="Probe the installed FlashInfer and report what it supports.",
        epilog="Exit status: 0 fine, 1 a --require name is not supported, 2 bad command "
        "line, 141 stdout closed early (128 + SIGPIPE).",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument(
        "--require",
        metavar="NAME,...",
        default="",
        help="exit 1 unless every named capability is supported, e.g. "
        "group,trigger_completion_at_end,fixed_split_size; accepts every name the "
        f"report prints, such as {DECODE.key}.{PLAN}.fixed_split_size",
    )
    parser.set_defaults(func=run)


def import_torch_quietly() -> None:
    # Loading torch first lets the report say whether CUDA is available; a broken torch
    # is simply reported as such by the probe.
    try:
        importlib.import_module("torch")
    except KeyboardInterrupt:
        raise
    except BaseException:  # SystemExit included: torch's failure is not the report's
        return


def _flush_c_stdio() -> None:
    # C code buffers printf() output when stdout is a pipe; flush it while fd 1 still
    # points at stderr, or it would land in the report at exit.
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:  # no C library to flush (Windows, a static build): nothing to do
        return


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send ``sys.stdout`` and file descriptor 1 to stderr for the duration."""
    saved_stream = sys.stdout
    with contextlib.suppress(OSError, ValueError, AttributeError):
        saved_stream.flush()
    saved_fd: int | None = None
    try:
        saved_fd = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no fd 1 or fd 2 (a daemon, an embedding): Python-level only
        if saved_fd is not None:
            os.close(saved_fd)
            saved_fd = None
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            sys.stdout.flush()  # whatever FlashInfer left there, still going to stderr
        _flush_c_stdio()
        sys.stdout = saved_stream
        if saved_fd is not None:
            os.dup2(saved_fd, 1)
            os.close(saved_fd)


def run(args: argparse.Namespace) -> int:
    """Probe, print, and check ``--require``."""
    from fi_compat.capabilities import get_capabilities
    from fi_compat.report import (
        UnknownRequirementError,
        build_report,
        missing,
        parse_requirements,
        render_text,
    )

    try:
        names = parse_requirements(str(args.require))
    except UnknownRequirementError as error:
        write_err(f"fi-compat report: {error}")
        return 2
    with stdout_to_stderr():
        import_torch_quietly()
        capabilities = get_capabilities()
    lacking = missing(capabilities, names)
    if args.json:
        report = build_report(capabilities)
        if names:
            report["require"] = {"names": names, "missing": lacking}
        write_out(json.dumps(report, indent=2, sort_keys=False) + "\n")
    else:
        write_out(render_text(capabilities, paint=palette(sys.stdout, os.environ)))
    if lacking:
        write_err("fi-compat report: required capabilities are missing:")
        for entry in lacking:
            write_err(f"  - {entry}")
        return 1
    return 0
