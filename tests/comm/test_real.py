"""The drop-in names against the real flashinfer-python installed by the test set-up."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
from types import SimpleNamespace
from typing import Any

import pytest
from packaging.version import Version

import fi_compat.comm as comm
from fi_compat._records import member_introduced_in

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]


def _real_comm() -> Any:
    try:
        return importlib.import_module("flashinfer.comm")
    except Exception as error:  # e.g. no CUDA runtime before 0.6.14
        pytest.skip(f"flashinfer.comm does not import here: {error}")


@pytest.mark.parametrize("name", ["create_allreduce_fusion_workspace", "allreduce_fusion"])
def test_dropin_signature_is_the_installed_one(name: str) -> None:
    real = inspect.signature(getattr(_real_comm(), name)).parameters.values()
    ours = inspect.signature(getattr(comm, name)).parameters.values()
    assert [(p.name, p.kind, p.default) for p in ours] == [
        (p.name, p.kind, p.default) for p in real
    ]


def test_pattern_members_are_the_installed_ones() -> None:
    # Ours are the newest release's: the installed release's with its values, and those of
    # later releases, which the installed one refuses (tests/test_report_features.py).
    real = _real_comm().AllReduceFusionPattern
    members = {name: value for name, value in vars(real).items() if name.startswith("k")}
    ours = {
        name: value
        for name, value in vars(comm.AllReduceFusionPattern).items()
        if name.startswith("k")
    }
    assert {name: ours[name] for name in members} == members
    installed = importlib.metadata.version("flashinfer-python")
    later = {name for name in ours if name not in members}
    assert all(
        Version(member_introduced_in("AllReduceFusionPattern", name) or "0") > Version(installed)
        for name in later
    )


# The unified call of 0.6.0+ runs FlashInfer's own deprecated trtllm_allreduce_fusion.
@pytest.mark.filterwarnings("ignore:use the unified API:DeprecationWarning")
def test_real_python_path_takes_the_checked_and_the_prepared_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The installed allreduce_fusion's whole Python path, only the kernel stubbed.

    Beyond binding to the signature: FlashInfer's own checks, dispatch and flattening run
    on what the facade passes, and the kernel receives this call's tensors.
    """
    import torch

    real = _real_comm()
    try:
        trtllm_ar = importlib.import_module("flashinfer.comm.trtllm_ar")
        allreduce = importlib.import_module("flashinfer.comm.allreduce")
        workspace_class = allreduce.TRTLLMAllReduceFusionWorkspace
    except (ImportError, AttributeError) as error:
        pytest.skip(f"no TRT-LLM unified path in this release: {error}")
    tokens, hidden = 8, 256
    native: Any = object.__new__(workspace_class)  # no GPU buffers: the attributes read
    native.world_size, native.rank, native.mem_handles = 2, 0, []
    native.workspace_tensor = torch.zeros(8, dtype=torch.int64)
    native.metadata = {
        "max_token_num": tokens,
        "tp_size": 2,
        "hidden_dim": hidden,
        "use_fp32_lamport": False,
    }
    native._destroyed = True  # nothing to free
    launches: list[dict[str, Any]] = []
    kernel = SimpleNamespace(trtllm_allreduce_fusion=lambda **kw: launches.append(kw))
    monkeypatch.setattr(trtllm_ar, "get_trtllm_comm_module", lambda: kernel)
    monkeypatch.setattr(real, "create_allreduce_fusion_workspace", lambda **_: native)
    workspace = comm.create_workspace(2, 0, tokens, hidden, torch.bfloat16, device="cpu")
    assert workspace.api == "unified"
    assert workspace.native is native
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    r, w = torch.randn_like(x), torch.randn(hidden, dtype=torch.bfloat16)
    norm_out, residual_out = torch.empty_like(x), torch.empty_like(x)
    options: dict[str, Any] = {
        "eps": 1e-5,
        "norm_out": norm_out,
        "residual_out": residual_out,
        "trigger_completion_at_end": False,
        "use_oneshot": True,
    }
    comm.allreduce_residual_rmsnorm(x, r, w, workspace=workspace, **options)
    assert len(launches) == 1
    prepared = workspace.prepare(x, r, w, **options)
    assert len(launches) == 1, "prepare must not launch"
    prepared()
    assert len(launches) == 2
    for launched in launches:
        assert launched["allreduce_in"].data_ptr() == x.data_ptr()
        assert launched["residual_in"].data_ptr() == r.data_ptr()
        assert launched["norm_out"].data_ptr() == norm_out.data_ptr()
        assert launched["residual_out"].data_ptr() == residual_out.data_ptr()
        assert launched["rms_gamma"] is w
        assert launched["rms_eps"] == 1e-5
        assert (launched["token_num"], launched["hidden_dim"]) == (tokens, hidden)
        assert launched["pattern_code"] == real.AllReduceFusionPattern.kARResidualRMSNorm
        assert launched["trigger_completion_at_end"] is False
        assert launched["launch_with_pdl"] is True
        assert launched["use_oneshot"] is True
