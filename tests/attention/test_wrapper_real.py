"""The deterministic wrapper and planner on the installed FlashInfer: what reaches its kernel.

Real wrappers of the installed release are built and planned on the CPU: pinned host
buffers become plain ones, and the compiled-module loaders the wrappers call
(``get_batch_prefill_module``, ``get_batch_decode_module``) return recorders. So the
release's own Python runs every line of ``plan`` (and of ``fast_decode_plan``) and the test
reads the arguments that would reach the kernel's scheduler: the split settings must be
there, as the pair ``(fixed_split_size or -1, disable_split_kv)``, for every layout, phase
and mode, through the wrapper and through the planner.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator
from typing import Any

import pytest

from fi_compat import determinism
from fi_compat.attention import (
    AttentionPlanner,
    BackendNotDeterministicError,
    Layout,
    PlanArgs,
    Settings,
    deterministic_wrapper,
    fast_decode_plan,
)

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]

#: Distinctive sizes, so a match in the kernel's arguments cannot be a coincidence.
EAGER = Settings(prefill_split_size=7919, decode_split_size=7907)
GRAPH = Settings(cuda_graph=True)


class Kernel:
    """A compiled module stand-in: records every call of every function it is asked for."""

    def __init__(self, log: list[tuple[str, tuple[Any, ...]]]) -> None:
        self._log = log

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> list[int]:
            self._log.append((name, args))
            return []

        return call


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    import flashinfer.decode
    import flashinfer.prefill
    import torch

    log: list[tuple[str, tuple[Any, ...]]] = []
    empty, zeros = torch.empty, torch.zeros

    def unpinned(make: Any) -> Any:
        @functools.wraps(make)
        def call(*args: Any, pin_memory: bool = False, **kwargs: Any) -> Any:
            return make(*args, **kwargs)

        return call

    monkeypatch.setattr(torch, "empty", unpinned(empty))
    monkeypatch.setattr(torch, "zeros", unpinned(zeros))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    loader = lambda *args, **kwargs: Kernel(log)  # noqa: E731
    for module in (flashinfer.prefill, flashinfer.decode):
        for name in ("get_batch_prefill_module", "get_batch_decode_module"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, loader)
    with determinism.deterministic(True):
        yield log


def pairs(log: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
    """The (fixed_split_size, disable_split_kv) pair of every kernel ``plan`` call."""
    found: list[tuple[Any, ...]] = []
    for name, args in log:
        if name != "plan":
            continue
        for index in range(len(args) - 1):
            size, flag = args[index], args[index + 1]
            if type(size) is int and size in (7919, 7907, -1) and type(flag) is bool:
                if index + 2 < len(args) and type(args[index + 2]) is bool:
                    continue  # a run of flags: the pair is the last int and the flag after it
                found.append((size, flag))
                break
        else:
            found.append(("no split settings in", args))
    return found


def workspace() -> Any:
    import torch

    return torch.empty(1 << 20, dtype=torch.uint8)


def tensors() -> dict[str, Any]:
    import torch

    i32 = torch.int32
    return {
        "qo": torch.tensor([0, 3, 5], dtype=i32),
        "kv": torch.tensor([0, 2, 3], dtype=i32),
        "indices": torch.tensor([0, 1, 2], dtype=i32),
        "last": torch.tensor([1, 1], dtype=i32),
    }


def prefill_args() -> PlanArgs:
    import torch

    t = tensors()
    return PlanArgs(
        t["qo"],
        t["kv"],
        t["indices"],
        t["last"],
        4,
        4,
        64,
        16,
        causal=True,
        q_data_type=torch.bfloat16,
    )


def ragged_args() -> PlanArgs:
    import torch

    t = tensors()
    return PlanArgs(t["qo"], t["qo"], 4, 4, 64, causal=True, q_data_type=torch.bfloat16)


def decode_args() -> PlanArgs:
    import torch

    t = tensors()
    return PlanArgs(t["kv"], t["indices"], t["last"], 4, 4, 64, 16, q_data_type=torch.bfloat16)


def build(kind: str, *, graph: bool = False, backend: str = "fa2") -> Any:
    import flashinfer

    cls = getattr(flashinfer, kind)
    if kind == "BatchDecodeWithPagedKVCacheWrapper":
        extra: dict[str, Any] = {"use_tensor_cores": True}
        if graph:
            t = tensors()
            extra.update(
                use_cuda_graph=True,
                paged_kv_indptr_buffer=t["kv"].clone(),
                paged_kv_indices_buffer=t["indices"].clone(),
                paged_kv_last_page_len_buffer=t["last"].clone(),
            )
        return cls(workspace(), "NHD", backend=backend, **extra)
    return cls(workspace(), "NHD", backend=backend)


PAGED, RAGGED, DECODE = (
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchDecodeWithPagedKVCacheWrapper",
)


@pytest.mark.parametrize(
    ("kind", "args", "expected"),
    [
        (PAGED, prefill_args, (7919, False)),
        (RAGGED, ragged_args, (7919, False)),
        (DECODE, decode_args, (7907, False)),
    ],
    ids=["paged", "ragged", "decode"],
)
def test_the_wrapper_plan_reaches_the_kernel(
    kernel: list[tuple[str, tuple[Any, ...]]], kind: str, args: Any, expected: tuple[int, bool]
) -> None:
    wrapper = deterministic_wrapper(build(kind), EAGER)
    request = args()
    wrapper.plan(*request.args, **request.kwargs)
    wrapper.begin_forward(*request.args, **request.kwargs)
    assert pairs(kernel) == [expected, expected]


def test_sglang_and_vllm_fast_plans_reach_the_kernel(
    kernel: list[tuple[str, tuple[Any, ...]]],
) -> None:
    import flashinfer.decode

    wrapper = deterministic_wrapper(build(DECODE, graph=True))  # CUDA-graph mode by default
    request = decode_args()
    wrapper.plan(*request.args, **request.kwargs)  # the capture: fills _cached_module
    wrapper.begin_forward = functools.partial(flashinfer.decode.fast_decode_plan, wrapper)
    wrapper.begin_forward(*request.args, **request.kwargs)  # an SGLang replay
    fast_decode_plan(wrapper, *request.args, **request.kwargs)  # a vLLM replay
    assert pairs(kernel) == [(-1, True)] * 3


@pytest.mark.parametrize("layout", list(Layout), ids=str)
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda_graph"])
def test_every_planner_layout_reaches_the_kernel(
    kernel: list[tuple[str, tuple[Any, ...]]], layout: Layout, graph: bool
) -> None:
    n = len(layout.roles)
    settings = GRAPH if graph else EAGER
    planner = AttentionPlanner(
        layout,
        prefill=[build(PAGED) for _ in range(n)],
        ragged=build(RAGGED),
        decode=[build(DECODE, graph=graph) for _ in range(n)],
        window_left=8 if layout is Layout.SLIDING_WINDOW else None,
        settings=settings,
        fast_decode=True,
    )
    planner.plan_prefill([prefill_args() for _ in range(n)], ragged_args())
    prefill = (-1, True) if graph else (7919, False)
    assert pairs(kernel) == [prefill] * (n + 1)
    kernel.clear()
    planner.plan_decode([decode_args() for _ in range(n)])
    planner.plan_decode([decode_args() for _ in range(n)], fast=True)
    decode = (-1, True) if graph else (7907, False)
    assert pairs(kernel) == [decode] * (2 * n)


@pytest.mark.parametrize("backend", ["fa3", "auto", "cutlass", "cudnn"])
def test_prefill_backends_that_drop_the_settings_are_refused_before_any_plan(
    kernel: list[tuple[str, tuple[Any, ...]]], backend: str
) -> None:
    import flashinfer

    try:
        wrapper = build(PAGED, backend=backend)
    except Exception as error:  # a backend this release's constructor does not take
        pytest.skip(f"{flashinfer.__version__} does not build backend={backend!r}: {error}")
    with pytest.raises(BackendNotDeterministicError) as info:
        deterministic_wrapper(wrapper)
    assert info.value.backend == backend
    with pytest.raises(BackendNotDeterministicError):
        AttentionPlanner.single(prefill=wrapper)
    assert kernel == []


def test_families_that_never_reach_are_refused_on_the_real_release() -> None:
    import flashinfer

    from fi_compat._surface import ATTENTION_FAMILIES
    from fi_compat.attention import family_reach
    from fi_compat.capabilities import get_capabilities

    release = get_capabilities().flashinfer.version
    refused = []
    for family in ATTENTION_FAMILIES:
        facts = family_reach(release, family)
        if facts is None or any(answer.reaches for answer in facts.backends.values()):
            continue
        wrapper = object.__new__(getattr(flashinfer, family))  # no __init__: no GPU needed
        if facts.backend_attribute is not None:
            setattr(wrapper, facts.backend_attribute, next(iter(facts.backends)))
        with determinism.deterministic(True), pytest.raises(BackendNotDeterministicError) as info:
            deterministic_wrapper(wrapper)
        assert info.value.family == family
        refused.append(family)
    assert "BatchMLAPagedAttentionWrapper" in refused
    assert "PODWithPagedKVCacheWrapper" in refused
