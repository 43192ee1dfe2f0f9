"""Colour for ``fi-compat report`` on a terminal: answers and hazards at a glance.

The text report is the same words either way (``render_text``); on a terminal they are
coloured by what they mean: green for what works (``supported``, ``served``, ``yes``, an
``available`` module), red for what does not (``unsupported``, ``refused``, ``no``,
``unavailable``), yellow for ``unknown``, and each hazard by its severity. Colour is used
only when stdout is a TTY and the ``NO_COLOR`` environment variable is unset or empty
(https://no-color.org), and never for ``--json``; ``TERM=dumb`` turns it off too. Plain
ANSI escapes: no dependency.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TextIO

__all__ = ["colourize", "wants_colour"]

_RESET = "\033[0m"
GREEN, RED, YELLOW, BOLD_RED = "\033[32m", "\033[31m", "\033[33m", "\033[1;31m"

#: An answer word -> its colour.
ANSWERS: Mapping[str, str] = {
    "supported": GREEN,
    "served": GREEN,
    "yes": GREEN,
    "available": GREEN,
    "unsupported": RED,
    "refused": RED,
    "no": RED,
    "unavailable": RED,
    "unknown": YELLOW,
}
#: A hazard's severity (``[error]``, ``[warning]``, ``[info]``) -> its colour.
SEVERITIES: Mapping[str, str] = {"error": BOLD_RED, "warning": YELLOW, "info": ""}

# "    keyword   supported   reason": the answer column of the keyword, kind and reach lines.
_ANSWER = re.compile(
    r"^(?P<head> {4}\S+ +)(?P<word>supported|unsupported|unknown|served|refused)(?= |$)"
)
# "  unified API: yes    legacy API: no": the API line's answers.
_API = re.compile(r"(?<=API: )(yes|no|unknown)\b")
# "flashinfer.comm   available": the module line.
_MODULE = re.compile(r"^(?P<head>\S+ +)(?P<word>available|unavailable)$")
# "  [warning] id: message": a hazard line.
_HAZARD = re.compile(r"^(?P<head>  )\[(?P<severity>\w+)\]")


def wants_colour(stream: TextIO | None, environ: Mapping[str, str]) -> bool:
    """Colour only for a terminal, with ``NO_COLOR`` unset or empty and ``TERM`` not dumb."""
    if stream is None or environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):  # a closed or detached stream
        return False


def _paint(word: str, colour: str) -> str:
    return f"{colour}{word}{_RESET}" if colour else word


def _line(line: str) -> str:
    found = _ANSWER.match(line)
    if found:
        word = found["word"]
        return found["head"] + _paint(word, ANSWERS[word]) + line[found.end() :]
    found = _MODULE.match(line)
    if found:
        return found["head"] + _paint(found["word"], ANSWERS[found["word"]])
    found = _HAZARD.match(line)
    if found:
        severity = found["severity"]
        tag = _paint(f"[{severity}]", SEVERITIES.get(severity, YELLOW))
        return found["head"] + tag + line[found.end() :]
    return _API.sub(lambda word: _paint(word[0], ANSWERS[word[0]]), line)


def colourize(text: str) -> str:
    """The report's text with its answers and hazards coloured (same words, same lines)."""
    return "\n".join(_line(line) for line in text.split("\n"))
