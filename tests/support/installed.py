"""The installed flashinfer-python, for tests that compare the fake with the real release."""

from __future__ import annotations

import importlib
import importlib.metadata
from types import ModuleType

import pytest

__all__ = ["import_installed"]

#: The release the venv pins (constraints/dev.txt) and the fake's real-release tests target.
PINNED = "0.7.2.post1"


def import_installed(*modules: str) -> tuple[ModuleType, ...]:
    """``modules`` of the installed FlashInfer, or skip the test saying why they are not.

    Skips when flashinfer-python is not installed, is not :data:`PINNED`, or a module does
    not import on this machine.
    """
    try:
        installed = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("flashinfer-python is not installed")
    if installed != PINNED:
        pytest.skip(f"needs flashinfer-python {PINNED}, found {installed}")
    try:
        return tuple(importlib.import_module(module) for module in modules)
    except Exception as error:  # the real package may not import on this machine
        pytest.skip(f"flashinfer not importable: {type(error).__name__}: {error}")
