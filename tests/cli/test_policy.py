"""Tests of ``fi-compat policy``: flags, text and JSON output, exit codes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from fi_compat.cli import _policy as cli_policy
from fi_compat.cli import main

FLAG = "--enable-flashinfer-allreduce-fusion"
ELIGIBLE = ["--arch", "Qwen3NextForCausalLM", "--sm", "9.0", "--tp", "4"]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fi-compat")
    cli_policy.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["policy", *argv])


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["policy", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_auto_enable_in_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(ELIGIBLE, capsys)
    assert code == 0
    assert err == ""
    assert out.splitlines() == [
        "FlashInfer allreduce fusion: ON",
        "  decided by: auto-enable",
        "  reason:     auto-enabled: Qwen3NextForCausalLM on SM 9.0 with TP 4 meets every "
        "auto-enable condition",
    ]


def test_deterministic_beats_enable_exit_0_with_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _run([*ELIGIBLE, "--deterministic", "--enable-fusion"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "FlashInfer allreduce fusion: OFF"
    assert lines[1] == "  decided by: deterministic-inference"
    assert lines[3].startswith(f"  warning:    Disable {FLAG} because deterministic inference")
    assert lines[4] == "  applied:    deterministic-inference, user-enable"


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "--arch",
        "LlamaForCausalLM",
        "--compute-capability",
        "sm100",
        "--device-name",
        "NVIDIA B200",
        "--tp",
        "8",
        "--nnodes",
        "2",
        "--enable-fusion",
        "--json",
    ]
    code, out, _ = _run(argv, capsys)
    assert code == 0
    data = json.loads(out)
    assert data["deployment"] == {
        "architecture": "LlamaForCausalLM",
        "compute_capability": "10.0",
        "device_name": "NVIDIA B200",
        "tp_size": 8,
        "nnodes": 2,
        "dp_attention": False,
        "attn_cp_size": 1,
        "moe_a2a_backend": "none",
        "deterministic": False,
        "fusion_choice": "enable",
        "fusion_backend": None,
        "optimization_level": 2,
        "dtype": "bfloat16",
        "encoder_only": False,
        "enable_pdmux": False,
    }
    decision = data["decision"]
    assert decision["enabled"] is True
    assert decision["rule"] == "user-enable"
    assert decision["applied_rules"] == ["user-enable", "architecture-not-allowed", "multi-node"]
    assert len(decision["warnings"]) == 2


@pytest.mark.parametrize(
    ("extra", "rule"),
    [
        (["--enforce-disable-fusion", "--deterministic"], "enforce-disable"),
        (["--disable-fusion"], "user-disable"),
        (["--dp-attention"], "dp-attention"),
        (["--attn-cp-size", "2"], "attention-context-parallel"),
        (["--moe-a2a-backend", "deepep"], "moe-a2a-backend"),
        (["--device-name", "NVIDIA H20"], "h20-device"),
        (["--tp", "1"], "tp-size-one"),
        (["--sm", "8.0"], "unsupported-gpu"),
    ],
)
def test_every_off_decision_still_exits_0(
    extra: list[str], rule: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run([*ELIGIBLE, *extra, "--json"], capsys)
    assert code == 0
    decision = json.loads(out)["decision"]
    assert (decision["enabled"], decision["rule"]) == (False, rule)


def test_sglang_spellings_are_aliases() -> None:
    short = _parse([*ELIGIBLE, "--dp-attention", "--deterministic", "--enforce-disable-fusion"])
    long = _parse(
        [
            "--arch",
            "Qwen3NextForCausalLM",
            "--compute-capability",
            "9.0",
            "--tp-size",
            "4",
            "--enable-dp-attention",
            "--enable-deterministic-inference",
            "--enforce-disable-flashinfer-allreduce-fusion",
        ]
    )
    assert vars(short) == vars(long)
    assert (
        _parse([*ELIGIBLE, FLAG]).fusion_choice
        == _parse([*ELIGIBLE, "--enable-fusion"]).fusion_choice
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sm", "9.0"], "--arch"),
        (["--arch", "X"], "--compute-capability"),
        (["--arch", "X", "--sm", "nine"], "compute capability"),
        ([*ELIGIBLE, "--tp", "0"], ">= 1"),
        ([*ELIGIBLE, "--tp", "-2"], ">= 1"),
        ([*ELIGIBLE, "--nnodes", "two"], "integer"),
        ([*ELIGIBLE, "--attn-cp-size", "0"], ">= 1"),
        ([*ELIGIBLE, "--enable-fusion", "--disable-fusion"], "not allowed with"),
        ([*ELIGIBLE, "--enable-fusion", "--enforce-disable-fusion"], "not allowed with"),
        ([*ELIGIBLE, "--moe-a2a-backend", ""], "moe_a2a_backend"),
    ],
)
def test_bad_arguments_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["policy", *argv])
    except SystemExit as exit_:
        code = exit_.code  # type: ignore[assignment]
    _, err = capsys.readouterr()
    assert code == 2
    assert message in err


def test_policy_is_registered_in_the_cli() -> None:
    from fi_compat.cli import _COMMANDS

    assert "policy" in _COMMANDS


def test_exit_code_in_a_real_process_and_no_torch() -> None:
    code = (
        "import sys\n"
        "from fi_compat.cli import main\n"
        "rc = main(sys.argv[1:])\n"
        "assert 'torch' not in sys.modules and 'flashinfer' not in sys.modules\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "policy", *ELIGIBLE, "--deterministic", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["decision"]["rule"] == "deterministic-inference"
