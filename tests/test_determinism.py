"""The one determinism switch, and the contract that the planner and the fusion gate share it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fi_compat import determinism
from fi_compat.attention import AttentionPlanner, PlannerConfigError, Settings
from fi_compat.errors import FusionForbiddenError
from tests.support.attention_doubles import DecodeDouble, measured_capabilities


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before = determinism.is_deterministic()
    yield
    determinism.set_deterministic(before)


Decode = DecodeDouble


def test_off_in_a_fresh_process() -> None:
    code = "import fi_compat.determinism as d; print(d.is_deterministic())"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_set_and_read() -> None:
    determinism.set_deterministic(True)
    assert determinism.is_deterministic() is True
    determinism.set_deterministic(False)
    assert determinism.is_deterministic() is False
    determinism.set_deterministic(True)
    assert determinism.is_deterministic() is True


def test_context_manager_restores_even_on_error() -> None:
    determinism.set_deterministic(False)
    seen: list[bool] = []

    def body() -> None:
        with determinism.deterministic():
            seen.append(determinism.is_deterministic())
            with determinism.deterministic(False):
                seen.append(determinism.is_deterministic())
            seen.append(determinism.is_deterministic())
            raise KeyError("boom")

    with pytest.raises(KeyError):
        body()
    assert seen == [True, False, True]
    assert determinism.is_deterministic() is False


def test_fusion_is_forbidden_while_on() -> None:
    determinism.ensure_fusion_allowed()
    with determinism.deterministic(), pytest.raises(FusionForbiddenError) as info:
        determinism.ensure_fusion_allowed("the fused MoE allreduce")
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert "expected no the fused MoE allreduce while deterministic inference is on" in message
    assert "Fix: use the unfused path" in message


@given(st.lists(st.booleans(), min_size=1, max_size=8))
def test_planner_and_fusion_gate_always_agree(switches: list[bool]) -> None:
    """Whatever the history of the switch, a planner built now and the fusion gate agree."""
    for on in switches:
        determinism.set_deterministic(on)
        planner = AttentionPlanner.single(decode=Decode(), capabilities=measured_capabilities())
        try:
            determinism.ensure_fusion_allowed()
            fusion_allowed = True
        except FusionForbiddenError:
            fusion_allowed = False
        assert planner.settings.deterministic is on
        assert fusion_allowed is not on
        assert bool(planner.targets[0].split) is on


@pytest.mark.parametrize("on", [True, False])
def test_settings_cannot_be_a_second_switch(on: bool) -> None:
    determinism.set_deterministic(on)
    with pytest.raises(PlannerConfigError, match="one switch"):
        AttentionPlanner.single(
            decode=Decode(),
            settings=Settings(deterministic=not on),
            capabilities=measured_capabilities(),
        )
    agreeing = AttentionPlanner.single(
        decode=Decode(), settings=Settings(deterministic=on), capabilities=measured_capabilities()
    )
    assert agreeing.settings.deterministic is on


def test_policy_deployment_defaults_to_the_switch() -> None:
    from fi_compat.policy import Deployment, FusionChoice, RuleId, decide_fusion

    def described() -> Deployment:
        return Deployment(
            architecture="DeepseekV3ForCausalLM",
            compute_capability=(9, 0),
            tp_size=8,
            fusion_choice=FusionChoice.ENABLE,
        )

    assert decide_fusion(described()).enabled
    with determinism.deterministic(True):
        deployment = described()
        assert deployment.deterministic is True
        decision = decide_fusion(deployment)
    assert not decision.enabled
    assert decision.rule is RuleId.DETERMINISTIC_INFERENCE
