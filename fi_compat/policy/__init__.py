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

from collections.abc import Callable
from typing import Any

from fi_compat._deprecation import moved_attribute
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
from fi_compat.policy._engines import ENGINE_RULES, EngineRules, engine_rules
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

__all__ = [
    "DEFAULT_MAX_FUSION_TOKENS",
    "DEFAULT_RULES",
    "ENGINE_RULES",
    "FUSION_ARCHITECTURES",
    "FUSION_BACKENDS",
    "FUSION_COMPUTE_CAPABILITY_MAJORS",
    "Deployment",
    "DeploymentRefusedError",
    "DummyRunShape",
    "EngineRules",
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
    "engine_rules",
    "is_h20_device",
    "parse_compute_capability",
    "should_fuse_mlp_allreduce_with_next_layer",
]


def __dir__() -> list[str]:
    return list(__all__)


#: The names with an engine's release in them, before the rule sets became data keyed
#: by engine and release: name -> (engine, release, the EngineRules field it is).
_RELEASE_NAMED = {
    "SGLANG_0_5_23_RULES": ("sglang", "0.5.23", "rules"),
    "SGLANG_0_5_23_FUSION_ARCHITECTURES": ("sglang", "0.5.23", "architectures"),
    "sglang_0_5_23_backend": ("sglang", "0.5.23", "backend"),
    "sglang_0_5_23_refusal": ("sglang", "0.5.23", "refusal"),
    "VLLM_0_33_0_RULES": ("vllm", "0.33.0", "rules"),
    "vllm_0_33_0_backend": ("vllm", "0.33.0", "backend"),
    "vllm_0_33_0_refusal": ("vllm", "0.33.0", "refusal"),
}


def __getattr__(name: str) -> Any:
    return moved_attribute(
        __name__,
        {
            old: (f"use engine_rules({engine!r}, {release!r}).{field}", _loader(old))
            for old, (engine, release, field) in _RELEASE_NAMED.items()
        },
        name,
        until="0.4.0",
    )


def _loader(old: str) -> Callable[[], Any]:
    engine, release, field = _RELEASE_NAMED[old]
    return lambda: getattr(ENGINE_RULES[engine, release], field)
