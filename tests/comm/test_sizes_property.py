"""Per-call sizes as a property: over every (tokens, hidden), a workspace serves exactly what
its rule admits, with the call's own sizes at the kernel, and refuses the rest before any
launch.

Hypothesis draws the sizes, around and beyond the workspace's own; the rule is written out
here from what ``tools/sizes.py`` measured (TRT-LLM: ``tokens x hidden <= max_token_num x
hidden_dim``; the legacy API: the creation width only), not read from fi-compat.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fi_compat.comm as comm
from fi_compat.errors import CallSizeUnsupportedError, WorkspaceMismatchError
from fi_compat.testing import FakeFlashInfer, fake_flashinfer

MAX_TOKENS, HIDDEN, DTYPE = 8, 64, torch.bfloat16
KERNELS = ("allreduce_fusion", "trtllm_allreduce_fusion")
SIZES = st.tuples(st.integers(0, 3 * MAX_TOKENS), st.integers(0, 3 * HIDDEN))


@pytest.fixture(scope="module", params=["0.7.2.post1", "0.6.5", "0.5.3"])
def made(request: pytest.FixtureRequest) -> Iterator[tuple[comm.FusionWorkspace, FakeFlashInfer]]:
    with fake_flashinfer(request.param) as fake:
        workspace = comm.create_workspace(
            2,
            0,
            MAX_TOKENS,
            HIDDEN,
            DTYPE,
            device="cpu",
            backend="auto" if request.param == "0.5.3" else "trtllm",
        )
        yield workspace, fake
        workspace.destroy()


def _served(legacy: bool, tokens: int, hidden: int) -> bool:
    if tokens < 1 or hidden < 1:
        return False
    if legacy:
        return hidden == HIDDEN and tokens <= MAX_TOKENS
    return tokens * hidden <= MAX_TOKENS * HIDDEN


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sizes=SIZES)
def test_a_workspace_serves_exactly_what_its_rule_admits(
    made: tuple[comm.FusionWorkspace, FakeFlashInfer], sizes: tuple[int, int]
) -> None:
    workspace, fake = made
    tokens, hidden = sizes
    legacy = workspace.api == "legacy"
    x = torch.randn(tokens, hidden, dtype=DTYPE)
    weight = torch.ones(hidden, dtype=DTYPE)
    before = len(fake.calls)
    if _served(legacy, tokens, hidden):
        norm_out, _ = comm.allreduce_residual_rmsnorm(
            x, torch.randn_like(x), weight, workspace=workspace
        )
        assert norm_out.shape == (tokens, hidden)
        (kernel,) = [c for c in fake.calls[before:] if c.name in KERNELS]
        reached = (
            (kernel.arguments["token_num"], kernel.arguments["hidden_dim"])
            if "token_num" in kernel.arguments
            else tuple(kernel.arguments["input"].shape)
        )
        assert reached == (tokens, hidden)
        assert workspace.is_buffer_size_sufficient(2, tokens, hidden, DTYPE) is True
    else:
        with pytest.raises(WorkspaceMismatchError) as caught:
            comm.allreduce_residual_rmsnorm(x, torch.randn_like(x), weight, workspace=workspace)
        assert not [c for c in fake.calls[before:] if c.name in KERNELS]
        fits_product = tokens >= 1 and hidden >= 1 and tokens * hidden <= MAX_TOKENS * HIDDEN
        assert isinstance(caught.value, CallSizeUnsupportedError) == (
            legacy and fits_product and hidden != HIDDEN
        )
        if tokens >= 1:
            assert workspace.is_buffer_size_sufficient(2, tokens, max(hidden, 1), DTYPE) is _served(
                legacy, tokens, max(hidden, 1)
            )
