"""Deprecation paths for public names: a keyword renamed, a name made private.

Each warns with :class:`DeprecationWarning` at the caller's line and names the fi-compat
release that removes the old spelling. Nothing here runs on a per-call path of the comm
facade or the attention planner.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def warn(message: str, *, stacklevel: int = 3) -> None:
    """Warn with :class:`DeprecationWarning`, attributed ``stacklevel`` frames up."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def renamed_keyword(
    old: str, new: str, *, until: str
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Let a function whose first parameter is ``new`` still take it as ``old=``, warning.

    The decorated function's signature is unchanged (type checkers see only ``new``).
    Passing both spellings (or ``old=`` beside a positional value) raises
    :class:`TypeError`, as a duplicated argument would.
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        qualified = f"{function.__module__}.{function.__qualname__}"

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if old in kwargs:
                if new in kwargs or args:
                    raise TypeError(
                        f"{qualified}() got {old!r} and {new!r} (or a positional value): "
                        f"{old!r} is the deprecated spelling of {new!r}; pass {new!r} only"
                    )
                warn(
                    f"{qualified}({old}=...) is now {qualified}({new}=...); "
                    f"the keyword {old!r} goes in fi-compat {until}"
                )
                kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate


def moved_attribute(
    module: str, moved: dict[str, tuple[str, Callable[[], Any]]], name: str, *, until: str
) -> Any:
    """Answer a module ``__getattr__`` for a name that moved or became private.

    ``moved`` maps an old public name to ``(advice, load)``: what to use instead, and a
    function returning the object. Any other name raises :class:`AttributeError`.
    """
    entry = moved.get(name)
    if entry is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    advice, load = entry
    # Attributed to the line that read the name: warn <- here <- module __getattr__ <- caller.
    warn(
        f"{module}.{name} is deprecated: {advice}; the old name goes in fi-compat {until}",
        stacklevel=4,
    )
    return load()
