"""Exceptions and warnings raised by fi-compat.

Every exception subclasses a built-in as well as :class:`FiCompatError`, so an engine can
catch ``ValueError`` or ``RuntimeError`` without importing fi-compat, or catch everything
fi-compat raises with ``except FiCompatError``.

Messages follow one pattern: what was expected, what was found, which FlashInfer release
changed it, and what to do.
"""

from __future__ import annotations

__all__ = [
    "CapabilityMissingError",
    "DeterminismUnavailableError",
    "FiCompatError",
    "FiCompatWarning",
    "FlashInferUnavailableError",
    "FusionForbiddenError",
    "GroupNotSupportedError",
    "InvalidArgumentError",
    "WorkspaceDestroyedError",
    "WorkspaceMismatchError",
    "explain",
]


def explain(
    expected: str,
    found: str,
    *,
    changed_in: str | None = None,
    fix: str | None = None,
) -> str:
    """Build a message in fi-compat's one shape.

    Parameters
    ----------
    expected
        What the caller or fi-compat needed.
    found
        What is actually there.
    changed_in
        The FlashInfer release that introduced (or removed) the thing, if one did.
    fix
        What the reader should do about it.
    """
    parts = [f"expected {expected}; found {found}."]
    if changed_in:
        parts.append(f"FlashInfer changed this in {changed_in}.")
    if fix:
        parts.append(f"Fix: {fix}")
    return " ".join(parts)


class FiCompatError(Exception):
    """Base class of every exception fi-compat raises on purpose."""


class InvalidArgumentError(FiCompatError, TypeError, ValueError):
    """An argument of a fi-compat entry point has the wrong type or value.

    Raised before anything reaches FlashInfer. It is both a ``TypeError`` and a
    ``ValueError``, so an engine catches it with whichever built-in it expects for a bad
    argument. The errors for a tensor that does not fit a workspace, a malformed planner
    and a malformed deployment description subclass it.
    """


class FlashInferUnavailableError(FiCompatError, ImportError):
    """FlashInfer (or ``flashinfer.comm``) cannot be imported here."""


class CapabilityMissingError(FiCompatError, RuntimeError):
    """The installed FlashInfer lacks something the caller asked for.

    Attributes
    ----------
    feature
        The probed item, for example ``"group"``.
    introduced_in
        The first FlashInfer release that has it, when known.
    """

    def __init__(self, message: str, *, feature: str, introduced_in: str | None = None) -> None:
        super().__init__(message)
        self.feature = feature
        self.introduced_in = introduced_in


class GroupNotSupportedError(CapabilityMissingError):
    """A process group was given that the installed release cannot honour.

    Dropping it would make the workspace rendezvous span the whole world, which hangs
    when the group is smaller than the world, so fi-compat refuses instead.
    """


class DeterminismUnavailableError(CapabilityMissingError):
    """Deterministic attention was asked for, but some ``plan`` cannot take the split settings."""


class FusionForbiddenError(FiCompatError, RuntimeError):
    """Allreduce fusion was asked for while deterministic inference is on."""


class WorkspaceMismatchError(InvalidArgumentError):
    """Tensors given to a fused call do not fit the workspace they would run on."""


class WorkspaceDestroyedError(FiCompatError, RuntimeError):
    """A fusion workspace was used after ``destroy()``."""


class FiCompatWarning(UserWarning):
    """Base class of every warning fi-compat emits; filter this to silence them all."""
