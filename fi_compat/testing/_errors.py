"""Exceptions of the recorded-release kit."""

from __future__ import annotations

from fi_compat.errors import FiCompatError

__all__ = ["FakeUninstalledError", "RecordingError", "UnknownReleaseError"]


class RecordingError(FiCompatError, ValueError):
    """A release file could not be read or parsed into a signature record."""


class UnknownReleaseError(FiCompatError, LookupError):
    """No recorded signatures ship for the requested FlashInfer release."""


class FakeUninstalledError(FiCompatError, RuntimeError):
    """A function of a fake flashinfer was called after its ``fake_flashinfer()`` ended."""
