"""What a workspace hands out keeps its promise after destroy, copy, pickle and partial use.

Engine code keeps bound methods for later (``check = ws.is_buffer_size_sufficient``),
freezes keywords with ``functools.partial``, copies objects and tears down in odd orders.
Every object here is tried that way on each kind of workspace (unified TRT-LLM, unified
MNNVL, legacy, reference) under the fake, asserting the typed error (or the documented
answer) and that nothing reached FlashInfer.
"""

from __future__ import annotations

import copy
import functools
import gc
import pickle
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
from fi_compat.errors import (
    UnsupportedOperationError,
    WorkspaceDestroyedError,
)
from fi_compat.testing import FakeFlashInfer, fake_flashinfer

TOKENS, HIDDEN, MAX_TOKENS, DTYPE = 4, 64, 8, torch.bfloat16
#: (release, api, backend) of each kind of workspace.
KINDS = [
    ("0.7.2.post1", "unified", "trtllm"),
    ("0.7.2.post1", "unified", "mnnvl"),
    ("0.5.3", "legacy", "auto"),
    ("0.7.2.post1", "reference", "auto"),
]
KERNELS = ("allreduce_fusion", "trtllm_allreduce_fusion")


@pytest.fixture(params=KINDS, ids=lambda kind: f"{kind[1]}-{kind[2]}")
def made(request: pytest.FixtureRequest) -> Iterator[tuple[comm.FusionWorkspace, FakeFlashInfer]]:
    release, api, backend = request.param
    with fake_flashinfer(release) as fake:
        size = 1 if api == "reference" else 2
        workspace = comm.create_workspace(
            size, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", api=api, backend=backend
        )
        yield workspace, fake


def _tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.randn(TOKENS, HIDDEN, dtype=DTYPE)
    return x, torch.randn_like(x), torch.randn(HIDDEN, dtype=DTYPE)


def _nothing_reached(fake: FakeFlashInfer, before: int) -> None:
    assert fake.calls[before:] == [], [call.name for call in fake.calls[before:]]


# ------------------------------------------------------------- methods kept past destroy()


def test_a_size_check_taken_before_destroy_answers_false_after(
    made: tuple[comm.FusionWorkspace, FakeFlashInfer],
) -> None:
    workspace, fake = made
    check = workspace.is_buffer_size_sufficient
    world = workspace.world_size
    assert check(world, TOKENS, HIDDEN, DTYPE) is True
    workspace.destroy()
    before = len(fake.calls)
    assert check(world, TOKENS, HIDDEN, DTYPE) is False
    assert workspace.is_buffer_size_sufficient(world, TOKENS, HIDDEN, DTYPE) is False
    _nothing_reached(fake, before)


def test_checkpoint_methods_refuse_after_destroy(
    made: tuple[comm.FusionWorkspace, FakeFlashInfer],
) -> None:
    workspace, fake = made
    prepare, restore = workspace.checkpoint_prepare, workspace.checkpoint_restore
    workspace.destroy()
    before = len(fake.calls)
    calls: list[Callable[[], Any]] = [
        prepare,
        lambda: restore(object()),
        workspace.checkpoint_prepare,
        lambda: workspace.checkpoint_restore(object()),
    ]
    for call in calls:
        with pytest.raises(WorkspaceDestroyedError):
            call()
    _nothing_reached(fake, before)


def test_forwarded_methods_and_attributes_refuse_after_destroy() -> None:
    with fake_flashinfer("0.7.2.post1") as fake:
        workspace = comm.create_workspace(
            2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", backend="mnnvl"
        )
        required = workspace.get_required_buffer_size_bytes  # FlashInfer's, through the facade
        assert required(2, TOKENS, HIDDEN, DTYPE) > 0
        assert isinstance(workspace.mc_ptr, int)
        workspace.destroy()
        before = len(fake.calls)
        with pytest.raises(WorkspaceDestroyedError):
            required(2, TOKENS, HIDDEN, DTYPE)
        with pytest.raises(WorkspaceDestroyedError):
            workspace.mc_ptr  # noqa: B018 - a pointer into freed memory
        _nothing_reached(fake, before)


def test_bound_calls_and_partials_refuse_after_destroy(
    made: tuple[comm.FusionWorkspace, FakeFlashInfer],
) -> None:
    workspace, fake = made
    x, residual, weight = _tensors()
    prepare = workspace.prepare
    fused = functools.partial(comm.allreduce_residual_rmsnorm, workspace=workspace, eps=1e-5)
    dropin = functools.partial(
        comm.allreduce_fusion,
        workspace=workspace,
        pattern=comm.AllReduceFusionPattern.kARResidualRMSNorm,
    )
    fused(x, residual, weight)  # alive: runs
    workspace.destroy()
    before = len(fake.calls)
    for call in (
        lambda: prepare(x, residual, weight),
        lambda: fused(x, residual, weight),
        lambda: dropin(input=x, residual_in=residual, rms_gamma=weight),
    ):
        with pytest.raises(WorkspaceDestroyedError):
            call()
    _nothing_reached(fake, before)


# ------------------------------------------------------------------- copies and pickles


@pytest.mark.parametrize(
    "operation",
    [copy.copy, copy.deepcopy, pickle.dumps],
    ids=["copy", "deepcopy", "pickle"],
)
def test_a_workspace_cannot_be_copied_or_pickled(
    made: tuple[comm.FusionWorkspace, FakeFlashInfer], operation: Callable[[Any], Any]
) -> None:
    workspace, fake = made
    before = len(fake.calls)
    with pytest.raises(UnsupportedOperationError) as caught:
        operation(workspace)
    assert isinstance(caught.value, TypeError)  # as pickle refuses what it cannot pickle
    assert str(caught.value).startswith("expected ")
    _nothing_reached(fake, before)
    assert not workspace.destroyed


def test_a_copied_prepared_call_is_revoked_with_the_workspace(
    made: tuple[comm.FusionWorkspace, FakeFlashInfer],
) -> None:
    workspace, fake = made
    prepared = workspace.prepare(*_tensors())
    twin = copy.copy(prepared)
    assert twin is not prepared
    assert twin.norm_out is prepared.norm_out
    assert twin.tokens == prepared.tokens
    before = len(fake.calls)
    norm_out, residual_out = twin()  # the very buffers the original launches on
    assert norm_out is prepared.norm_out
    assert residual_out is prepared.residual_out
    prepared()
    launched = [call for call in fake.calls[before:] if call.name in KERNELS]
    assert len(launched) == (2 if workspace.fused else 0)
    workspace.destroy()
    before = len(fake.calls)
    for call in (prepared, twin, copy.copy(twin)):
        with pytest.raises(WorkspaceDestroyedError):
            call()
    _nothing_reached(fake, before)


@pytest.mark.parametrize("operation", [copy.deepcopy, pickle.dumps], ids=["deepcopy", "pickle"])
def test_a_prepared_call_cannot_be_deep_copied_or_pickled(
    made: tuple[comm.FusionWorkspace, FakeFlashInfer], operation: Callable[[Any], Any]
) -> None:
    workspace, fake = made
    prepared = workspace.prepare(*_tensors())
    before = len(fake.calls)
    with pytest.raises(UnsupportedOperationError):
        operation(prepared)
    _nothing_reached(fake, before)


# ------------------------------------------------------------------------------ threads


def test_calls_from_another_thread_see_destroy(
    made: tuple[comm.FusionWorkspace, FakeFlashInfer],
) -> None:
    workspace, _fake = made
    x, residual, weight = _tensors()
    outcomes: list[BaseException | tuple[torch.Tensor, torch.Tensor]] = []

    def run() -> None:
        try:
            outcomes.append(
                comm.allreduce_residual_rmsnorm(x, residual, weight, workspace=workspace)
            )
        except BaseException as error:  # recorded for the main thread
            outcomes.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    workspace.destroy()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    first, second = outcomes
    assert isinstance(first, tuple)
    assert first[0].shape == (TOKENS, HIDDEN)
    assert isinstance(second, WorkspaceDestroyedError)


def _holders(found: object) -> list[str]:
    """What still refers to ``found``, for the failure message: each referrer's type, and a
    frame's code and line."""
    said = []
    for holder in gc.get_referrers(found):
        if isinstance(holder, types.FrameType):
            said.append(f"frame {holder.f_code.co_name} line {holder.f_lineno}")
        else:
            said.append(type(holder).__qualname__)
    return said


def test_methods_kept_past_the_workspace_object_still_answer(
    request: pytest.FixtureRequest,
) -> None:
    """The FusionWorkspace is gone (never destroyed: FlashInfer's buffers are alive); what
    it handed out keeps answering as it would have."""
    with fake_flashinfer("0.7.2.post1"):
        request.getfixturevalue("collector_held")  # after the fake's entry let go of its caches
        workspace = comm.create_workspace(2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu")
        check = workspace.is_buffer_size_sufficient
        prepared = workspace.prepare(*_tensors())
        alive = weakref.ref(workspace)
        del workspace
        gc.collect()
        assert alive() is not None  # the prepared call holds its workspace
        assert check(2, TOKENS, HIDDEN, DTYPE) is True
        norm_out, _ = prepared()
        assert norm_out.shape == (TOKENS, HIDDEN)
        del prepared
        gc.collect()
        assert alive() is None, _holders(alive())
        assert check(2, TOKENS, HIDDEN, DTYPE) is True
