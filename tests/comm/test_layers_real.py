"""The lowest launch layer against the real flashinfer-python installed by the test set-up.

The installed release's public ``allreduce_fusion`` and fi-compat's checked and prepared
calls are run on the CPU on the same tensors, the compiled module replaced by a recorder,
and what reaches it is compared argument by argument (``tests/support/layers_equivalence``).
Then each reason to stay on the public call is provoked: a wrapper that is not FlashInfer's
(API logging, a patch), trace dumping on, a source that differs from the measured one, a
release measured ``public`` or not measured, a workspace that is not TRT-LLM's. And the
checks fi-compat adds or keeps: detached symmetric-memory handles, the legacy function's own
metadata check.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
from fi_compat.comm import _layers
from fi_compat.errors import WorkspaceDetachedError
from tests.support.layers_equivalence import (
    CASES,
    HIDDEN,
    MAX_TOKENS,
    RANK,
    WORLD,
    Stage,
    compare,
    stage,
)

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]

LOWER = "calls go to trtllm_allreduce_fusion below its deprecation wrapper"


@pytest.fixture
def staged() -> Any:
    try:
        with stage() as staged:
            yield staged
    except (ImportError, AttributeError, KeyError) as error:
        pytest.skip(f"no TRT-LLM unified path in the installed release: {error}")


def _measured_here() -> dict[str, Any]:
    import flashinfer

    entry = _layers.measured().get(flashinfer.__version__)
    if entry is None or entry["layer"] != "legacy":
        pytest.skip(f"flashinfer {flashinfer.__version__} is not bound lower (layers.json)")
    return dict(entry)


def _workspace() -> comm.FusionWorkspace:
    return comm.create_workspace(WORLD, RANK, MAX_TOKENS, HIDDEN, torch.bfloat16, device="cpu")


def _tensors(tokens: int = 4) -> list[torch.Tensor]:
    x = torch.randn(tokens, HIDDEN, dtype=torch.bfloat16)
    return [x, torch.randn_like(x), torch.randn(HIDDEN, dtype=torch.bfloat16)]


def test_the_kernel_gets_what_the_public_call_passes(staged: Stage) -> None:
    _measured_here()
    result = compare(staged)
    assert any(LOWER in decision for decision in result["decisions"]), result["decisions"]
    assert result["differences"] == []
    assert result["cases"] == len(CASES) == 48
    assert result["warned"] == [], "the lower layer runs no deprecation warning"


def test_the_public_call_warns_and_the_bound_call_does_not(staged: Stage) -> None:
    _measured_here()
    workspace = _workspace()
    x, residual, weight = _tensors()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        staged.public_call(
            [x, residual, weight, torch.empty_like(x), torch.empty_like(x)],
            (True, True, False, None, 1e-6, 4),
            quiet=False,
        )
    assert [w.category for w in caught] == [DeprecationWarning]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        comm.allreduce_residual_rmsnorm(x, residual, weight, workspace=workspace)
    assert caught == []
    assert len(staged.calls) == 2


def _stays_public(staged: Stage, workspace: comm.FusionWorkspace, why: str) -> None:
    assert not any(LOWER in decision for decision in workspace.decisions)
    assert any(why in decision for decision in workspace.decisions), workspace.decisions
    x, residual, weight = _tensors()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        comm.allreduce_residual_rmsnorm(x, residual, weight, workspace=workspace)
        workspace.prepare(x, residual, weight)()
    assert len(staged.calls) == 2


def test_a_wrapper_that_is_not_flashinfers_keeps_the_public_call(
    staged: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    _measured_here()
    seen: list[int] = []

    @functools.wraps(staged.public)
    def logging_wrapper(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        return staged.public(*args, **kwargs)

    monkeypatch.setattr(staged.comm, "allreduce_fusion", logging_wrapper)
    _stays_public(staged, _workspace(), "is wrapped by")
    assert seen == [1, 1], "the wrapper saw every call"


def test_trace_dumping_keeps_the_public_call(
    staged: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    _measured_here()
    if not hasattr(staged.public, "__wrapped__"):
        pytest.skip("this release's allreduce_fusion has no trace wrapper")
    monkeypatch.setenv("FLASHINFER_TRACE_DUMP", "1")
    monkeypatch.setattr(_layers, "_trace_dumping", lambda wrapper: True)
    _stays_public(staged, _workspace(), "trace dumping is on")


def test_the_trace_switch_is_read_from_flashinfers_own_wrapper(staged: Stage) -> None:
    _measured_here()
    if not hasattr(staged.public, "__wrapped__"):
        pytest.skip("this release's allreduce_fusion has no trace wrapper")
    assert _layers._trace_dumping(staged.public) is False
    assert _layers._trace_dumping(lambda: None) is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"fusion_source": "0" * 64}, "its source differs"),
        ({"legacy_source": "0" * 64}, "is not flashinfer"),
        ({"layer": "public", "detail": "measured so"}, "measured so"),
        ({"checks": ["handles_attached", "a_check_from_the_future"]}, "checks fi-compat does"),
        ({"arguments": {"allreduce_in": "view:input"}}, "parameters are not those measured"),
    ],
)
def test_an_entry_that_does_not_fit_keeps_the_public_call(
    staged: Stage, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], why: str
) -> None:
    import flashinfer

    entry = {**_measured_here(), **change}
    monkeypatch.setattr(_layers, "measured", lambda: {flashinfer.__version__: entry})
    _stays_public(staged, _workspace(), why)


def test_an_unmeasured_release_keeps_the_public_call(
    staged: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    _measured_here()
    monkeypatch.setattr(_layers, "measured", dict)
    _stays_public(staged, _workspace(), "layering was not measured")


def test_a_workspace_of_another_class_keeps_the_public_call(staged: Stage) -> None:
    _measured_here()
    _launcher, why = _layers.lowest_layer(
        _version(),
        _spec(),
        fusion=staged.public,
        native=object(),
        pattern=1,
    )
    assert _launcher is None
    assert "not a TRTLLMAllReduceFusionWorkspace" in why


def _version() -> str:
    import flashinfer

    return str(flashinfer.__version__)


def _spec() -> Any:
    from fi_compat.comm._types import Spec

    return Spec(WORLD, RANK, MAX_TOKENS, HIDDEN, torch.bfloat16, -1)


def test_detached_handles_are_refused_as_flashinfer_refuses_them(staged: Stage) -> None:
    entry = _measured_here()
    if "handles_attached" not in entry["checks"]:
        pytest.skip("this release does not check its handles")
    handle_class = staged.namespace["SymmDeviceMemory"]
    handle: Any = object.__new__(handle_class)
    handle._mapped = False
    if handle.mapped is not False:
        pytest.skip("SymmDeviceMemory.mapped is not read from _mapped in this release")
    staged.native.mem_handles = [handle]
    workspace = _workspace()
    assert any("checked on every call" in decision for decision in workspace.decisions)
    x, residual, weight = _tensors()
    tensors = [x, residual, weight, torch.empty_like(x), torch.empty_like(x)]
    with pytest.raises(RuntimeError, match="not attached"):
        staged.public_call(tensors, (True, True, False, None, 1e-6, 4))
    with pytest.raises(WorkspaceDetachedError, match="checkpoint_restore") as raised:
        comm.allreduce_residual_rmsnorm(x, residual, weight, workspace=workspace)
    assert isinstance(raised.value, RuntimeError)
    prepared = workspace.prepare(x, residual, weight)
    with pytest.raises(WorkspaceDetachedError):
        prepared()
    assert staged.calls == []
    handle._mapped = True  # checkpoint_restore
    comm.allreduce_residual_rmsnorm(x, residual, weight, workspace=workspace)
    prepared()
    assert len(staged.calls) == 2


def test_the_legacy_functions_own_checks_still_run(staged: Stage) -> None:
    """The metadata check below the skipped layers guards the kernel: it is kept."""
    _measured_here()
    workspace = _workspace()
    staged.native.metadata["tp_size"] = WORLD * 2  # a workspace of another world
    x, residual, weight = _tensors()
    with pytest.raises(ValueError, match=r"tp_size|world_size"):
        comm.allreduce_residual_rmsnorm(x, residual, weight, workspace=workspace)
    with pytest.raises(ValueError, match=r"tp_size|world_size"):
        workspace.prepare(x, residual, weight)()
    assert staged.calls == []


def test_api_logging_keeps_the_public_call_and_logs() -> None:
    """FLASHINFER_LOGLEVEL is read when flashinfer is imported: a fresh interpreter."""
    _measured_here()
    script = textwrap.dedent(
        """
        import torch
        from tests.support.layers_equivalence import stage, WORLD, RANK, MAX_TOKENS, HIDDEN
        import fi_compat.comm as comm
        with stage() as staged:
            ws = comm.create_workspace(WORLD, RANK, MAX_TOKENS, HIDDEN, torch.bfloat16,
                                       device="cpu")
            x = torch.randn(4, HIDDEN, dtype=torch.bfloat16)
            comm.allreduce_residual_rmsnorm(x, torch.randn_like(x),
                                            torch.randn(HIDDEN, dtype=torch.bfloat16),
                                            workspace=ws)
            print("DECISIONS", ws.decisions)
            print("CALLS", len(staged.calls))
        """
    )
    env = {**os.environ, "FLASHINFER_LOGLEVEL": "1", "FLASHINFER_LOGDEST": "stderr"}
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.getcwd(),
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "is wrapped by" in done.stdout
    assert "CALLS 1" in done.stdout
    assert "FlashInfer API Call: allreduce_fusion" in done.stderr + done.stdout


def _hostile(name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, residual, weight = _tensors()
    if name == "non-contiguous input":
        x = torch.randn(HIDDEN, 4, dtype=torch.bfloat16).t()
    elif name == "more tokens than the workspace holds":
        x = torch.randn(MAX_TOKENS + 1, HIDDEN, dtype=torch.bfloat16)
        residual = torch.randn_like(x)
    elif name == "another dtype":
        x = x.float()
    elif name == "another hidden size":
        x = torch.randn(4, HIDDEN * 2, dtype=torch.bfloat16)
        residual = torch.randn_like(x)
    elif name == "a 3-D input":
        x = x.unsqueeze(0)
    elif name == "no tokens":
        x = x[:0]
        residual = residual[:0]
    return x, residual, weight


@pytest.mark.parametrize(
    "name",
    [
        "non-contiguous input",
        "more tokens than the workspace holds",
        "another dtype",
        "another hidden size",
        "a 3-D input",
        "no tokens",
    ],
)
def test_hostile_tensors_are_refused_before_the_lower_layer(staged: Stage, name: str) -> None:
    from fi_compat.errors import WorkspaceMismatchError

    _measured_here()
    workspace = _workspace()
    assert any(LOWER in decision for decision in workspace.decisions)
    x, residual, weight = _hostile(name)
    with pytest.raises(WorkspaceMismatchError):
        comm.allreduce_residual_rmsnorm(x, residual, weight, workspace=workspace)
    with pytest.raises(WorkspaceMismatchError):
        workspace.prepare(x, residual, weight)
    assert staged.calls == [], "nothing reached the kernel"


@pytest.mark.parametrize("aliased", ["norm_out is residual_out", "norm_out is weight", "None"])
def test_aliased_outputs_and_wrong_types_are_refused_before_the_lower_layer(
    staged: Stage, aliased: str
) -> None:
    from fi_compat.errors import WorkspaceMismatchError

    _measured_here()
    workspace = _workspace()
    assert any(LOWER in decision for decision in workspace.decisions)
    x, residual, weight = _tensors()
    out = torch.empty_like(x)
    options: dict[str, Any] = {
        "norm_out is residual_out": {"norm_out": out, "residual_out": out},
        "norm_out is weight": {"norm_out": weight},
        "None": {},
    }[aliased]
    first: Any = None if aliased == "None" else x
    with pytest.raises(WorkspaceMismatchError):
        comm.allreduce_residual_rmsnorm(first, residual, weight, workspace=workspace, **options)
    with pytest.raises(WorkspaceMismatchError):
        workspace.prepare(first, residual, weight, **options)
    assert staged.calls == [], "nothing reached the kernel"
