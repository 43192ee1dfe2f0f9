"""Each drop-in argument a release may refuse has a ``--require`` name that says so first.

For every swept release and each scalar argument of the drop-in ``allreduce_fusion``, the
answer of ``--require dropin:allreduce_fusion.<argument>`` (and of the JSON report's
``requirements``) agrees with what the call does: met where a non-default value runs,
missing exactly where the call raises ``CapabilityMissingError`` whose ``feature`` is that
same name.
"""

from __future__ import annotations

from typing import Any, Literal

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch
from packaging.version import Version

import fi_compat.comm as comm
from fi_compat._requirements.comm import DROPIN_ARGUMENTS, dropin_support
from fi_compat.capabilities import get_capabilities
from fi_compat.comm._dropin import DEFAULTS
from fi_compat.errors import CapabilityMissingError
from fi_compat.report import REQUIREMENT_NAMES, build_report, missing
from fi_compat.testing import available_releases, fake_flashinfer, load_release
from tests.support import release_classes

RELEASES = [
    v
    for v in available_releases()
    if Version(v) >= Version("0.5.0")
    and (load_release(v).unified_api or load_release(v).legacy_api)
]
SWEPT = release_classes.releases("names", RELEASES)
TOKENS, HIDDEN, DTYPE = 4, 64, torch.bfloat16
#: The FlashInfer call a fused drop-in call ends in, per workspace API.
FUSED_CALLS = {"unified": "allreduce_fusion", "legacy": "trtllm_allreduce_fusion"}
#: A valid non-default value for each scalar argument (the tensor ones need a pattern).
VALUES: dict[str, Any] = {
    "launch_with_pdl": True,
    "trigger_completion_at_end": False,
    "rms_eps": 1e-5,
    "use_oneshot": True,
    "fp32_acc": True,
    "weight_bias": 1.0,
    "moe_finalize_backend": "cake",
}


def test_every_drop_in_argument_has_a_requirement_name() -> None:
    assert tuple(DEFAULTS) == DROPIN_ARGUMENTS
    names = {f"dropin:allreduce_fusion.{name}" for name in DROPIN_ARGUMENTS}
    assert names <= set(REQUIREMENT_NAMES)


@pytest.mark.parametrize("release", SWEPT)
def test_the_requirement_answers_what_the_call_does(release: str) -> None:
    with fake_flashinfer(release) as fake:
        caps = get_capabilities()
        answers = build_report(caps)["requirements"]
        workspace = comm.create_allreduce_fusion_workspace(
            world_size=2, rank=0, max_token_num=TOKENS, hidden_dim=HIDDEN, dtype=DTYPE
        )
        assert workspace.fused, workspace.reason
        seen = set()
        for argument, value in VALUES.items():
            name = f"dropin:allreduce_fusion.{argument}"
            lacking = missing(caps, [name])
            assert answers[name]["status"] == ("missing" if lacking else "met")
            tensors = {
                "residual_in": torch.zeros(TOKENS, HIDDEN, dtype=DTYPE),
                "rms_gamma": torch.ones(HIDDEN, dtype=DTYPE),
            }

            def call(argument: str = argument, value: Any = value, tensors: Any = tensors) -> None:
                comm.allreduce_fusion(
                    torch.zeros(TOKENS, HIDDEN, dtype=DTYPE),
                    workspace,
                    comm.AllReduceFusionPattern.kARResidualRMSNorm,
                    **tensors,
                    **{argument: value},
                )

            if lacking:
                fake.clear_calls()
                with pytest.raises(CapabilityMissingError) as refused:
                    call()
                assert refused.value.feature == name
                assert not fake.calls_to(FUSED_CALLS[workspace.api]), "refused after a launch"
                seen.add("refused")
            else:
                fake.clear_calls()
                call()  # runs: --require said it would
                assert fake.calls_to(FUSED_CALLS[workspace.api]), "ran without a launch"
                seen.add("ran")
        workspace.destroy()
    assert "ran" in seen


def test_without_fusion_every_argument_is_missing_with_the_reason() -> None:
    with fake_flashinfer("0.7.2.post1", comm_import_error=OSError("no libcudart")):
        answers = dropin_support(get_capabilities())
    assert {answer.supported for answer in answers.values()} == {False}
    assert all("libcudart" in answer.reason for answer in answers.values())


def test_a_release_without_weight_bias_names_it_and_the_newest_has_it() -> None:
    first = next(v for v in RELEASES if load_release(v).accepts("allreduce_fusion", "weight_bias"))
    older = RELEASES[RELEASES.index(first) - 1]
    name = "dropin:allreduce_fusion.weight_bias"
    with fake_flashinfer(older):
        assert missing(get_capabilities(), [name])
    with fake_flashinfer(first):
        assert missing(get_capabilities(), [name]) == []


@pytest.mark.parametrize("release", ["0.5.3", "0.6.14", "0.6.15", "0.7.2.post1"])
def test_checkpointing_answers_what_the_workspace_does(release: str) -> None:
    """``checkpointing:<kind>`` is met exactly where ``checkpoint_prepare()`` runs on a
    workspace of that kind, and a refusal's ``feature`` is that name."""
    from fi_compat._requirements.comm import checkpoint_support
    from fi_compat.errors import CheckpointUnsupportedError

    seen = set()
    with fake_flashinfer(release):
        caps = get_capabilities()
        answers = checkpoint_support(caps)
        backends: list[Literal["trtllm", "mnnvl"] | None] = (
            ["trtllm", "mnnvl"] if caps.comm.unified_api else [None]
        )
        for backend in backends:
            workspace = (
                comm.create_allreduce_fusion_workspace(
                    world_size=2, rank=0, max_token_num=TOKENS, hidden_dim=HIDDEN, dtype=DTYPE
                )
                if backend is None
                else comm.create_allreduce_fusion_workspace(
                    backend=backend,
                    world_size=2,
                    rank=0,
                    max_token_num=TOKENS,
                    hidden_dim=HIDDEN,
                    dtype=DTYPE,
                )
            )
            assert workspace.fused, workspace.reason
            kind = "legacy" if workspace.api == "legacy" else workspace.backend
            name = f"checkpointing:{kind}"
            assert name in REQUIREMENT_NAMES
            assert (missing(caps, [name]) == []) is answers[name].supported
            if answers[name].supported:
                workspace.checkpoint_prepare()
                seen.add("ran")
            else:
                with pytest.raises(CheckpointUnsupportedError) as refused:
                    workspace.checkpoint_prepare()
                assert refused.value.feature == name
                seen.add("refused")
            workspace.destroy()
    assert seen == ({"ran"} if Version(release) >= Version("0.6.15") else {"refused"})
