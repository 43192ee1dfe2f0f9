"""Property-based tests of fi_compat.policy over the whole input space (hypothesis).

The central claims: deterministic inference and enforce-disable always win, any veto
beats any enabler, and the decision does not depend on the order of the rule list.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from fi_compat.policy import (
    DEFAULT_RULES,
    FUSION_ARCHITECTURES,
    Deployment,
    FusionChoice,
    FusionDecision,
    FusionRule,
    RuleEffect,
    RuleId,
    ScatterMode,
    align_dummy_run_num_tokens,
    align_dummy_run_shape,
    decide_fusion,
    should_fuse_mlp_allreduce_with_next_layer,
)

FLAG = "--enable-flashinfer-allreduce-fusion"

DEVICE_NAMES = [
    "",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H200",
    "NVIDIA H200 NVL",
    "NVIDIA H20",
    "NVIDIA H20-3e",
    "NVIDIA B200",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA GeForce RTX 5090",
]

deployments = st.builds(
    Deployment,
    architecture=st.one_of(
        st.sampled_from(sorted(FUSION_ARCHITECTURES)),
        st.sampled_from(["LlamaForCausalLM", "Qwen3ForCausalLM", "MixtralForCausalLM"]),
        st.text(min_size=1, max_size=30),
    ),
    # Biased towards the GPUs and sizes under which fusion can run, so that the
    # interesting corners (explicit enable + determinism on a runnable setup) are hit.
    compute_capability=st.one_of(
        st.sampled_from([(9, 0), (10, 0), (10, 3)]),
        st.tuples(st.integers(0, 13), st.integers(0, 9)),
    ),
    device_name=st.one_of(st.sampled_from(DEVICE_NAMES), st.text(max_size=20)),
    tp_size=st.integers(1, 16),
    nnodes=st.integers(1, 4),
    dp_attention=st.sampled_from([False, False, True]),
    attn_cp_size=st.sampled_from([1, 1, 1, 2, 4]),
    moe_a2a_backend=st.sampled_from(["none", "deepep", "mooncake", "flashinfer", "mori"]),
    deterministic=st.booleans(),
    fusion_choice=st.sampled_from(list(FusionChoice)),
)


def _spec(d: Deployment) -> bool:
    """The policy written as one plain expression, independently of the rule engine."""
    name = d.device_name.upper()
    h20 = "H20" in name and "H200" not in name
    runnable = (
        d.tp_size > 1
        and d.compute_capability[0] in (9, 10)
        and not d.dp_attention
        and d.attn_cp_size <= 1
    )
    auto = (
        d.architecture in FUSION_ARCHITECTURES
        and d.nnodes == 1
        and not h20
        and d.moe_a2a_backend == "none"
    )
    if d.fusion_choice is FusionChoice.ENFORCE_DISABLE or d.deterministic or not runnable:
        return False
    if d.fusion_choice is FusionChoice.ENABLE:
        return True
    if d.fusion_choice is FusionChoice.DISABLE:
        return False
    return auto


@settings(max_examples=500, deadline=None)
@given(deployments)
def test_decision_matches_the_plain_specification(d: Deployment) -> None:
    assert decide_fusion(d).enabled is _spec(d)


@settings(deadline=None)
@given(deployments)
def test_deterministic_inference_always_disables(d: Deployment) -> None:
    decision = decide_fusion(dataclasses.replace(d, deterministic=True))
    assert decision.enabled is False
    assert RuleId.DETERMINISTIC_INFERENCE in decision.applied_rules
    if d.fusion_choice is not FusionChoice.ENFORCE_DISABLE:
        assert decision.rule is RuleId.DETERMINISTIC_INFERENCE


@settings(deadline=None)
@given(deployments)
def test_enforce_disable_beats_everything(d: Deployment) -> None:
    decision = decide_fusion(dataclasses.replace(d, fusion_choice=FusionChoice.ENFORCE_DISABLE))
    assert decision.enabled is False
    assert decision.rule is RuleId.ENFORCE_DISABLE
    assert decision.warnings == ()


@settings(deadline=None)
@given(deployments)
def test_explicit_enable_under_determinism_warns_naming_the_flag(d: Deployment) -> None:
    decision = decide_fusion(
        dataclasses.replace(d, deterministic=True, fusion_choice=FusionChoice.ENABLE)
    )
    assert decision.enabled is False
    assert any(
        w.startswith(f"Disable {FLAG} because deterministic inference") for w in decision.warnings
    )


@settings(deadline=None)
@given(deployments)
def test_warnings_only_concern_an_explicit_enable(d: Deployment) -> None:
    decision = decide_fusion(d)
    if d.fusion_choice is not FusionChoice.ENABLE:
        assert decision.warnings == ()
    assert all(FLAG in w for w in decision.warnings)


@settings(max_examples=300, deadline=None)
@given(deployments, st.permutations(DEFAULT_RULES))
def test_shuffling_the_rule_list_does_not_change_the_decision(
    d: Deployment, shuffled: list[FusionRule]
) -> None:
    assert decide_fusion(d, shuffled) == decide_fusion(d)


@settings(max_examples=300, deadline=None)
@given(deployments, st.data())
def test_any_applying_veto_beats_any_enabler_in_any_subset_and_order(
    d: Deployment, data: st.DataObject
) -> None:
    subset = data.draw(st.lists(st.sampled_from(DEFAULT_RULES), unique=True))
    shuffled = data.draw(st.permutations(subset))
    decision = decide_fusion(d, shuffled)
    applying = [r for r in subset if r.applies(d)]
    if any(r.effect is RuleEffect.VETO for r in applying):
        assert decision.enabled is False
        assert decision.rule in {r.rule_id for r in applying if r.effect is RuleEffect.VETO}
    elif any(r.effect is RuleEffect.USER_DISABLE for r in applying):
        assert (decision.enabled, decision.rule) == (False, RuleId.USER_DISABLE)
    elif any(r.effect is RuleEffect.USER_ENABLE for r in applying):
        assert (decision.enabled, decision.rule) == (True, RuleId.USER_ENABLE)
    elif applying:
        assert decision.enabled is False
    else:
        assert (decision.enabled, decision.rule) == (True, RuleId.AUTO_ENABLE)


@settings(max_examples=300, deadline=None)
@given(deployments, st.data())
def test_priorities_only_pick_the_reported_rule_never_the_outcome(
    d: Deployment, data: st.DataObject
) -> None:
    priorities = data.draw(
        st.lists(st.integers(-5, 5), min_size=len(DEFAULT_RULES), max_size=len(DEFAULT_RULES))
    )
    reprioritised = [
        dataclasses.replace(r, priority=p) for r, p in zip(DEFAULT_RULES, priorities, strict=True)
    ]
    shuffled = data.draw(st.permutations(reprioritised))
    assert decide_fusion(d, shuffled).enabled is decide_fusion(d).enabled


@settings(deadline=None)
@given(deployments)
def test_decision_is_consistent_with_its_applied_rules(d: Deployment) -> None:
    decision = decide_fusion(d)
    assert decision == decide_fusion(d)
    assert isinstance(decision, FusionDecision)
    assert decision.enabled is (decision.rule in {RuleId.AUTO_ENABLE, RuleId.USER_ENABLE})
    by_id = {r.rule_id: r for r in DEFAULT_RULES}
    assert set(decision.applied_rules) == {r.rule_id for r in DEFAULT_RULES if r.applies(d)}
    keys = [by_id[i].sort_key for i in decision.applied_rules]
    assert keys == sorted(keys)
    if decision.applied_rules:
        assert decision.rule is decision.applied_rules[0]
    else:
        assert decision.rule is RuleId.AUTO_ENABLE
    assert decision.reason


@settings(deadline=None)
@given(deployments)
def test_vetoes_are_monotone(d: Deployment) -> None:
    # Switching on any veto switches fusion off, whatever the rest of the deployment.
    for change in (
        {"deterministic": True},
        {"fusion_choice": FusionChoice.ENFORCE_DISABLE},
        {"tp_size": 1},
        {"dp_attention": True},
        {"attn_cp_size": 2},
        {"compute_capability": (8, 0)},
    ):
        after = decide_fusion(dataclasses.replace(d, **change)).enabled
        assert after is False


# --------------------------------------------------------------------------- per layer

modes = st.sampled_from(list(ScatterMode))


@settings(deadline=None)
@given(
    enabled=st.booleans(),
    mode=modes,
    last=st.booleans(),
    tp=st.integers(1, 64),
    tokens=st.integers(0, 10_000),
    limit=st.integers(1, 8192),
)
def test_layer_fusion_is_exactly_the_conjunction_of_its_conditions(
    enabled: bool, mode: ScatterMode, last: bool, tp: int, tokens: int, limit: int
) -> None:
    got = should_fuse_mlp_allreduce_with_next_layer(
        fusion_enabled=enabled,
        mlp_mode=mode,
        is_last_layer=last,
        tp_size=tp,
        num_tokens=tokens,
        max_fusion_tokens=limit,
    )
    expected = (
        enabled
        and mode in (ScatterMode.FULL, ScatterMode.TP_ATTN_FULL)
        and not last
        and tp > 1
        and 1 <= tokens <= limit
    )
    assert got is expected
    if mode is ScatterMode.SCATTERED:
        assert got is False


@settings(deadline=None)
@given(deployments, modes, st.integers(0, 4096))
def test_layer_never_fuses_when_the_deployment_decision_is_off(
    d: Deployment, mode: ScatterMode, tokens: int
) -> None:
    decision = decide_fusion(d)
    got = should_fuse_mlp_allreduce_with_next_layer(
        fusion_enabled=decision,
        mlp_mode=mode,
        is_last_layer=False,
        tp_size=d.tp_size,
        num_tokens=tokens,
    )
    if not decision.enabled or d.deterministic:
        assert got is False


# --------------------------------------------------------------------------- dummy run


@given(n=st.integers(0, 100_000), attn_tp=st.integers(1, 64), sync=st.booleans())
def test_dummy_run_alignment(n: int, attn_tp: int, sync: bool) -> None:
    aligned = align_dummy_run_num_tokens(n, attn_tp, sync)
    if not sync:
        assert aligned == n
        return
    assert aligned % attn_tp == 0
    assert n <= aligned < n + attn_tp
    assert align_dummy_run_num_tokens(aligned, attn_tp, sync) == aligned


@given(
    bs=st.integers(0, 1024),
    per_req=st.integers(1, 8),
    attn_tp=st.integers(1, 16),
    sync=st.booleans(),
)
def test_dummy_run_shape(bs: int, per_req: int, attn_tp: int, sync: bool) -> None:
    shape = align_dummy_run_shape(bs, per_req, attn_tp, sync)
    assert shape.num_tokens == align_dummy_run_num_tokens(bs * per_req, attn_tp, sync)
    assert shape.batch_size == shape.num_tokens // per_req
    assert shape.batch_size >= bs
    assert shape.batch_size * per_req <= shape.num_tokens
