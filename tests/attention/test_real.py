"""The planner against the real installed flashinfer-python: its calls bind, no kernel runs.

The wrappers are created without ``__init__`` (which allocates pinned memory and needs a
GPU); the attributes FlashInfer's ``__init__`` would set and the planner reads are set by
hand. Each class's ``plan`` is then replaced by a binder that checks the planner's exact
arguments against the real signature, and against ``_plan_impl`` where ``plan`` forwards
``**kwargs`` to it.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from fi_compat import determinism
from fi_compat.attention import (
    AttentionPlanner,
    Layout,
    PlanArgs,
    PlannerConfigError,
    Settings,
    TensorCoresRequiredError,
)

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]

KINDS = (
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchDecodeWithPagedKVCacheWrapper",
)


@pytest.fixture(scope="module")
def flashinfer() -> Any:
    import flashinfer

    return flashinfer


def bare(cls: type, *, tensor_cores: bool = True, cuda_graph: bool = False) -> Any:
    wrapper: Any = object.__new__(cls)
    wrapper._backend = wrapper._requested_backend = "fa2"  # what __init__(backend="fa2") keeps
    wrapper._use_tensor_cores = tensor_cores
    wrapper._use_cuda_graph = cuda_graph
    return wrapper


@pytest.fixture
def bound(flashinfer: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Replace each wrapper's plan by a binder; yields (kind, BoundArguments) per call."""
    calls: list[tuple[str, Any]] = []

    def binder(kind: str, original: Callable[..., Any], forward: Any) -> Callable[..., None]:
        signature = inspect.signature(original)
        forwards = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())

        def plan(self: Any, *args: Any, **kwargs: Any) -> None:
            arguments = signature.bind(self, *args, **kwargs)
            if forwards:
                # plan(**kwargs) hands the keywords to _plan_impl: they must bind there too
                arguments = inspect.signature(forward).bind(self, *args, **kwargs)
            calls.append((kind, arguments))

        return plan

    for kind in KINDS:
        cls = getattr(flashinfer, kind)
        original = cls.plan
        monkeypatch.setattr(cls, "plan", binder(kind, original, getattr(cls, "_plan_impl", None)))
    return calls


def requests(kind: str) -> PlanArgs:
    """Arguments as SGLang / vLLM pass them (tensors replaced by labels: only binding counts)."""
    if kind == "BatchDecodeWithPagedKVCacheWrapper":
        return PlanArgs(
            "indptr",
            "indices",
            "last_page_len",
            32,
            8,
            128,
            1,
            data_type="bf16",
            q_data_type="bf16",
            non_blocking=True,
        )
    if kind == "BatchPrefillWithRaggedKVCacheWrapper":
        return PlanArgs("qo_indptr", "qo_indptr", 32, 8, 128, q_data_type="bf16", causal=True)
    return PlanArgs(
        "qo_indptr",
        "kv_indptr",
        "kv_indices",
        "last_page_len",
        32,
        8,
        128,
        1,
        q_data_type="bf16",
        kv_data_type="bf16",
        custom_mask=None,
        non_blocking=True,
        causal=True,
    )


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda_graph"])
@pytest.mark.parametrize("layout", list(Layout), ids=str)
@pytest.mark.parametrize("on", [True, False], ids=["deterministic", "off"])
def test_real_plan_binds_what_the_planner_passes(
    flashinfer: Any, layout: Layout, graph: bool, on: bool, request: pytest.FixtureRequest
) -> None:
    n = len(layout.roles)
    paged = [
        bare(flashinfer.BatchPrefillWithPagedKVCacheWrapper, cuda_graph=graph) for _ in "x" * n
    ]
    decode = [
        bare(flashinfer.BatchDecodeWithPagedKVCacheWrapper, cuda_graph=graph) for _ in "x" * n
    ]
    ragged = bare(flashinfer.BatchPrefillWithRaggedKVCacheWrapper, cuda_graph=graph)
    with determinism.deterministic(on):
        # built against the real, unpatched plan signatures
        planner = AttentionPlanner(
            layout,
            prefill=paged,
            ragged=ragged,
            decode=decode,
            window_left=3 if layout is Layout.SLIDING_WINDOW else None,
            settings=Settings(cuda_graph=graph),
        )
    calls: list[tuple[str, Any]] = request.getfixturevalue("bound")
    planner.plan_prefill([requests(KINDS[0])] * n, requests("BatchPrefillWithRaggedKVCacheWrapper"))
    planner.plan_decode([requests(KINDS[2])] * n)

    assert [kind for kind, _ in calls] == [KINDS[1], *[KINDS[0]] * n, *[KINDS[2]] * n]
    for kind, arguments in calls:
        passed = arguments.arguments
        if not on:
            assert "fixed_split_size" not in passed
            assert "disable_split_kv" not in passed
            continue
        if graph:
            assert (passed["fixed_split_size"], passed["disable_split_kv"]) == (None, True)
        else:
            size = 2048 if kind == KINDS[2] else 4096
            assert (passed["fixed_split_size"], passed["disable_split_kv"]) == (size, False)


def test_real_decode_without_tensor_cores_is_refused(flashinfer: Any) -> None:
    wrapper = bare(flashinfer.BatchDecodeWithPagedKVCacheWrapper, tensor_cores=False)
    assert wrapper.use_tensor_cores is False  # the real property reads _use_tensor_cores
    with determinism.deterministic(True), pytest.raises(TensorCoresRequiredError):
        AttentionPlanner.single(decode=wrapper)
    with determinism.deterministic(True), pytest.raises(TensorCoresRequiredError):
        AttentionPlanner.single(decode=wrapper, settings=Settings(cuda_graph=True))


def test_real_decode_guards_fixed_split_size_on_tensor_cores(flashinfer: Any) -> None:
    """The premise of the tensor-core check, read from the installed source."""
    cls = flashinfer.BatchDecodeWithPagedKVCacheWrapper
    source = inspect.getsource(getattr(cls, "_plan_impl", cls.plan))
    guard = re.search(
        r"if fixed_split_size is not None and not self\.use_tensor_cores:\s*raise ValueError",
        source,
    )
    assert guard is not None
    # without tensor cores disable_split_kv never reaches the non-tensor-core planner
    tensor_core_branch = source.index("elif self.use_tensor_cores:")
    assert source.index("args.append(disable_split_kv)") > tensor_core_branch
    assert source.count("args.append(disable_split_kv)") == 1


def test_real_cuda_graph_wrapper_needs_a_cuda_graph_planner(flashinfer: Any) -> None:
    wrapper = bare(flashinfer.BatchPrefillWithPagedKVCacheWrapper, cuda_graph=True)
    assert wrapper.is_cuda_graph_enabled is True
    with determinism.deterministic(True), pytest.raises(PlannerConfigError, match="cuda_graph"):
        AttentionPlanner.single(prefill=wrapper)


def test_real_wrapper_in_the_wrong_slot_is_refused(flashinfer: Any) -> None:
    with pytest.raises(PlannerConfigError, match="as the ragged wrapper"):
        AttentionPlanner.single(ragged=bare(flashinfer.BatchPrefillWithPagedKVCacheWrapper))
