"""The deterministic wrapper with doubles of FlashInfer's classes and made-up measurements.

The doubles live in a module named ``flashinfer.<...>`` (fi-compat vouches only for
FlashInfer's classes) and record what their ``plan`` receives; the measurements are a
hand-made ``reach.json`` for release ``9.9.9``, so every verdict and every path is exercised
here, whatever the shipped data says. The shipped data, the fake and the real release are
tested in ``test_wrapper_releases.py`` and ``test_reach_*.py``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import pytest

from fi_compat import determinism
from fi_compat.attention import (
    AttentionPlanner,
    BackendNotDeterministicError,
    DeterminismUnavailableError,
    PlanArgs,
    PlannerConfigError,
    Settings,
    TensorCoresRequiredError,
    Verdict,
    _reach,
    _vouch,
    deterministic_wrapper,
    fast_decode_plan,
    is_deterministic_wrapper,
    split_reach,
)
from fi_compat.capabilities import Capabilities, get_capabilities
from fi_compat.errors import CapabilityMissingError

RELEASE = "9.9.9"
FIXED, DISABLE = "fixed_split_size", "disable_split_kv"


class _Double:
    """What a FlashInfer wrapper's plan and attributes look like to fi-compat (0.4.0+)."""

    def __init__(
        self, backend: str = "fa2", *, use_tensor_cores: bool = True, use_cuda_graph: bool = False
    ) -> None:
        self._backend = backend
        self._use_tensor_cores = use_tensor_cores
        self._use_cuda_graph = use_cuda_graph
        self.plans: list[dict[str, Any]] = []

    @property
    def is_cuda_graph_enabled(self) -> bool:
        return self._use_cuda_graph

    def plan(
        self,
        indptr: Any,
        indices: Any,
        last_page_len: Any = None,
        fixed_split_size: int | None = None,
        disable_split_kv: bool = False,
        q_data_type: str = "float16",
    ) -> None:
        self.plans.append(
            {
                "args": (indptr, indices, last_page_len),
                FIXED: fixed_split_size,
                DISABLE: disable_split_kv,
                "q_data_type": q_data_type,
            }
        )
        self._planned = True

    begin_forward = plan

    def run(self, q: Any) -> Any:
        return ("ran", q, self._backend)


class BatchPrefillWithPagedKVCacheWrapper(_Double):
    __module__ = "flashinfer.prefill"


class BatchDecodeWithPagedKVCacheWrapper(_Double):
    __module__ = "flashinfer.decode"

    @property
    def use_tensor_cores(self) -> bool:
        return self._use_tensor_cores


class BatchMLAPagedAttentionWrapper(_Double):
    __module__ = "flashinfer.mla"


class EngineDecode(BatchDecodeWithPagedKVCacheWrapper):
    """An engine's own subclass: still FlashInfer's decode family."""

    __module__ = "engine.attention"


class LookAlike(_Double):
    """Not FlashInfer's: named like it, defined elsewhere."""

    __module__ = "engine.attention"


LookAlike.__name__ = LookAlike.__qualname__ = "BatchPrefillWithPagedKVCacheWrapper"

FAST_CALLS: list[dict[str, Any]] = []


def release_fast_decode_plan(self: Any, indptr: Any, *args: Any, **kwargs: Any) -> None:
    """Stands for the release's ``flashinfer.decode.fast_decode_plan``."""
    FAST_CALLS.append({"self": self, "indptr": indptr, **kwargs})


def _family(
    answers: dict[str, str], attribute: str | None = "_backend", takes: bool = True
) -> dict[str, Any]:
    return {
        "plan_takes": takes,
        "backend_attribute": attribute,
        "default_backend": "auto" if attribute else None,
        "backends": {
            backend: {"verdict": verdict, "detail": f"{verdict} as measured"}
            for backend, verdict in answers.items()
        },
    }


DATA: dict[str, Any] = {
    RELEASE: {
        "BatchPrefillWithPagedKVCacheWrapper": _family(
            {"fa2": "reaches", "fa3": "dropped", "auto": "dropped", "trtllm-gen": "unmeasured"}
        ),
        "BatchDecodeWithPagedKVCacheWrapper": _family(
            {"fa2": "reaches", "auto": "reaches", "xqa": "reaches"}
        ),
        "BatchMLAPagedAttentionWrapper": _family({"fa2": "refused"}, takes=False),
        "fast_decode_plan": _family({"fa2": "reaches", "auto": "reaches", "xqa": "dropped"}),
    }
}


@pytest.fixture(autouse=True)
def measured(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The made-up measurements, and the release's fast plan."""
    monkeypatch.setattr(_reach, "reach_data", lambda: DATA)
    _reach._release.cache_clear()
    _reach._measured.cache_clear()
    monkeypatch.setattr(_vouch, "fast_plan_of_release", lambda: release_fast_decode_plan)
    FAST_CALLS.clear()
    yield
    _reach._release.cache_clear()
    _reach._measured.cache_clear()


@pytest.fixture
def caps() -> Capabilities:
    real = get_capabilities()
    return dataclasses.replace(
        real, flashinfer=dataclasses.replace(real.flashinfer, version=RELEASE)
    )


@pytest.fixture
def on() -> Iterator[None]:
    with determinism.deterministic(True):
        yield


# ---------------------------------------------------------------------------- off


def test_off_the_wrapper_is_returned_as_is(caps: Capabilities) -> None:
    wrapper = BatchPrefillWithPagedKVCacheWrapper("fa3")
    assert deterministic_wrapper(wrapper, capabilities=caps) is wrapper
    assert not is_deterministic_wrapper(wrapper)


# ---------------------------------------------------------------------------- behaves as it


def test_every_plan_carries_the_settings(on: None, caps: Capabilities) -> None:
    inner = BatchPrefillWithPagedKVCacheWrapper()
    wrapper = deterministic_wrapper(inner, capabilities=caps)
    assert wrapper is not inner
    assert isinstance(wrapper, BatchPrefillWithPagedKVCacheWrapper)
    assert type(wrapper).__name__ == "BatchPrefillWithPagedKVCacheWrapper"
    assert is_deterministic_wrapper(wrapper)
    wrapper.plan(1, 2, q_data_type="bfloat16")
    wrapper.begin_forward(1, 2)
    assert [(p[FIXED], p[DISABLE]) for p in inner.plans] == [(4096, False)] * 2
    assert inner.plans[0]["q_data_type"] == "bfloat16"
    # one attribute dictionary: what plan set is seen through the original, and back
    assert inner._planned is True
    inner._backend = "fa2"
    wrapper.extra = 5  # type: ignore[attr-defined]
    assert inner.extra == 5  # type: ignore[attr-defined]
    assert wrapper.run("q") == ("ran", "q", "fa2")


def test_decode_plans_with_the_decode_size_and_graphs_default_to_graph_mode(
    on: None, caps: Capabilities
) -> None:
    eager = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper(), capabilities=caps)
    graph_inner = BatchDecodeWithPagedKVCacheWrapper(use_cuda_graph=True)
    graph = deterministic_wrapper(graph_inner, capabilities=caps)
    eager.plan(1, 2)
    graph.plan(1, 2)
    assert (eager.plans[0][FIXED], eager.plans[0][DISABLE]) == (2048, False)
    assert (graph_inner.plans[0][FIXED], graph_inner.plans[0][DISABLE]) == (None, True)


def test_an_engine_subclass_is_its_flashinfer_family(on: None, caps: Capabilities) -> None:
    wrapper = deterministic_wrapper(EngineDecode(), capabilities=caps)
    assert isinstance(wrapper, EngineDecode)
    wrapper.plan(1, 2)
    assert (wrapper.plans[0][FIXED], wrapper.plans[0][DISABLE]) == (2048, False)


# ---------------------------------------------------------------------------- engine keywords


@pytest.mark.parametrize(
    ("settings", "given", "agrees"),
    [
        (Settings(), {FIXED: 4096, DISABLE: False}, True),
        (Settings(), {FIXED: 4096}, True),
        (Settings(), {DISABLE: False}, True),
        (Settings(), {FIXED: 2048}, False),
        (Settings(), {FIXED: -1, DISABLE: False}, False),  # vLLM's non-invariant pair
        (Settings(), {DISABLE: True}, False),
        (Settings(), {FIXED: 4096, DISABLE: "no"}, False),
        (Settings(), {FIXED: 4096.0}, False),
        (Settings.from_split(4096, True), {FIXED: 4096, DISABLE: True}, True),  # vLLM
        (Settings.from_split(4096, True), {FIXED: -1, DISABLE: True}, True),
        (Settings.from_split(4096, True), {FIXED: None, DISABLE: True}, True),
        (Settings.from_split(4096, True), {FIXED: 4096, DISABLE: False}, False),
        (Settings(cuda_graph=True), {FIXED: None, DISABLE: True}, True),
        (Settings(cuda_graph=True), {FIXED: 4096, DISABLE: True}, True),
        (Settings(cuda_graph=True), {FIXED: -1, DISABLE: False}, False),
    ],
)
def test_engine_split_keywords_are_accepted_when_they_agree(
    on: None, caps: Capabilities, settings: Settings, given: dict[str, Any], agrees: bool
) -> None:
    inner = BatchPrefillWithPagedKVCacheWrapper()
    wrapper = deterministic_wrapper(inner, settings, capabilities=caps)
    ours = settings.resolved().split_kwargs("prefill")
    if agrees:
        wrapper.plan(1, 2, **given)
        assert (inner.plans[0][FIXED], inner.plans[0][DISABLE]) == (ours[FIXED], ours[DISABLE])
    else:
        with pytest.raises(PlannerConfigError, match="agree with the ones chosen"):
            wrapper.plan(1, 2, **given)
        assert inner.plans == []


def test_positional_split_settings_are_seen_too(on: None, caps: Capabilities) -> None:
    inner = BatchPrefillWithPagedKVCacheWrapper()
    wrapper = deterministic_wrapper(inner, capabilities=caps)
    wrapper.plan(1, 2, 3, 4096, False, "bfloat16")
    assert inner.plans[-1] == {
        "args": (1, 2, 3),
        FIXED: 4096,
        DISABLE: False,
        "q_data_type": "bfloat16",
    }
    with pytest.raises(PlannerConfigError):
        wrapper.plan(1, 2, 3, 17)
    assert len(inner.plans) == 1


def test_a_plan_taking_args_keeps_every_positional_argument(on: None, caps: Capabilities) -> None:
    class VarArgs(BatchPrefillWithPagedKVCacheWrapper):
        def plan(
            self, *args: Any, fixed_split_size: Any = None, disable_split_kv: Any = False
        ) -> None:
            self.plans.append({"args": args, FIXED: fixed_split_size, DISABLE: disable_split_kv})

    inner = VarArgs()
    deterministic_wrapper(inner, capabilities=caps).plan(1, 2, 3, 4, 5, 6, 7, 8, 9)
    assert inner.plans == [{"args": (1, 2, 3, 4, 5, 6, 7, 8, 9), FIXED: 4096, DISABLE: False}]


def test_too_many_positional_arguments_are_refused_as_flashinfer_would(
    on: None, caps: Capabilities
) -> None:
    inner = BatchPrefillWithPagedKVCacheWrapper()
    wrapper = deterministic_wrapper(inner, capabilities=caps)
    with pytest.raises(TypeError, match="argument"):
        wrapper.plan(1, 2, 3, 4096, False, "bf16", 7)  # type: ignore[call-arg]
    assert inner.plans == []


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("backend", "verdict"),
    [("fa3", "dropped"), ("auto", "dropped"), ("trtllm-gen", "unmeasured"), ("cudnn", "unknown")],
)
def test_a_backend_that_does_not_reach_the_kernel_is_refused(
    on: None, caps: Capabilities, backend: str, verdict: str
) -> None:
    inner = BatchPrefillWithPagedKVCacheWrapper(backend)
    with pytest.raises(BackendNotDeterministicError) as info:
        deterministic_wrapper(inner, capabilities=caps)
    error = info.value
    assert isinstance(error, DeterminismUnavailableError)
    assert (error.family, error.backend, error.release, error.verdict) == (
        "BatchPrefillWithPagedKVCacheWrapper",
        backend,
        RELEASE,
        verdict,
    )
    message = str(error)
    assert f"backend={backend!r}" in message
    assert f"flashinfer {RELEASE}" in message
    assert "backend='fa2'" in message  # the fix names the backend that reaches
    assert inner.plans == []


def test_auto_is_refused_even_where_one_measurement_saw_it_reach(
    on: None, caps: Capabilities
) -> None:
    assert split_reach(RELEASE, "BatchDecodeWithPagedKVCacheWrapper", "auto").reaches
    with pytest.raises(BackendNotDeterministicError, match="resolved inside plan") as info:
        deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper("auto"), capabilities=caps)
    assert info.value.verdict == "unmeasured"
    assert "backend='fa2'" in str(info.value)
    with pytest.raises(BackendNotDeterministicError, match="resolved inside plan"):
        AttentionPlanner.single(
            decode=BatchDecodeWithPagedKVCacheWrapper("auto"), capabilities=caps
        )


def test_a_family_with_no_split_keywords_is_refused(on: None, caps: Capabilities) -> None:
    with pytest.raises(BackendNotDeterministicError, match="refused") as info:
        deterministic_wrapper(BatchMLAPagedAttentionWrapper(), capabilities=caps)
    assert "no backend of BatchMLAPagedAttentionWrapper" in str(info.value)


@pytest.mark.parametrize("wrapper", [LookAlike(), _Double()], ids=["look-alike", "plain"])
def test_what_is_not_flashinfer_is_refused(on: None, caps: Capabilities, wrapper: Any) -> None:
    with pytest.raises(BackendNotDeterministicError, match="no measurement for"):
        deterministic_wrapper(wrapper, capabilities=caps)


@pytest.mark.parametrize("value", [None, 3, b"fa2", ["fa2"]])
def test_an_unreadable_backend_is_refused(on: None, caps: Capabilities, value: Any) -> None:
    inner = BatchPrefillWithPagedKVCacheWrapper()
    inner._backend = value
    with pytest.raises(BackendNotDeterministicError, match="cannot be read"):
        deterministic_wrapper(inner, capabilities=caps)


def test_an_unmeasured_release_is_refused(on: None, caps: Capabilities) -> None:
    other = dataclasses.replace(
        caps, flashinfer=dataclasses.replace(caps.flashinfer, version="1.0")
    )
    with pytest.raises(BackendNotDeterministicError, match="install a flashinfer-python release"):
        deterministic_wrapper(BatchPrefillWithPagedKVCacheWrapper(), capabilities=other)


def test_decode_without_tensor_cores_is_refused(on: None, caps: Capabilities) -> None:
    with pytest.raises(TensorCoresRequiredError):
        deterministic_wrapper(
            BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=False), capabilities=caps
        )


def test_a_graph_wrapper_with_eager_settings_is_refused(on: None, caps: Capabilities) -> None:
    with pytest.raises(PlannerConfigError, match="use_cuda_graph=True"):
        deterministic_wrapper(
            BatchDecodeWithPagedKVCacheWrapper(use_cuda_graph=True),
            Settings(cuda_graph=False),
            capabilities=caps,
        )


@pytest.mark.parametrize(
    "wrapper",
    [None, BatchPrefillWithPagedKVCacheWrapper, object(), "fa2", 3],
    ids=["None", "class", "object", "'fa2'", "3"],
)
def test_hostile_wrappers_are_refused_whatever_the_switch(wrapper: Any, caps: Capabilities) -> None:
    for switch in (False, True):
        with determinism.deterministic(switch), pytest.raises(PlannerConfigError):
            deterministic_wrapper(wrapper, capabilities=caps)


@pytest.mark.parametrize("settings", ["fa2", {}, 1, Settings])
def test_hostile_settings_are_refused(settings: Any, caps: Capabilities) -> None:
    with pytest.raises(PlannerConfigError, match="settings"):
        deterministic_wrapper(BatchPrefillWithPagedKVCacheWrapper(), settings, capabilities=caps)


@pytest.mark.parametrize("capabilities", ["0.7.2", {}, 1, Capabilities])
def test_hostile_capabilities_are_refused(capabilities: Any) -> None:
    for switch in (False, True):
        with determinism.deterministic(switch), pytest.raises(PlannerConfigError, match="capab"):
            deterministic_wrapper(BatchPrefillWithPagedKVCacheWrapper(), capabilities=capabilities)


def test_wrapping_twice(on: None, caps: Capabilities) -> None:
    wrapper = deterministic_wrapper(BatchPrefillWithPagedKVCacheWrapper(), capabilities=caps)
    assert deterministic_wrapper(wrapper, capabilities=caps) is wrapper
    with pytest.raises(PlannerConfigError, match="made deterministic once"):
        deterministic_wrapper(wrapper, Settings.from_split(4096, True), capabilities=caps)


def test_one_flashinfer_wrapper_wrapped_twice(on: None, caps: Capabilities) -> None:
    inner = BatchDecodeWithPagedKVCacheWrapper()
    first = deterministic_wrapper(inner, capabilities=caps)
    again = deterministic_wrapper(inner, capabilities=caps)  # the same settings: fine
    again.plan(1, 2)
    first.plan(1, 2)
    assert [p[FIXED] for p in inner.plans] == [2048, 2048]
    with pytest.raises(PlannerConfigError, match="already wrapped to carry"):
        deterministic_wrapper(inner, Settings.from_split(4096, True), capabilities=caps)
    first.plan(1, 2)
    assert inner.plans[-1][FIXED] == 2048
    assert inner.plan.__func__ is BatchDecodeWithPagedKVCacheWrapper.plan  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- fast plans


def test_sglang_style_fast_plan_is_served_with_the_settings(on: None, caps: Capabilities) -> None:
    inner = BatchDecodeWithPagedKVCacheWrapper(use_cuda_graph=True)
    wrapper = deterministic_wrapper(inner, capabilities=caps)
    wrapper.begin_forward = functools.partial(  # type: ignore[method-assign]
        release_fast_decode_plan, wrapper
    )
    installed = wrapper.begin_forward
    assert isinstance(installed, functools.partial)
    assert installed.func == release_fast_decode_plan  # what SGLang checks
    installed(7, fixed_split_size=None, disable_split_kv=True)
    assert [{"self": wrapper, "indptr": 7, FIXED: None, DISABLE: True}] == FAST_CALLS
    with pytest.raises(PlannerConfigError):
        wrapper.begin_forward(7, fixed_split_size=None, disable_split_kv=False)
    wrapper.plan(1, 2)  # plan itself is still the settled plan
    assert (inner.plans[0][FIXED], inner.plans[0][DISABLE]) == (None, True)
    del wrapper.begin_forward
    wrapper.begin_forward(1, 2)
    assert len(inner.plans) == 2
    with pytest.raises(AttributeError):
        del wrapper.begin_forward


@pytest.mark.parametrize(
    "replacement",
    [
        lambda *a, **k: None,
        functools.partial(print),
        functools.partial(release_fast_decode_plan, object()),
        functools.partial(release_fast_decode_plan),
    ],
    ids=["lambda", "other-partial", "other-self", "unbound"],
)
def test_an_engine_own_plan_replacement_is_refused(
    on: None, caps: Capabilities, replacement: Any
) -> None:
    wrapper = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper(), capabilities=caps)
    for name in ("plan", "begin_forward"):
        with pytest.raises(DeterminismUnavailableError, match="cannot see which split settings"):
            setattr(wrapper, name, replacement)
    wrapper.plan(1, 2)
    assert wrapper.plans[0][FIXED] == 2048


def test_a_fast_plan_that_drops_the_settings_is_refused(on: None, caps: Capabilities) -> None:
    wrapper = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper("xqa"), capabilities=caps)
    with pytest.raises(BackendNotDeterministicError, match="fast_decode_plan"):
        wrapper.plan = functools.partial(  # type: ignore[method-assign]
            release_fast_decode_plan, wrapper
        )
    with pytest.raises(BackendNotDeterministicError):
        fast_decode_plan(wrapper, 7)
    assert FAST_CALLS == []


def test_vllm_style_fast_plan_call(on: None, caps: Capabilities) -> None:
    plain = BatchDecodeWithPagedKVCacheWrapper()
    fast_decode_plan(plain, 1, fixed_split_size=-1, disable_split_kv=False)
    assert FAST_CALLS[-1] == {"self": plain, "indptr": 1, FIXED: -1, DISABLE: False}
    wrapper = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper(), capabilities=caps)
    fast_decode_plan(wrapper, 2)
    assert FAST_CALLS[-1] == {"self": wrapper, "indptr": 2, FIXED: 2048, DISABLE: False}
    with pytest.raises(PlannerConfigError):
        fast_decode_plan(wrapper, 3, fixed_split_size=-1, disable_split_kv=False)
    assert len(FAST_CALLS) == 2


def test_planner_fast_decode(on: None, caps: Capabilities) -> None:
    decode = BatchDecodeWithPagedKVCacheWrapper(use_cuda_graph=True)
    planner = AttentionPlanner.single(
        decode=decode, settings=Settings(cuda_graph=True), capabilities=caps, fast_decode=True
    )
    planner.plan_decode([PlanArgs(5)], fast=True)
    assert [{"self": decode, "indptr": 5, FIXED: None, DISABLE: True}] == FAST_CALLS
    without = AttentionPlanner.single(
        decode=BatchDecodeWithPagedKVCacheWrapper(), capabilities=caps
    )
    with pytest.raises(PlannerConfigError, match="fast_decode=True"):
        without.plan_decode([PlanArgs(5)], fast=True)
    with pytest.raises(PlannerConfigError, match="fast"):
        without.plan_decode([PlanArgs(5)], fast=1)  # type: ignore[arg-type]
    with pytest.raises(BackendNotDeterministicError, match="fast_decode_plan"):
        AttentionPlanner.single(
            decode=BatchDecodeWithPagedKVCacheWrapper("xqa"), capabilities=caps, fast_decode=True
        )


def test_planner_fast_decode_needs_the_release_fast_plan(
    on: None, caps: Capabilities, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_vouch, "fast_plan_of_release", lambda: None)
    with pytest.raises(CapabilityMissingError, match=r"0\.4\.0"):
        AttentionPlanner.single(
            decode=BatchDecodeWithPagedKVCacheWrapper(), capabilities=caps, fast_decode=True
        )
    with pytest.raises(ImportError, match="fast_decode_plan"):
        fast_decode_plan(BatchDecodeWithPagedKVCacheWrapper(), 1)


# ---------------------------------------------------------------------------- the data


def test_split_reach_answers_from_the_data() -> None:
    assert split_reach(RELEASE, "BatchPrefillWithPagedKVCacheWrapper", "fa2").reaches
    answer = split_reach(RELEASE, "BatchPrefillWithPagedKVCacheWrapper", "fa3")
    assert (answer.verdict, answer.detail) == (Verdict.DROPPED, "dropped as measured")
    assert split_reach(None, "BatchAttention", "fa2").verdict is Verdict.UNKNOWN
    assert split_reach(RELEASE, "BatchAttention", "fa2").verdict is Verdict.UNKNOWN
    assert (
        "measured: auto, fa2, xqa"
        in split_reach(RELEASE, "BatchDecodeWithPagedKVCacheWrapper", "cudnn").detail
    )


def test_a_reach_file_of_another_schema_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.resources
    import json

    class Fake:
        def joinpath(self, name: str) -> Any:
            return self

        def read_text(self, encoding: str) -> str:
            return json.dumps({"schema": 99, "releases": {}})

    monkeypatch.undo()
    _reach.reach_data.cache_clear()
    monkeypatch.setattr(importlib.resources, "files", lambda package: Fake())
    try:
        with pytest.raises(RuntimeError, match="schema 99"):
            _reach.reach_data()
    finally:
        monkeypatch.undo()
        _reach.reach_data.cache_clear()
