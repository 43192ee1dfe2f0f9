"""The errors the attention planner raises, on top of :mod:`fi_compat.errors`."""

from __future__ import annotations

from fi_compat.errors import DeterminismUnavailableError, InvalidArgumentError

__all__ = ["PlannerConfigError", "TensorCoresRequiredError"]


class TensorCoresRequiredError(DeterminismUnavailableError, ValueError):
    """A decode wrapper without tensor cores was handed to a deterministic planner.

    FlashInfer's decode wrapper honours ``fixed_split_size`` and ``disable_split_kv`` only
    on its tensor-core path: ``plan(fixed_split_size=...)`` raises ``ValueError`` without
    tensor cores, and ``disable_split_kv`` is silently ignored there. It is a
    :class:`~fi_compat.errors.DeterminismUnavailableError` (``RuntimeError``) and a
    ``ValueError``, like FlashInfer's own error for the same mistake.
    """


class PlannerConfigError(InvalidArgumentError):
    """The planner was built or called with arguments that cannot be right.

    For example the wrong number of wrappers for the layout, a wrapper without a callable
    ``plan``, an unknown layout, a ``Settings`` value that disagrees with
    :mod:`fi_compat.determinism`, split settings passed by the caller, or a step given the
    wrong number of :class:`~fi_compat.attention.PlanArgs`. Raised before any wrapper is
    planned. An :class:`~fi_compat.errors.InvalidArgumentError`, so also a ``ValueError``
    and a ``TypeError``.
    """
