"""The ``fi-compat`` command line: one module per subcommand, each with ``register``.

Every subcommand behaves like a well-mannered Unix tool on the way out:

- Text that the terminal's encoding cannot show is written with backslash escapes
  (``\\u00e9``), never as a ``UnicodeEncodeError``.
- When the reader of stdout goes away (``fi-compat report --json | head -c 10``), the
  command stops quietly, without a traceback, and exits with :data:`EXIT_BROKEN_PIPE`
  (141 = 128 + SIGPIPE, the status a shell shows for a C tool that SIGPIPE ended, so
  ``set -o pipefail`` treats both alike). Remaining output is pointed at ``os.devnull``,
  as the Python documentation recommends, so the interpreter's final flush stays quiet.
- Ctrl-C stops it with one line on stderr and status :data:`EXIT_INTERRUPTED` (130).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO, cast

from fi_compat._arguments import require_strs
from fi_compat._version import __version__

__all__ = [
    "COMMANDS",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "build_parser",
    "encodable",
    "main",
    "write_err",
    "write_out",
]


def __dir__() -> list[str]:
    return list(__all__)


#: Subcommand modules under ``fi_compat.cli``; each defines
#: ``register(subparsers) -> None`` and sets ``func`` on its parser.
COMMANDS: tuple[str, ...] = ("report", "policy")

#: Exit status when stdout's reader has gone away: 128 + SIGPIPE (13).
EXIT_BROKEN_PIPE = 141

#: Exit status after Ctrl-C: 128 + SIGINT (2).
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="fi-compat",
        description="What the installed FlashInfer supports, and how fi-compat adapts to it.",
    )
    parser.add_argument("--version", action="version", version=f"fi-compat {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"fi_compat.cli.{name}").register(subparsers)
    return parser


def encodable(text: str, stream: TextIO | None) -> str:
    """``text`` with every character ``stream``'s encoding cannot write backslash-escaped."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        return text.encode(encoding, "backslashreplace").decode(encoding)
    except (LookupError, UnicodeError):  # an encoding Python does not know, or a lossy one
        return text.encode("ascii", "backslashreplace").decode("ascii")


def write_out(text: str) -> None:
    """Write ``text`` to stdout, escaping what its encoding cannot show.

    A ``BrokenPipeError`` propagates to :func:`main`, which ends the command quietly.
    """
    stream = sys.stdout
    if stream is not None:
        stream.write(encodable(text, stream))


def write_err(text: str) -> None:
    """Write one line to stderr; a stderr that cannot be written to is ignored."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(encodable(text, stream) + "\n")
        stream.flush()
    except (OSError, ValueError):  # a closed or broken stderr: nowhere left to complain
        return


def _point_stdout_at_devnull() -> None:
    # https://docs.python.org/3/library/signal.html#note-on-sigpipe
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor behind stdout
        return


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Parameters
    ----------
    argv
        The arguments after the program name; None reads ``sys.argv[1:]``.

    Raises
    ------
    InvalidArgumentError
        ``argv`` is neither None nor a list or tuple of str.
    """
    if argv is not None:
        argv = require_strs("argv", argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help(sys.stderr)
            return 2
        status = cast(Callable[[argparse.Namespace], int], func)(args)
        if sys.stdout is not None:
            sys.stdout.flush()  # a closed pipe shows here, while we can still handle it
    except BrokenPipeError:
        _point_stdout_at_devnull()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        write_err("fi-compat: interrupted")
        return EXIT_INTERRUPTED
    return status
