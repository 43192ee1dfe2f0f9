"""fi_compat.comm against the recorded signatures of every FlashInfer release.

Each test runs on a fake ``flashinfer`` built by :mod:`fi_compat.testing` from one recorded
release; the fake raises ``TypeError`` for a keyword the release does not take and records
every call. Expected answers come from the recorded data (``ReleaseRecord``), not from
version numbers typed here.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from packaging.version import Version

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
from fi_compat._surface import GATES
from fi_compat.comm import _unified, _workspace
from fi_compat.comm._group import GroupSpan, _bcast_group_local_root
from fi_compat.errors import (
    CapabilityMissingError,
    GroupNotSupportedError,
    WorkspaceMismatchError,
)
from fi_compat.testing import (
    FakeFlashInfer,
    FunctionRecord,
    ReleaseRecord,
    StandIn,
    available_releases,
    fake_flashinfer,
    load_release,
)
from tests.support import release_classes

#: The final releases from 0.2.9 on: those the comm adaptations are measured and stated for
#: (older releases lack flashinfer.comm or its fusion API; pre-releases are not measured).
RELEASES = [
    v
    for v in available_releases()
    if not Version(v).is_prerelease and Version(v) >= Version("0.2.9")
]
#: The releases the tests below run on: the first and last of each 'comm' class
#: (tests/support/release_classes.py; every one with --all-releases).
SWEPT = release_classes.releases("comm", RELEASES)
UNIFIED = [v for v in RELEASES if load_release(v).unified_api]
LEGACY_ONLY = [
    v for v in RELEASES if load_release(v).legacy_api and not load_release(v).unified_api
]

FACTORY = "create_allreduce_fusion_workspace"
FUSION = "allreduce_fusion"
LEGACY_FACTORY = "trtllm_create_ipc_workspace_for_all_reduce_fusion"
LEGACY_FUSION = "trtllm_allreduce_fusion"
LEGACY_DESTROY = "trtllm_destroy_ipc_workspace_for_all_reduce_fusion"
NON_FUSION_DESTROY = "trtllm_destroy_ipc_workspace_for_all_reduce"

TOKENS, HIDDEN = 4, 64
DTYPE = torch.bfloat16


class Group:
    """Stands in for a torch.distributed ProcessGroup (only its identity matters here)."""


@pytest.fixture(params=SWEPT)
def release(request: pytest.FixtureRequest) -> Iterator[tuple[ReleaseRecord, FakeFlashInfer]]:
    version: str = request.param
    with fake_flashinfer(version) as fake:
        yield fake.record, fake


def _destroyed(workspace: comm.FusionWorkspace) -> bool:
    """``workspace.destroyed``, read through a call so that type checkers do not narrow it."""
    return workspace.destroyed


def _tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.randn(TOKENS, HIDDEN, dtype=DTYPE),
        torch.randn(TOKENS, HIDDEN, dtype=DTYPE),
        torch.randn(HIDDEN, dtype=DTYPE),
    )


def _required(func: FunctionRecord) -> set[str]:
    return {p.name for p in func.parameters if p.accepts_keyword and not p.has_default}


def _check_against_record(record: ReleaseRecord, name: str, arguments: dict[str, Any]) -> None:
    func = record.comm_function(name)
    assert func is not None
    assert set(arguments) <= set(func.keyword_names), name
    assert _required(func) <= set(arguments), name


def _pattern_value(record: ReleaseRecord, member: str) -> Any:
    enum = record.comm_enums["AllReduceFusionPattern"]
    assert enum is not None
    return enum.members[member]


def _span(size: int, world: int) -> Any:
    return lambda group: GroupSpan(size, 0, world)


# ------------------------------------------------------------------ api and keyword mapping


def test_matrix_covers_both_apis() -> None:
    assert UNIFIED
    assert LEGACY_ONLY


def test_each_release_gets_exactly_the_keywords_it_accepts(
    release: tuple[ReleaseRecord, FakeFlashInfer],
) -> None:
    record, fake = release
    x, r, w = _tensors()
    workspace = comm.create_workspace(2, 1, 16, HIDDEN, DTYPE, device="cpu")
    norm_out, residual_out = comm.allreduce_residual_rmsnorm(
        x, r, w, workspace=workspace, eps=1e-5, use_oneshot=True, fp32_acc=True
    )
    assert norm_out.shape == residual_out.shape == x.shape
    if record.unified_api:
        assert workspace.api == "unified"
        (created,) = fake.calls_to(FACTORY)
        _check_against_record(record, FACTORY, dict(created.arguments))
        assert created.arguments["world_size"] == 2
        assert created.arguments["rank"] == 1
        assert created.arguments["dtype"] is DTYPE
        (call,) = fake.calls_to(FUSION)
        arguments = dict(call.arguments)
        _check_against_record(record, FUSION, arguments)
        assert ("trigger_completion_at_end" in arguments) == record.accepts(
            FUSION, "trigger_completion_at_end"
        )
        assert arguments["input"] is x
        assert arguments["residual_in"] is r
        assert arguments["rms_gamma"] is w
        assert arguments["norm_out"] is norm_out
        assert arguments["residual_out"] is residual_out
        assert arguments["workspace"] is workspace.native
        assert arguments["pattern"] == _pattern_value(record, "kARResidualRMSNorm")
        assert arguments["rms_eps"] == 1e-5
        assert arguments["use_oneshot"] is True
        assert arguments["fp32_acc"] is True
        assert not fake.calls_to(LEGACY_FUSION)
    else:
        assert workspace.api == "legacy"
        (created,) = fake.calls_to(LEGACY_FACTORY)
        _check_against_record(record, LEGACY_FACTORY, dict(created.arguments))
        assert created.arguments["tp_rank"] == 1
        assert created.arguments["tp_size"] == 2
        assert "use_fp32_lamport" not in created.arguments  # bfloat16
        (call,) = fake.calls_to(LEGACY_FUSION)
        arguments = dict(call.arguments)
        func = record.comm_function(LEGACY_FUSION)
        assert func is not None
        assert set(arguments) == _required(func)
        assert arguments["allreduce_in"] is x
        assert arguments["residual_in"] is r
        assert arguments["rms_gamma"] is w
        assert arguments["norm_out"] is norm_out
        assert arguments["residual_out"] is residual_out
        assert arguments["token_num"] == TOKENS
        assert arguments["hidden_dim"] == HIDDEN
        assert (arguments["world_size"], arguments["world_rank"]) == (2, 1)
        assert isinstance(arguments["workspace_ptrs"], StandIn)
        assert arguments["workspace_ptrs"] is workspace.workspace_tensor
        assert arguments["pattern_code"] == _pattern_value(record, "kARResidualRMSNorm")
        assert arguments["trigger_completion_at_end"] is True
        assert arguments["launch_with_pdl"] is True
        assert arguments["allreduce_out"] is None
        assert arguments["quant_out"] is None


def test_destroy_uses_the_destroy_function_of_its_api(
    release: tuple[ReleaseRecord, FakeFlashInfer],
) -> None:
    record, fake = release
    with comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu") as workspace:
        assert not _destroyed(workspace)
    assert _destroyed(workspace)
    workspace.destroy()  # idempotent
    names = [call.name for call in fake.calls]
    assert NON_FUSION_DESTROY not in names
    if record.unified_api:
        destroys = [name for name in names if name.endswith(".destroy")]
        assert len(destroys) == 1
        assert workspace.native.destroyed is True
        assert not fake.calls_to(LEGACY_DESTROY)
    else:
        (call,) = fake.calls_to(LEGACY_DESTROY)
        assert call.arguments["workspace"] is workspace.ipc_handles


def test_float32_asks_the_legacy_factory_for_fp32_lamport_buffers() -> None:
    version = LEGACY_ONLY[-1]
    with fake_flashinfer(version) as fake:
        comm.create_workspace(2, 0, 16, HIDDEN, torch.float32, device="cpu")
        (created,) = fake.calls_to(LEGACY_FACTORY)
        assert created.arguments["use_fp32_lamport"] is True


# ----------------------------------------------------------------------------------- group


def test_group_smaller_than_the_world_is_never_dropped(
    release: tuple[ReleaseRecord, FakeFlashInfer], monkeypatch: pytest.MonkeyPatch
) -> None:
    record, fake = release
    monkeypatch.setattr(_workspace, "group_span", _span(2, 4))
    group = Group()
    factory = FACTORY if record.unified_api else LEGACY_FACTORY
    accepts_group = record.accepts(factory, "group")
    accepts_backend = record.unified_api and record.accepts(FACTORY, "comm_backend")
    backend = record.torch_dist_backend
    root_is_local = backend is not None and backend.bcast_root_is_group_local is True
    needs_backend = record.unified_api and (not accepts_group or not root_is_local)
    if not accepts_group and not (accepts_backend and backend is not None):
        with pytest.raises(GroupNotSupportedError, match=re.escape(GATES["group"].introduced_in)):
            comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, group=group, device="cpu")
        assert not fake.calls_to(factory)
        return
    workspace = comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, group=group, device="cpu")
    (created,) = fake.calls_to(factory)
    _check_against_record(record, factory, dict(created.arguments))
    assert (created.arguments.get("group") is group) == accepts_group
    if needs_backend:
        assert backend is not None
        given = created.arguments["comm_backend"]
        base = getattr(importlib.import_module(backend.module or backend.defined_in), backend.name)
        assert isinstance(given, base)
        assert workspace.comm_backend is given
        if root_is_local:
            assert type(given) is base
        else:
            assert type(given).bcast is _bcast_group_local_root
            assert given._fi_compat_group is group
        (made,) = fake.calls_to("TorchDistBackend.__init__")
        assert made.arguments["group"] is group
    else:
        assert "comm_backend" not in created.arguments
    if not record.unified_api:
        workspace.destroy()
        (destroyed,) = fake.calls_to(LEGACY_DESTROY)
        assert (destroyed.arguments.get("group") is group) == record.accepts(
            LEGACY_DESTROY, "group"
        )


def test_group_routes_seen_across_releases() -> None:
    """The matrix exercises every route of rule 1, not just one."""
    routes = set()
    for version in UNIFIED:
        record = load_release(version)
        accepts_group = record.accepts(FACTORY, "group")
        backend = record.torch_dist_backend
        local = backend is not None and backend.bcast_root_is_group_local is True
        routes.add((accepts_group, local))
    assert routes == {(False, False), (True, False), (True, True)}


def test_whole_world_group_is_left_out_only_where_not_taken(
    release: tuple[ReleaseRecord, FakeFlashInfer], monkeypatch: pytest.MonkeyPatch
) -> None:
    record, fake = release
    monkeypatch.setattr(_workspace, "group_span", _span(2, 2))
    group = Group()
    factory = FACTORY if record.unified_api else LEGACY_FACTORY
    workspace = comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, group=group, device="cpu")
    (created,) = fake.calls_to(factory)
    _check_against_record(record, factory, dict(created.arguments))
    assert (created.arguments.get("group") is group) == record.accepts(factory, "group")
    assert "comm_backend" not in created.arguments
    assert workspace.group is group
    if not record.accepts(factory, "group"):
        assert any("whole world" in decision for decision in workspace.decisions)


def test_no_group_passes_neither_group_nor_comm_backend(
    release: tuple[ReleaseRecord, FakeFlashInfer],
) -> None:
    record, fake = release
    comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu")
    factory = FACTORY if record.unified_api else LEGACY_FACTORY
    (created,) = fake.calls_to(factory)
    assert "group" not in created.arguments
    assert "comm_backend" not in created.arguments


# ------------------------------------------------------------------ trigger_completion_at_end


@pytest.mark.parametrize("version", UNIFIED)
def test_trigger_false_with_pdl_is_passed_or_honoured(version: str) -> None:
    """Where the release takes the flag it is passed; 0.6.0 to 0.6.7 resolve ``auto`` to
    MNNVL on one node, which ignores the flag in every release, so it is left out."""
    with fake_flashinfer(version) as fake:
        record = fake.record
        x, r, w = _tensors()
        workspace = comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu")
        comm.allreduce_residual_rmsnorm(
            x, r, w, workspace=workspace, trigger_completion_at_end=False
        )
        (call,) = fake.calls_to(FUSION)
        assert call.arguments["launch_with_pdl"] is True
        if record.accepts(FUSION, "trigger_completion_at_end"):
            assert call.arguments["trigger_completion_at_end"] is False
            return
        assert workspace.backend == "mnnvl"
        assert "trigger_completion_at_end" not in call.arguments
        assert any("MNNVL backend ignores it" in d for d in workspace.decisions)


NO_TRIGGER = [
    v for v in UNIFIED if not load_release(v).accepts(FUSION, "trigger_completion_at_end")
]


class _Unreadable:
    """A TRT-LLM workspace object whose pointers fi-compat cannot read."""

    backend = "trtllm"

    def __init__(self, native: Any) -> None:
        self._native = native

    def destroy(self) -> None:
        self._native.destroy()


@pytest.mark.parametrize("version", NO_TRIGGER[:1] + NO_TRIGGER[-1:])
def test_trigger_false_completes_at_the_end_where_it_cannot_be_honoured(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No release exposes a TRT-LLM workspace without pointers; if one did, an early
    completion signal would become completion at the end (the same result), never a
    failed forward pass."""
    with fake_flashinfer(version) as fake:
        module = importlib.import_module("flashinfer.comm")
        original = module.create_allreduce_fusion_workspace
        comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu")  # probe first
        monkeypatch.setattr(module, FACTORY, lambda **kwargs: _Unreadable(original(**kwargs)))
        fake.clear_calls()
        workspace = comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu")
        (said,) = [d for d in workspace.decisions if "completes at the end" in d]
        assert GATES["trigger_completion_at_end"].introduced_in in said
        x, r, w = _tensors()
        for pdl in (True, False):
            fake.clear_calls()
            comm.allreduce_residual_rmsnorm(
                x, r, w, workspace=workspace, trigger_completion_at_end=False, launch_with_pdl=pdl
            )
            (call,) = fake.calls_to(FUSION)
            assert "trigger_completion_at_end" not in call.arguments
            assert call.arguments["launch_with_pdl"] is pdl
            assert isinstance(call.arguments["workspace"], _Unreadable)
            assert not fake.calls_to(LEGACY_FUSION)
        workspace.destroy()


@pytest.mark.parametrize("version", NO_TRIGGER)
def test_trigger_false_runs_the_same_kernel_through_the_legacy_entry(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.6.0 to 0.6.7 tie the flag to launch_with_pdl; a TRT-LLM workspace honours False."""
    with fake_flashinfer(version) as fake:
        module = importlib.import_module("flashinfer.comm")
        original = module.create_allreduce_fusion_workspace
        pointers = StandIn("workspace_ptrs")

        def trtllm_workspace(**kwargs: Any) -> Any:
            native = original(**kwargs)
            native.backend = "trtllm"
            native.workspace_tensor = pointers
            return native

        comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu")  # probe first
        fake.clear_calls()
        monkeypatch.setattr(module, FACTORY, trtllm_workspace)
        workspace = comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu")
        x, r, w = _tensors()
        legacy = fake.record.comm_function(LEGACY_FUSION)
        assert legacy is not None
        deprecated = any(d.startswith("deprecated(") for d in legacy.decorators)
        # The release's own allreduce_fusion calls this same deprecated entry point, so the
        # warning is the one FlashInfer emits on its unified path too.
        with (
            pytest.warns(DeprecationWarning, match="unified API")
            if deprecated
            else contextlib.nullcontext()
        ):
            comm.allreduce_residual_rmsnorm(
                x, r, w, workspace=workspace, trigger_completion_at_end=False
            )
        assert not fake.calls_to(FUSION)
        (call,) = fake.calls_to(LEGACY_FUSION)
        _check_against_record(fake.record, LEGACY_FUSION, dict(call.arguments))
        assert call.arguments["trigger_completion_at_end"] is False
        assert call.arguments["launch_with_pdl"] is True
        assert call.arguments["workspace_ptrs"] is pointers
        # A prepared call takes the same route.
        fake.clear_calls()
        with (
            pytest.warns(DeprecationWarning, match="unified API")
            if deprecated
            else contextlib.nullcontext()
        ):
            prepared = workspace.prepare(x, r, w, trigger_completion_at_end=False)
            prepared()
        assert not fake.calls_to(FUSION)
        (frozen,) = fake.calls_to(LEGACY_FUSION)
        assert frozen.arguments["trigger_completion_at_end"] is False
        assert frozen.arguments["workspace_ptrs"] is pointers
        assert frozen.arguments["allreduce_in"] is x
        assert frozen.arguments["norm_out"] is prepared.norm_out
        fake.clear_calls()
        comm.allreduce_residual_rmsnorm(x, r, w, workspace=workspace)
        (call,) = fake.calls_to(FUSION)
        assert "trigger_completion_at_end" not in call.arguments


@pytest.mark.parametrize("version", NO_TRIGGER[:1])
def test_mnnvl_ignores_the_flag_on_every_release(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_flashinfer(version) as fake:
        module = importlib.import_module("flashinfer.comm")
        original = module.create_allreduce_fusion_workspace

        def mnnvl_workspace(**kwargs: Any) -> Any:
            native = original(**kwargs)
            native.backend = "mnnvl"
            return native

        comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu")
        fake.clear_calls()
        monkeypatch.setattr(module, FACTORY, mnnvl_workspace)
        workspace = comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu")
        x, r, w = _tensors()
        comm.allreduce_residual_rmsnorm(
            x, r, w, workspace=workspace, trigger_completion_at_end=False
        )
        (call,) = fake.calls_to(FUSION)
        assert "trigger_completion_at_end" not in call.arguments


@pytest.mark.parametrize("version", LEGACY_ONLY)
def test_legacy_always_passes_the_flag(version: str) -> None:
    with fake_flashinfer(version) as fake:
        x, r, w = _tensors()
        workspace = comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu")
        comm.allreduce_residual_rmsnorm(
            x, r, w, workspace=workspace, trigger_completion_at_end=False
        )
        (call,) = fake.calls_to(LEGACY_FUSION)
        assert call.arguments["trigger_completion_at_end"] is False


# -------------------------------------------------------------- options a release lacks


@pytest.mark.parametrize("version", LEGACY_ONLY[-1:] + UNIFIED[:1])
def test_an_option_the_release_lacks_is_refused_not_dropped(version: str) -> None:
    with fake_flashinfer(version) as fake:
        record = fake.record
        factory = FACTORY if record.unified_api else LEGACY_FACTORY
        assert not record.accepts(factory, "top_k")
        with pytest.raises(CapabilityMissingError, match="top_k"):
            comm.create_workspace(
                2, 0, 16, HIDDEN, DTYPE, device="cpu", factory_options={"top_k": 8}
            )
        assert not fake.calls_to(factory)


@pytest.mark.parametrize("version", LEGACY_ONLY[-1:])
def test_legacy_refuses_unified_only_backends(version: str) -> None:
    with (
        fake_flashinfer(version),
        pytest.raises(CapabilityMissingError, match=re.escape(GATES["unified_api"].introduced_in)),
    ):
        comm.create_workspace(2, 0, 16, HIDDEN, DTYPE, device="cpu", backend="mnnvl")


# ------------------------------------------------------------------------------- drop-ins


def _assert_same_parameters(ours: Any, record: FunctionRecord) -> None:
    import inspect

    parameters = list(inspect.signature(ours).parameters.values())
    assert [p.name for p in parameters] == [p.name for p in record.parameters]
    assert [p.kind.name for p in parameters] == [p.kind for p in record.parameters]
    for mine, theirs in zip(parameters, record.parameters, strict=True):
        if theirs.default is None:
            assert mine.default is inspect.Parameter.empty, mine.name
        else:
            assert mine.default == ast.literal_eval(theirs.default), mine.name


@pytest.mark.parametrize("name", [FACTORY, FUSION])
def test_dropins_have_the_newest_recorded_signature(name: str) -> None:
    newest = load_release(RELEASES[-1]).comm_function(name)
    assert newest is not None
    _assert_same_parameters(getattr(comm, name), newest)


def test_pattern_values_match_every_recorded_release() -> None:
    seen: set[str] = set()
    for version in RELEASES:
        enum = load_release(version).comm_enums.get("AllReduceFusionPattern")
        if enum is None:
            continue
        for member, value in enum.members.items():
            assert getattr(comm.AllReduceFusionPattern, member) == value, (version, member)
            seen.add(member)
    newest = load_release(RELEASES[-1]).comm_enums["AllReduceFusionPattern"]
    assert newest is not None
    ours = {name for name in vars(comm.AllReduceFusionPattern) if name.startswith("k")}
    assert ours == set(newest.members)
    assert seen == ours


def test_dropin_pair_runs_the_fused_pattern(release: tuple[ReleaseRecord, FakeFlashInfer]) -> None:
    record, fake = release
    x, r, w = _tensors()
    norm_out, residual_out = torch.empty_like(x), torch.empty_like(x)
    workspace = comm.create_allreduce_fusion_workspace(
        world_size=2, rank=0, max_token_num=16, hidden_dim=HIDDEN, dtype=DTYPE
    )
    result = comm.allreduce_fusion(
        input=x,
        workspace=workspace,
        pattern=comm.AllReduceFusionPattern.kARResidualRMSNorm,
        launch_with_pdl=True,
        residual_out=residual_out,
        norm_out=norm_out,
        residual_in=r,
        rms_gamma=w,
    )
    assert result is norm_out
    name = FUSION if record.unified_api else LEGACY_FUSION
    (call,) = fake.calls_to(name)
    _check_against_record(record, name, dict(call.arguments))
    assert call.arguments["norm_out"] is norm_out
    assert call.arguments["residual_out"] is residual_out
    workspace.destroy()
    assert not fake.calls_to(NON_FUSION_DESTROY)


@pytest.mark.parametrize("version", [LEGACY_ONLY[-1], UNIFIED[0], RELEASES[-1]])
def test_dropin_maps_other_patterns(version: str) -> None:
    with fake_flashinfer(version) as fake:
        record = fake.record
        x = torch.randn(TOKENS, HIDDEN, dtype=DTYPE)
        output = torch.empty_like(x)
        workspace = comm.create_allreduce_fusion_workspace(
            world_size=2, rank=0, max_token_num=16, hidden_dim=HIDDEN, dtype=DTYPE
        )
        result = comm.allreduce_fusion(
            input=x,
            workspace=workspace,
            pattern=comm.AllReduceFusionPattern.kAllReduce,
            output=output,
        )
        name = FUSION if record.unified_api else LEGACY_FUSION
        (call,) = fake.calls_to(name)
        _check_against_record(record, name, dict(call.arguments))
        if record.unified_api:
            assert call.arguments["output"] is output
            assert call.arguments["pattern"] == _pattern_value(record, "kAllReduce")
        else:
            assert result is output
            assert call.arguments["allreduce_out"] is output
            assert call.arguments["pattern_code"] == _pattern_value(record, "kAllReduce")


@pytest.mark.parametrize("version", [LEGACY_ONLY[-1], UNIFIED[0], RELEASES[-1]])
def test_dropin_refuses_a_non_contiguous_quant_out_before_the_launch(version: str) -> None:
    """FlashInfer writes quant_out through a flat view; a strided one is refused, typed."""
    with fake_flashinfer(version) as fake:
        x, r, w = _tensors()
        workspace = comm.create_allreduce_fusion_workspace(
            world_size=2, rank=0, max_token_num=16, hidden_dim=HIDDEN, dtype=DTYPE
        )
        strided = torch.empty(HIDDEN, TOKENS, dtype=torch.float8_e4m3fn).t()
        assert not strided.is_contiguous()
        fake.clear_calls()
        with pytest.raises(WorkspaceMismatchError, match="quant_out to be contiguous"):
            comm.allreduce_fusion(
                input=x,
                workspace=workspace,
                pattern=comm.AllReduceFusionPattern.kARResidualRMSNormFP8Quant,
                residual_in=r,
                rms_gamma=w,
                quant_out=strided,
                scale_factor=1.0,
            )
        assert not fake.calls_to(FUSION)
        assert not fake.calls_to(LEGACY_FUSION)
        workspace.destroy()


@pytest.mark.parametrize("version", [LEGACY_ONLY[-1], UNIFIED[0]])
def test_dropin_refuses_what_the_release_cannot_run(version: str) -> None:
    with fake_flashinfer(version) as fake:
        x, r, w = _tensors()
        workspace = comm.create_allreduce_fusion_workspace(
            world_size=2, rank=0, max_token_num=16, hidden_dim=HIDDEN, dtype=DTYPE
        )
        with pytest.raises(CapabilityMissingError, match=r"block_quant_group_size|PerTokenGroup"):
            comm.allreduce_fusion(
                input=x,
                workspace=workspace,
                pattern=comm.AllReduceFusionPattern.kARResidualRMSNormPerTokenGroupFP8PackedQuant,
                residual_in=r,
                rms_gamma=w,
                block_quant_group_size=128,
            )
        assert not fake.calls_to(FUSION)
        assert not fake.calls_to(LEGACY_FUSION)


@pytest.mark.parametrize("version", [UNIFIED[0], RELEASES[-1]])
def test_dropin_passes_a_native_workspace_through(
    version: str, caplog: pytest.LogCaptureFixture
) -> None:
    with fake_flashinfer(version) as fake:
        record = fake.record
        module = importlib.import_module("flashinfer.comm")
        native = module.create_allreduce_fusion_workspace(
            world_size=2, rank=0, max_token_num=16, hidden_dim=HIDDEN, dtype=DTYPE
        )
        x, r, w = _tensors()
        pattern = comm.AllReduceFusionPattern.kARResidualRMSNorm
        comm.allreduce_fusion(
            input=x,
            workspace=native,
            pattern=pattern,
            residual_in=r,
            rms_gamma=w,
            trigger_completion_at_end=False,
        )
        (call,) = fake.calls_to(FUSION)
        _check_against_record(record, FUSION, dict(call.arguments))
        assert call.arguments["workspace"] is native
        takes_trigger = record.accepts(FUSION, "trigger_completion_at_end")
        # Without PDL, leaving the flag out gives the same result.
        assert ("trigger_completion_at_end" in call.arguments) == takes_trigger
        fake.clear_calls()
        if takes_trigger:
            return
        # With PDL the release completes at the end: the same result, said once at debug.
        _unified._told.clear()
        with caplog.at_level(logging.DEBUG, logger="fi_compat"):
            for _ in range(2):
                comm.allreduce_fusion(
                    input=x,
                    workspace=native,
                    pattern=pattern,
                    residual_in=r,
                    rms_gamma=w,
                    launch_with_pdl=True,
                    trigger_completion_at_end=False,
                )
        calls = fake.calls_to(FUSION)
        assert len(calls) == 2
        assert all("trigger_completion_at_end" not in c.arguments for c in calls)
        assert all(c.arguments["launch_with_pdl"] is True for c in calls)
        (record_,) = [m for m in caplog.messages if "completes at the end" in m]
        assert version in record_


NO_GROUP = [v for v in UNIFIED if not load_release(v).accepts(FACTORY, "group")]


@pytest.mark.parametrize("version", NO_GROUP[:1] + NO_GROUP[-1:])
def test_caller_comm_backend_carries_the_group(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workspace, "group_span", _span(2, 4))
    with fake_flashinfer(version) as fake:
        backend = object()
        workspace = comm.create_workspace(
            2, 0, 16, HIDDEN, DTYPE, group=Group(), comm_backend=backend, device="cpu"
        )
        (created,) = fake.calls_to(FACTORY)
        assert created.arguments["comm_backend"] is backend
        assert "group" not in created.arguments
        assert not fake.calls_to("TorchDistBackend.__init__")
        assert "group carried by the caller's comm_backend" in workspace.decisions
