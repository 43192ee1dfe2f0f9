"""Hostile input to :mod:`fi_compat.policy`: switches take real bools, rules real rules.

Before, ``Deployment(dp_attention="false")`` vetoed fusion: ``bool("false")`` is True. Every
switch of the policy now refuses anything but ``True`` or ``False`` with a typed error
(``numpy.bool_`` too: convert with ``bool(x)``), as does every other malformed argument of
its public functions. Every bad input sits in a module-level table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

from fi_compat.errors import FiCompatError, InvalidArgumentError
from fi_compat.policy import (
    DEFAULT_RULES,
    Deployment,
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
from tests.support.values import NOT_BOOLS, NOT_STRS


def _good_deployment(**changes: Any) -> Deployment:
    kwargs: dict[str, Any] = {
        "architecture": "DeepseekV3ForCausalLM",
        "compute_capability": (9, 0),
        "tp_size": 8,
        "deterministic": False,
        **changes,
    }
    return Deployment(**kwargs)


def _fuse(**changes: Any) -> bool:
    kwargs: dict[str, Any] = {
        "fusion_enabled": True,
        "mlp_mode": ScatterMode.FULL,
        "is_last_layer": False,
        "tp_size": 8,
        "num_tokens": 16,
        **changes,
    }
    return should_fuse_mlp_allreduce_with_next_layer(**kwargs)


def _rule(**changes: Any) -> FusionRule:
    kwargs: dict[str, Any] = {
        "rule_id": RuleId.MULTI_NODE,
        "effect": RuleEffect.VETO,
        "applies": lambda d: False,
        "explain": lambda d: "never",
        "priority": 0,
        **changes,
    }
    return FusionRule(**kwargs)


Case = tuple[str, Callable[[], object]]

#: fi_compat.policy: (id, call) -> PolicyInputError.
POLICY_BAD: list[Case] = [
    *(
        (f"Deployment(dp_attention={v!r})", lambda v=v: _good_deployment(dp_attention=v))
        for v in NOT_BOOLS
    ),
    *(
        (f"Deployment(deterministic={v!r})", lambda v=v: _good_deployment(deterministic=v))
        for v in NOT_BOOLS
    ),
    *((f"should_fuse(is_last_layer={v!r})", lambda v=v: _fuse(is_last_layer=v)) for v in NOT_BOOLS),
    *(
        (f"should_fuse(fusion_enabled={v!r})", lambda v=v: _fuse(fusion_enabled=v))
        for v in NOT_BOOLS
    ),
    *(
        (
            f"align_dummy_run_num_tokens(require_mlp_sync={v!r})",
            lambda v=v: align_dummy_run_num_tokens(7, 4, v),
        )
        for v in NOT_BOOLS
    ),
    *(
        (
            f"align_dummy_run_shape(require_mlp_sync={v!r})",
            lambda v=v: align_dummy_run_shape(3, 1, 4, v),
        )
        for v in NOT_BOOLS
    ),
    *(
        (f"parse_compute_capability({v!r})", lambda v=v: parse_compute_capability(v))
        for v in NOT_STRS
    ),
    *((f"is_h20_device({v!r})", lambda v=v: is_h20_device(v)) for v in NOT_STRS),
    ("decide_fusion(None)", lambda: decide_fusion(None)),
    ("decide_fusion(dict)", lambda: decide_fusion(_good_deployment().as_dict())),
    ("decide_fusion(str)", lambda: decide_fusion("DeepseekV3ForCausalLM")),
    ("decide_fusion(class)", lambda: decide_fusion(Deployment)),
    ("decide_fusion(rules=None)", lambda: decide_fusion(_good_deployment(), None)),
    ("decide_fusion(rules=one rule)", lambda: decide_fusion(_good_deployment(), _rule())),
    ("decide_fusion(rules=int)", lambda: decide_fusion(_good_deployment(), 5)),
    ("decide_fusion(rules=str)", lambda: decide_fusion(_good_deployment(), "rules")),
    ("decide_fusion(rules=[None])", lambda: decide_fusion(_good_deployment(), [None])),
    (
        "decide_fusion(rule answering 'false')",
        lambda: decide_fusion(_good_deployment(), [_rule(applies=lambda d: "false")]),
    ),
    (
        "decide_fusion(rule answering 1)",
        lambda: decide_fusion(_good_deployment(), (*DEFAULT_RULES, _rule(applies=lambda d: 1))),
    ),
    ("FusionRule(rule_id=str)", lambda: _rule(rule_id="multi-node")),
    ("FusionRule(effect=int)", lambda: _rule(effect=0)),
    ("FusionRule(applies=str)", lambda: _rule(applies="yes")),
    ("FusionRule(explain=None)", lambda: _rule(explain=None)),
    ("FusionRule(priority=str)", lambda: _rule(priority="0")),
    ("FusionRule(priority=True)", lambda: _rule(priority=True)),
    ("FusionRule(priority=float)", lambda: _rule(priority=1.5)),
]


def test_the_tables_count() -> None:
    assert (len(NOT_BOOLS), len(NOT_STRS)) == (15, 6)
    assert len(POLICY_BAD) == 6 * 15 + 2 * 6 + 11 + 7  # switches, strs, decide_fusion, rules


def test_policy_input_error_is_an_invalid_argument_error() -> None:
    assert issubclass(PolicyInputError, InvalidArgumentError)
    for base in (FiCompatError, ValueError, TypeError):
        assert issubclass(PolicyInputError, base)


@pytest.mark.parametrize(("case", "call"), POLICY_BAD, ids=[c for c, _ in POLICY_BAD])
def test_policy_refuses_malformed_input(case: str, call: Callable[[], object]) -> None:
    with pytest.raises(PolicyInputError) as info:
        call()
    assert type(info.value) is PolicyInputError
    assert isinstance(info.value, InvalidArgumentError)
    assert isinstance(info.value, FiCompatError | TypeError)
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------------------- controls


def test_real_bools_still_work() -> None:
    for value in (True, False):
        assert _good_deployment(dp_attention=value).dp_attention is value
        assert _good_deployment(deterministic=value).deterministic is value
        assert _fuse(is_last_layer=value) is (not value)
        assert align_dummy_run_num_tokens(7, 4, value) == (8 if value else 7)
        assert align_dummy_run_shape(3, 1, 4, value).num_tokens == (4 if value else 3)
    assert parse_compute_capability("sm90") == (9, 0)
    assert is_h20_device("NVIDIA H20") is True
    assert decide_fusion(_good_deployment(), [_rule()]).enabled is True
    assert decide_fusion(_good_deployment(), iter(DEFAULT_RULES)).enabled is True


def test_the_string_false_no_longer_vetoes_fusion() -> None:
    """The bug of issue 10: ``dp_attention="false"`` made fusion off under a made-up veto."""
    assert decide_fusion(_good_deployment(dp_attention=False)).enabled is True
    with pytest.raises(PolicyInputError, match="dp_attention to be a bool"):
        _good_deployment(dp_attention="false")
