"""When to fuse FlashInfer's allreduce with the next layer's residual + RMSNorm.

:func:`decide_fusion` decides once per deployment (a :class:`Deployment`) whether
allreduce fusion is on, and names the rule that decided it and why;
:func:`should_fuse_mlp_allreduce_with_next_layer` is the cheap per-layer check made on
every forward pass once that decision is known. The rules, their precedence and the
allow-list are described in the fusion policy guide, ``docs/guide/policy.md``.

This package imports neither torch nor flashinfer.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from fi_compat.errors import PolicyInputError
from fi_compat.policy._deployment import (
    FUSION_ARCHITECTURES,
    FUSION_COMPUTE_CAPABILITY_MAJORS,
    Deployment,
    FusionChoice,
    RuleEffect,
    RuleId,
    is_h20_device,
    parse_compute_capability,
)
from fi_compat.policy._layers import (
    DEFAULT_MAX_FUSION_TOKENS,
    DummyRunShape,
    ScatterMode,
    align_dummy_run_num_tokens,
    align_dummy_run_shape,
    should_fuse_mlp_allreduce_with_next_layer,
)
from fi_compat.policy._rules import DEFAULT_RULES, FusionDecision, FusionRule, decide_fusion

__all__ = [
    "DEFAULT_MAX_FUSION_TOKENS",
    "DEFAULT_RULES",
    "FUSION_ARCHITECTURES",
    "FUSION_COMPUTE_CAPABILITY_MAJORS",
    "Deployment",
    "DummyRunShape",
    "FusionChoice",
    "FusionDecision",
    "FusionRule",
    "PolicyInputError",
    "RuleEffect",
    "RuleId",
    "ScatterMode",
    "align_dummy_run_num_tokens",
    "align_dummy_run_shape",
    "decide_fusion",
    "is_h20_device",
    "parse_compute_capability",
    "should_fuse_mlp_allreduce_with_next_layer",
]


def __dir__() -> list[str]:
    return list(__all__)
