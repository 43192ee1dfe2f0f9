"""The engine rule sets against the engines' own decisions.

``engine_rules("sglang", "0.5.23")`` and ``engine_rules("vllm", "0.33.0")`` are checked row
by row against tables whose rows were derived by reading and running the engines' decision
functions:

- SGLang 0.5.23: ``_flashinfer_allreduce_fusion_auto_enable``,
  ``_enforce_disable_allreduce_fusion`` and ``_deterministic_allreduce_fusion_disable``
  (``srt/arg_groups/overrides.py``), ``_handle_deprecated_args``
  (``srt/arg_groups/serving_hook.py``), ``_resolve_backend``
  (``srt/layers/flashinfer_comm_fusion.py``) and ``flashinfer_ar_fusion_applies``
  (``srt/layers/layer_boundary/residual/add_norm.py``).
- vLLM 0.33.0: ``enable_allreduce_rms_fusion`` and ``OPTIMIZATION_LEVEL_0x``
  (``config/vllm.py``), ``PassConfig.flashinfer_max_size`` (``config/compilation.py``),
  ``AllReduceFusionPass.__init__`` and ``FI_ALLREDUCE_FUSION_MAX_SIZE_MB``
  (``compilation/passes/fusion/allreduce_rms_fusion.py``), ``_resolve_fi_ar_backend`` and
  ``get_fi_ar_workspace`` (``distributed/device_communicators/flashinfer_all_reduce.py``).

The tables stand alone. The same rows are also run through the engine functions
themselves, read from the engines' published wheels (fetched once into the release cache
by :mod:`tests.support.engine_wheels`, as every engine test gets them), with the GPU
queries stubbed; those tests skip only where the wheel is not cached and the registry
cannot be reached.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import random
import re
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import pytest

from fi_compat.cli import main
from fi_compat.errors import DeploymentRefusedError, FiCompatError, PolicyInputError
from fi_compat.policy import (
    DEFAULT_RULES,
    Deployment,
    FusionChoice,
    FusionRule,
    FusionRuleSet,
    RuleEffect,
    RuleId,
    decide_fusion,
    engine_rules,
)
from tests.support.engine_wheels import ENGINES, engine_wheel
from tools.releases import RegistryUnreachableError

SGLANG = engine_rules("sglang", "0.5.23")
VLLM = engine_rules("vllm", "0.33.0")
SGLANG_0_5_23_RULES = SGLANG.rules
VLLM_0_33_0_RULES = VLLM.rules

ENABLE, DISABLE, UNSET, ENFORCE = (
    FusionChoice.ENABLE,
    FusionChoice.DISABLE,
    FusionChoice.UNSET,
    FusionChoice.ENFORCE_DISABLE,
)
REFUSED = "refused"

# --------------------------------------------------------------------------- SGLang rows
# (architecture, cc, tp, nnodes, dp_attention, attn_cp, a2a, deterministic, choice,
#  backend flag, expected): expected is (enabled, backend) or REFUSED.
DSV3, LLAMA, MIMO = "DeepseekV3ForCausalLM", "LlamaForCausalLM", "MiMoV2FlashForCausalLM"
SGLANG_ROWS: list[tuple[Any, ...]] = [
    # auto-enable: `auto` resolves to mnnvl on SM100, trtllm on SM90
    (DSV3, (10, 0), 8, 1, False, 1, "none", False, UNSET, None, (True, "mnnvl")),
    (DSV3, (10, 3), 4, 1, False, 1, "none", False, UNSET, None, (True, "mnnvl")),
    (DSV3, (9, 0), 8, 1, False, 1, "none", False, UNSET, None, (True, "trtllm")),
    # across nodes: auto-enabled on SM100 only
    (DSV3, (10, 0), 8, 2, False, 1, "none", False, UNSET, None, (True, "mnnvl")),
    (DSV3, (9, 0), 8, 2, False, 1, "none", False, UNSET, None, (False, None)),
    # no H20 rule: an H20 is SM 9.0 like any Hopper
    (DSV3, (9, 0), 8, 1, False, 1, "none", False, UNSET, None, (True, "trtllm")),
    # conditions of the auto-enable
    (LLAMA, (9, 0), 8, 1, False, 1, "none", False, UNSET, None, (False, None)),
    (DSV3, (9, 0), 1, 1, False, 1, "none", False, UNSET, None, (False, None)),
    (DSV3, (8, 0), 8, 1, False, 1, "none", False, UNSET, None, (False, None)),
    (DSV3, (12, 0), 8, 1, False, 1, "none", False, UNSET, None, (False, None)),
    (DSV3, (9, 0), 8, 1, True, 1, "none", False, UNSET, None, (False, None)),
    (DSV3, (9, 0), 8, 1, False, 1, "deepep", False, UNSET, None, (False, None)),
    # attn_cp_size is not checked for other models...
    (DSV3, (9, 0), 8, 1, False, 2, "none", False, UNSET, None, (True, "trtllm")),
    # ...but it is for MiMo, which auto-enables cutedsl on SM100 only
    (MIMO, (10, 0), 8, 1, False, 1, "none", False, UNSET, None, (True, "cutedsl")),
    (MIMO, (10, 0), 8, 1, False, 2, "none", False, UNSET, None, (False, None)),
    (MIMO, (9, 0), 8, 1, False, 1, "none", False, UNSET, None, (False, None)),
    (MIMO, (10, 0), 6, 1, False, 1, "none", False, UNSET, None, (False, None)),
    # the user's backend
    (LLAMA, (9, 0), 8, 1, False, 1, "none", False, UNSET, "auto", (True, "trtllm")),
    (LLAMA, (9, 0), 8, 1, False, 1, "none", False, ENABLE, None, (True, "trtllm")),
    (LLAMA, (10, 0), 8, 1, False, 1, "none", False, UNSET, "trtllm", (True, "trtllm")),
    (LLAMA, (9, 0), 8, 1, False, 1, "none", False, UNSET, "mnnvl", (True, "mnnvl")),
    (LLAMA, (10, 0), 8, 2, False, 1, "none", False, UNSET, "mnnvl", (True, "mnnvl")),
    (LLAMA, (10, 0), 8, 1, False, 1, "none", False, UNSET, "cutedsl", (True, "cutedsl")),
    # _resolve_backend refuses
    (LLAMA, (8, 0), 8, 1, False, 1, "none", False, UNSET, "trtllm", REFUSED),
    (LLAMA, (9, 0), 8, 1, False, 1, "none", False, UNSET, "cutedsl", REFUSED),
    (LLAMA, (9, 0), 1, 1, False, 1, "none", False, UNSET, "cutedsl", REFUSED),
    (LLAMA, (9, 0), 8, 2, False, 1, "none", False, UNSET, "auto", REFUSED),
    (LLAMA, (10, 0), 8, 2, False, 1, "none", False, UNSET, "trtllm", REFUSED),
    (LLAMA, (9, 0), 8, 2, False, 1, "none", False, UNSET, "mnnvl", REFUSED),
    # no workspace for a group of one rank: nothing is resolved, nothing fuses
    (LLAMA, (8, 0), 1, 1, False, 1, "none", False, UNSET, "trtllm", (False, None)),
    # DP attention: the backend resolves, the per-layer gate never fuses
    (LLAMA, (9, 0), 8, 1, True, 1, "none", False, UNSET, "trtllm", (False, None)),
    # enforce-disable and determinism clear the backend before anything resolves it
    (LLAMA, (8, 0), 8, 1, False, 1, "none", False, ENFORCE, "trtllm", (False, None)),
    (LLAMA, (8, 0), 8, 1, False, 1, "none", True, UNSET, "trtllm", (False, None)),
    (DSV3, (9, 0), 8, 1, False, 1, "none", True, UNSET, None, (False, None)),
    (DSV3, (10, 0), 8, 1, False, 1, "none", True, UNSET, "mnnvl", (False, None)),
]


def _sglang_deployment(row: tuple[Any, ...]) -> Deployment:
    arch, cc, tp, nnodes, dp, cp, a2a, det, choice, backend, _ = row
    return Deployment(
        architecture=arch,
        compute_capability=cc,
        tp_size=tp,
        nnodes=nnodes,
        dp_attention=dp,
        attn_cp_size=cp,
        moe_a2a_backend=a2a,
        deterministic=det,
        fusion_choice=choice,
        fusion_backend=backend,
    )


def _answer(deployment: Deployment, rules: FusionRuleSet) -> Any:
    try:
        decision = decide_fusion(deployment, rules)
    except DeploymentRefusedError:
        return REFUSED
    return (decision.enabled, decision.backend)


@pytest.mark.parametrize("row", SGLANG_ROWS, ids=lambda r: f"{r[0]}-{r[1]}-tp{r[2]}-{r[9]}")
def test_sglang_0_5_23_rows(row: tuple[Any, ...]) -> None:
    assert _answer(_sglang_deployment(row), SGLANG_0_5_23_RULES) == row[-1]


# --------------------------------------------------------------------------- vLLM rows
# (cc, tp, nnodes, optimization level, batch invariant, fuse_allreduce_rms (None: unset),
#  VLLM_FLASHINFER_ALLREDUCE_BACKEND, vLLM's answer, fi-compat's answer)
VLLM_ROWS: list[tuple[Any, ...]] = [
    ((9, 0), 4, 1, 2, False, None, None, (True, "mnnvl"), (True, "mnnvl")),
    ((10, 0), 8, 1, 3, False, None, None, (True, "mnnvl"), (True, "mnnvl")),
    ((10, 3), 16, 2, 2, False, None, None, (True, "mnnvl"), (True, "mnnvl")),
    ((9, 0), 4, 1, 1, False, None, None, (False, None), (False, None)),
    ((9, 0), 4, 1, 1, False, True, None, (True, "mnnvl"), (True, "mnnvl")),
    ((9, 0), 4, 1, 0, False, True, None, (False, None), (False, None)),
    ((9, 0), 4, 1, 2, False, False, None, (False, None), (False, None)),
    ((9, 0), 1, 1, 2, False, True, None, (False, None), (False, None)),
    ((9, 0), 16, 1, 2, False, True, None, (False, None), (False, None)),
    ((9, 0), 6, 1, 2, False, True, None, (False, None), (False, None)),
    ((8, 0), 4, 1, 2, False, None, None, (False, None), (False, None)),
    ((8, 0), 4, 1, 2, False, True, None, (False, None), (False, None)),
    ((12, 0), 4, 1, 2, False, True, None, (False, None), (False, None)),
    ((9, 0), 4, 2, 2, False, True, None, (False, None), (False, None)),
    ((9, 0), 4, 1, 2, False, None, "trtllm", (True, "trtllm"), (True, "trtllm")),
    ((10, 0), 8, 2, 2, False, None, "trtllm", REFUSED, REFUSED),
    # VLLM_BATCH_INVARIANT: the default turns off; an explicit True stays on in vLLM,
    # while fi-compat's determinism switch turns it off (the one intended difference).
    ((9, 0), 4, 1, 2, True, None, None, (False, None), (False, None)),
    ((9, 0), 4, 1, 2, True, True, None, (True, "mnnvl"), (False, None)),
]


def _vllm_deployment(row: tuple[Any, ...]) -> Deployment:
    cc, tp, nnodes, level, invariant, fuse, backend, _, _ = row
    choice = UNSET if fuse is None else (ENABLE if fuse else DISABLE)
    return Deployment(
        architecture="LlamaForCausalLM",
        compute_capability=cc,
        tp_size=tp,
        nnodes=nnodes,
        optimization_level=level,
        deterministic=invariant,
        fusion_choice=choice,
        fusion_backend=backend,
    )


@pytest.mark.parametrize("row", VLLM_ROWS, ids=lambda r: f"{r[0]}-tp{r[1]}-n{r[2]}-O{r[3]}")
def test_vllm_0_33_0_rows(row: tuple[Any, ...]) -> None:
    assert _answer(_vllm_deployment(row), VLLM_0_33_0_RULES) == row[-1]


# --------------------------------------------------------------------------- order and precedence


@pytest.mark.parametrize(
    "rules", [SGLANG_0_5_23_RULES, VLLM_0_33_0_RULES], ids=lambda rules: rules.name
)
def test_the_order_of_the_rules_plays_no_part(rules: FusionRuleSet) -> None:
    rows = [_sglang_deployment(r) for r in SGLANG_ROWS] + [_vllm_deployment(r) for r in VLLM_ROWS]
    rng = random.Random(29)
    for _ in range(5):
        shuffled = list(rules.rules)
        rng.shuffle(shuffled)
        other = dataclasses.replace(rules, rules=tuple(shuffled))
        for deployment in rows:
            assert _answer(deployment, other) == _answer(deployment, rules)
            # A plain tuple of the rules decides the same, naming no backend.
            plain = _answer(deployment, tuple(reversed(shuffled)))  # type: ignore[arg-type]
            mine = _answer(deployment, rules)
            assert plain == mine if mine == REFUSED else plain[0] == mine[0]


@pytest.mark.parametrize(
    "rules", [SGLANG_0_5_23_RULES, VLLM_0_33_0_RULES], ids=lambda rules: rules.name
)
def test_determinism_wins_in_every_engine_rule_set(rules: FusionRuleSet) -> None:
    for cc, tp, nnodes, backend, choice in itertools.product(
        [(8, 0), (9, 0), (10, 0), (12, 0)],
        [1, 2, 8],
        [1, 2],
        [None, "auto", "trtllm"],
        [UNSET, ENABLE],
    ):
        deployment = Deployment(
            architecture=DSV3,
            compute_capability=cc,
            tp_size=tp,
            nnodes=nnodes,
            deterministic=True,
            fusion_backend=backend,
            fusion_choice=choice,
        )
        decision = decide_fusion(deployment, rules)
        assert (decision.enabled, decision.rule) == (False, RuleId.DETERMINISTIC_INFERENCE)


def test_warnings_name_the_engines_flags() -> None:
    deployment = Deployment(
        architecture=DSV3,
        compute_capability=(9, 0),
        tp_size=8,
        deterministic=True,
        fusion_backend="trtllm",
    )
    assert decide_fusion(deployment, SGLANG_0_5_23_RULES).warnings == (
        "Disable --flashinfer-allreduce-fusion-backend because deterministic inference is enabled.",
    )
    vllm = dataclasses.replace(deployment, fusion_backend=None, fusion_choice=ENABLE)
    (warning,) = decide_fusion(vllm, VLLM_0_33_0_RULES).warnings
    assert warning.startswith("Disable compilation_config.pass_config.fuse_allreduce_rms=True")


def test_the_refusal_is_typed_and_carries_the_engines_reason() -> None:
    deployment = Deployment(
        architecture=LLAMA, compute_capability=(9, 0), tp_size=8, fusion_backend="cutedsl"
    )
    with pytest.raises(DeploymentRefusedError, match="requires a Blackwell system") as info:
        decide_fusion(deployment, SGLANG_0_5_23_RULES)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, FiCompatError)
    assert info.value.rule == "backend-refused"


def test_default_rules_are_unchanged_by_the_new_fields() -> None:
    base = Deployment(architecture=DSV3, compute_capability=(9, 0), tp_size=8)
    for changes in ({"fusion_backend": "cutedsl"}, {"optimization_level": 0}, {"dtype": "fp16"}):
        assert decide_fusion(dataclasses.replace(base, **changes)) == decide_fusion(base)
    assert decide_fusion(base).backend is None


def test_the_sglang_allow_list_is_the_one_fi_compat_keeps() -> None:
    from fi_compat.policy import FUSION_ARCHITECTURES

    # One home: the list is written once (the wheel-backed test below compares it with
    # SGLang 0.5.23's own where the wheel is at hand).
    assert SGLANG.architectures is FUSION_ARCHITECTURES


# --------------------------------------------------------------------------- hostile input

HOSTILE_FIELDS: list[dict[str, Any]] = [
    {"fusion_backend": "flashinfer"},
    {"fusion_backend": ""},
    {"fusion_backend": 1},
    {"fusion_backend": b"auto"},
    {"optimization_level": 4},
    {"optimization_level": -1},
    {"optimization_level": "2"},
    {"optimization_level": True},
    {"optimization_level": 2.0},
    {"dtype": ""},
    {"dtype": None},
    {"encoder_only": "false"},
    {"enable_pdmux": 1},
]


@pytest.mark.parametrize("changes", HOSTILE_FIELDS, ids=repr)
def test_hostile_new_fields_raise_policy_input_error(changes: dict[str, Any]) -> None:
    with pytest.raises(PolicyInputError):
        Deployment(architecture=DSV3, compute_capability=(9, 0), **changes)


def test_hostile_rule_sets_raise_policy_input_error() -> None:
    rule = DEFAULT_RULES[0]
    for bad in (
        lambda: FusionRuleSet(name="", rules=(), enable_flag="--x"),
        lambda: FusionRuleSet(name="x", rules=[rule], enable_flag="--x"),  # type: ignore[arg-type]
        lambda: FusionRuleSet(name="x", rules=(rule, rule), enable_flag="--x"),
        lambda: FusionRuleSet(name="x", rules=(), enable_flag="--x", backend="trtllm"),  # type: ignore[arg-type]
        lambda: FusionRule(
            rule_id=RuleId.USER_ENABLE,
            effect=RuleEffect.USER_ENABLE,
            applies=lambda d: True,
            explain=lambda d: "",
            refuses=True,
        ),
        lambda: FusionRule(
            rule_id=RuleId.USER_ENABLE,
            effect=RuleEffect.VETO,
            applies=lambda d: True,
            explain=lambda d: "",
            refuses="yes",  # type: ignore[arg-type]
        ),
        lambda: SGLANG_0_5_23_RULES.rule(RuleId.H20_DEVICE),
    ):
        with pytest.raises(PolicyInputError):
            bad()


@pytest.mark.parametrize("answer", [5, "", b"trtllm", ["trtllm"], True])
def test_a_rule_set_naming_no_backend_name_is_refused(answer: object) -> None:
    rules = FusionRuleSet(
        name="made up",
        rules=tuple(DEFAULT_RULES),
        enable_flag="--x",
        backend=lambda deployment: answer,  # type: ignore[arg-type,return-value]
    )
    enabled = Deployment(architecture=DSV3, compute_capability=(9, 0), tp_size=8)
    assert decide_fusion(enabled, tuple(DEFAULT_RULES)).enabled  # so the backend is asked
    with pytest.raises(PolicyInputError, match="the backend made up names"):
        decide_fusion(enabled, rules)


ARCH = ["--arch", DSV3, "--sm", "9.0", "--tp", "8"]
HOSTILE_ARGV: list[list[str]] = [
    ["--engine", "trt", *ARCH],
    ["--engine", "sglang", *ARCH, "--flashinfer-allreduce-fusion-backend", "nccl"],
    ["--engine", "sglang", *ARCH, "--attn-dp-size", "0"],
    ["--engine", "sglang", *ARCH, "--attn-dp-size", "x"],
    ["--engine", "sglang", *ARCH, "--dtype", ""],
    ["--engine", "sglang", *ARCH, "-O", "2"],
    ["--engine", "vllm", *ARCH, "-O", "4"],
    ["--engine", "vllm", *ARCH, "--fuse-allreduce-rms", "maybe"],
    ["--engine", "vllm", *ARCH, "--fuse-allreduce-rms", "true", "--disable-fusion"],
    ["--engine", "vllm", *ARCH, "--flashinfer-allreduce-fusion-backend", "auto"],
    ["--engine", "vllm", *ARCH, "--flashinfer-allreduce-backend", "cutedsl"],
    [*ARCH, "--flashinfer-allreduce-fusion-backend", "auto"],
    [*ARCH, "--attn-dp-size", "2"],
]


@pytest.mark.parametrize("argv", HOSTILE_ARGV, ids=" ".join)
def test_hostile_cli_flags_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code: int | str | None
    try:
        code = main(["policy", *argv])
    except SystemExit as exit_:
        code = exit_.code  # argparse
    assert code == 2
    assert "Traceback" not in capsys.readouterr().err


# --------------------------------------------------------------------------- the CLI


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["policy", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_sglang_auto_answers_as_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--engine", "sglang", "--arch", LLAMA, "--sm", "10.0", "--tp-size", "8"]
    code, out, _ = _cli([*argv, "--flashinfer-allreduce-fusion-backend", "auto", "--json"], capsys)
    assert code == 0
    import json

    decision = json.loads(out)["decision"]
    assert (decision["enabled"], decision["backend"]) == (True, "mnnvl")
    code, out, _ = _cli(
        [
            *argv,
            "--flashinfer-allreduce-fusion-backend",
            "auto",
            "--enable-deterministic-inference",
        ],
        capsys,
    )
    assert code == 0
    assert "warning:    Disable --flashinfer-allreduce-fusion-backend because" in out
    code, out, err = _cli(
        [*argv, "--nnodes", "2", "--flashinfer-allreduce-fusion-backend", "trtllm"], capsys
    )
    assert code == 3
    assert "single-node only" in err


@pytest.mark.parametrize(
    ("extra", "rule"),
    [
        (["--attn-dp-size", "8"], "dp-attention"),
        (["--attention-data-parallel-size", "8"], "dp-attention"),
        (["--dp-size", "8", "--enable-dp-attention"], "dp-attention"),
        (["--dp-size", "8"], "auto-enable"),
        (["--enable-dp-attention"], "auto-enable"),  # dp_size 1: no attention DP in 0.5.23
        (["--enable-flashinfer-allreduce-fusion"], "user-enable"),
        (["--enforce-disable-flashinfer-allreduce-fusion"], "enforce-disable"),
    ],
)
def test_cli_sglang_spellings(
    extra: list[str], rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(["--engine", "sglang", *ARCH, *extra], capsys)
    assert code == 0
    assert f"decided by: {rule}" in out


def test_cli_vllm_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--engine", "vllm", "--arch", LLAMA, "--sm", "9.0", "-tp", "4"]
    assert "decided by: auto-enable" in _cli(base, capsys)[1]
    assert "decided by: optimization-level" in _cli([*base, "-O", "1"], capsys)[1]
    assert (
        "decided by: user-enable" in _cli([*base, "-O1", "--fuse-allreduce-rms", "true"], capsys)[1]
    )
    out = _cli([*base, "--batch-invariant", "--fuse-allreduce-rms", "true"], capsys)[1]
    assert "decided by: deterministic-inference" in out


# --------------------------------------------------------------------------- the engines' own code


@functools.cache
def _wheel(name: str) -> Path:
    try:
        return engine_wheel(ENGINES[name])
    except RegistryUnreachableError as error:  # pragma: no cover - depends on the network
        pytest.skip(f"the {name} wheel is not cached and the registry is unreachable: {error}")


def _load(wheel: Path, member: str, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute the named top-level functions and assignments of ``member`` in ``namespace``."""
    with zipfile.ZipFile(wheel) as archive:
        tree = ast.parse(archive.read(member).decode("utf-8"))
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in names:
            node.decorator_list = []
            body.append(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in names for t in targets):
                body.append(node)
    exec(
        compile(ast.Module(body=body, type_ignores=[]), f"{wheel.name}/{member}", "exec"), namespace
    )
    return namespace


class _Logger:
    def __getattr__(self, _: str) -> Any:
        return lambda *a, **k: None


def _sglang_engine(row: tuple[Any, ...], wheel: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    arch, cc, tp, nnodes, dp, cp, a2a, det, choice, backend, _ = row
    platform = types.SimpleNamespace(
        is_sm90=cc[0] == 9, is_sm100=cc[0] == 10, is_blackwell=cc[0] in (10, 11, 12)
    )
    ns: dict[str, Any] = {"get_platform": lambda: platform, "logger": _Logger(), "Any": Any}
    _load(
        wheel,
        "sglang/srt/layers/flashinfer_comm_fusion.py",
        {"_mnnvl_supported", "_resolve_backend"},
        ns,
    )
    ns.update(
        model_config_of=lambda view: view.model_config,
        attn_dp_enabled_of=lambda view: view.attn_dp_size > 1,
    )
    _load(
        wheel,
        "sglang/srt/arg_groups/overrides.py",
        {"_FLASHINFER_ALLREDUCE_FUSION_ARCHS", "_flashinfer_allreduce_fusion_auto_enable"},
        ns,
    )
    fake_torch = types.ModuleType("torch")
    fake_torch.bfloat16 = "bfloat16"  # type: ignore[attr-defined]
    cutedsl = types.ModuleType("sglang.srt.layers.flashinfer_mnnvl_cutedsl")
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read("sglang/srt/layers/flashinfer_mnnvl_cutedsl.py").decode()
    sizes = next(
        ast.literal_eval(n.value)
        for n in ast.parse(source).body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SUPPORTED_TP_SIZES"
    )
    cutedsl.SUPPORTED_TP_SIZES = sizes  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.flashinfer_mnnvl_cutedsl", cutedsl)
    # serving_hook.py `_handle_deprecated_args`: the old enable flag means `auto`.
    configured = backend if backend is not None else ("auto" if choice is ENABLE else None)
    view = types.SimpleNamespace(
        model_config=types.SimpleNamespace(
            hf_config=types.SimpleNamespace(architectures=[arch], model_type="x", hidden_size=1),
            dtype="bfloat16",
        ),
        tp_size=tp,
        nnodes=nnodes,
        attn_dp_size=8 if dp else 1,
        attn_cp_size=cp,
        moe_a2a_backend=a2a,
        encoder_only=False,
        enable_pdmux=False,
        disable_custom_all_reduce=False,
        flashinfer_allreduce_fusion_backend=configured,
    )
    configured = ns["_flashinfer_allreduce_fusion_auto_enable"](view).get(
        "flashinfer_allreduce_fusion_backend", configured
    )
    if choice is ENFORCE or det:  # `_enforce_disable_...`, `_deterministic_..._disable`
        configured = None
    if configured is None:
        return (False, None)
    resolved = None
    if configured == "cutedsl" or tp > 1:  # base_runner.py / ensure_workspace_initialized
        try:
            resolved = ns["_resolve_backend"](configured, nnodes > 1)
        except ValueError:
            return REFUSED
    # add_norm.py `flashinfer_ar_fusion_applies` (cutedsl: its own stage gate, same checks)
    fuses = (platform.is_sm90 or platform.is_sm100) and not dp and tp > 1
    return (True, resolved) if fuses else (False, None)


@pytest.mark.parametrize("row", SGLANG_ROWS, ids=lambda r: f"{r[0]}-{r[1]}-tp{r[2]}-{r[9]}")
def test_sglang_rows_against_sglang_0_5_23_code(
    row: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _sglang_engine(row, _wheel("sglang"), monkeypatch) == row[-1]


def _vllm_engine(row: tuple[Any, ...], wheel: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    cc, tp, nnodes, level, invariant, fuse, backend, _, _ = row
    cap = cc[0] * 10 + cc[1]
    platform = types.SimpleNamespace(
        is_rocm=lambda: False,
        is_cuda=lambda: True,
        is_device_capability_family=lambda c: cap // 10 == c // 10,
        is_device_capability=lambda c: cap == c,
        has_device_capability=lambda c: cap >= c,
    )
    fakes: dict[str, dict[str, Any]] = {
        "vllm.platforms": {"current_platform": platform},
        "vllm.utils.flashinfer": {"has_flashinfer": lambda: True},
    }
    for name, attrs in fakes.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)
    envs = types.SimpleNamespace(
        VLLM_BATCH_INVARIANT=invariant, VLLM_FLASHINFER_ALLREDUCE_BACKEND=backend or "auto"
    )
    ns: dict[str, Any] = {"envs": envs, "logger": _Logger(), "Any": Any, "VllmConfig": object}
    _load(wheel, "vllm/config/vllm.py", {"enable_allreduce_rms_fusion"}, ns)
    _load(
        wheel,
        "vllm/compilation/passes/fusion/allreduce_rms_fusion.py",
        {"FI_ALLREDUCE_FUSION_MAX_SIZE_MB"},
        ns,
    )
    ns.update(current_platform=platform, _node_count=lambda group: nnodes, ProcessGroup=object)
    _load(
        wheel,
        "vllm/distributed/device_communicators/flashinfer_all_reduce.py",
        {"_resolve_fi_ar_backend"},
        ns,
    )
    cfg = types.SimpleNamespace(parallel_config=types.SimpleNamespace(tensor_parallel_size=tp))
    # config/vllm.py OPTIMIZATION_LEVEL_0x, applied only where the user left it unset
    default = ns["enable_allreduce_rms_fusion"](cfg) if level >= 2 else False
    configured = fuse if fuse is not None else default
    if not configured or level == 0 or tp <= 1:  # O0: compilation mode NONE
        return (False, None)
    # config/compilation.py `PassConfig.flashinfer_max_size`
    if tp not in ns["FI_ALLREDUCE_FUSION_MAX_SIZE_MB"].get(cap, {}) or tp not in (2, 4, 8, 16):
        return (False, None)
    chosen, _ = ns["_resolve_fi_ar_backend"](None)
    if chosen is None:
        return (False, None)
    if chosen == "trtllm" and nnodes > 1:  # get_fi_ar_workspace raises
        return REFUSED
    return (True, chosen)


@pytest.mark.parametrize("row", VLLM_ROWS, ids=lambda r: f"{r[0]}-tp{r[1]}-n{r[2]}-O{r[3]}")
def test_vllm_rows_against_vllm_0_33_0_code(
    row: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _vllm_engine(row, _wheel("vllm"), monkeypatch) == row[-2]


# ------------------------------------------------------------------ rule sets as data


def test_engine_rules_are_keyed_by_engine_and_release() -> None:
    from fi_compat.policy import ENGINE_RULES, EngineRules

    assert set(ENGINE_RULES) == {("sglang", "0.5.23"), ("vllm", "0.33.0")}
    for (engine, release), entry in ENGINE_RULES.items():
        assert isinstance(entry, EngineRules)
        assert (entry.engine, entry.release) == (engine, release)
        assert entry is engine_rules(engine) is engine_rules(engine, release)
        assert entry.rules.backend is entry.backend
        assert release in entry.rules.name
        # every rule cites the engine code it follows
        assert {rule.rule_id for rule in entry.rules} <= set(entry.sources)
    assert SGLANG.architectures is not None
    assert VLLM.architectures is None
    with pytest.raises(TypeError):
        ENGINE_RULES["x", "1"] = SGLANG  # type: ignore[index]


@pytest.mark.parametrize(
    ("engine", "release", "match"),
    [
        ("tensorrt-llm", None, r"expected engine to be a modelled engine \(sglang, vllm\)"),
        ("SGLang", None, "modelled engine"),
        ("", None, "modelled engine"),
        ("sglang", "0.5.22", r"modelled release of sglang \(0.5.23\); found '0.5.22'"),
        ("vllm", "", "modelled release of vllm"),
        (None, None, "expected engine to be a str"),
        (b"sglang", None, "expected engine to be a str"),
        ("sglang", 0.5, "expected release to be a str"),
        ("sglang", ("0.5.23",), "expected release to be a str"),
    ],
)
def test_engine_rules_refuses_what_is_not_modelled(
    engine: object, release: object, match: str
) -> None:
    with pytest.raises(PolicyInputError, match=match):
        engine_rules(engine, release)  # type: ignore[arg-type]


def test_no_public_name_carries_an_engine_release_number() -> None:
    # the public-API snapshot (tests/support/public_api.py writes it; read as text here, so
    # that the Python 3.10 run, which has no griffe, reads it too)
    snapshot = Path(__file__).parent / "support" / "public_api.txt"
    # every name it lists: modules, classes, functions, constants and members
    named = re.findall(r"^\s*(?:(?:module|class|def) )?([\w.]+)", snapshot.read_text(), re.M)
    assert "fi_compat.policy.engine_rules" in named
    assert not [name for name in named if re.search(r"\d+_\d+_\d+", name)]
