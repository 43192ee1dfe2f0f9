"""The one switch for deterministic inference.

An engine sets determinism once, at start-up, with :func:`set_deterministic`; the attention
planner, the comm facade and the fusion policy all read this switch, and there is no second
flag that could disagree with it. The errors guide, ``docs/guide/errors.md``, says what each
does while it is on.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from fi_compat._arguments import require_bool, require_str
from fi_compat.errors import FusionForbiddenError, explain

__all__ = [
    "deterministic",
    "ensure_fusion_allowed",
    "is_deterministic",
    "set_deterministic",
]


def __dir__() -> list[str]:
    return list(__all__)


_lock = threading.Lock()
_enabled = False


def set_deterministic(enabled: bool) -> None:
    """Turn deterministic inference on or off for this process.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    enabled
        ``True`` or ``False``; nothing else.

    Raises
    ------
    InvalidArgumentError
        ``enabled`` is not a bool (``"false"``, ``0``, ``None``, ``numpy.bool_``, ...); the
        switch is left as it was.
    """
    global _enabled
    require_bool("enabled", enabled)
    with _lock:
        _enabled = enabled


def is_deterministic() -> bool:
    """Whether deterministic inference is on for this process.

    .. versionadded:: 0.2.0
    """
    return _enabled


def deterministic(enabled: bool = True) -> AbstractContextManager[None]:
    """Set the switch for the duration of a ``with`` block, then restore it (for tests).

    .. versionadded:: 0.2.0

    Parameters
    ----------
    enabled
        ``True`` or ``False``; nothing else.

    Raises
    ------
    InvalidArgumentError
        ``enabled`` is not a bool; raised by this call, before the block is entered.
    """
    require_bool("enabled", enabled)
    return _deterministic(enabled)


@contextmanager
def _deterministic(enabled: bool) -> Iterator[None]:
    global _enabled
    with _lock:
        previous, _enabled = _enabled, enabled
    try:
        yield
    finally:
        with _lock:
            _enabled = previous


def ensure_fusion_allowed(what: str = "allreduce fusion") -> None:
    """Raise :class:`~fi_compat.errors.FusionForbiddenError` while determinism is on.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    what
        What is about to be set up, for the message.

    Raises
    ------
    FusionForbiddenError
        Deterministic inference is on.
    InvalidArgumentError
        ``what`` is not a str.
    """
    require_str(
        "what",
        what,
        detail="what is about to be set up, for the message",
        fix="pass a description such as 'allreduce fusion', or nothing",
    )
    if _enabled:
        raise FusionForbiddenError(
            explain(
                f"no {what} while deterministic inference is on",
                f"a request for {what} with fi_compat.determinism.is_deterministic() == True",
                fix="use the unfused path (workspace=None), or turn determinism off; the "
                "fused kernel's result depends on the batch, so it can never be "
                "deterministic (engines: do not pass --enable-flashinfer-allreduce-fusion "
                "with --enable-deterministic-inference)",
            )
        )
