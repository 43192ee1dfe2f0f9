"""The attention planner with spy wrappers: every path x phase x mode gets both split settings."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat
from fi_compat import capabilities as capabilities_module
from fi_compat import determinism
from fi_compat.attention import (
    DEFAULT_DECODE_SPLIT_SIZE,
    DEFAULT_PREFILL_SPLIT_SIZE,
    AttentionPlanner,
    Layout,
    PlanArgs,
    PlannerConfigError,
    Settings,
    TensorCoresRequiredError,
    _vouch,
)
from fi_compat.capabilities import Capabilities
from fi_compat.errors import CapabilityMissingError, DeterminismUnavailableError
from tests.support.attention_doubles import measured_capabilities

_UNSET: Any = object()


class Spy:
    """Stands in for a FlashInfer wrapper whose plan takes the split settings (0.4.0+).

    The planner vouches only for FlashInfer's classes on backends measured to hand the
    settings to the kernel, so the spies used in a slot are :data:`PagedSpy`,
    :data:`RaggedSpy` and :data:`DecodeSpy`: subclasses named as FlashInfer's classes, in a
    ``flashinfer`` module, on ``fa2``, which the installed release's measurement says reaches
    the kernel for all three.
    """

    _backend = "fa2"
    _requested_backend = "fa2"  # where 0.7.x ragged and decode keep the requested backend

    def __init__(self, *, use_tensor_cores: bool = True, use_cuda_graph: bool = False) -> None:
        self._use_tensor_cores = use_tensor_cores
        self._use_cuda_graph = use_cuda_graph
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    @property
    def use_tensor_cores(self) -> bool:
        return self._use_tensor_cores

    @property
    def is_cuda_graph_enabled(self) -> bool:
        return self._use_cuda_graph

    def plan(
        self,
        *args: Any,
        fixed_split_size: Any = _UNSET,
        disable_split_kv: Any = _UNSET,
        **kwargs: Any,
    ) -> None:
        if fixed_split_size is not _UNSET:
            kwargs["fixed_split_size"] = fixed_split_size
        if disable_split_kv is not _UNSET:
            kwargs["disable_split_kv"] = disable_split_kv
        self.calls.append((args, kwargs))


def _flashinfer_class(name: str, base: type[Any], module: str) -> type[Any]:
    return type(name, (base,), {"__module__": module})


PagedSpy = _flashinfer_class("BatchPrefillWithPagedKVCacheWrapper", Spy, "flashinfer.prefill")
RaggedSpy = _flashinfer_class("BatchPrefillWithRaggedKVCacheWrapper", Spy, "flashinfer.prefill")
DecodeSpy = _flashinfer_class("BatchDecodeWithPagedKVCacheWrapper", Spy, "flashinfer.decode")


class OldSpy:
    """A wrapper from before 0.4.0: plan knows nothing of the split settings."""

    use_tensor_cores = True

    def plan(self, indptr: Any, indices: Any, causal: bool = False) -> None:
        raise AssertionError("never called")


class OpaqueSpy:
    """A plan whose ``**kwargs`` goes nowhere a probe can follow: the answer is unknown."""

    use_tensor_cores = True

    def plan(self, indptr: Any, **kwargs: Any) -> None:
        self.saved = kwargs


class NoFlagSpy(DecodeSpy):  # type: ignore[valid-type,misc]
    """A decode wrapper whose tensor-core setting cannot be read."""

    use_tensor_cores = None
    _use_tensor_cores = None

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []


LAYOUTS = [Layout.SINGLE, Layout.SLIDING_WINDOW, Layout.CROSS_ATTENTION]
WINDOW = 4


@pytest.fixture(autouse=True)
def _measured_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner vouches for the spies (on ``fa2``) by the installed release's measured
    reach: the probe reports the newest measured release, whatever is installed (the
    installed one when it is that release, as in ``make test``)."""
    measured = measured_capabilities()
    monkeypatch.setattr(capabilities_module, "get_capabilities", lambda: measured)


@pytest.fixture
def caps() -> Capabilities:
    return capabilities_module.get_capabilities()


@pytest.fixture(autouse=True)
def _switch_off() -> Iterator[None]:
    with determinism.deterministic(False):
        yield


def build(
    layout: Layout,
    *,
    ragged: bool = True,
    settings: Settings | None = None,
    decode_kwargs: dict[str, Any] | None = None,
) -> tuple[AttentionPlanner, list[Spy], Spy | None, list[Spy]]:
    n = len(layout.roles)
    graph = settings is not None and settings.cuda_graph
    prefill = [PagedSpy(use_cuda_graph=graph) for _ in range(n)]
    decode = [DecodeSpy(use_cuda_graph=graph, **(decode_kwargs or {})) for _ in range(n)]
    ragged_spy = RaggedSpy(use_cuda_graph=graph) if ragged else None
    planner = AttentionPlanner(
        layout,
        prefill=prefill,
        ragged=ragged_spy,
        decode=decode,
        window_left=WINDOW if layout is Layout.SLIDING_WINDOW else None,
        settings=settings,
    )
    return planner, prefill, ragged_spy, decode


def args_for(span: Any, i: int) -> PlanArgs:
    indptr = torch.cat([torch.zeros(1, dtype=torch.int32), span.kv_lens.cumsum(0).int()])
    return PlanArgs(
        indptr, f"indices-{i}", torch.ones_like(span.kv_lens), 8, 2, 128, 1, q_data_type="bf16"
    )


def run_step(planner: AttentionPlanner, phase: str) -> list[PlanArgs]:
    seq_lens = torch.tensor([9, 3, 17], dtype=torch.int32)
    prefix_lens = torch.tensor([5, 0, 16], dtype=torch.int32)
    encoder_lens = torch.tensor([6, 2, 4], dtype=torch.int32)
    if phase == "decode":
        spans = planner.decode_spans(seq_lens, encoder_lens)
        requests = [args_for(span, i) for i, span in enumerate(spans)]
        planner.plan_decode(requests)
        return requests
    ragged = phase == "ragged"
    spans = planner.prefill_spans(seq_lens, prefix_lens, encoder_lens, ragged=ragged)
    requests = [args_for(span, i) for i, span in enumerate(spans)]
    ragged_args = PlanArgs("qo_indptr", "qo_indptr", 8, 2, 128, causal=True) if ragged else None
    planner.plan_prefill(requests, ragged_args)
    return [*requests, *([ragged_args] if ragged_args else [])]


def expected_split(phase: str, *, deterministic: bool, graph: bool) -> dict[str, Any]:
    if not deterministic:
        return {}
    if graph:
        return {"fixed_split_size": None, "disable_split_kv": True}
    size = DEFAULT_DECODE_SPLIT_SIZE if phase == "decode" else DEFAULT_PREFILL_SPLIT_SIZE
    return {"fixed_split_size": size, "disable_split_kv": False}


# ---------------------------------------------------------------------------- every path


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda_graph"])
@pytest.mark.parametrize("phase", ["prefill", "ragged", "decode"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
@pytest.mark.parametrize("on", [True, False], ids=["deterministic", "off"])
def test_every_path_phase_and_mode_forwards_the_split_settings(
    layout: Layout, phase: str, graph: bool, on: bool
) -> None:
    with determinism.deterministic(on):
        planner, prefill, ragged, decode = build(layout, settings=Settings(cuda_graph=graph))
    requests = run_step(planner, phase)
    planned = decode if phase == "decode" else [*prefill, *([ragged] if phase == "ragged" else [])]
    idle = [spy for spy in [*prefill, ragged, *decode] if spy is not None and spy not in planned]
    assert len(planned) == len(requests) == len(layout.roles) + (phase == "ragged")
    split = expected_split(phase, deterministic=on, graph=graph)
    for spy, request in zip(planned, requests, strict=True):
        assert spy is not None
        assert len(spy.calls) == 1
        args, kwargs = spy.calls[0]
        assert args == request.args
        # exactly the engine's call plus the split settings; nothing else added or dropped
        assert kwargs == {**request.kwargs, **split}
    assert all(spy.calls == [] for spy in idle)


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_every_wrapper_gets_the_split_settings_of_its_phase(layout: Layout) -> None:
    settings = Settings(prefill_split_size=640, decode_split_size=320)
    with determinism.deterministic(True):
        planner = build(layout, settings=settings)[0]
    kinds = {t.kind for t in planner.targets}
    assert kinds == {
        "BatchPrefillWithPagedKVCacheWrapper",
        "BatchPrefillWithRaggedKVCacheWrapper",
        "BatchDecodeWithPagedKVCacheWrapper",
    }
    assert len(planner.targets) == 2 * len(layout.roles) + 1
    for target in planner.targets:
        size = 320 if target.kind == "BatchDecodeWithPagedKVCacheWrapper" else 640
        assert dict(target.split) == {"fixed_split_size": size, "disable_split_kv": False}


def test_only_call_plan_calls_plan() -> None:
    """One code path: no other function in fi_compat calls a wrapper's ``plan``."""
    root = Path(fi_compat.__file__).parent
    callers = []
    for path in sorted(root.rglob("*.py")):
        if "testing" in path.relative_to(root).parts:
            continue  # the fake FlashInfer kit defines plan methods, it does not plan
        if path.parent.name == "_measured" and (
            path.name.endswith("_probe.py") or path.name.startswith("reach_")
        ):
            # a probe (and the reach probe's modules) plans the release's wrappers in its own
            # subprocess, to measure
            continue
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef):
                continue
            for node in ast.walk(func):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("plan", "begin_forward")
                ):
                    callers.append(f"{path.relative_to(root)}:{func.name}")
    assert callers == ["attention/_planner.py:_call_plan"]


def test_per_step_path_inspects_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    with determinism.deterministic(True):
        planner, prefill, _, decode = build(Layout.SLIDING_WINDOW)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("signature work on the per-step path")

    monkeypatch.setattr(inspect, "signature", forbidden)
    monkeypatch.setattr(inspect, "getattr_static", forbidden)
    monkeypatch.setattr(_vouch, "inspect_callable", forbidden)
    monkeypatch.setattr(determinism, "is_deterministic", forbidden)
    run_step(planner, "decode")
    run_step(planner, "prefill")
    assert [len(spy.calls) for spy in [*prefill, *decode]] == [1, 1, 1, 1]


def test_signatures_are_inspected_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = _vouch.inspect_callable  # type: ignore[attr-defined]

    def counting(name: str, func: Any, **kwargs: Any) -> Any:
        seen.append(name)
        return real(name, func, **kwargs)

    monkeypatch.setattr(_vouch, "_ACCEPTANCE_CACHE", {})
    monkeypatch.setattr(_vouch, "inspect_callable", counting)
    with determinism.deterministic(True):
        for _ in range(3):  # e.g. one planner per captured batch size
            AttentionPlanner.single(prefill=PagedSpy(), decode=DecodeSpy())
        with pytest.raises(DeterminismUnavailableError):
            AttentionPlanner.single(decode=OldSpy())
        with pytest.raises(DeterminismUnavailableError):
            AttentionPlanner.single(decode=OldSpy())
    assert seen == [
        "BatchPrefillWithPagedKVCacheWrapper.plan",
        "BatchDecodeWithPagedKVCacheWrapper.plan",
        "OldSpy.plan",
    ]


def test_settings_are_read_when_the_planner_is_built() -> None:
    with determinism.deterministic(True):
        planner, prefill, _, _ = build(Layout.SINGLE)
    assert determinism.is_deterministic() is False
    assert planner.settings.deterministic is True
    run_step(planner, "prefill")
    assert prefill[0].calls[0][1]["fixed_split_size"] == DEFAULT_PREFILL_SPLIT_SIZE


def test_off_adds_nothing_and_forwards_the_engines_own_arguments() -> None:
    planner, prefill, _, _ = build(Layout.SINGLE)
    assert planner.settings.deterministic is False
    assert all(dict(t.split) == {} for t in planner.targets)
    planner.plan_prefill([PlanArgs(1, 2, causal=True, window_left=7)])
    assert prefill[0].calls == [((1, 2), {"causal": True, "window_left": 7})]


def test_decode_only_planner() -> None:
    decode = DecodeSpy()
    with determinism.deterministic(True):
        planner = AttentionPlanner.single(decode=decode)
    planner.plan_decode([PlanArgs("indptr")])
    planner.plan_prefill([])
    assert decode.calls == [(("indptr",), {"fixed_split_size": 2048, "disable_split_kv": False})]


def test_classmethod_constructors_match_the_layouts() -> None:
    with determinism.deterministic(True):
        swa = AttentionPlanner.sliding_window(
            3, prefill=(PagedSpy(), PagedSpy()), decode=(DecodeSpy(), DecodeSpy())
        )
        cross = AttentionPlanner.cross_attention(
            ragged=RaggedSpy(), decode=(DecodeSpy(), DecodeSpy())
        )
    assert (swa.layout, swa.window_left) == (Layout.SLIDING_WINDOW, 3)
    assert [t.role for t in swa.targets] == ["window", "full", "window", "full"]
    assert [t.role for t in cross.targets] == ["ragged", "self", "cross"]


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("slot", ["prefill", "ragged", "decode"])
def test_a_plan_without_split_settings_is_refused_up_front(slot: str, caps: Capabilities) -> None:
    wrappers: dict[str, Any] = {"prefill": PagedSpy(), "ragged": RaggedSpy(), "decode": DecodeSpy()}
    wrappers[slot] = OldSpy()
    with determinism.deterministic(True), pytest.raises(DeterminismUnavailableError) as info:
        AttentionPlanner.single(**wrappers, capabilities=caps)
    message = str(info.value)
    assert "OldSpy.plan" in message
    assert f"flashinfer {caps.flashinfer.version}" in message
    assert "FlashInfer changed this in 0.4.0" in message
    assert "flashinfer-python>=0.4.0" in message
    assert "unsupported" in message
    assert info.value.introduced_in == "0.4.0"
    assert info.value.feature == "fixed_split_size"
    assert isinstance(info.value, CapabilityMissingError | RuntimeError)
    for other in wrappers.values():
        assert getattr(other, "calls", []) == []


def test_an_unresolvable_kwargs_plan_is_refused_as_unknown(caps: Capabilities) -> None:
    with determinism.deterministic(True), pytest.raises(DeterminismUnavailableError) as info:
        AttentionPlanner.single(decode=OpaqueSpy(), capabilities=caps)
    message = str(info.value)
    assert "unknown" in message
    assert "**kwargs" in message
    assert "will not guess" in message


def test_odd_plan_attributes() -> None:
    class NoPlan:
        use_tensor_cores = True

    class StaticPlan:
        __module__ = "flashinfer.decode"
        _backend = _requested_backend = "fa2"
        use_tensor_cores = True

        @staticmethod
        def plan(*args: Any, fixed_split_size: Any = None, disable_split_kv: Any = False) -> None:
            pass

    class NotCallable:
        use_tensor_cores = True
        plan = 42

    StaticPlan.__name__ = "BatchDecodeWithPagedKVCacheWrapper"
    with determinism.deterministic(True):
        AttentionPlanner.single(decode=StaticPlan())
    for on in (True, False):  # a wrapper without a callable plan is refused either way
        with determinism.deterministic(on):
            with pytest.raises(PlannerConfigError, match=r"NoPlan.*no callable plan"):
                AttentionPlanner.single(decode=NoPlan())
            with pytest.raises(PlannerConfigError, match=r"NotCallable.*no callable plan"):
                AttentionPlanner.single(decode=NotCallable())


def test_old_wrappers_are_fine_when_determinism_is_off() -> None:
    planner = AttentionPlanner.single(prefill=OldSpy(), decode=OpaqueSpy())
    planner.plan_decode([PlanArgs("indptr", q_data_type="bf16")])
    assert planner.targets[1].wrapper.saved == {"q_data_type": "bf16"}


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda_graph"])
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_decode_without_tensor_cores_is_refused(
    layout: Layout, graph: bool, caps: Capabilities
) -> None:
    settings = Settings(cuda_graph=graph)
    with determinism.deterministic(True), pytest.raises(TensorCoresRequiredError) as info:
        build(layout, settings=settings, decode_kwargs={"use_tensor_cores": False})
    error = info.value
    assert isinstance(error, ValueError)
    assert isinstance(error, DeterminismUnavailableError)
    message = str(error)
    assert "use_tensor_cores=True" in message
    assert "found use_tensor_cores=False" in message
    assert "disable_split_kv" in message
    assert f"flashinfer {caps.flashinfer.version}" in message
    assert f"the {layout.roles[0]} BatchDecodeWithPagedKVCacheWrapper" in message


def test_decode_without_tensor_cores_is_fine_when_off() -> None:
    planner = build(Layout.SINGLE, decode_kwargs={"use_tensor_cores": False})[0]
    assert planner.settings.deterministic is False


def test_an_unreadable_tensor_core_setting_is_refused() -> None:
    with determinism.deterministic(True), pytest.raises(TensorCoresRequiredError) as info:
        AttentionPlanner.single(decode=NoFlagSpy())
    assert "cannot be read" in str(info.value)


def test_tensor_cores_read_from_the_private_attribute_when_no_property() -> None:
    class PrivateOnly:
        __module__ = "flashinfer.decode"
        _backend = _requested_backend = "fa2"

        def __init__(self) -> None:
            self._use_tensor_cores = True

        def plan(
            self, *args: Any, fixed_split_size: Any = None, disable_split_kv: Any = False
        ) -> None:
            pass

    PrivateOnly.__name__ = "BatchDecodeWithPagedKVCacheWrapper"
    with determinism.deterministic(True):
        AttentionPlanner.single(decode=PrivateOnly())


def test_a_cuda_graph_wrapper_needs_a_cuda_graph_planner() -> None:
    with determinism.deterministic(True), pytest.raises(PlannerConfigError, match="cuda_graph"):
        AttentionPlanner.single(decode=DecodeSpy(use_cuda_graph=True))
    with determinism.deterministic(True):
        AttentionPlanner.single(
            decode=DecodeSpy(use_cuda_graph=True), settings=Settings(cuda_graph=True)
        )
        # an eager wrapper under graph settings is deterministic too (no split at all)
        AttentionPlanner.single(decode=DecodeSpy(), settings=Settings(cuda_graph=True))


def test_wrappers_in_the_wrong_place_are_refused() -> None:
    class BatchDecodeWithPagedKVCacheWrapper(Spy):
        pass

    with pytest.raises(PlannerConfigError, match="as the main wrapper"):
        AttentionPlanner.single(prefill=BatchDecodeWithPagedKVCacheWrapper())
    with pytest.raises(PlannerConfigError, match="as the ragged wrapper"):
        AttentionPlanner.single(ragged=BatchDecodeWithPagedKVCacheWrapper())
    AttentionPlanner.single(decode=BatchDecodeWithPagedKVCacheWrapper())


# ---------------------------------------------------------------------------- configuration


def test_settings_that_disagree_with_the_switch_are_refused() -> None:
    with pytest.raises(PlannerConfigError, match="set_deterministic"):
        AttentionPlanner.single(decode=DecodeSpy(), settings=Settings(deterministic=True))
    with determinism.deterministic(True), pytest.raises(PlannerConfigError):
        AttentionPlanner.single(decode=DecodeSpy(), settings=Settings(deterministic=False))
    with determinism.deterministic(True):
        planner = AttentionPlanner.single(decode=DecodeSpy(), settings=Settings(deterministic=True))
    assert planner.settings.deterministic is True


@pytest.mark.parametrize("bad", [0, -2, True, 2.0, "4096"])
def test_split_sizes_must_be_positive_ints(bad: Any) -> None:
    with pytest.raises(PlannerConfigError, match="an int >= 1"):
        Settings(prefill_split_size=bad)
    with pytest.raises(PlannerConfigError, match="decode_split_size"):
        Settings(decode_split_size=bad)


@pytest.mark.parametrize("none", [None, -1])
def test_no_fixed_split_size_is_none_or_minus_one(
    none: int | None,
) -> None:
    settings = Settings(prefill_split_size=none, decode_split_size=none, disable_split_kv=True)
    assert (settings.prefill_split_size, settings.decode_split_size) == (None, None)
    with determinism.deterministic(True):
        resolved = settings.resolved()
        # without a fixed size, only disable_split_kv=True keeps the split from the batch
        with pytest.raises(PlannerConfigError, match="prefill_split_size=None with disable"):
            replace(settings, disable_split_kv=False).resolved()
    for phase in ("prefill", "decode"):
        assert resolved.split_kwargs(phase) == {"fixed_split_size": None, "disable_split_kv": True}
    # -1 as an int only: a bool or float of that value is still refused
    for bad in (-1.0, False):
        with pytest.raises(PlannerConfigError, match="prefill_split_size"):
            Settings(prefill_split_size=bad)  # type: ignore[arg-type]


def test_settings_defaults() -> None:
    settings = Settings()
    assert (settings.deterministic, settings.cuda_graph) == (None, False)
    assert (settings.prefill_split_size, settings.decode_split_size) == (4096, 2048)
    with pytest.raises(PlannerConfigError, match="phase"):
        settings.resolved().split_kwargs("verify")


@pytest.mark.parametrize("phase", [None, 1, ["decode"], b"decode", "Decode", ""])
def test_split_kwargs_takes_a_phase_name_only(phase: object) -> None:
    with pytest.raises(PlannerConfigError, match=r"^expected phase to be one of 'prefill'"):
        Settings().resolved().split_kwargs(phase)  # type: ignore[arg-type]


@pytest.mark.parametrize("keyword", ["fixed_split_size", "disable_split_kv"])
def test_plan_args_refuse_the_split_settings(keyword: str) -> None:
    with pytest.raises(PlannerConfigError, match=keyword):
        PlanArgs(1, 2, **{keyword: None})
    assert repr(PlanArgs(1, causal=True)) == "PlanArgs(1, causal=True)"


def test_wrapper_counts_must_match_the_layout() -> None:
    with pytest.raises(PlannerConfigError, match="2 decode wrapper"):
        AttentionPlanner(Layout.CROSS_ATTENTION, decode=[DecodeSpy()])
    with pytest.raises(PlannerConfigError, match="1 prefill wrapper"):
        AttentionPlanner(Layout.SINGLE, prefill=[PagedSpy(), PagedSpy()])
    with pytest.raises(PlannerConfigError, match="at least one wrapper"):
        AttentionPlanner(Layout.SINGLE)


def test_per_step_requests_must_match_the_wrappers() -> None:
    planner, prefill, _, decode = build(Layout.SLIDING_WINDOW, ragged=False)
    with pytest.raises(PlannerConfigError, match="exactly 2 PlanArgs"):
        planner.plan_decode([PlanArgs(1)])
    with pytest.raises(PlannerConfigError, match="exactly 2 PlanArgs"):
        planner.plan_prefill([PlanArgs(1), PlanArgs(2), PlanArgs(3)])
    assert all(spy.calls == [] for spy in [*prefill, *decode])  # nothing half-planned
    with pytest.raises(PlannerConfigError, match="ragged"):
        planner.plan_prefill([PlanArgs(1), PlanArgs(2)], PlanArgs(0))


@pytest.mark.parametrize("window", [None, -1, True, 2.5])
def test_sliding_window_needs_a_window(window: Any) -> None:
    with pytest.raises(PlannerConfigError, match="window_left to be an int >= 0"):
        AttentionPlanner(
            Layout.SLIDING_WINDOW, decode=[DecodeSpy(), DecodeSpy()], window_left=window
        )


def test_window_only_for_the_sliding_window_layout() -> None:
    with pytest.raises(PlannerConfigError, match="no window_left"):
        AttentionPlanner(Layout.SINGLE, decode=[DecodeSpy()], window_left=3)


def test_cross_attention_needs_encoder_lengths() -> None:
    planner = build(Layout.CROSS_ATTENTION)[0]
    with pytest.raises(PlannerConfigError, match="encoder_lens"):
        planner.decode_spans(torch.tensor([3]))


def test_repr_and_layout_strings() -> None:
    planner = build(Layout.CROSS_ATTENTION)[0]
    assert repr(planner).startswith("AttentionPlanner(cross_attention, prefill=2, ragged=True")
    assert Layout("sliding_window").roles == ("window", "full")


# ---------------------------------------------------------------------------- import


def test_import_loads_neither_torch_nor_flashinfer() -> None:
    code = (
        "import fi_compat.attention, sys\n"
        "fi_compat.attention.AttentionPlanner, fi_compat.attention.Settings()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'flashinfer', 'numpy')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", result.stdout


def test_public_names() -> None:
    import fi_compat.attention as attention

    assert set(attention.__all__) == set(dir(attention))
    for name in attention.__all__:
        assert getattr(attention, name) is not None
