"""Exceptions of the recorded-release kit."""

from __future__ import annotations

from fi_compat.errors import FiCompatError

__all__ = ["RecordingError", "UnknownReleaseError"]


class RecordingError(FiCompatError, ValueError):
    """A release file could not be read or parsed into a signature record."""


class UnknownReleaseError(FiCompatError, LookupError):
    """No recorded signatures ship for the requested FlashInfer release."""
