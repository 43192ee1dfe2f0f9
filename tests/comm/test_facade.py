"""fi_compat.comm: import isolation, validation before any launch, fallback, determinism."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
from fi_compat._surface import GATES
from fi_compat.comm import _workspace
from fi_compat.comm._group import GroupSpan
from fi_compat.determinism import deterministic
from fi_compat.errors import (
    CallSizeUnsupportedError,
    CapabilityMissingError,
    FiCompatError,
    FlashInferUnavailableError,
    FusionForbiddenError,
    WorkspaceDestroyedError,
    WorkspaceMismatchError,
)
from fi_compat.testing import FakeFlashInfer, available_releases, fake_flashinfer, load_release

NEWEST = available_releases()[-1]
LEGACY = next(v for v in reversed(available_releases()) if not load_release(v).unified_api)
KERNELS = ("allreduce_fusion", "trtllm_allreduce_fusion")
TOKENS, HIDDEN, MAX_TOKENS = 4, 64, 8
DTYPE = torch.bfloat16

# ----------------------------------------------------------------------------- fixtures


def _tensors(
    tokens: int = TOKENS, dtype: torch.dtype = DTYPE
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.randn(tokens, HIDDEN, dtype=dtype),
        torch.randn(tokens, HIDDEN, dtype=dtype),
        torch.randn(HIDDEN, dtype=dtype),
    )


Factory = Callable[..., comm.FusionWorkspace]


@pytest.fixture(params=["unified", "legacy", "reference"])
def flavour(request: pytest.FixtureRequest) -> Iterator[tuple[Factory, FakeFlashInfer]]:
    api: str = request.param
    version = LEGACY if api == "legacy" else NEWEST
    with fake_flashinfer(version) as fake:

        def make(**kwargs: Any) -> comm.FusionWorkspace:
            options: dict[str, Any] = {"device": "cpu", "api": api, **kwargs}
            # A reference workspace of several processes needs torch.distributed: see
            # tests/comm/test_reference.py for those.
            size = 1 if api == "reference" else 2
            workspace = comm.create_workspace(size, 0, MAX_TOKENS, HIDDEN, DTYPE, **options)
            assert workspace.api == api
            return workspace

        yield make, fake


def _no_kernel(fake: FakeFlashInfer) -> None:
    assert not [call for call in fake.calls if call.name in KERNELS]


# --------------------------------------------------------------------------- validation


def _mismatch(
    flavour: tuple[Factory, FakeFlashInfer], *args: Any, **kwargs: Any
) -> WorkspaceMismatchError:
    make, fake = flavour
    workspace = make()
    with pytest.raises(WorkspaceMismatchError) as caught:
        comm.allreduce_residual_rmsnorm(*args, workspace=workspace, **kwargs)
    _no_kernel(fake)
    message = str(caught.value)
    assert message.startswith("expected ")
    assert "; found " in message
    assert isinstance(caught.value, ValueError)
    return caught.value


#: What a refusal of a call too big for the workspace says, per rule of its fit.
_TOO_BIG = {
    "exact": f"at most {MAX_TOKENS} tokens",
    "product": f"tokens x hidden at most {MAX_TOKENS * HIDDEN}",
    "bytes": "fit the workspace's buffer",
}


def test_too_many_tokens(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    # Over every rule: product, exact, and MNNVL's lamport buffer (rounded up to the
    # allocation granularity, which leaves room for far more than max_token_num).
    tokens = 1000 * MAX_TOKENS
    error = _mismatch(flavour, *_tensors(tokens=tokens))
    assert type(error) is WorkspaceMismatchError
    assert f"found input of shape ({tokens}, {HIDDEN})" in str(error)
    assert _TOO_BIG[flavour[0]().fit.rule] in str(error)


def test_a_call_wider_than_the_workspace_holds(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    wide = HIDDEN * 4096  # TOKENS x wide: over the product, and over MNNVL's buffer
    x = torch.randn(TOKENS, wide, dtype=DTYPE)
    error = _mismatch(flavour, x, x.clone(), torch.randn(wide, dtype=DTYPE))
    assert f"({TOKENS}, {wide})" in str(error)
    assert type(error) is WorkspaceMismatchError  # too big for any rule: no capability missing
    rule = flavour[0]().fit.rule
    assert (f"hidden size {HIDDEN}" if rule == "exact" else _TOO_BIG[rule]) in str(error)


def test_a_call_of_another_width_that_fits(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    make, fake = flavour
    workspace = make()
    for tokens, hidden in ((TOKENS, HIDDEN // 2), (MAX_TOKENS // 2, HIDDEN * 2)):
        x = torch.randn(tokens, hidden, dtype=DTYPE)
        args = (x, x.clone(), torch.randn(hidden, dtype=DTYPE))
        if workspace.fit.rule == "exact":
            with pytest.raises(CallSizeUnsupportedError) as caught:
                comm.allreduce_residual_rmsnorm(*args, workspace=workspace)
            assert caught.value.feature == "per_call_sizes:legacy"
            assert caught.value.introduced_in == "0.6.0"
            assert "0.6.0" in str(caught.value)
            _no_kernel(fake)
            continue
        before = len(fake.calls)
        norm_out, residual_out = comm.allreduce_residual_rmsnorm(*args, workspace=workspace)
        assert norm_out.shape == residual_out.shape == (tokens, hidden)
        launched = [call for call in fake.calls[before:] if call.name in KERNELS]
        if workspace.fused:
            (kernel,) = launched
            assert kernel.arguments["input"].shape == (tokens, hidden)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_dtype_mismatch(flavour: tuple[Factory, FakeFlashInfer], which: int) -> None:
    tensors = list(_tensors())
    tensors[which] = tensors[which].to(torch.float16)
    error = _mismatch(flavour, *tensors)
    assert "dtype torch.bfloat16" in str(error)
    assert "found dtype torch.float16" in str(error)


def test_wrong_device(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    make, fake = flavour
    workspace = make(device="cuda:0")  # only recorded; CPU tensors must be refused
    with pytest.raises(WorkspaceMismatchError, match=r"on cuda:0.*found input on cpu"):
        comm.allreduce_residual_rmsnorm(*_tensors(), workspace=workspace)
    _no_kernel(fake)


@pytest.mark.parametrize("which", [0, 1])
def test_non_contiguous_input(flavour: tuple[Factory, FakeFlashInfer], which: int) -> None:
    tensors = list(_tensors())
    tensors[which] = torch.randn(HIDDEN, TOKENS, dtype=DTYPE).t()
    assert tensors[which].shape == (TOKENS, HIDDEN)
    error = _mismatch(flavour, *tensors)
    assert "contiguous" in str(error)
    assert "strides (1, 4)" in str(error)


def test_shape_mismatch_of_residual_and_weight(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    x, _, w = _tensors()
    error = _mismatch(flavour, x, torch.randn(TOKENS - 1, HIDDEN, dtype=DTYPE), w)
    assert f"residual of shape ({TOKENS}, {HIDDEN})" in str(error)
    x, r, _ = _tensors()
    error = _mismatch(flavour, x, r, torch.randn(HIDDEN, 1, dtype=DTYPE))
    assert f"weight of shape ({HIDDEN},)" in str(error)


def test_one_dimensional_input(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    error = _mismatch(flavour, torch.randn(HIDDEN, dtype=DTYPE), *_tensors()[1:])
    assert "(num_tokens, hidden_dim)" in str(error)


@pytest.mark.parametrize("name", ["norm_out", "residual_out"])
def test_bad_preallocated_output(flavour: tuple[Factory, FakeFlashInfer], name: str) -> None:
    bad = {name: torch.empty(TOKENS, HIDDEN, dtype=torch.float32)}
    error = _mismatch(flavour, *_tensors(), **bad)
    assert f"{name} of dtype torch.bfloat16" in str(error)
    strided = {name: torch.empty(HIDDEN, TOKENS, dtype=DTYPE).t()}
    error = _mismatch(flavour, *_tensors(), **strided)
    assert f"a contiguous {name}" in str(error)


def test_destroyed_workspace(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    make, fake = flavour
    workspace = make()
    workspace.destroy()
    with pytest.raises(WorkspaceDestroyedError, match="destroy\\(\\) has already run") as caught:
        comm.allreduce_residual_rmsnorm(*_tensors(), workspace=workspace)
    assert isinstance(caught.value, RuntimeError)
    _no_kernel(fake)
    x, r, w = _tensors()
    with pytest.raises(WorkspaceDestroyedError):
        comm.allreduce_fusion(
            input=x,
            workspace=workspace,
            pattern=comm.AllReduceFusionPattern.kARResidualRMSNorm,
            residual_in=r,
            rms_gamma=w,
        )
    with pytest.raises(WorkspaceDestroyedError):
        comm.allreduce_fusion(
            input=x, workspace=workspace, pattern=comm.AllReduceFusionPattern.kAllReduce
        )
    _no_kernel(fake)


def test_a_good_call_reaches_the_kernel(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    make, fake = flavour
    workspace = make()
    x, r, w = _tensors(tokens=MAX_TOKENS)
    norm_out, residual_out = torch.empty_like(x), torch.empty_like(x)
    result = comm.allreduce_residual_rmsnorm(
        x, r, w, workspace=workspace, norm_out=norm_out, residual_out=residual_out
    )
    assert result[0] is norm_out
    assert result[1] is residual_out
    kernels = [call for call in fake.calls if call.name in KERNELS]
    assert len(kernels) == (0 if workspace.api == "reference" else 1)


# ------------------------------------------------------------------ creation arguments


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        ((2, 2, 8, HIDDEN, DTYPE), "rank to be an int in 0..1"),
        ((0, 0, 8, HIDDEN, DTYPE), "world_size to be an int >= 1"),
        ((1, 0, 0, HIDDEN, DTYPE), "max_token_num to be an int >= 1"),
        ((1, 0, 8, HIDDEN, torch.int8), "dtype one of"),
    ],
)
def test_bad_creation_arguments(arguments: tuple[Any, ...], text: str) -> None:
    with pytest.raises(WorkspaceMismatchError, match=text):
        comm.create_workspace(*arguments, device="cpu", api="reference")


def test_world_size_must_describe_the_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_workspace, "group_span", lambda group: GroupSpan(4, 1, 8))
    with pytest.raises(WorkspaceMismatchError, match=r"a group of 4 processes .* rank 1"):
        comm.create_workspace(2, 0, 8, HIDDEN, DTYPE, group=object(), device="cpu")


# ------------------------------------------------------------------ fallback and errors


def test_world_size_one_falls_back_without_probing(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> None:
        raise AssertionError("probed")

    monkeypatch.setattr(_workspace, "get_capabilities", fail)
    workspace = comm.create_workspace(1, 0, 8, HIDDEN, DTYPE, device="cpu")
    assert workspace.api == "reference"
    assert not workspace.fused
    assert workspace.reason is not None
    assert "world_size is 1" in workspace.reason


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"cuda_runtime": False}, "libcudart"),
        ({"comm_import_error": OSError("no libnccl")}, "no libnccl"),
        ({"installed": False}, "flashinfer"),
    ],
)
def test_unavailable_comm_falls_back_or_raises(
    options: dict[str, Any], text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if torch.distributed had a world of two processes.
    monkeypatch.setattr(_workspace, "group_span", lambda group: GroupSpan(2, 0, 2))
    with fake_flashinfer(NEWEST, **options) as fake:
        workspace = comm.create_workspace(2, 0, 8, HIDDEN, DTYPE, device="cpu")
        assert workspace.api == "reference"
        assert workspace.reason is not None
        assert text in workspace.reason
        with pytest.raises(FlashInferUnavailableError, match=text) as caught:
            comm.create_workspace(2, 0, 8, HIDDEN, DTYPE, device="cpu", fallback=False)
        assert isinstance(caught.value, ImportError)
        with pytest.raises(FlashInferUnavailableError):
            comm.create_allreduce_fusion_workspace(
                world_size=2, rank=0, max_token_num=8, hidden_dim=HIDDEN, dtype=DTYPE
            )
        assert not fake.calls


def test_forcing_an_absent_api_names_the_release() -> None:
    gate = re.escape(GATES["unified_api"].introduced_in)
    with fake_flashinfer(LEGACY), pytest.raises(CapabilityMissingError, match=gate) as caught:
        comm.create_workspace(2, 0, 8, HIDDEN, DTYPE, device="cpu", api="unified")
    assert caught.value.feature == "unified_api"


def test_reference_of_several_processes_needs_torch_distributed() -> None:
    with pytest.raises(CapabilityMissingError, match="init_process_group"):
        comm.create_workspace(2, 0, 8, HIDDEN, DTYPE, device="cpu", api="reference")


def test_errors_are_fi_compat_errors() -> None:
    for error in (WorkspaceMismatchError, WorkspaceDestroyedError, CapabilityMissingError):
        assert issubclass(error, FiCompatError)


# ----------------------------------------------------------------------------- determinism


def test_determinism_forbids_fusion_workspaces_only() -> None:
    with fake_flashinfer(NEWEST) as fake, deterministic():
        with pytest.raises(FusionForbiddenError, match="deterministic"):
            comm.create_workspace(2, 0, 8, HIDDEN, DTYPE, device="cpu")
        with pytest.raises(FusionForbiddenError):
            comm.create_allreduce_fusion_workspace(
                world_size=2, rank=0, max_token_num=8, hidden_dim=HIDDEN, dtype=DTYPE
            )
        assert not fake.calls
        reference = comm.create_workspace(1, 0, 8, HIDDEN, DTYPE, device="cpu", api="reference")
        assert reference.api == "reference"
        x, r, w = _tensors()
        norm_out, residual_out = comm.allreduce_residual_rmsnorm(x, r, w, workspace=None)
        torch.testing.assert_close(residual_out, x + r)
        assert norm_out.dtype is DTYPE


# -------------------------------------------------------------------------- the workspace


def test_workspace_describes_itself() -> None:
    with fake_flashinfer(NEWEST):
        workspace = comm.create_workspace(2, 1, 8, HIDDEN, DTYPE, device="cpu")
    assert (workspace.world_size, workspace.rank) == (2, 1)
    assert (workspace.max_token_num, workspace.hidden_dim, workspace.dtype) == (8, HIDDEN, DTYPE)
    assert workspace.api == "unified"
    assert workspace.fused
    assert workspace.group is None
    assert "api='unified'" in repr(workspace)
    assert "live" in repr(workspace)
    # Drop-in use: attributes of FlashInfer's own workspace object are reachable.
    assert workspace.world_size == workspace.native.world_size
    assert workspace.destroyed is workspace.native.destroyed is False
    with pytest.raises(AttributeError):
        _ = workspace.no_such_attribute


def test_dropin_on_a_reference_workspace() -> None:
    workspace = comm.create_workspace(1, 0, 8, HIDDEN, DTYPE, device="cpu", api="reference")
    x, r, w = _tensors()
    output = torch.empty_like(x)
    result = comm.allreduce_fusion(
        input=x, workspace=workspace, pattern=comm.AllReduceFusionPattern.kAllReduce, output=output
    )
    assert result is output
    assert torch.equal(output, x)
    norm = comm.allreduce_fusion(
        input=x,
        workspace=workspace,
        pattern=comm.AllReduceFusionPattern.kARResidualRMSNorm,
        residual_in=r,
        rms_gamma=w,
        output=output,
    )
    expected, _ = comm.allreduce_residual_rmsnorm(x, r, w, workspace=None)
    assert torch.equal(norm, expected)
    with pytest.raises(CapabilityMissingError, match="kARResidualRMSNormFP8Quant"):
        comm.allreduce_fusion(
            input=x,
            workspace=workspace,
            pattern=comm.AllReduceFusionPattern.kARResidualRMSNormFP8Quant,
            residual_in=r,
            rms_gamma=w,
        )
