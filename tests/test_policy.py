"""Example-based tests of fi_compat.policy: the rules, their precedence, the per-layer check."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fi_compat import policy
from fi_compat.errors import FiCompatError
from fi_compat.policy import (
    DEFAULT_MAX_FUSION_TOKENS,
    DEFAULT_RULES,
    FUSION_ARCHITECTURES,
    Deployment,
    DummyRunShape,
    FusionChoice,
    FusionDecision,
    FusionRule,
    PolicyInputError,
    RuleEffect,
    RuleId,
    ScatterMode,
    align_dummy_run_num_tokens,
    align_dummy_run_shape,
    decide_fusion,
    is_h20_device,
    parse_compute_capability,
    should_fuse_mlp_allreduce_with_next_layer,
)

FLAG = "--enable-flashinfer-allreduce-fusion"

# The list of SGLang PR #22664, verbatim.
SEED_ARCHITECTURES = {
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "GptOssForCausalLM",
    "GlmMoeDsaForCausalLM",
    "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "Qwen3MoeForCausalLM",
    "Qwen3NextForCausalLM",
    "KimiK25ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
}
ADDED_SINCE = {
    "DeepseekV4ForCausalLM",
    "MistralLarge3ForCausalLM",
    "Qwen3VLMoeForConditionalGeneration",
    "Qwen4ExpForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration",
    "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM",
    "NemotronH_Omni_Reasoning_V3",
}

# A deployment that meets every auto-enable condition: the setting of PR #22664.
ELIGIBLE = Deployment(
    architecture="Qwen3NextForCausalLM",
    compute_capability=(9, 0),
    device_name="NVIDIA H100 80GB HBM3",
    tp_size=4,
)


def _with(**changes: object) -> Deployment:
    return dataclasses.replace(ELIGIBLE, **changes)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- allow-list


def test_allow_list_is_the_seed_list_plus_later_additions() -> None:
    assert isinstance(FUSION_ARCHITECTURES, frozenset)
    assert FUSION_ARCHITECTURES == SEED_ARCHITECTURES | ADDED_SINCE
    assert len(FUSION_ARCHITECTURES) == 19


@pytest.mark.parametrize("arch", sorted(SEED_ARCHITECTURES | ADDED_SINCE))
def test_every_allow_listed_architecture_auto_enables(arch: str) -> None:
    decision = decide_fusion(_with(architecture=arch))
    assert decision == FusionDecision(
        enabled=True,
        rule=RuleId.AUTO_ENABLE,
        reason=(f"auto-enabled: {arch} on SM 9.0 with TP 4 meets every auto-enable condition"),
    )


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "deepseekv3forcausallm", "Qwen3ForCausalLM"])
def test_other_architectures_do_not_auto_enable(arch: str) -> None:
    decision = decide_fusion(_with(architecture=arch))
    assert not decision.enabled
    assert decision.rule is RuleId.ARCHITECTURE_NOT_ALLOWED
    assert arch in decision.reason
    assert decision.warnings == ()


# --------------------------------------------------------------------------- GPU class


@pytest.mark.parametrize("cc", [(9, 0), (9, 1), (10, 0), (10, 3)])
def test_sm90_and_sm100_class_auto_enable(cc: tuple[int, int]) -> None:
    assert decide_fusion(_with(compute_capability=cc)).enabled


@pytest.mark.parametrize("cc", [(8, 0), (8, 9), (11, 0), (12, 0), (12, 1), (7, 5)])
def test_other_compute_capabilities_are_a_veto(cc: tuple[int, int]) -> None:
    for choice in FusionChoice:
        decision = decide_fusion(_with(compute_capability=cc, fusion_choice=choice))
        assert not decision.enabled
    decision = decide_fusion(_with(compute_capability=cc, fusion_choice=FusionChoice.ENABLE))
    assert decision.rule is RuleId.UNSUPPORTED_GPU
    assert f"{cc[0]}.{cc[1]}" in decision.reason
    assert len(decision.warnings) == 1
    assert decision.warnings[0].startswith(f"Disable {FLAG} because compute capability")


# --------------------------------------------------------------------------- H20


@pytest.mark.parametrize(
    ("name", "is_h20"),
    [
        ("NVIDIA H20", True),
        ("NVIDIA H20-3e", True),
        ("nvidia h20", True),
        ("NVIDIA H200", False),
        ("NVIDIA H200 NVL", False),
        ("NVIDIA H100 80GB HBM3", False),
        ("", False),
    ],
)
def test_h20_detection(name: str, is_h20: bool) -> None:
    assert is_h20_device(name) is is_h20
    decision = decide_fusion(_with(device_name=name))
    assert decision.enabled is (not is_h20)
    if is_h20:
        assert decision.rule is RuleId.H20_DEVICE
        assert "flashinfer#2204" in decision.reason


def test_explicit_enable_on_h20_is_honoured_with_a_warning() -> None:
    decision = decide_fusion(_with(device_name="NVIDIA H20", fusion_choice=FusionChoice.ENABLE))
    assert decision.enabled
    assert decision.rule is RuleId.USER_ENABLE
    assert decision.applied_rules == (RuleId.USER_ENABLE, RuleId.H20_DEVICE)
    assert len(decision.warnings) == 1
    assert FLAG in decision.warnings[0]
    assert "H20" in decision.warnings[0]


# --------------------------------------------------------------------------- soft conditions


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"nnodes": 2}, RuleId.MULTI_NODE),
        ({"moe_a2a_backend": "deepep"}, RuleId.MOE_A2A_BACKEND),
        ({"architecture": "LlamaForCausalLM"}, RuleId.ARCHITECTURE_NOT_ALLOWED),
        ({"device_name": "NVIDIA H20"}, RuleId.H20_DEVICE),
    ],
)
def test_auto_enable_conditions_block_only_the_automatic_enable(
    changes: dict[str, object], rule: RuleId
) -> None:
    auto = decide_fusion(_with(**changes))
    assert (auto.enabled, auto.rule, auto.applied_rules) == (False, rule, (rule,))
    explicit = decide_fusion(_with(fusion_choice=FusionChoice.ENABLE, **changes))
    assert (explicit.enabled, explicit.rule) == (True, RuleId.USER_ENABLE)
    assert explicit.applied_rules == (RuleId.USER_ENABLE, rule)
    assert len(explicit.warnings) == 1
    assert explicit.warnings[0].startswith(f"{FLAG} is honoured although")


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"tp_size": 1}, RuleId.TP_SIZE_ONE),
        ({"dp_attention": True}, RuleId.DP_ATTENTION),
        ({"attn_cp_size": 2}, RuleId.ATTENTION_CONTEXT_PARALLEL),
        ({"compute_capability": (8, 0)}, RuleId.UNSUPPORTED_GPU),
    ],
)
def test_hard_blockers_veto_even_an_explicit_enable(
    changes: dict[str, object], rule: RuleId
) -> None:
    auto = decide_fusion(_with(**changes))
    assert (auto.enabled, auto.rule, auto.warnings) == (False, rule, ())
    explicit = decide_fusion(_with(fusion_choice=FusionChoice.ENABLE, **changes))
    assert (explicit.enabled, explicit.rule) == (False, rule)
    assert explicit.applied_rules == (rule, RuleId.USER_ENABLE)
    assert explicit.warnings == (f"Disable {FLAG} because {explicit.reason}.",)


def test_moe_a2a_backend_none_is_the_only_no_backend_spelling() -> None:
    assert decide_fusion(_with(moe_a2a_backend="none")).enabled
    assert decide_fusion(_with(moe_a2a_backend="mooncake")).rule is RuleId.MOE_A2A_BACKEND


# --------------------------------------------------------------------------- determinism


def test_deterministic_inference_disables_auto_enabled_fusion() -> None:
    decision = decide_fusion(_with(deterministic=True))
    assert not decision.enabled
    assert decision.rule is RuleId.DETERMINISTIC_INFERENCE
    assert "deterministic inference" in decision.reason
    assert decision.warnings == ()


def test_deterministic_inference_beats_an_explicit_enable_and_warns() -> None:
    decision = decide_fusion(_with(deterministic=True, fusion_choice=FusionChoice.ENABLE))
    assert not decision.enabled
    assert decision.rule is RuleId.DETERMINISTIC_INFERENCE
    assert decision.applied_rules == (RuleId.DETERMINISTIC_INFERENCE, RuleId.USER_ENABLE)
    assert decision.warnings == (
        f"Disable {FLAG} because deterministic inference is enabled and the fused "
        "allreduce gives batch-size-dependent results.",
    )


def test_deterministic_with_enable_and_a_hard_blocker_warns_for_each_veto() -> None:
    decision = decide_fusion(
        _with(deterministic=True, tp_size=1, fusion_choice=FusionChoice.ENABLE)
    )
    assert decision.rule is RuleId.DETERMINISTIC_INFERENCE
    assert len(decision.warnings) == 2
    assert all(w.startswith(f"Disable {FLAG} because") for w in decision.warnings)
    assert "tensor-parallel size is 1" in decision.warnings[1]


def test_enforce_disable_beats_everything() -> None:
    decision = decide_fusion(
        _with(deterministic=True, tp_size=1, fusion_choice=FusionChoice.ENFORCE_DISABLE)
    )
    assert not decision.enabled
    assert decision.rule is RuleId.ENFORCE_DISABLE
    assert decision.applied_rules == (
        RuleId.ENFORCE_DISABLE,
        RuleId.DETERMINISTIC_INFERENCE,
        RuleId.TP_SIZE_ONE,
    )
    assert decision.warnings == ()


def test_user_disable_beats_auto_enable() -> None:
    decision = decide_fusion(_with(fusion_choice=FusionChoice.DISABLE))
    assert (decision.enabled, decision.rule) == (False, RuleId.USER_DISABLE)
    assert decision.reason == "fusion is disabled by the user"


def test_the_seed_bug_cannot_come_back_with_vetoes_listed_last() -> None:
    # SGLang's bug: the rule that forbids fusion ran after the one that enabled it.
    # Here the list order is irrelevant: vetoes listed last still win.
    vetoes_last = sorted(DEFAULT_RULES, key=lambda r: r.effect is RuleEffect.VETO)
    assert vetoes_last[-1].effect is RuleEffect.VETO
    for rules in (DEFAULT_RULES, tuple(reversed(DEFAULT_RULES)), tuple(vetoes_last)):
        decision = decide_fusion(_with(deterministic=True), rules)
        assert (decision.enabled, decision.rule) == (False, RuleId.DETERMINISTIC_INFERENCE)


# --------------------------------------------------------------------------- rule sets


def test_default_rules_have_unique_ids_and_cover_every_rule_id_but_auto_enable() -> None:
    ids = [r.rule_id for r in DEFAULT_RULES]
    assert len(ids) == len(set(ids))
    # The engine rule sets (fi_compat.policy._engines) add ids of their own.
    engine_only = {
        RuleId.BACKEND_REFUSED,
        RuleId.MIMO_CUTEDSL,
        RuleId.UNSUPPORTED_WORLD_SIZE,
        RuleId.OPTIMIZATION_LEVEL,
        RuleId.NO_COMPILATION,
    }
    assert set(ids) == set(RuleId) - {RuleId.AUTO_ENABLE} - engine_only
    assert {r.rule_id for r in DEFAULT_RULES if r.effect is RuleEffect.VETO} == {
        RuleId.ENFORCE_DISABLE,
        RuleId.DETERMINISTIC_INFERENCE,
        RuleId.TP_SIZE_ONE,
        RuleId.UNSUPPORTED_GPU,
        RuleId.DP_ATTENTION,
        RuleId.ATTENTION_CONTEXT_PARALLEL,
    }


def test_duplicate_rule_ids_are_refused() -> None:
    with pytest.raises(PolicyInputError, match="unique rule ids"):
        decide_fusion(ELIGIBLE, (*DEFAULT_RULES, DEFAULT_RULES[0]))


def test_auto_enable_is_not_a_rule() -> None:
    rule = FusionRule(RuleId.AUTO_ENABLE, RuleEffect.VETO, lambda d: True, lambda d: "x")
    with pytest.raises(PolicyInputError, match="auto-enable"):
        decide_fusion(ELIGIBLE, (rule,))


def test_non_rules_are_refused() -> None:
    with pytest.raises(PolicyInputError, match="FusionRule"):
        decide_fusion(ELIGIBLE, ("not a rule",))  # type: ignore[arg-type]


def test_no_rules_means_auto_enable() -> None:
    assert decide_fusion(_with(tp_size=1), ()).rule is RuleId.AUTO_ENABLE


def test_decision_as_dict_is_json_ready() -> None:
    decision = decide_fusion(_with(deterministic=True, fusion_choice=FusionChoice.ENABLE))
    data = json.loads(json.dumps(decision.as_dict()))
    assert data == {
        "enabled": False,
        "rule": "deterministic-inference",
        "reason": decision.reason,
        "warnings": list(decision.warnings),
        "applied_rules": ["deterministic-inference", "user-enable"],
        "backend": None,
    }
    assert json.loads(json.dumps(ELIGIBLE.as_dict()))["compute_capability"] == "9.0"


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "changes",
    [
        {"tp_size": 0},
        {"tp_size": -2},
        {"nnodes": 0},
        {"attn_cp_size": 0},
        {"attn_cp_size": -1},
        {"tp_size": True},
        {"tp_size": 2.0},
        {"compute_capability": (9,)},
        {"compute_capability": (-1, 0)},
        {"compute_capability": (9, -1)},
        {"compute_capability": [9, 0]},
        {"compute_capability": ("9", "0")},
        {"architecture": ""},
        {"moe_a2a_backend": ""},
        {"device_name": None},
        {"fusion_choice": "enable"},
    ],
)
def test_bad_deployments_raise_a_value_error(changes: dict[str, object]) -> None:
    with pytest.raises(PolicyInputError) as info:
        _with(**changes)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, FiCompatError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9.0", (9, 0)),
        ("10.3", (10, 3)),
        (" 12.1 ", (12, 1)),
        ("sm90", (9, 0)),
        ("SM_100", (10, 0)),
        ("sm_90a", (9, 0)),
        ("sm100f", (10, 0)),
        ("103", (10, 3)),
        ("80", (8, 0)),
    ],
)
def test_parse_compute_capability(text: str, expected: tuple[int, int]) -> None:
    assert parse_compute_capability(text) == expected


@pytest.mark.parametrize("text", ["", "9", "x.y", "9.", ".0", "9.0.1", "-9.0", "sm", "9,0"])
def test_parse_compute_capability_refuses_garbage(text: str) -> None:
    with pytest.raises(PolicyInputError, match="compute capability"):
        parse_compute_capability(text)


# --------------------------------------------------------------------------- per layer


def _fuse(**changes: object) -> bool:
    kwargs: dict[str, object] = {
        "fusion_enabled": True,
        "mlp_mode": ScatterMode.FULL,
        "is_last_layer": False,
        "tp_size": 4,
        "num_tokens": 128,
    }
    kwargs.update(changes)
    return should_fuse_mlp_allreduce_with_next_layer(**kwargs)  # type: ignore[arg-type]


def test_layer_fuses_when_everything_holds() -> None:
    assert _fuse() is True
    assert _fuse(mlp_mode=ScatterMode.TP_ATTN_FULL) is True
    assert _fuse(fusion_enabled=decide_fusion(ELIGIBLE)) is True


@pytest.mark.parametrize(
    "changes",
    [
        {"mlp_mode": ScatterMode.SCATTERED},
        {"mlp_mode": ScatterMode.MOE_FULL},
        {"is_last_layer": True},
        {"tp_size": 1},
        {"fusion_enabled": False},
        {"fusion_enabled": decide_fusion(_with(deterministic=True))},
        {"num_tokens": 0},
        {"num_tokens": DEFAULT_MAX_FUSION_TOKENS + 1},
        {"num_tokens": 65, "max_fusion_tokens": 64},
    ],
)
def test_layer_does_not_fuse(changes: dict[str, object]) -> None:
    assert _fuse(**changes) is False


def test_token_limit_is_inclusive() -> None:
    assert DEFAULT_MAX_FUSION_TOKENS == 2048
    assert _fuse(num_tokens=2048) is True
    assert _fuse(num_tokens=1) is True
    assert _fuse(num_tokens=64, max_fusion_tokens=64) is True


@pytest.mark.parametrize(
    "changes",
    [
        {"tp_size": 0},
        {"num_tokens": -1},
        {"max_fusion_tokens": 0},
        {"mlp_mode": "full"},
        {"fusion_enabled": 1},
        {"fusion_enabled": None},
    ],
)
def test_layer_check_validates_inputs(changes: dict[str, object]) -> None:
    with pytest.raises(PolicyInputError):
        _fuse(**changes)


# --------------------------------------------------------------------------- dummy run


@pytest.mark.parametrize(
    ("num_tokens", "attn_tp", "sync", "expected"),
    [
        (7, 4, True, 8),
        (8, 4, True, 8),
        (9, 4, True, 12),
        (0, 4, True, 0),
        (1, 8, True, 8),
        (7, 1, True, 7),
        (7, 4, False, 7),
        (0, 3, False, 0),
    ],
)
def test_align_dummy_run_num_tokens(
    num_tokens: int, attn_tp: int, sync: bool, expected: int
) -> None:
    assert align_dummy_run_num_tokens(num_tokens, attn_tp, sync) == expected


@pytest.mark.parametrize(("num_tokens", "attn_tp"), [(-1, 4), (4, 0), (4, -2)])
def test_align_dummy_run_num_tokens_validates(num_tokens: int, attn_tp: int) -> None:
    with pytest.raises(PolicyInputError):
        align_dummy_run_num_tokens(num_tokens, attn_tp, True)


@pytest.mark.parametrize(
    ("bs", "per_req", "attn_tp", "sync", "expected"),
    [
        (3, 1, 4, True, DummyRunShape(batch_size=4, num_tokens=4)),
        (6, 2, 4, True, DummyRunShape(batch_size=6, num_tokens=12)),
        (3, 2, 4, True, DummyRunShape(batch_size=4, num_tokens=8)),
        (1, 3, 2, True, DummyRunShape(batch_size=1, num_tokens=4)),
        (3, 1, 4, False, DummyRunShape(batch_size=3, num_tokens=3)),
        (0, 1, 4, True, DummyRunShape(batch_size=0, num_tokens=0)),
    ],
)
def test_align_dummy_run_shape(
    bs: int, per_req: int, attn_tp: int, sync: bool, expected: DummyRunShape
) -> None:
    assert align_dummy_run_shape(bs, per_req, attn_tp, sync) == expected


@pytest.mark.parametrize(("bs", "per_req"), [(-1, 1), (1, 0)])
def test_align_dummy_run_shape_validates(bs: int, per_req: int) -> None:
    with pytest.raises(PolicyInputError):
        align_dummy_run_shape(bs, per_req, 2, True)


# --------------------------------------------------------------------------- module


def test_public_names() -> None:
    assert dir(policy) == sorted(policy.__all__)
    for name in policy.__all__:
        assert hasattr(policy, name), name


def test_readme_documents_every_rule_and_allow_listed_architecture() -> None:
    """The fusion policy guide (docs/guide/policy.md) names every rule and architecture."""
    from pathlib import Path

    page = Path(__file__).resolve().parent.parent / "docs" / "guide" / "policy.md"
    section = page.read_text(encoding="utf-8").split("# Fusion policy\n", 1)[1]
    for arch in FUSION_ARCHITECTURES:
        assert f"`{arch}`" in section, arch
    for rule_id in RuleId:
        assert f"`{rule_id.value}`" in section, rule_id
