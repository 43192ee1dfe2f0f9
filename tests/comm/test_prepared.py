"""``FusionWorkspace.prepare``: checked once, then the very launch a checked call makes.

The prepared call must pass FlashInfer exactly what :func:`allreduce_residual_rmsnorm`
passes for the same tensors, on every recorded release and for every way
``trigger_completion_at_end`` is honoured; it must refuse at ``prepare`` what a call
refuses, and stop launching once its workspace is destroyed.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
from fi_compat.comm._launch import freeze_call
from fi_compat.errors import (
    CapabilityMissingError,
    WorkspaceDestroyedError,
    WorkspaceMismatchError,
)
from fi_compat.testing import FakeFlashInfer, available_releases, fake_flashinfer, load_release

FUSED = [
    v for v in available_releases() if load_release(v).unified_api or load_release(v).legacy_api
]
KERNELS = ("allreduce_fusion", "trtllm_allreduce_fusion")
TOKENS, HIDDEN, MAX_TOKENS = 4, 64, 8
DTYPE = torch.bfloat16
FLAGS = [(True, True), (True, False), (False, True), (False, False)]


def _tensors(tokens: int = TOKENS) -> tuple[torch.Tensor, ...]:
    x = torch.randn(tokens, HIDDEN, dtype=DTYPE)
    return (
        x,
        torch.randn_like(x),
        torch.randn(HIDDEN, dtype=DTYPE),
        torch.empty_like(x),
        torch.empty_like(x),
    )


def _kernel_calls(fake: FakeFlashInfer) -> list[tuple[str, dict[str, Any]]]:
    return [(call.name, dict(call.arguments)) for call in fake.calls if call.name in KERNELS]


def _same(left: dict[str, Any], right: dict[str, Any]) -> bool:
    """The same names bound to the same objects (tensors by identity)."""
    return left.keys() == right.keys() and all(
        left[k] is right[k] or (not isinstance(left[k], torch.Tensor) and left[k] == right[k])
        for k in left
    )


def _refusal(call: Callable[[], object]) -> str | None:
    """The message of the CapabilityMissingError ``call`` raises, or None."""
    try:
        call()
    except CapabilityMissingError as error:
        return str(error)
    return None


# ------------------------------------------------------------------ against every release


# Forcing the legacy API on 0.6.0+ calls its deprecated entry points, which warn on every
# call (on FlashInfer's own unified path too): not what this test is about.
@pytest.mark.filterwarnings("ignore:use the unified API:DeprecationWarning")
@pytest.mark.parametrize("version", FUSED)
@pytest.mark.parametrize("api", ["auto", "legacy"])
def test_prepared_call_passes_what_a_checked_call_passes(version: str, api: str) -> None:
    if api == "legacy" and not load_release(version).legacy_api:
        pytest.skip("no legacy API in this release")
    with fake_flashinfer(version) as fake:
        workspace = comm.create_workspace(
            2,
            0,
            MAX_TOKENS,
            HIDDEN,
            DTYPE,
            device="cpu",
            api=api,  # type: ignore[arg-type]
        )
        x, r, w, norm_out, residual_out = _tensors()
        for pdl, trigger in FLAGS:
            options: dict[str, Any] = {
                "eps": 1e-5,
                "norm_out": norm_out,
                "residual_out": residual_out,
                "fp32_acc": True,
                "use_oneshot": False,
                "launch_with_pdl": pdl,
                "trigger_completion_at_end": trigger,
            }
            fake.clear_calls()
            refused = _refusal(
                functools.partial(
                    comm.allreduce_residual_rmsnorm, x, r, w, workspace=workspace, **options
                )
            )
            if refused is not None:
                # A release that can honour the flags in no way: prepare refuses the same.
                assert _refusal(functools.partial(workspace.prepare, x, r, w, **options)) == refused
                assert not _kernel_calls(fake)
                continue
            checked = _kernel_calls(fake)
            fake.clear_calls()
            prepared = workspace.prepare(x, r, w, **options)
            assert not _kernel_calls(fake), "prepare must not launch"
            for _ in range(2):
                assert prepared() == (norm_out, residual_out)
            launched = _kernel_calls(fake)
            assert len(checked) == 1
            assert len(launched) == 2
            for name, arguments in launched:
                assert name == checked[0][0], (pdl, trigger)
                assert _same(arguments, checked[0][1]), (pdl, trigger, arguments, checked)


# ----------------------------------------------------------------------------- per flavour


Factory = Callable[..., comm.FusionWorkspace]


@pytest.fixture(params=["unified", "legacy", "reference"])
def flavour(request: pytest.FixtureRequest) -> Iterator[tuple[Factory, FakeFlashInfer]]:
    api: Any = request.param
    version = next(
        v
        for v in reversed(available_releases())
        if api != "legacy" or not load_release(v).unified_api
    )
    with fake_flashinfer(version) as fake:

        def make(**kwargs: Any) -> comm.FusionWorkspace:
            size = 1 if api == "reference" else 2
            return comm.create_workspace(
                size, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", api=api, **kwargs
            )

        yield make, fake


def test_prepare_allocates_missing_outputs_once(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    make, _ = flavour
    workspace = make()
    x, r, w, _, _ = _tensors()
    prepared = workspace.prepare(x, r, w)
    assert prepared.tokens == TOKENS
    assert prepared.workspace is workspace
    norm_out, residual_out = prepared.norm_out, prepared.residual_out
    assert norm_out.shape == residual_out.shape == x.shape
    assert norm_out.dtype is residual_out.dtype is DTYPE
    assert norm_out.data_ptr() != residual_out.data_ptr()
    first = prepared()
    second = prepared()
    assert first[0] is second[0] is norm_out
    assert first[1] is second[1] is residual_out
    assert f"tokens={TOKENS}" in repr(prepared)


def test_prepare_refuses_what_a_call_refuses(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    make, fake = flavour
    workspace = make()
    x, r, w, _, _ = _tensors()
    wrong: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        (_tensors(MAX_TOKENS * 1000)[:3], {}),  # over every rule, MNNVL's rounded buffer too
        ((x.to(torch.float16), r, w), {}),
        ((torch.randn(HIDDEN, TOKENS, dtype=DTYPE).t(), r, w), {}),
        ((x, r, torch.randn(HIDDEN + 1, dtype=DTYPE)), {}),
        ((x, r, w), {"norm_out": torch.empty(TOKENS, HIDDEN, dtype=torch.float32)}),
        ((x, r, w), {"residual_out": torch.empty(TOKENS - 1, HIDDEN, dtype=DTYPE)}),
    ]
    for tensors, options in wrong:
        with pytest.raises(WorkspaceMismatchError) as checked:
            comm.allreduce_residual_rmsnorm(*tensors, workspace=workspace, **options)
        with pytest.raises(WorkspaceMismatchError) as prepared:
            workspace.prepare(*tensors, **options)
        assert str(prepared.value) == str(checked.value)
    assert not _kernel_calls(fake)


def test_destroy_revokes_prepared_calls(flavour: tuple[Factory, FakeFlashInfer]) -> None:
    make, fake = flavour
    workspace = make()
    x, r, w, _, _ = _tensors()
    prepared = [workspace.prepare(x, r, w), workspace.prepare(x, r, w, eps=1e-3)]
    fake.clear_calls()
    workspace.destroy()
    for call in prepared:
        with pytest.raises(WorkspaceDestroyedError, match="destroy\\(\\) has already run"):
            call()
    with pytest.raises(WorkspaceDestroyedError):
        workspace.prepare(x, r, w)
    assert not _kernel_calls(fake)


def test_workspace_does_not_keep_prepared_calls_alive(request: pytest.FixtureRequest) -> None:
    with fake_flashinfer(available_releases()[-1]):
        request.getfixturevalue("collector_held")  # after the fake's entry let go of its caches
        workspace = comm.create_workspace(2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu")
        x, r, w, _, _ = _tensors()
        reference = weakref.ref(workspace.prepare(x, r, w))
        assert reference() is None
        workspace.destroy()


def test_prepared_reference_reads_the_buffers_at_call_time() -> None:
    workspace = comm.create_workspace(1, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu")
    assert workspace.api == "reference"
    x, r, w, norm_out, residual_out = _tensors()
    static = torch.zeros_like(x)
    prepared = workspace.prepare(static, r, w, norm_out=norm_out, residual_out=residual_out)
    for _ in range(2):
        static.copy_(torch.randn_like(x))
        expected = comm.allreduce_residual_rmsnorm(static, r, w, workspace=workspace)
        got = prepared()
        assert torch.equal(got[0], expected[0])
        assert torch.equal(got[1], expected[1])


# ------------------------------------------------------------------------------ freeze_call


def _plain(a: Any, b: Any, c: Any = "c-default", d: Any = None, *, e: Any = None) -> Any:
    return (a, b, c, d, e)


def _forwarding(*args: Any, **kwargs: Any) -> Any:
    return _plain(*args, **kwargs)


def test_freeze_is_positional_for_an_explicit_signature() -> None:
    frozen = freeze_call(_plain, {"b": 2, "a": 1, "d": 4})
    assert isinstance(frozen, functools.partial)
    assert frozen.args == (1, 2, "c-default", 4)
    assert not frozen.keywords
    assert frozen() == (1, 2, "c-default", 4, None)


@pytest.mark.parametrize(
    ("function", "arguments"),
    [
        (_plain, {"a": 1, "b": 2, "e": 5}),  # keyword-only
        (_plain, {"a": 1, "b": 2, "z": 0}),  # unknown: let the call raise TypeError
        (_plain, {"b": 2}),  # a required parameter left out
        (_forwarding, {"a": 1, "b": 2}),  # a wrapper's own signature is (*args, **kwargs)
        (functools.wraps(_plain)(_forwarding), {"a": 1, "b": 2}),  # even when it wraps
    ],
)
def test_freeze_falls_back_to_keywords(function: Any, arguments: dict[str, Any]) -> None:
    frozen = freeze_call(function, arguments)
    assert isinstance(frozen, functools.partial)
    assert frozen.args == ()
    assert frozen.keywords == arguments


def test_freeze_of_a_callable_without_signature() -> None:
    class NoSignature:
        __signature__ = "not a signature"

        def __call__(self, **kwargs: Any) -> Any:
            return kwargs

    frozen = freeze_call(NoSignature(), {"a": 1})
    assert frozen() == {"a": 1}


def test_prepare_refuses_tensors_on_another_device() -> None:
    with fake_flashinfer(available_releases()[-1]) as fake:
        workspace = comm.create_workspace(2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cuda:0")
        x, r, w, _, _ = _tensors()
        with pytest.raises(WorkspaceMismatchError, match=r"on cuda:0.*found input on cpu"):
            workspace.prepare(x, r, w)
        assert not _kernel_calls(fake)
