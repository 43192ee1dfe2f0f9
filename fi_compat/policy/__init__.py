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

from fi_compat.errors import DeploymentRefusedError, PolicyInputError
from fi_compat.policy._deployment import (
    FUSION_ARCHITECTURES,
    FUSION_BACKENDS,
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
from fi_compat.policy._rules import (
    DEFAULT_RULES,
    FusionDecision,
    FusionRule,
    FusionRuleSet,
    decide_fusion,
)
from fi_compat.policy._sglang import (
    SGLANG_0_5_23_FUSION_ARCHITECTURES,
    SGLANG_0_5_23_RULES,
    sglang_0_5_23_backend,
    sglang_0_5_23_refusal,
)
from fi_compat.policy._vllm import VLLM_0_33_0_RULES, vllm_0_33_0_backend, vllm_0_33_0_refusal

__all__ = [
    "DEFAULT_MAX_FUSION_TOKENS",
    "DEFAULT_RULES",
    "FUSION_ARCHITECTURES",
    "FUSION_BACKENDS",
    "FUSION_COMPUTE_CAPABILITY_MAJORS",
    "SGLANG_0_5_23_FUSION_ARCHITECTURES",
    "SGLANG_0_5_23_RULES",
    "VLLM_0_33_0_RULES",
    "Deployment",
    "DeploymentRefusedError",
    "DummyRunShape",
    "FusionChoice",
    "FusionDecision",
    "FusionRule",
    "FusionRuleSet",
    "PolicyInputError",
    "RuleEffect",
    "RuleId",
    "ScatterMode",
    "align_dummy_run_num_tokens",
    "align_dummy_run_shape",
    "decide_fusion",
    "is_h20_device",
    "parse_compute_capability",
    "sglang_0_5_23_backend",
    "sglang_0_5_23_refusal",
    "should_fuse_mlp_allreduce_with_next_layer",
    "vllm_0_33_0_backend",
    "vllm_0_33_0_refusal",
]


def __dir__() -> list[str]:
    return list(__all__)
