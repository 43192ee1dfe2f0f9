"""The rules of the fusion policy and the deployment-level decision.

Rules are data (:class:`FusionRule`); :func:`decide_fusion` evaluates every one of them
and lets the applying rule that comes first in one total order decide.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fi_compat._arguments import describe, require_bool, require_instance, require_int
from fi_compat.errors import PolicyInputError, explain
from fi_compat.policy._deployment import (
    FUSION_ARCHITECTURES,
    FUSION_COMPUTE_CAPABILITY_MAJORS,
    Deployment,
    FusionChoice,
    RuleEffect,
    RuleId,
    is_h20_device,
)

__all__ = ["DEFAULT_RULES", "FusionDecision", "FusionRule", "decide_fusion"]

# The public package's name, so that log records keep the logger they always had.
_logger = logging.getLogger("fi_compat.policy")

ENABLE_FLAG = "--enable-flashinfer-allreduce-fusion"


@dataclass(frozen=True)
class FusionRule:
    """One rule of the policy: when it applies, and what it then does.

    .. versionadded:: 0.2.0

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

    .. versionadded:: 0.2.0

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
""".. versionadded:: 0.2.0"""


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

    .. versionadded:: 0.2.0

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
