"""The rules of the fusion policy and the deployment-level decision.

Rules are data (:class:`FusionRule`); :func:`decide_fusion` evaluates every one of them
and lets the applying rule that comes first in one total order decide.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fi_compat._arguments import (
    describe,
    require_bool,
    require_instance,
    require_int,
    require_str,
)
from fi_compat.errors import DeploymentRefusedError, PolicyInputError, explain
from fi_compat.policy._deployment import (
    FUSION_ARCHITECTURES,
    FUSION_COMPUTE_CAPABILITY_MAJORS,
    Deployment,
    FusionChoice,
    RuleEffect,
    RuleId,
    is_h20_device,
)

__all__ = ["DEFAULT_RULES", "FusionDecision", "FusionRule", "FusionRuleSet", "decide_fusion"]

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
    refuses
        Whether the engine refuses the deployment at start-up where this rule decides:
        :func:`decide_fusion` then raises :class:`~fi_compat.errors.DeploymentRefusedError`
        with the rule's explanation instead of answering. Only a
        :attr:`RuleEffect.VETO` rule can refuse. New in 0.3.0.

    Raises
    ------
    PolicyInputError
        If ``rule_id`` is not a :class:`RuleId`, ``effect`` not a :class:`RuleEffect`,
        ``applies`` or ``explain`` not callable, ``priority`` not an int, or ``refuses``
        not a bool or set on a rule that is not a veto.
    """

    rule_id: RuleId
    effect: RuleEffect
    applies: Callable[[Deployment], bool] = field(compare=False)
    explain: Callable[[Deployment], str] = field(compare=False)
    priority: int = 0
    refuses: bool = False

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
        require_bool("refuses", self.refuses, error=PolicyInputError)
        if self.refuses and self.effect is not RuleEffect.VETO:
            raise PolicyInputError(
                explain(
                    "refuses=True only on a RuleEffect.VETO rule",
                    f"a {self.effect.name} rule",
                    fix="make the refusing rule a veto",
                )
            )

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
    backend
        The FlashInfer fusion backend the engine runs when fusion is on, as the rule
        set's engine resolves it (``"trtllm"``, ``"mnnvl"``, ``"cutedsl"``); None when
        fusion is off or the rules name no backend (:data:`DEFAULT_RULES` do not).
        New in 0.3.0.
    """

    enabled: bool
    rule: RuleId
    reason: str
    warnings: tuple[str, ...] = ()
    applied_rules: tuple[RuleId, ...] = ()
    backend: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view of this decision."""
        return {
            "enabled": self.enabled,
            "rule": self.rule.value,
            "reason": self.reason,
            "warnings": list(self.warnings),
            "applied_rules": [r.value for r in self.applied_rules],
            "backend": self.backend,
        }


@dataclass(frozen=True)
class FusionRuleSet:
    """A named rule set: an engine's rules, the flag it names and the backend it picks.

    Iterating it gives its rules, so it goes wherever a tuple of :class:`FusionRule`
    does. Given to :func:`decide_fusion` as a whole, it also names the backend of an
    enabled decision and words the warnings with the engine's own flag. A plain tuple
    of its rules decides the same (on or off, the deciding rule, a refusal) but names
    no backend and words warnings with SGLang's old ``--enable-flashinfer-allreduce-fusion``.

    .. versionadded:: 0.3.0

    Parameters
    ----------
    name
        What the rule set models, e.g. ``"SGLang 0.5.23"``.
    rules
        The rules; ids unique, as :func:`decide_fusion` requires.
    enable_flag
        The engine's spelling of an explicit enable, named in warnings.
    backend
        Given a deployment the rules enable fusion for, the backend the engine runs.
        None: the rule set names no backend.

    Raises
    ------
    PolicyInputError
        If ``name`` or ``enable_flag`` is not a non-empty str, ``rules`` is not a tuple
        of rules with unique ids, or ``backend`` is neither None nor callable.
    """

    name: str
    rules: tuple[FusionRule, ...]
    enable_flag: str
    backend: Callable[[Deployment], str | None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        require_str("name", self.name, nonempty=True, error=PolicyInputError)
        require_str("enable_flag", self.enable_flag, nonempty=True, error=PolicyInputError)
        require_instance(
            "rules", self.rules, tuple, "a tuple of FusionRule", error=PolicyInputError
        )
        _check_rules(self.rules)
        if self.backend is not None and not callable(self.backend):
            raise PolicyInputError(
                explain(
                    "backend to be None or a callable taking a Deployment",
                    describe(self.backend),
                    fix="pass a function, e.g. backend=lambda d: 'trtllm'",
                )
            )

    def __iter__(self) -> Iterator[FusionRule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def rule(self, rule_id: RuleId) -> FusionRule:
        """The rule of this set with id ``rule_id``.

        Raises
        ------
        PolicyInputError
            If the set has no such rule.
        """
        for candidate in self.rules:
            if candidate.rule_id is rule_id:
                return candidate
        raise PolicyInputError(f"expected a rule of {self.name}; found no {rule_id!r} in it.")


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


def _backend(rule_set: FusionRuleSet | None, deployment: Deployment) -> str | None:
    """The backend ``rule_set`` names for an enabled ``deployment``; None without one."""
    if rule_set is None or rule_set.backend is None:
        return None
    answer = rule_set.backend(deployment)
    if answer is not None:
        require_str(
            f"the backend {rule_set.name} names",
            answer,
            nonempty=True,
            error=PolicyInputError,
            fix="return a backend name (e.g. 'trtllm') or None from FusionRuleSet.backend",
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
    deployment: Deployment, rules: Iterable[FusionRule] | FusionRuleSet = DEFAULT_RULES
) -> FusionDecision:
    """Decide whether FlashInfer allreduce fusion is on for ``deployment``.

    The applying rule that comes first in one total order (:attr:`FusionRule.sort_key`)
    decides, whatever the order of ``rules``. The fusion policy guide,
    ``docs/guide/policy.md``, gives the rules and their precedence. When the deciding
    rule refuses (:attr:`FusionRule.refuses`), the engine the rules model would not
    start with this deployment, and this function raises.

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
    DeploymentRefusedError
        If the deciding rule refuses: the engine modelled by ``rules`` would not start
        with this deployment. A ``ValueError``.
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
    rule_set = rules if isinstance(rules, FusionRuleSet) else None
    flag = rule_set.enable_flag if rule_set is not None else ENABLE_FLAG
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
            backend=_backend(rule_set, deployment),
        )
    else:
        winner = applied[0]
        if winner.refuses:
            where = f" of {rule_set.name}" if rule_set is not None else ""
            raise DeploymentRefusedError(
                f"{winner.explain(deployment)} (rule {winner.rule_id.value!r}{where})",
                rule=winner.rule_id.value,
            )
        enabled = winner.effect is RuleEffect.USER_ENABLE
        user_enabled = any(r.effect is RuleEffect.USER_ENABLE for r in applied)
        warnings: list[str] = []
        if user_enabled and winner.effect is RuleEffect.VETO:
            warnings.extend(
                f"Disable {flag} because {r.explain(deployment)}."
                for r in applied
                if r.effect is RuleEffect.VETO
            )
        elif winner.effect is RuleEffect.USER_ENABLE:
            warnings.extend(
                f"{flag} is honoured although {r.explain(deployment)}; "
                "fusion would not have been enabled automatically."
                for r in applied
                if r.effect is RuleEffect.BLOCK_AUTO_ENABLE
            )
        decision = FusionDecision(
            enabled=enabled,
            rule=winner.rule_id,
            reason=winner.explain(deployment),
            warnings=tuple(warnings),
            applied_rules=applied_ids,
            backend=_backend(rule_set, deployment) if enabled else None,
        )
    _logger.debug("allreduce fusion decision for %r: %r", deployment, decision)
    return decision
