"""A generated block of a documentation page: the text between its two markers.

The pages' blocks that the tests' own generators write (the module map of
``docs/contributing.md``, the kinds table of ``docs/guide/upgrade.md``) are read and
rewritten here; the release and policy tables have their own, ``tools/doc_tables.py``.
"""

from __future__ import annotations

__all__ = ["block", "with_block"]


def block(text: str, start: str, end: str) -> str:
    """The text between the first ``start`` marker of ``text`` and the ``end`` after it,
    without the newlines that open it."""
    return text.split(start, 1)[1].split(end, 1)[0].lstrip("\n")


def with_block(text: str, start: str, end: str, content: str) -> str:
    """``text`` with the block between its markers replaced by a newline and ``content``."""
    head, rest = text.split(start, 1)
    return f"{head}{start}\n{content}{end}{rest.split(end, 1)[1]}"
