"""The errors the attention planner raises, on top of :mod:`fi_compat.errors`."""

from __future__ import annotations

from fi_compat.errors import DeterminismUnavailableError, FiCompatError

__all__ = ["PlannerConfigError", "TensorCoresRequiredError"]


class TensorCoresRequiredError(DeterminismUnavailableError, ValueError):
    """A decode wrapper without tensor cores was handed to a deterministic planner.

    FlashInfer's decode wrapper honours ``fixed_split_size`` and ``disable_split_kv`` only
    on its tensor-core path: ``plan(fixed_split_size=...)`` raises ``ValueError`` without
    tensor cores, and ``disable_split_kv`` is silently ignored there. It is a
    :class:`~fi_compat.errors.DeterminismUnavailableError` (``RuntimeError``) and a
    ``ValueError``, like FlashInfer's own error for the same mistake.
    """


class PlannerConfigError(FiCompatError, ValueError):
    """The planner was built or called with arguments that cannot be right.

    For example the wrong number of wrappers for the layout, a ``Settings`` value that
    disagrees with :mod:`fi_compat.determinism`, or split settings passed by the caller.
    """
