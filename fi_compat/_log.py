"""The package logger: silent by default, debug records only, never on a per-call path."""

from __future__ import annotations

import logging

__all__ = ["get_logger"]

_root = logging.getLogger("fi_compat")
_root.addHandler(logging.NullHandler())


def get_logger(name: str) -> logging.Logger:
    """The logger for one fi-compat module (a child of ``fi_compat``)."""
    return logging.getLogger(name)
