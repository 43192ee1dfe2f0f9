"""Which backend values a wrapper class offers, which it refuses, and which one it holds.

A release offers the candidates (:data:`CANDIDATE_BACKENDS`) that its class source spells
as a string literal or its ``backend`` documentation as inline code
(:func:`offered_backends`), unless its constructor refuses the value itself
(:func:`rejects_value`) rather than the CPU it runs on. What an instance holds is read from
its attributes: those holding the requested value (:func:`backend_attributes`), and the
backend one built without ``backend=`` holds (:func:`constructed_backend`).
"""

from __future__ import annotations

import contextlib
import inspect
import re
import traceback
from typing import Any

from .reach_arguments import construct_any_layout

__all__ = [
    "CANDIDATE_BACKENDS",
    "CONSTRUCTED_BACKEND_ATTRIBUTES",
    "backend_attributes",
    "constructed_backend",
    "offered_backends",
    "rejects_value",
]

#: Backend values tried on every family that takes ``backend=``; a release offers the ones
#: its class source spells as a string literal and its constructor does not reject.
CANDIDATE_BACKENDS: tuple[str, ...] = (
    "auto",
    "fa2",
    "fa3",
    "cudnn",
    "cutlass",
    "trtllm-gen",
    "cute-dsl",
    "cute-dsl-prims",
    "cute-dsl-monolithic",
    "cute-dsl-modular",
    "fmha_v2",
    "cutile",
    "xqa",
    "prims-ts",
    "cake",
)

#: ``__init__`` errors that say the backend value itself is not one the class offers.
INVALID_BACKEND = re.compile(
    r"(unsupported|invalid|unknown|unrecognized|unrecognised)\s+(attention\s+)?backend"
    r"|backend\s*(must be|should be|is not one of)|not a valid backend"
    r"|does not support backend\s*="
    r"|backend (is )?not yet supported|backend is not supported for",
    re.IGNORECASE,
)
#: An ``assert`` that checks the backend value against the offered ones.
REJECTING_ASSERT = re.compile(r"assert\s+.*backend\w*\s+(not\s+)?in\b")

#: A numpydoc ``backend : str`` entry, up to the next parameter or section.
BACKEND_DOC = re.compile(r"^\s*backend\s*:[^\n]*\n((?:[ \t]+[^\n]*\n|[ \t]*\n)*)", re.MULTILINE)
#: A value spelled as inline code in such an entry.
DOC_VALUE = re.compile(r"``([A-Za-z0-9_-]+)``")

#: Where a wrapper keeps the backend it was built with: the requested value where a release
#: rewrites ``_backend`` when it resolves ``auto`` (the decode wrapper of 0.7.2), else
#: ``_backend``.
CONSTRUCTED_BACKEND_ATTRIBUTES = ("_requested_backend", "_backend")


def offered_backends(cls: Any) -> list[str]:
    """Candidates spelled as a string literal in the class's own source (or its bases')."""
    text = ""
    for klass in cls.__mro__:
        if (klass.__module__ or "").startswith("flashinfer"):
            with contextlib.suppress(OSError, TypeError):
                text += inspect.getsource(klass)
    documented = set(DOC_VALUE.findall(_backend_doc(cls)))
    return [
        c for c in CANDIDATE_BACKENDS if f'"{c}"' in text or f"'{c}'" in text or c in documented
    ]


def _backend_doc(cls: Any) -> str:
    """The ``backend`` entry of the constructor's (or the class's) numpydoc parameters."""
    for doc in (inspect.getdoc(cls.__init__) or "", inspect.getdoc(cls) or ""):
        match = BACKEND_DOC.search(doc)
        if match:
            return match.group(1)
    return ""


def rejects_value(error: BaseException, message: str) -> bool:
    """Whether ``__init__`` refused the backend value itself (not the CPU it runs on)."""
    if INVALID_BACKEND.search(message):
        return True
    frames = traceback.extract_tb(error.__traceback__)
    line = frames[-1].line if frames else ""
    return isinstance(error, AssertionError) and bool(REJECTING_ASSERT.search(line or ""))


def backend_attributes(wrapper: Any, requested: str) -> list[str]:
    """The wrapper's attributes that hold ``requested``, by name."""
    return sorted(name for name, value in vars(wrapper).items() if value == requested)


def constructed_backend(torch: Any, family: str, cls: Any) -> str | None:
    """The backend an instance built without ``backend=`` holds after ``__init__``.

    Not the signature's default: a class without ``backend=`` may still hand one to its
    base (the CUDA-graph decode wrapper passes the decode wrapper's ``"auto"`` on), and that
    is what ``plan`` resolves. :mod:`fi_compat._measured.reach` records it as such a class's
    ``default_backend`` (a class with ``backend=`` keeps its signature's default: its
    ``__init__`` may resolve ``"auto"`` for the stand-in GPU). None when the instance cannot
    be built or holds no str.
    """
    try:
        wrapper, _layout = construct_any_layout(torch, family, cls, None)
    except Exception:  # the class cannot be built on the CPU: nothing read
        return None
    for name in CONSTRUCTED_BACKEND_ATTRIBUTES:
        value = vars(wrapper).get(name)
        if isinstance(value, str):
            return value
    return None
