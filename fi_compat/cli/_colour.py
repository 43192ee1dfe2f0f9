"""Colour for ``fi-compat report`` on a terminal: when to use it, and the ANSI palette.

:func:`fi_compat.report.render_text` asks its ``paint(role, text)`` for every cell that
holds an answer while it builds each line, so only those cells are ever coloured, whatever
a name or a reason says. :func:`ansi` is that function for a terminal: green for what
works (``supported``, ``served``, ``yes``, ``available``), red for what does not
(``unsupported``, ``refused``, ``no``, ``unavailable``), yellow for ``unknown``, and a
hazard's tag by its severity (``error`` bold red, ``warning`` yellow, ``info`` plain).
:func:`plain` leaves every cell as it is, and :func:`palette` picks between them by
:func:`wants_colour`: colour only when stdout is a TTY, the ``NO_COLOR`` environment
variable is unset or empty (https://no-color.org) and ``TERM`` is not ``dumb``; ``--json``
is never coloured. Plain ANSI escapes: no dependency.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TextIO

__all__ = ["ansi", "palette", "plain", "wants_colour"]

RESET = "\033[0m"
GREEN, RED, YELLOW, BOLD_RED = "\033[32m", "\033[31m", "\033[33m", "\033[1;31m"

#: A role (an answer word, or a hazard's severity) -> its colour; "" for plain.
COLOURS: Mapping[str, str] = MappingProxyType(
    {
        "supported": GREEN,
        "served": GREEN,
        "yes": GREEN,
        "available": GREEN,
        "unsupported": RED,
        "refused": RED,
        "no": RED,
        "unavailable": RED,
        "unknown": YELLOW,
        "error": BOLD_RED,
        "warning": YELLOW,
        "info": "",
    }
)


def wants_colour(stream: TextIO | None, environ: Mapping[str, str]) -> bool:
    """Colour only for a terminal, with ``NO_COLOR`` unset or empty and ``TERM`` not dumb."""
    if stream is None or environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):  # a closed or detached stream
        return False


def plain(role: str, text: str) -> str:
    """Every cell as it is: for a pipe, a file, ``NO_COLOR`` or ``TERM=dumb``."""
    return text


def ansi(role: str, text: str) -> str:
    """``text`` in the colour of its ``role``; a role without a colour stays plain (a new
    answer word reads as it is, not in a colour it was never given)."""
    colour = COLOURS.get(role, "")
    return f"{colour}{text}{RESET}" if colour else text


def palette(stream: TextIO | None, environ: Mapping[str, str]) -> Callable[[str, str], str]:
    """:func:`ansi` where :func:`wants_colour` says so, else :func:`plain`."""
    return ansi if wants_colour(stream, environ) else plain
