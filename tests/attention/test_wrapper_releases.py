"""The deterministic wrapper and planner against the fake of every release from 0.4.0.

For each recorded release, every attention family it exports and every backend measured for
it: a fake wrapper built as engines build it is either accepted, and then every plan (and
fast plan) puts the wrapper's settings at the fake's kernel boundary
(``FakeFlashInfer.kernel_plans``, which follows the measured data), or refused before any
plan with a typed error naming the family, backend and release. Nothing in between: no
accepted wrapper's plan reaches the kernel without the settings. The three layouts run
through the wrapper as well as through the planner.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from packaging.version import Version

from fi_compat import determinism
from fi_compat._records import ClassRecord, FunctionRecord
from fi_compat._surface import ATTENTION_FAMILIES, DECODE, PREFILL_PAGED, PREFILL_RAGGED
from fi_compat.attention import (
    AttentionPlanner,
    BackendNotDeterministicError,
    DeterminismUnavailableError,
    Layout,
    PlanArgs,
    Settings,
    deterministic_wrapper,
    family_reach,
    fast_decode_plan,
    split_reach,
)
from fi_compat.testing import FakeFlashInfer, available_releases, fake_flashinfer
from tests.support import release_classes

#: The releases whose split reach is measured (attention/reach.json): the final releases
#: from 0.4.0 on. A pre-release is not measured, and refused under determinism (below).
RELEASES = [
    r
    for r in available_releases()
    if Version(r) >= Version("0.4.0") and not Version(r).is_prerelease
]
#: The releases the tests below run on: the first and last of each 'attention' class
#: (tests/support/release_classes.py; every one with --all-releases).
SWEPT = release_classes.releases("attention", RELEASES)
FAMILIES_OF = {
    release: [f for f in ATTENTION_FAMILIES if family_reach(release, f) is not None]
    for release in RELEASES
}
#: (release, family): each case builds one fake and checks every backend measured for it.
CASES = [(release, family) for release in SWEPT for family in FAMILIES_OF[release]]
EAGER = Settings(prefill_split_size=7919, decode_split_size=7907)
DECODE_FAMILIES = {DECODE.key, "CUDAGraphBatchDecodeWithPagedKVCacheWrapper"}


@pytest.fixture(autouse=True)
def _on() -> Iterator[None]:
    with determinism.deterministic(True):
        yield


def _positionals(func: FunctionRecord) -> tuple[str, ...]:
    return tuple(
        f"<{p.name}>"
        for p in func.parameters[1:]
        if p.kind in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD") and not p.has_default
    )


def _record(fi: FakeFlashInfer, family: str) -> ClassRecord:
    found = fi.record.attention_family(family)
    assert found is not None, family
    return found


def make(fi: FakeFlashInfer, family: str, backend: str = "fa2", **extra: Any) -> Any:
    """A fake wrapper of ``family``, built as engines build one (tensor cores for decode)."""
    init = _record(fi, family).method("__init__")
    assert init is not None
    kwargs: dict[str, Any] = dict(extra)
    if "backend" in init.keyword_names and backend != "default":
        kwargs["backend"] = backend
    if "use_tensor_cores" in init.keyword_names:
        kwargs["use_tensor_cores"] = True
    wrapper = getattr(fi.flashinfer, family)(*_positionals(init), **kwargs)
    if "use_cuda_graph" in extra or family == "CUDAGraphBatchDecodeWithPagedKVCacheWrapper":
        wrapper._use_cuda_graph = True  # what FlashInfer's __init__ records
    return wrapper


def plan_args(fi: FakeFlashInfer, family: str) -> PlanArgs:
    plan = _record(fi, family).method("plan")
    assert plan is not None
    return PlanArgs(*_positionals(plan))


def expected_pair(family: str, graph: bool) -> tuple[int, bool]:
    if graph:
        return (-1, True)
    return (7907, False) if family in DECODE_FAMILIES else (7919, False)


def kernel_pairs(fi: FakeFlashInfer) -> list[tuple[Any, Any]]:
    for plan in fi.kernel_plans:
        assert not plan.dropped, plan
        assert not plan.unmeasured, plan
    return [(plan.fixed_split_size, plan.disable_split_kv) for plan in fi.kernel_plans]


@pytest.mark.parametrize(("release", "family"), CASES, ids=lambda v: str(v))
def test_every_family_and_backend_is_served_or_refused(release: str, family: str) -> None:
    facts = family_reach(release, family)
    assert facts is not None
    graph = family == "CUDAGraphBatchDecodeWithPagedKVCacheWrapper"
    settings = Settings(cuda_graph=True) if graph else EAGER
    with fake_flashinfer(release) as fi:
        for backend in sorted(facts.backends):
            answer = split_reach(release, family, backend)
            wrapper = make(fi, family, backend)
            resolves_auto = getattr(wrapper, "_backend", None) == "auto"
            fi.clear_calls()
            if not (answer.reaches and backend != "auto" and not resolves_auto):
                with pytest.raises(DeterminismUnavailableError) as info:
                    deterministic_wrapper(wrapper, settings)
                if isinstance(info.value, BackendNotDeterministicError):
                    assert (info.value.family, info.value.release) == (family, release), backend
                assert fi.kernel_plans == [], backend
                continue
            wrapped = deterministic_wrapper(wrapper, settings)
            request = plan_args(fi, family)
            wrapped.plan(*request.args, **request.kwargs)
            if hasattr(wrapped, "begin_forward"):
                wrapped.begin_forward(*request.args, **request.kwargs)
            pairs = kernel_pairs(fi)
            assert pairs, backend
            assert set(pairs) == {expected_pair(family, graph)}, backend


def test_an_unmeasured_pre_release_is_refused_under_determinism() -> None:
    with (
        fake_flashinfer("0.5.0rc1") as fi,
        pytest.raises(BackendNotDeterministicError, match="no measurement"),
    ):
        deterministic_wrapper(make(fi, DECODE.key), Settings())


@pytest.mark.parametrize("release", SWEPT)
def test_decode_fast_plans_carry_the_settings_or_are_refused(release: str) -> None:
    with fake_flashinfer(release) as fi:
        decode = fi.flashinfer.decode
        request = plan_args(fi, DECODE.key)
        wrapped = deterministic_wrapper(
            make(fi, DECODE.key, use_cuda_graph=True), Settings(cuda_graph=True)
        )
        fast = split_reach(release, "fast_decode_plan", "fa2")
        assert fast.reaches  # measured on every release from 0.4.0
        wrapped.begin_forward = functools.partial(decode.fast_decode_plan, wrapped)
        wrapped.begin_forward(*request.args, **request.kwargs)
        fast_decode_plan(wrapped, *request.args, **request.kwargs)
        assert kernel_pairs(fi) == [(-1, True), (-1, True)]


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda_graph"])
@pytest.mark.parametrize("layout", list(Layout), ids=str)
@pytest.mark.parametrize("release", SWEPT)
def test_every_layout_through_the_wrapper_and_the_planner(
    release: str, layout: Layout, graph: bool
) -> None:
    n = len(layout.roles)
    window = 4 if layout is Layout.SLIDING_WINDOW else None
    settings = Settings(cuda_graph=True) if graph else EAGER
    extra: dict[str, Any] = {"use_cuda_graph": True} if graph else {}
    prefill_pair = expected_pair(PREFILL_PAGED.key, graph)
    decode_pair = expected_pair(DECODE.key, graph)
    with fake_flashinfer(release) as fi:
        planner = AttentionPlanner(
            layout,
            prefill=[make(fi, PREFILL_PAGED.key) for _ in range(n)],
            ragged=make(fi, PREFILL_RAGGED.key),
            decode=[make(fi, DECODE.key, **extra) for _ in range(n)],
            window_left=window,
            settings=settings,
            fast_decode=True,
        )
        planner.plan_prefill(
            [plan_args(fi, PREFILL_PAGED.key)] * n, plan_args(fi, PREFILL_RAGGED.key)
        )
        planner.plan_decode([plan_args(fi, DECODE.key)] * n)
        planner.plan_decode([plan_args(fi, DECODE.key)] * n, fast=True)
        assert kernel_pairs(fi) == [prefill_pair] * (n + 1) + [decode_pair] * (2 * n)
        fi.clear_calls()

        # the same layout, the engine keeping its own plan calls on wrapped wrappers
        paged = [deterministic_wrapper(make(fi, PREFILL_PAGED.key), settings) for _ in range(n)]
        ragged = deterministic_wrapper(make(fi, PREFILL_RAGGED.key), settings)
        # a captured decode wrapper gets the CUDA-graph pair by default, as SGLang plans it
        decode_settings = None if graph else EAGER
        decode = [
            deterministic_wrapper(make(fi, DECODE.key, **extra), decode_settings) for _ in range(n)
        ]
        for wrapper in (*paged, ragged):
            request = plan_args(fi, type(wrapper).__name__)
            wrapper.plan(*request.args, **request.kwargs)
        agreeing: dict[str, Any] = (
            {"fixed_split_size": None, "disable_split_kv": True}  # SGLang's capture pair
            if graph
            else {"fixed_split_size": 7907}
        )
        for wrapper in decode:
            request = plan_args(fi, DECODE.key)
            wrapper.plan(*request.args, **request.kwargs, **agreeing)
        assert kernel_pairs(fi) == [prefill_pair] * (n + 1) + [decode_pair] * n


@pytest.mark.parametrize("release", SWEPT)
def test_auto_is_refused_on_every_release(release: str) -> None:
    with fake_flashinfer(release) as fi:
        for family in (PREFILL_PAGED.key, PREFILL_RAGGED.key, DECODE.key):
            wrapper = make(fi, family, "auto")
            with pytest.raises(BackendNotDeterministicError, match="resolved inside plan"):
                deterministic_wrapper(wrapper, EAGER)
            with pytest.raises(BackendNotDeterministicError, match="backend='fa2'"):
                AttentionPlanner.single(
                    **{
                        "prefill"
                        if family == PREFILL_PAGED.key
                        else "ragged"
                        if family == PREFILL_RAGGED.key
                        else "decode": wrapper
                    },
                    settings=EAGER,
                )
        assert fi.kernel_plans == []
