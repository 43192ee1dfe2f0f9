"""Guarded steps for the probe: any failure but Ctrl-C becomes text, never a crash.

FlashInfer may throw anything at the probe (``SystemExit`` included), and an exception's
``__str__`` may itself raise; :func:`fi_compat._signature.describe_error` words it safely.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fi_compat._signature import describe_error

_T = TypeVar("_T")


def attempt(func: Callable[..., _T], *args: Any) -> tuple[_T | None, str | None]:
    """``(func(*args), None)``, or ``(None, description)`` for anything but Ctrl-C."""
    try:
        return func(*args), None
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # FlashInfer may throw anything at the probe
        return None, describe_error(error)


def guarded_getattr(obj: object, name: str) -> tuple[Any, str | None]:
    """``(value, None)``; ``(None, None)`` when absent; ``(None, description)`` when reading
    the attribute raised something other than ``AttributeError`` (a lazy ``__getattr__``
    raising ``ModuleNotFoundError``, a property raising ``SystemExit``, ...)."""
    try:
        return getattr(obj, name), None
    except KeyboardInterrupt:
        raise
    except AttributeError:
        return None, None
    except BaseException as error:
        return None, describe_error(error)


def member(obj: object, name: str, test: Callable[[Any], bool]) -> tuple[Any, bool, str | None]:
    """``(value, test(value), None)`` for ``obj.<name>``; ``(None, False, description)``
    when reading it or testing it raised; ``(None, False, None)`` when it is absent."""
    value, error = guarded_getattr(obj, name)
    if error is not None:
        return None, False, error
    passed, error = attempt(test, value)
    return value, bool(passed), error
