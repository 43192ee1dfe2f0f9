"""Argument checks shared by every public entry point.

One rule and one message per kind of argument, whichever entry point takes it. Every
check has the same four parameters:

``name``
    The argument as the message names it (``"tp_size"``, ``"factory_options['top_k']"``).
``value``
    What was passed.
``error``
    The class to raise: :class:`~fi_compat.errors.InvalidArgumentError` unless a domain
    has its own (the planner's ``PlannerConfigError``, the policy's ``PolicyInputError``,
    comm's ``WorkspaceMismatchError``), so each domain keeps its error type.
``fix``
    What the reader should do; each check has a default.

Messages take :func:`~fi_compat.errors.explain`'s shape: ``expected <name> to be ...;
found <value> of type <type>. Fix: ...``.

None of these belongs on a per-call hot path: a fast path checks with one expression of
identity comparisons and asks these only to say what was wrong. This module imports
neither torch nor flashinfer.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Iterable

from fi_compat.errors import InvalidArgumentError, explain

__all__ = [
    "describe",
    "require_bool",
    "require_choice",
    "require_instance",
    "require_int",
    "require_real",
    "require_str",
    "require_strs",
]

_BOOL_FIX = (
    "pass True or False; convert explicitly where the value comes from (bool('false') is "
    "True, so parse strings yourself; bool(x) for a numpy bool or an int)"
)


def describe(value: object) -> str:
    """What was found, for the ``found`` half of a message.

    Parameters
    ----------
    value
        Anything; its ``repr`` is shortened by :mod:`reprlib` (which also survives a
        ``__repr__`` that raises).

    Returns
    -------
    str
        ``"None"``, or ``"<short repr> of type <type>"``, the type qualified by its module
        unless it is a built-in (``"'8' of type str"``, ``"True of type numpy.bool"``).
    """
    if value is None:
        return "None"
    kind = type(value)
    module = kind.__module__
    name = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    return f"{reprlib.repr(value)} of type {name}"


def _refuse(
    error: type[InvalidArgumentError],
    name: str,
    kind: str,
    value: object,
    *,
    optional: bool = False,
    detail: str | None = None,
    fix: str | None,
) -> InvalidArgumentError:
    """The error saying that ``name`` should have been ``kind`` but was ``value``."""
    expected = f"{name} to be {'None or ' if optional else ''}{kind}"
    if detail:
        expected = f"{expected} ({detail})"
    return error(explain(expected, describe(value), fix=fix or f"pass {name} as {kind}"))


def require_bool(
    name: str,
    value: object,
    *,
    optional: bool = False,
    error: type[InvalidArgumentError] = InvalidArgumentError,
    fix: str | None = None,
) -> None:
    """Refuse anything but ``True`` or ``False`` (or ``None`` when ``optional``).

    ``bool("false")`` is ``True``: a switch that converted its argument would turn on for
    the string ``"false"``, ``"0"`` or ``"off"``. So switches take real bools only; ``0``,
    ``1``, strings and ``numpy.bool_`` are refused, not converted.

    Parameters
    ----------
    name, value, error, fix
        See the module docstring; ``fix`` defaults to how to convert a value to a bool.
    optional
        Accept ``None`` as well.

    Raises
    ------
    InvalidArgumentError
        (``error``) ``value`` is not a bool.
    """
    if value is True or value is False or (optional and value is None):
        return
    raise _refuse(
        error, name, "a bool (True or False)", value, optional=optional, fix=fix or _BOOL_FIX
    )


def require_choice(
    name: str,
    value: object,
    choices: tuple[str, ...],
    *,
    error: type[InvalidArgumentError] = InvalidArgumentError,
    fix: str | None = None,
) -> None:
    """Refuse anything but one of the strings ``choices``.

    Parameters
    ----------
    name, value, error, fix
        See the module docstring.
    choices
        The accepted values.

    Raises
    ------
    InvalidArgumentError
        (``error``) ``value`` is not a str, or not one of ``choices``.
    """
    if isinstance(value, str) and value in choices:
        return
    kind = "one of " + ", ".join(map(repr, choices))
    raise _refuse(error, name, kind, value, fix=fix or "pass one of those")


def require_str(
    name: str,
    value: object,
    *,
    nonempty: bool = False,
    detail: str | None = None,
    error: type[InvalidArgumentError] = InvalidArgumentError,
    fix: str | None = None,
) -> None:
    """Refuse anything but a ``str`` (a non-empty one when ``nonempty``).

    Parameters
    ----------
    name, value, error, fix
        See the module docstring.
    nonempty
        Refuse ``""`` as well.
    detail
        What the text means, shown in parentheses after the expectation.

    Raises
    ------
    InvalidArgumentError
        (``error``) ``value`` is not a str, or is empty when ``nonempty``.
    """
    if isinstance(value, str) and (value or not nonempty):
        return
    kind = "a non-empty str" if nonempty else "a str"
    raise _refuse(error, name, kind, value, detail=detail, fix=fix)


def require_int(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    optional: bool = False,
    detail: str | None = None,
    error: type[InvalidArgumentError] = InvalidArgumentError,
    fix: str | None = None,
) -> None:
    """Refuse anything but an ``int`` in ``minimum..maximum`` (both ends included).

    A bool is an ``int`` to Python but never a count or a size here, so it is refused; so
    are floats, even whole ones, and strings of digits.

    Parameters
    ----------
    name, value, error, fix
        See the module docstring.
    minimum, maximum
        The bounds, each included; ``None`` for none.
    optional
        Accept ``None`` as well.
    detail
        What the number means, shown in parentheses after the expectation.

    Raises
    ------
    InvalidArgumentError
        (``error``) ``value`` is not an int, is a bool, or is out of bounds.
    """
    if optional and value is None:
        return
    if (
        not isinstance(value, bool)
        and isinstance(value, int)
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    ):
        return
    if minimum is not None and maximum is not None:
        kind = f"an int in {minimum}..{maximum}"
    elif minimum is not None:
        kind = f"an int >= {minimum}"
    elif maximum is not None:
        kind = f"an int <= {maximum}"
    else:
        kind = "an int"
    raise _refuse(error, name, kind, value, optional=optional, detail=detail, fix=fix)


def require_real(
    name: str,
    value: object,
    *,
    minimum: float | None = None,
    error: type[InvalidArgumentError] = InvalidArgumentError,
    fix: str | None = None,
) -> float:
    """``value`` as a finite float (at least ``minimum``); anything else is refused.

    Accepts any real number but a bool: a float, a float subclass, an int, a NumPy scalar.
    nan and the infinities are refused.

    Parameters
    ----------
    name, value, error, fix
        See the module docstring.
    minimum
        The smallest value allowed (included); ``None`` for no bound.

    Returns
    -------
    float
        ``float(value)``.

    Raises
    ------
    InvalidArgumentError
        (``error``) ``value`` is not a real number, is a bool, is not finite, or is below
        ``minimum``.
    """
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        try:
            result = float(value)
        except (ArithmeticError, TypeError, ValueError):  # Fraction(10**400): OverflowError
            result = math.nan
        if math.isfinite(result) and (minimum is None or result >= minimum):
            return result
    kind = "a finite real number" if minimum is None else f"a finite real number >= {minimum}"
    raise _refuse(error, name, kind, value, fix=fix)


def require_instance(
    name: str,
    value: object,
    cls: type | tuple[type, ...],
    kind: str,
    *,
    optional: bool = False,
    error: type[InvalidArgumentError] = InvalidArgumentError,
    fix: str | None = None,
) -> None:
    """Refuse anything but an instance of ``cls`` (or ``None`` when ``optional``).

    Parameters
    ----------
    name, value, error, fix
        See the module docstring.
    cls
        The class, or a tuple of classes, ``value`` must be an instance of.
    kind
        ``cls`` as the message names it, with its article: ``"a FusionChoice"``.
    optional
        Accept ``None`` as well.

    Raises
    ------
    InvalidArgumentError
        (``error``) ``value`` is not an instance of ``cls``.
    """
    if isinstance(value, cls) or (optional and value is None):
        return
    raise _refuse(error, name, kind, value, optional=optional, fix=fix)


def require_strs(
    name: str,
    value: object,
    *,
    error: type[InvalidArgumentError] = InvalidArgumentError,
    fix: str | None = None,
) -> tuple[str, ...]:
    """``value`` as a tuple of str: any iterable of str but a str or bytes itself.

    A lone string is refused rather than read as a sequence of one-character names.

    Parameters
    ----------
    name, value, error, fix
        See the module docstring.

    Raises
    ------
    InvalidArgumentError
        (``error``) ``value`` is a str, bytes, not iterable, or holds something not a str.
    """
    kind = "a list or tuple of str"
    if isinstance(value, str | bytes | bytearray):
        raise _refuse(error, name, kind, value, fix=fix or "wrap a single item in a list")
    if not isinstance(value, Iterable):
        raise _refuse(error, name, kind, value, fix=fix)
    items: tuple[object, ...] = tuple(value)
    strings: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise _refuse(error, f"every item of {name}", "a str", item, fix=fix)
        strings.append(item)
    return tuple(strings)
