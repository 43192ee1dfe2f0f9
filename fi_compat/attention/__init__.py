"""Deterministic attention planning: the split settings reach every wrapper on every path.

Deterministic inference with FlashInfer attention needs every ``plan`` call to carry
``fixed_split_size=`` and ``disable_split_kv=`` (FlashInfer 0.4.0+). An
:class:`AttentionPlanner` routes every ``plan`` call of an engine through one function that
adds them; an engine that keeps its own ``plan`` calls wraps each FlashInfer wrapper with
:func:`deterministic_wrapper` instead::

    decode = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper(
        workspace, "NHD", use_tensor_cores=True, backend="fa2"))
    decode.plan(...)                        # carries the settings

Both follow :func:`fi_compat.determinism.is_deterministic` and refuse, never drop, a
wrapper that cannot take the settings. Importing this package imports neither torch nor
FlashInfer. The deterministic-attention guide, ``docs/guide/attention.md``, explains the
rest.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from fi_compat.attention._layout import Layout, PlanArgs, PlanTarget
from fi_compat.attention._planner import AttentionPlanner
from fi_compat.attention._reach import FamilyReach, Reach, Verdict, family_reach, measured_releases
from fi_compat.attention._reach import reach as split_reach
from fi_compat.attention._settings import (
    DEFAULT_DECODE_SPLIT_SIZE,
    DEFAULT_PREFILL_SPLIT_SIZE,
    NO_FIXED_SIZE,
    SPLIT_KEYWORDS,
    Settings,
)
from fi_compat.attention._spans import (
    KvSpan,
    cross_attention_decoder_span,
    cross_attention_encoder_span,
    full_span,
    window_decode_span,
    window_prefill_span,
)
from fi_compat.attention._wrapper import (
    deterministic_wrapper,
    fast_decode_plan,
    is_deterministic_wrapper,
)
from fi_compat.errors import (
    BackendNotDeterministicError,
    DeterminismUnavailableError,
    PlannerConfigError,
    TensorCoresRequiredError,
)

__all__ = [
    "DEFAULT_DECODE_SPLIT_SIZE",
    "DEFAULT_PREFILL_SPLIT_SIZE",
    "NO_FIXED_SIZE",
    "SPLIT_KEYWORDS",
    "AttentionPlanner",
    "BackendNotDeterministicError",
    "DeterminismUnavailableError",
    "FamilyReach",
    "KvSpan",
    "Layout",
    "PlanArgs",
    "PlanTarget",
    "PlannerConfigError",
    "Reach",
    "Settings",
    "TensorCoresRequiredError",
    "Verdict",
    "cross_attention_decoder_span",
    "cross_attention_encoder_span",
    "deterministic_wrapper",
    "family_reach",
    "fast_decode_plan",
    "full_span",
    "is_deterministic_wrapper",
    "measured_releases",
    "split_reach",
    "window_decode_span",
    "window_prefill_span",
]


def __dir__() -> list[str]:
    return list(__all__)
