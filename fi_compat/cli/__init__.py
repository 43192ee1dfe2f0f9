"""The ``fi-compat`` command line: one private module per subcommand, each with ``register``.

Every subcommand behaves like a well-mannered Unix tool on the way out:

- Text that the terminal's encoding cannot show is written with backslash escapes
  (``\\u00e9``), never as a ``UnicodeEncodeError``.
- When the reader of stdout goes away (``fi-compat report --json | head -c 10``), the
  command stops quietly, without a traceback, and exits with ``EXIT_BROKEN_PIPE``
  (141 = 128 + SIGPIPE, the status a shell shows for a C tool that SIGPIPE ended, so
  ``set -o pipefail`` treats both alike). Remaining output is pointed at ``os.devnull``,
  as the Python documentation recommends, so the interpreter's final flush stays quiet.
- Ctrl-C stops it with one line on stderr and status ``EXIT_INTERRUPTED`` (130).

A ``diff`` or a ``scan`` reads hundreds of thousands of small records, none of them in a
reference cycle: :func:`main` runs a command with the cyclic collector's first threshold
raised (restored after), and :func:`console`, the program itself, freezes what is left
before the interpreter ends, so that its teardown does not search that heap for cycles
again and again (half a second of a one-second ``diff``; objects are still freed and exit
handlers still run).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn, cast

from fi_compat._arguments import require_strs
from fi_compat._version import __version__
from fi_compat.cli._output import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    point_stdout_at_devnull,
    write_err,
)

__all__ = ["console", "main"]


def __dir__() -> list[str]:
    return list(__all__)


#: Subcommands; each is the module ``fi_compat.cli._<name>``, which defines
#: ``register(subparsers) -> None`` and sets ``func`` on its parser.
_COMMANDS: tuple[str, ...] = ("report", "policy", "diff", "scan", "record", "measure")
#: The cyclic collector's first threshold while a command runs (CPython's default is 700):
#: a diff allocates about a million objects, and each full collection walks all of them.
_FIRST_THRESHOLD = 100_000


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """Collect cycles less often while a command runs; the thresholds as they were after."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], _FIRST_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def _build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="fi-compat",
        description="What the installed FlashInfer supports, and how fi-compat adapts to it.",
    )
    parser.add_argument("--version", action="version", version=f"fi-compat {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"fi_compat.cli._{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    .. versionadded:: 0.2.0

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
        parser = _build_parser()
        args = parser.parse_args(argv)
        func = getattr(args, "func", None)
        if func is None:
            parser.print_help(sys.stderr)
            return 2
        with _few_collections():
            status = cast(Callable[[argparse.Namespace], int], func)(args)
        if sys.stdout is not None:
            sys.stdout.flush()  # a closed pipe shows here, while we can still handle it
    except BrokenPipeError:
        point_stdout_at_devnull()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        write_err("fi-compat: interrupted")
        return EXIT_INTERRUPTED
    return status


def console() -> NoReturn:
    """The ``fi-compat`` program (and ``python -m fi_compat``): :func:`main` on
    ``sys.argv``, then exit with its status.

    .. versionadded:: 0.3.0

    The process ends here, so what the command read is frozen (:func:`gc.freeze`) first:
    the interpreter's teardown then frees it without searching it for cycles.
    """
    status = main()
    gc.freeze()
    raise SystemExit(status)
