"""When to fuse FlashInfer's allreduce with the next layer's residual + RMSNorm.

Two levels:

* :func:`decide_fusion` decides once per deployment whether allreduce fusion is on,
  from a :class:`Deployment` description, and says which rule decided it and why.
* :func:`should_fuse_mlp_allreduce_with_next_layer` is the cheap per-layer check an
  engine makes on every forward pass once the deployment-level decision is known;
  :func:`align_dummy_run_num_tokens` pads a warm-up token count the way the scheduler
  would.

Rules are data (:class:`FusionRule`). Each has an *effect class*; the decision is the
minimum of the rules that apply under one total order (effect class, then priority, then
id), so it does not depend on the order in which rules are listed. A veto (enforce-disable,
deterministic inference, or a hard blocker such as TP 1) therefore beats an explicit user
enable, which beats every condition that only blocks the *automatic* enable.

This module imports neither torch nor flashinfer.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fi_compat._arguments import (
    describe,
    require_bool,
    require_instance,
    require_int,
    require_str,
)
from fi_compat.determinism import is_deterministic
from fi_compat.errors import PolicyInputError, explain

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

_logger = logging.getLogger(__name__)

ENABLE_FLAG = "--enable-flashinfer-allreduce-fusion"

# Architectures (``config.json`` -> ``architectures[0]``) that SGLang auto-enables
# FlashInfer allreduce fusion for. Kept in this one place; every rule reads it.
FUSION_ARCHITECTURES: frozenset[str] = frozenset(
    {
        # -- SGLang PR #22664 (merged 2026-04-18), server_args.py
        #    `_handle_model_specific_adjustments`: the list as it stood then.
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "GptOssForCausalLM",
        "GlmMoeDsaForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM",  # added by PR #22664 itself
        "KimiK25ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        # -- Added in SGLang since: `_FLASHINFER_ALLREDUCE_FUSION_ARCHS` in
        #    python/sglang/srt/arg_groups/overrides.py (the auto-enable moved there
        #    from server_args.py), as read at sgl-project/sglang commit 003bbaf9ab79.
        "DeepseekV4ForCausalLM",
        "MistralLarge3ForCausalLM",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "NemotronH_Omni_Reasoning_V3",
    }
)

# Compute-capability majors that count as "SM90 or SM100 class". SGLang's
# `is_sm90_supported()` is `major == 9` (H100, H200, H20: 9.0) and its
# `is_sm100_supported()` is `major == 10` (B200/GB200: 10.0, B300/GB300: 10.3);
# both also require a CUDA toolkit of at least 12.3 / 12.8, which fi-compat does not
# model. Consumer and workstation Blackwell (12.x), Thor (11.0) and Ampere (8.x) do
# not count.
FUSION_COMPUTE_CAPABILITY_MAJORS: frozenset[int] = frozenset({9, 10})

# SGLang's FUSE_ALLREDUCE_MAX_BATCH_SIZE in layers/communicator.py: fusion applies
# to forward passes of 1..2048 tokens.
DEFAULT_MAX_FUSION_TOKENS = 2048


def __dir__() -> list[str]:
    return list(__all__)


class FusionChoice(enum.Enum):
    """What the user said about allreduce fusion on the command line."""

    UNSET = "unset"
    """No flag given: the policy may auto-enable."""
    ENABLE = "enable"
    """``--enable-flashinfer-allreduce-fusion``."""
    DISABLE = "disable"
    """Fusion off by the user's choice (no auto-enable)."""
    ENFORCE_DISABLE = "enforce-disable"
    """``--enforce-disable-flashinfer-allreduce-fusion``: off, whatever else says."""


class ScatterMode(enum.Enum):
    """How tokens are spread over ranks where the MLP runs (SGLang's ``ScatterMode``)."""

    SCATTERED = "scattered"
    """Each rank holds its own tokens (e.g. ``--moe-dense-tp-size 1``): no TP all-reduce."""
    TP_ATTN_FULL = "tp_attn_full"
    """Every rank of an attention-TP group holds that group's tokens."""
    FULL = "full"
    """Every rank holds every token."""
    MOE_FULL = "moe_full"
    """Full within the MoE group under MoE context-parallel all-gather (newer SGLang)."""


# Modes whose MLP output ends in a plain TP all-reduce that can be fused into the next
# layer's residual + RMSNorm. SCATTERED has no all-reduce at all (SGLang PR #19918:
# fusing there made up an all-reduce and produced garbage). MOE_FULL only occurs with
# MoE context-parallel all-gather, under which SGLang turns fusion off because the fused
# path skips the post-layer slice.
_FUSIBLE_MLP_MODES: frozenset[ScatterMode] = frozenset({ScatterMode.TP_ATTN_FULL, ScatterMode.FULL})


class RuleEffect(enum.IntEnum):
    """What a rule does when it applies, in precedence order (lower wins).

    The order of this enum *is* the precedence: any applying ``VETO`` beats any
    ``USER_DISABLE``/``USER_ENABLE``, which beat any ``BLOCK_AUTO_ENABLE``. When no rule
    applies, fusion is auto-enabled.
    """

    VETO = 0
    """Fusion off, whatever the user asked: enforce-disable, determinism, hard blockers."""
    USER_DISABLE = 1
    """The user turned fusion off."""
    USER_ENABLE = 2
    """The user turned fusion on; only a veto overrides it."""
    BLOCK_AUTO_ENABLE = 3
    """A condition of the automatic enable does not hold; an explicit enable still wins."""


class RuleId(enum.Enum):
    """Stable identifiers of the rules, also used in ``--json`` output."""

    ENFORCE_DISABLE = "enforce-disable"
    DETERMINISTIC_INFERENCE = "deterministic-inference"
    TP_SIZE_ONE = "tp-size-one"
    UNSUPPORTED_GPU = "unsupported-gpu"
    DP_ATTENTION = "dp-attention"
    ATTENTION_CONTEXT_PARALLEL = "attention-context-parallel"
    USER_DISABLE = "user-disable"
    USER_ENABLE = "user-enable"
    ARCHITECTURE_NOT_ALLOWED = "architecture-not-allowed"
    MULTI_NODE = "multi-node"
    H20_DEVICE = "h20-device"
    MOE_A2A_BACKEND = "moe-a2a-backend"
    AUTO_ENABLE = "auto-enable"
    """Not a rule: the outcome when no rule applies."""


def parse_compute_capability(text: str) -> tuple[int, int]:
    """Parse a compute capability such as ``"9.0"``, ``"10.3"``, ``"sm90"`` or ``"100"``.

    Raises
    ------
    PolicyInputError
        If ``text`` is not a str, or not a compute capability.
    """
    require_str("the compute capability", text, error=PolicyInputError)
    raw = text.strip().lower()
    for prefix in ("sm_", "sm"):
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    raw = raw.rstrip("af")  # sm_90a, sm_100f: arch-specific suffixes
    major_s, dot, minor_s = raw.partition(".")
    if not dot:  # "90" -> 9.0, "103" -> 10.3
        major_s, minor_s = raw[:-1], raw[-1:]
    if not (major_s.isdigit() and minor_s.isdigit() and major_s.isascii() and minor_s.isascii()):
        raise PolicyInputError(
            f"expected a compute capability like '9.0', '10.3' or 'sm90'; found {text!r}."
        )
    return int(major_s), int(minor_s)


def is_h20_device(device_name: str) -> bool:
    """Whether ``device_name`` names an H20 (an H200 does not count).

    Matches SGLang's test: the name contains ``H20`` but not ``H200``; case-insensitive.

    Raises
    ------
    PolicyInputError
        If ``device_name`` is not a str.
    """
    require_str("device_name", device_name, error=PolicyInputError)
    name = device_name.upper()
    return "H20" in name and "H200" not in name


@dataclass(frozen=True)
class Deployment:
    """What the fusion policy needs to know about one engine deployment.

    Parameters
    ----------
    architecture
        ``architectures[0]`` of the model's ``config.json``.
    compute_capability
        ``(major, minor)`` of the GPU, e.g. ``(9, 0)``.
    device_name
        The GPU's name, e.g. ``"NVIDIA H20"``; empty when unknown.
    tp_size
        Tensor-parallel size.
    nnodes
        Number of nodes.
    dp_attention
        Whether DP attention is on.
    attn_cp_size
        Attention context-parallel size.
    moe_a2a_backend
        MoE all-to-all backend; ``"none"`` means none.
    deterministic
        Whether deterministic inference is on. Defaults to the process-wide switch,
        :func:`fi_compat.determinism.is_deterministic`, read when the description is
        made, so an engine that set determinism once cannot describe a deployment that
        forgets it.
    fusion_choice
        What the user said about fusion.

    Raises
    ------
    PolicyInputError
        If a size is below 1 or not an int, the capability is malformed, a string is
        empty, or ``dp_attention`` or ``deterministic`` is not a bool (``"false"`` would
        otherwise count as on).
    """

    architecture: str
    compute_capability: tuple[int, int]
    device_name: str = ""
    tp_size: int = 1
    nnodes: int = 1
    dp_attention: bool = False
    attn_cp_size: int = 1
    moe_a2a_backend: str = "none"
    deterministic: bool = field(default_factory=is_deterministic)
    fusion_choice: FusionChoice = FusionChoice.UNSET

    def __post_init__(self) -> None:
        require_str(
            "architecture",
            self.architecture,
            nonempty=True,
            detail="architectures[0] of the model's config.json",
            error=PolicyInputError,
        )
        cc = self.compute_capability
        if not (isinstance(cc, tuple) and len(cc) == 2):
            raise PolicyInputError(f"expected compute_capability (major, minor); found {cc!r}.")
        require_int("compute_capability major", cc[0], minimum=0, error=PolicyInputError)
        require_int("compute_capability minor", cc[1], minimum=0, error=PolicyInputError)
        require_str("device_name", self.device_name, error=PolicyInputError)
        require_int("tp_size", self.tp_size, minimum=1, error=PolicyInputError)
        require_int("nnodes", self.nnodes, minimum=1, error=PolicyInputError)
        require_int("attn_cp_size", self.attn_cp_size, minimum=1, error=PolicyInputError)
        require_bool("dp_attention", self.dp_attention, error=PolicyInputError)
        require_bool("deterministic", self.deterministic, error=PolicyInputError)
        require_str(
            "moe_a2a_backend",
            self.moe_a2a_backend,
            nonempty=True,
            detail="a MoE all-to-all backend name, or 'none'",
            error=PolicyInputError,
        )
        require_instance(
            "fusion_choice",
            self.fusion_choice,
            FusionChoice,
            "a FusionChoice",
            error=PolicyInputError,
            fix="pass a FusionChoice member",
        )

    @property
    def sm(self) -> str:
        """The compute capability as text, e.g. ``"9.0"``."""
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view of this deployment."""
        return {
            "architecture": self.architecture,
            "compute_capability": self.sm,
            "device_name": self.device_name,
            "tp_size": self.tp_size,
            "nnodes": self.nnodes,
            "dp_attention": self.dp_attention,
            "attn_cp_size": self.attn_cp_size,
            "moe_a2a_backend": self.moe_a2a_backend,
            "deterministic": self.deterministic,
            "fusion_choice": self.fusion_choice.value,
        }


@dataclass(frozen=True)
class FusionRule:
    """One rule of the policy: when it applies, and what it then does.

    Parameters
    ----------
    rule_id
        Stable identifier; unique within a rule set.
    effect
        The precedence class; see :class:`RuleEffect`.
    applies
        Predicate over a deployment.
    explain
        Human-readable reason, given a deployment the rule applies to.
    priority
        Tie-break between rules of one effect class (lower is reported first). It
        never changes *whether* fusion is on, only which applying rule is named.

    Raises
    ------
    PolicyInputError
        If ``rule_id`` is not a :class:`RuleId`, ``effect`` not a :class:`RuleEffect`,
        ``applies`` or ``explain`` not callable, or ``priority`` not an int.
    """

    rule_id: RuleId
    effect: RuleEffect
    applies: Callable[[Deployment], bool] = field(compare=False)
    explain: Callable[[Deployment], str] = field(compare=False)
    priority: int = 0

    def __post_init__(self) -> None:
        require_instance(
            "rule_id",
            self.rule_id,
            RuleId,
            "a RuleId",
            error=PolicyInputError,
            fix="pass a RuleId member",
        )
        require_instance(
            "effect",
            self.effect,
            RuleEffect,
            "a RuleEffect",
            error=PolicyInputError,
            fix="pass a RuleEffect member",
        )
        for name in ("applies", "explain"):
            if not callable(getattr(self, name)):
                raise PolicyInputError(
                    explain(
                        f"{name} to be a callable taking a Deployment",
                        describe(getattr(self, name)),
                        fix=f"pass a function, e.g. {name}=lambda d: ...",
                    )
                )
        require_int("priority", self.priority, error=PolicyInputError)

    @property
    def sort_key(self) -> tuple[int, int, str]:
        """Total precedence order: effect class, then priority, then id."""
        return (int(self.effect), self.priority, self.rule_id.value)


@dataclass(frozen=True)
class FusionDecision:
    """The outcome of :func:`decide_fusion`.

    Attributes
    ----------
    enabled
        Whether FlashInfer allreduce fusion is on for the deployment.
    rule
        The rule that decided it (:attr:`RuleId.AUTO_ENABLE` when no rule applied).
    reason
        Why, in one sentence.
    warnings
        Things the user should hear about, e.g. an explicit enable that was overridden.
        Kept as data; the caller decides whether to log them.
    applied_rules
        Every rule that applied, in precedence order.
    """

    enabled: bool
    rule: RuleId
    reason: str
    warnings: tuple[str, ...] = ()
    applied_rules: tuple[RuleId, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view of this decision."""
        return {
            "enabled": self.enabled,
            "rule": self.rule.value,
            "reason": self.reason,
            "warnings": list(self.warnings),
            "applied_rules": [r.value for r in self.applied_rules],
        }


DEFAULT_RULES: tuple[FusionRule, ...] = (
    # -- Vetoes: fusion is off whatever else holds. The user's enforce-disable and the
    #    determinism contract come first; the rest are conditions under which SGLang's
    #    per-layer check never fuses anyway, so honouring an explicit enable would lie.
    FusionRule(
        rule_id=RuleId.ENFORCE_DISABLE,
        effect=RuleEffect.VETO,
        applies=lambda d: d.fusion_choice is FusionChoice.ENFORCE_DISABLE,
        explain=lambda d: (
            "fusion is forcibly disabled by --enforce-disable-flashinfer-allreduce-fusion"
        ),
        priority=0,
    ),
    FusionRule(
        rule_id=RuleId.DETERMINISTIC_INFERENCE,
        effect=RuleEffect.VETO,
        applies=lambda d: d.deterministic,
        explain=lambda d: (
            "deterministic inference is enabled and the fused allreduce gives "
            "batch-size-dependent results"
        ),
        priority=1,
    ),
    FusionRule(
        rule_id=RuleId.TP_SIZE_ONE,
        effect=RuleEffect.VETO,
        applies=lambda d: d.tp_size <= 1,
        explain=lambda d: "tensor-parallel size is 1, so there is no allreduce to fuse",
        priority=2,
    ),
    FusionRule(
        rule_id=RuleId.UNSUPPORTED_GPU,
        effect=RuleEffect.VETO,
        applies=lambda d: d.compute_capability[0] not in FUSION_COMPUTE_CAPABILITY_MAJORS,
        explain=lambda d: (
            f"compute capability {d.sm} is neither SM90 (9.x) nor SM100 (10.x) class; "
            "the fused kernels do not run there"
        ),
        priority=3,
    ),
    FusionRule(
        rule_id=RuleId.DP_ATTENTION,
        effect=RuleEffect.VETO,
        applies=lambda d: d.dp_attention,
        explain=lambda d: "DP attention is on, and fusion is never applied under DP attention",
        priority=4,
    ),
    FusionRule(
        rule_id=RuleId.ATTENTION_CONTEXT_PARALLEL,
        effect=RuleEffect.VETO,
        applies=lambda d: d.attn_cp_size > 1,
        explain=lambda d: (
            f"attention context-parallel size is {d.attn_cp_size}; the fusion's own "
            "communicator does not support the context-parallel sub-groups"
        ),
        priority=5,
    ),
    # -- The user's explicit choice.
    FusionRule(
        rule_id=RuleId.USER_DISABLE,
        effect=RuleEffect.USER_DISABLE,
        applies=lambda d: d.fusion_choice is FusionChoice.DISABLE,
        explain=lambda d: "fusion is disabled by the user",
        priority=0,
    ),
    FusionRule(
        rule_id=RuleId.USER_ENABLE,
        effect=RuleEffect.USER_ENABLE,
        applies=lambda d: d.fusion_choice is FusionChoice.ENABLE,
        explain=lambda d: f"fusion is enabled by the user ({ENABLE_FLAG})",
        priority=0,
    ),
    # -- Conditions of the automatic enable only.
    FusionRule(
        rule_id=RuleId.ARCHITECTURE_NOT_ALLOWED,
        effect=RuleEffect.BLOCK_AUTO_ENABLE,
        applies=lambda d: d.architecture not in FUSION_ARCHITECTURES,
        explain=lambda d: f"{d.architecture} is not on the fusion allow-list",
        priority=0,
    ),
    FusionRule(
        rule_id=RuleId.MULTI_NODE,
        effect=RuleEffect.BLOCK_AUTO_ENABLE,
        applies=lambda d: d.nnodes > 1,
        explain=lambda d: (
            f"the deployment spans {d.nnodes} nodes and auto-enable is single-node only "
            "(flashinfer-ai/flashinfer#2006)"
        ),
        priority=1,
    ),
    FusionRule(
        rule_id=RuleId.H20_DEVICE,
        effect=RuleEffect.BLOCK_AUTO_ENABLE,
        applies=lambda d: is_h20_device(d.device_name),
        explain=lambda d: (
            f"{d.device_name!r} is an H20, which has a known fusion bug "
            "(flashinfer-ai/flashinfer#2204)"
        ),
        priority=2,
    ),
    FusionRule(
        rule_id=RuleId.MOE_A2A_BACKEND,
        effect=RuleEffect.BLOCK_AUTO_ENABLE,
        applies=lambda d: d.moe_a2a_backend != "none",
        explain=lambda d: f"MoE all-to-all backend {d.moe_a2a_backend!r} is in use",
        priority=3,
    ),
)


def _applies(rule: FusionRule, deployment: Deployment) -> bool:
    answer = rule.applies(deployment)
    require_bool(
        f"the answer of rule {rule.rule_id.value!r}",
        answer,
        error=PolicyInputError,
        fix="return a bool from FusionRule.applies (a truthy string or number would "
        "silently count as applying)",
    )
    return answer


def _check_rules(rules: Sequence[FusionRule]) -> None:
    seen: set[RuleId] = set()
    for rule in rules:
        if not isinstance(rule, FusionRule):
            raise PolicyInputError(f"expected FusionRule objects; found {rule!r}.")
        if rule.rule_id is RuleId.AUTO_ENABLE:
            raise PolicyInputError("auto-enable is the outcome when no rule applies, not a rule.")
        if rule.rule_id in seen:
            raise PolicyInputError(f"expected unique rule ids; found {rule.rule_id.value!r} twice.")
        seen.add(rule.rule_id)


def decide_fusion(
    deployment: Deployment, rules: Iterable[FusionRule] = DEFAULT_RULES
) -> FusionDecision:
    """Decide whether FlashInfer allreduce fusion is on for ``deployment``.

    Every rule is evaluated; the applying rule that comes first in the total order
    (:attr:`FusionRule.sort_key`) decides. Fusion is on when that rule is
    :attr:`RuleEffect.USER_ENABLE`, or when no rule applies (auto-enable). The result
    does not depend on the order of ``rules``.

    Parameters
    ----------
    deployment
        The deployment to decide for.
    rules
        The rule set; :data:`DEFAULT_RULES` unless testing or extending.

    Returns
    -------
    FusionDecision

    Raises
    ------
    PolicyInputError
        If ``deployment`` is not a :class:`Deployment`, ``rules`` is not an iterable of
        :class:`FusionRule`, two rules share an id, a rule claims
        :attr:`RuleId.AUTO_ENABLE`, or a rule's ``applies`` answers something other than
        a bool.
    """
    require_instance(
        "deployment",
        deployment,
        Deployment,
        "a fi_compat.policy.Deployment",
        error=PolicyInputError,
        fix="describe the deployment with Deployment(architecture=..., "
        "compute_capability=..., ...)",
    )
    if isinstance(rules, FusionRule | str | bytes) or not isinstance(rules, Iterable):
        raise PolicyInputError(
            explain(
                "rules to be an iterable of FusionRule",
                describe(rules),
                fix="pass a tuple of rules, e.g. (*DEFAULT_RULES, my_rule)",
            )
        )
    rule_list = list(rules)
    _check_rules(rule_list)
    applied = sorted((r for r in rule_list if _applies(r, deployment)), key=lambda r: r.sort_key)
    applied_ids = tuple(r.rule_id for r in applied)
    if not applied:
        decision = FusionDecision(
            enabled=True,
            rule=RuleId.AUTO_ENABLE,
            reason=(
                f"auto-enabled: {deployment.architecture} on SM {deployment.sm} with TP "
                f"{deployment.tp_size} meets every auto-enable condition"
            ),
        )
    else:
        winner = applied[0]
        user_enabled = any(r.effect is RuleEffect.USER_ENABLE for r in applied)
        warnings: list[str] = []
        if user_enabled and winner.effect is RuleEffect.VETO:
            warnings.extend(
                f"Disable {ENABLE_FLAG} because {r.explain(deployment)}."
                for r in applied
                if r.effect is RuleEffect.VETO
            )
        elif winner.effect is RuleEffect.USER_ENABLE:
            warnings.extend(
                f"{ENABLE_FLAG} is honoured although {r.explain(deployment)}; "
                "fusion would not have been enabled automatically."
                for r in applied
                if r.effect is RuleEffect.BLOCK_AUTO_ENABLE
            )
        decision = FusionDecision(
            enabled=winner.effect is RuleEffect.USER_ENABLE,
            rule=winner.rule_id,
            reason=winner.explain(deployment),
            warnings=tuple(warnings),
            applied_rules=applied_ids,
        )
    _logger.debug("allreduce fusion decision for %r: %r", deployment, decision)
    return decision


def should_fuse_mlp_allreduce_with_next_layer(
    *,
    fusion_enabled: bool | FusionDecision,
    mlp_mode: ScatterMode,
    is_last_layer: bool,
    tp_size: int,
    num_tokens: int,
    max_fusion_tokens: int = DEFAULT_MAX_FUSION_TOKENS,
) -> bool:
    """Whether this layer's MLP allreduce should be fused into the next layer's norm.

    Parameters
    ----------
    fusion_enabled
        The deployment-level decision (or just its ``enabled`` flag).
    mlp_mode
        How tokens are spread where this layer's MLP runs.
    is_last_layer
        Whether this is the model's last layer (there is no next layer to fuse into).
    tp_size
        Tensor-parallel size.
    num_tokens
        Tokens in this forward pass.
    max_fusion_tokens
        Largest token count the fused kernel takes.

    Returns
    -------
    bool
        False when fusion is off, the MLP runs SCATTERED (or MOE_FULL), on the last
        layer, at TP 1, or when ``num_tokens`` is 0 or above ``max_fusion_tokens``.

    Raises
    ------
    PolicyInputError
        If ``tp_size`` or ``max_fusion_tokens`` is below 1, ``num_tokens`` is negative,
        ``mlp_mode`` is not a :class:`ScatterMode`, ``fusion_enabled`` is neither a bool
        nor a :class:`FusionDecision`, or ``is_last_layer`` is not a bool.
    """
    require_instance(
        "mlp_mode",
        mlp_mode,
        ScatterMode,
        "a ScatterMode",
        error=PolicyInputError,
        fix="pass a ScatterMode member",
    )
    require_instance(
        "fusion_enabled",
        fusion_enabled,
        (bool, FusionDecision),
        "a bool or a FusionDecision",
        error=PolicyInputError,
        fix="pass decide_fusion(...) or its enabled flag",
    )
    require_bool("is_last_layer", is_last_layer, error=PolicyInputError)
    require_int("tp_size", tp_size, minimum=1, error=PolicyInputError)
    require_int("num_tokens", num_tokens, minimum=0, error=PolicyInputError)
    require_int("max_fusion_tokens", max_fusion_tokens, minimum=1, error=PolicyInputError)
    enabled = (
        fusion_enabled.enabled if isinstance(fusion_enabled, FusionDecision) else fusion_enabled
    )
    return (
        enabled
        and mlp_mode in _FUSIBLE_MLP_MODES
        and not is_last_layer
        and tp_size > 1
        and 0 < num_tokens <= max_fusion_tokens
    )


def align_dummy_run_num_tokens(num_tokens: int, attn_tp_size: int, require_mlp_sync: bool) -> int:
    """Round a warm-up (dummy run) token count the way the scheduler pads real batches.

    When MLP sync is required (DP attention and its relatives), the scheduler pads
    every batch to a multiple of the attention-TP size; a warm-up that skips that
    padding crashes on a token count the attention-TP ranks cannot split.

    Parameters
    ----------
    num_tokens
        Tokens the warm-up would run.
    attn_tp_size
        Attention tensor-parallel size.
    require_mlp_sync
        Whether the deployment requires MLP sync.

    Returns
    -------
    int
        ``num_tokens`` rounded up to a multiple of ``attn_tp_size`` when
        ``require_mlp_sync``; ``num_tokens`` unchanged otherwise.

    Raises
    ------
    PolicyInputError
        If ``num_tokens`` is negative or ``attn_tp_size`` is below 1 (or either is not an
        int), or ``require_mlp_sync`` is not a bool.
    """
    require_int("num_tokens", num_tokens, minimum=0, error=PolicyInputError)
    require_int("attn_tp_size", attn_tp_size, minimum=1, error=PolicyInputError)
    require_bool("require_mlp_sync", require_mlp_sync, error=PolicyInputError)
    if not require_mlp_sync:
        return num_tokens
    return -(-num_tokens // attn_tp_size) * attn_tp_size


@dataclass(frozen=True)
class DummyRunShape:
    """Batch size and token count of a warm-up forward pass after alignment."""

    batch_size: int
    num_tokens: int


def align_dummy_run_shape(
    batch_size: int,
    num_tokens_per_request: int,
    attn_tp_size: int,
    require_mlp_sync: bool,
) -> DummyRunShape:
    """Align a warm-up batch: pad its tokens, then derive the batch size back.

    The token count is :func:`align_dummy_run_num_tokens` of
    ``batch_size * num_tokens_per_request``; the batch size is that count floor-divided
    by ``num_tokens_per_request``, as SGLang's ``_dummy_run`` does. The token count is
    authoritative: it need not equal ``batch_size * num_tokens_per_request``.

    Raises
    ------
    PolicyInputError
        If ``batch_size`` is negative or ``num_tokens_per_request`` or ``attn_tp_size``
        is below 1 (or any of them is not an int), or ``require_mlp_sync`` is not a bool.
    """
    require_int("batch_size", batch_size, minimum=0, error=PolicyInputError)
    require_int("num_tokens_per_request", num_tokens_per_request, minimum=1, error=PolicyInputError)
    require_int("attn_tp_size", attn_tp_size, minimum=1, error=PolicyInputError)
    require_bool("require_mlp_sync", require_mlp_sync, error=PolicyInputError)
    num_tokens = align_dummy_run_num_tokens(
        batch_size * num_tokens_per_request, attn_tp_size, require_mlp_sync
    )
    return DummyRunShape(batch_size=num_tokens // num_tokens_per_request, num_tokens=num_tokens)
