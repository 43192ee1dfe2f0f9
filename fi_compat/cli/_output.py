"""How every ``fi-compat`` subcommand writes and exits: escaped text, quiet broken pipes.

See :mod:`fi_compat.cli` for the behaviour these helpers give the command line.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "encodable",
    "point_stdout_at_devnull",
    "write_err",
    "write_out",
]

#: Exit status when stdout's reader has gone away: 128 + SIGPIPE (13).
EXIT_BROKEN_PIPE = 141

#: Exit status after Ctrl-C: 128 + SIGINT (2).
EXIT_INTERRUPTED = 130


def encodable(text: str, stream: TextIO | None) -> str:
    """``text`` with every character ``stream``'s encoding cannot write backslash-escaped."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        return text.encode(encoding, "backslashreplace").decode(encoding)
    except (LookupError, UnicodeError):  # an encoding Python does not know, or a lossy one
        return text.encode("ascii", "backslashreplace").decode("ascii")


def write_out(text: str) -> None:
    """Write ``text`` to stdout, escaping what its encoding cannot show.

    A ``BrokenPipeError`` propagates to ``fi_compat.cli.main``, which ends the command
    quietly.
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


def point_stdout_at_devnull() -> None:
    # https://docs.python.org/3/library/signal.html#note-on-sigpipe
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor behind stdout
        return
