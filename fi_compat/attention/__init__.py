"""Deterministic attention planning: the split settings reach every wrapper on every path.

Deterministic inference with FlashInfer attention needs every ``plan`` call to fix the
split-KV reduction order with ``fixed_split_size=`` and ``disable_split_kv=`` (FlashInfer
0.4.0+). An engine that builds each ``plan`` call by hand forgets one path sooner or later
(SGLang once passed them on its single-wrapper path but not on the sliding-window and
cross-attention paths, and outputs drifted with batch size). Here every path of every
layout and phase produces :class:`PlanArgs` that go through one function,
``_planner._call_plan``, which adds the settings chosen once when the planner was built::

    from fi_compat.attention import AttentionPlanner, PlanArgs

    planner = AttentionPlanner.sliding_window(
        window_left, prefill=(window_paged, full_paged), decode=(window_dec, full_dec)
    )
    spans = planner.decode_spans(seq_lens)            # (window, full) KvSpan
    # ... the engine builds indptr / indices from each span ...
    planner.plan_decode([PlanArgs(indptr_w, indices_w, last_page_len, *heads),
                         PlanArgs(indptr_f, indices_f, last_page_len, *heads)])

Contract with :mod:`fi_compat.determinism`:

- The planner reads :func:`fi_compat.determinism.is_deterministic` once, when it is built
  (``Settings.deterministic=None``). An explicit ``Settings(deterministic=...)`` that
  disagrees with the switch is refused: there is one switch.
- The same switch makes :func:`fi_compat.determinism.ensure_fusion_allowed` raise, which
  the comm facade calls before creating an allreduce-fusion workspace. So a deterministic
  planner never runs next to allreduce fusion, as long as the switch is set at start-up,
  before planners and workspaces are built, and not flipped afterwards.
- Deterministic: every plan gets ``fixed_split_size=<prefill or decode size>`` and
  ``disable_split_kv=False`` (eager), or ``fixed_split_size=None`` and
  ``disable_split_kv=True`` (``Settings(cuda_graph=True)``: capture and replay). Not
  deterministic: nothing is added; the call is exactly the engine's direct call.
- Refuse, never drop: when deterministic and a wrapper's ``plan`` cannot take the split
  settings (before 0.4.0, or ``**kwargs`` fi-compat cannot follow), a decode wrapper
  lacks tensor cores, or its class and backend were not measured to hand the settings to
  the kernel on the installed release (:func:`split_reach`; ``backend="auto"`` never is),
  the planner's constructor raises; a forward pass never starts.

Engines that keep their own ``plan`` calls wrap each FlashInfer wrapper instead::

    decode = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper(
        workspace, "NHD", use_tensor_cores=True, backend="fa2"))
    decode.plan(...)                        # carries the settings
    fast_decode_plan(decode, ...)           # so does the release's fast plan

The same checks run when wrapping; per ``plan`` the wrapper only merges the settings.

Importing this package imports neither torch nor FlashInfer.

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
