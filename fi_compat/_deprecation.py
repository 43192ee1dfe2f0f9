"""Deprecation paths for public names: a keyword renamed, a name made private or moved,
a method, property or field renamed.

Each warns with :class:`DeprecationWarning` at the caller's line and names the fi-compat
release that removes the old spelling. Nothing here runs on a per-call path of the comm
facade or the attention planner.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)


def warn(message: str, *, stacklevel: int = 3) -> None:
    """Warn with :class:`DeprecationWarning`, attributed ``stacklevel`` frames up."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def renamed_keyword(
    old: str, new: str, *, until: str, subject: str | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Let a function with a parameter ``new`` still take it as ``old=``, warning.

    The decorated function's signature is unchanged (type checkers see only ``new``).
    Passing both spellings (or ``old=`` beside a positional value for ``new``) raises
    :class:`TypeError`, as a duplicated argument would. ``subject`` is how the messages
    name the call (the function's dotted name by default).
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        qualified = subject or f"{function.__module__}.{function.__qualname__}"
        names = list(inspect.signature(function).parameters)
        # How many positional values reach ``new``'s slot: its position among the parameters.
        position = names.index(new) if new in names else 0

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if old in kwargs:
                if new in kwargs or len(args) > position:
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


class _RenamedAttribute:
    """A class attribute that answers with another one, warning (see
    :func:`renamed_attribute`)."""

    def __init__(self, new: str, until: str) -> None:
        self.new = new
        self.until = until
        self.old = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        cls = type(instance).__name__
        # Attributed to the line that read the attribute: warn <- here <- caller.
        warn(
            f"{cls}.{self.old} is now {cls}.{self.new} (the same answer); the old name "
            f"goes in fi-compat {self.until}"
        )
        return getattr(instance, self.new)


def renamed_attribute(new: str, *, until: str) -> Any:
    """The old name of a renamed method, property or field, bound in the class body
    (``support = renamed_attribute("acceptance", until="0.4.0")``).

    Reading it on an instance warns at the caller's line and gives what ``new`` gives (a
    bound method, a value), so old calls and reads work unchanged; it cannot be assigned
    (the classes it serves are frozen). A dataclass does not take it for a field.
    """
    return _RenamedAttribute(new, until)


def renamed_field(old: str, new: str, *, until: str) -> Callable[[C], C]:
    """Class decorator for a dataclass whose field ``old`` is now ``new``: its constructor
    still takes ``old=``, warning (:func:`renamed_keyword`). Bind
    ``old = renamed_attribute(new, ...)`` in the class body for reading it."""

    def decorate(cls: C) -> C:
        public = cls.__module__.split("._", 1)[0]
        init = renamed_keyword(old, new, until=until, subject=f"{public}.{cls.__qualname__}")
        cls.__init__ = init(cls.__init__)  # type: ignore[misc]
        return cls

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
