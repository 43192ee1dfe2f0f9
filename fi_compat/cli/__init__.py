"""The ``fi-compat`` command line: one module per subcommand, each with ``register``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import cast

from fi_compat._version import __version__

__all__ = ["COMMANDS", "build_parser", "main"]

#: Subcommand modules under ``fi_compat.cli``; each defines
#: ``register(subparsers) -> None`` and sets ``func`` on its parser.
COMMANDS: tuple[str, ...] = ("report", "policy")


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    return cast(Callable[[argparse.Namespace], int], func)(args)
