"""Hostile input to the attention planner: refused whole, typed, before FlashInfer sees anything.

Every bad input below sits in a module-level table, so the count is plain. Each must raise
exactly :class:`PlannerConfigError` (an :class:`InvalidArgumentError`, a ``TypeError`` and a
``ValueError``), and for the planner, no call at all may reach the fake FlashInfer after the
bad call starts: a step is checked whole before its first ``plan``.

The wrappers are the fake ``flashinfer`` wrapper classes of two recorded releases: the
newest, and 0.6.14 (before 0.6.15).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fi_compat import determinism
from fi_compat.attention import (
    AttentionPlanner,
    Layout,
    PlanArgs,
    PlannerConfigError,
    Settings,
    cross_attention_decoder_span,
    cross_attention_encoder_span,
    full_span,
    window_decode_span,
    window_prefill_span,
)
from fi_compat.errors import DeterminismUnavailableError, FiCompatError, InvalidArgumentError
from fi_compat.testing import FakeFlashInfer, FunctionRecord, available_releases, fake_flashinfer

NEWEST = available_releases()[-1]
OLDER = "0.6.14"  # the last release before 0.6.15
RELEASES = [OLDER, NEWEST]
PAGED, RAGGED, DECODE = (
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchDecodeWithPagedKVCacheWrapper",
)
LAYOUTS = list(Layout)
MODES = [pytest.param(False, id="off"), pytest.param(True, id="deterministic")]


def window_for(layout: Layout) -> int | None:
    return 2 if layout is Layout.SLIDING_WINDOW else None


# ---------------------------------------------------------------------------- helpers


class NoPlan:
    """Looks like a wrapper, has no plan."""

    use_tensor_cores = True


class PlanIsNotCallable:
    use_tensor_cores = True
    plan = 42


def required_positionals(func: FunctionRecord) -> tuple[str, ...]:
    return tuple(
        f"<{p.name}>"
        for p in func.parameters[1:]
        if p.kind in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD") and not p.has_default
    )


class Wrappers:
    """Fresh fake wrappers of one release, built the way engines build them."""

    def __init__(self, kit: FakeFlashInfer, layout: Layout) -> None:
        self.kit = kit
        self.layout = layout
        self.n = len(layout.roles)

    def make(self, kind: str) -> Any:
        record = self.kit.record.wrapper(kind)
        assert record is not None
        init = record.method("__init__")
        assert init is not None
        kwargs: dict[str, Any] = {
            name: value
            for name, value in (("use_tensor_cores", True), ("backend", "fa2"))
            if name in init.keyword_names
        }  # fa2: the backend measured to hand the split settings to the kernel (0.4.0+)
        wrapper = getattr(self.kit.flashinfer, kind)(*required_positionals(init), **kwargs)
        wrapper._use_tensor_cores = True  # what FlashInfer's __init__ stores (0.2.x-0.7.x)
        return wrapper

    def paged(self) -> list[Any]:
        return [self.make(PAGED) for _ in range(self.n)]

    def decode(self) -> list[Any]:
        return [self.make(DECODE) for _ in range(self.n)]

    def args(self, kind: str) -> PlanArgs:
        record = self.kit.record.wrapper(kind)
        assert record is not None
        plan = record.method("plan")
        assert plan is not None
        return PlanArgs(*required_positionals(plan))

    def base(self) -> dict[str, Any]:
        """Keyword arguments of a good planner: every wrapper of the layout."""
        return {
            "layout": self.layout,
            "prefill": self.paged(),
            "ragged": self.make(RAGGED),
            "decode": self.decode(),
            "window_left": window_for(self.layout),
        }


@pytest.fixture(scope="module", params=RELEASES)
def kit(request: pytest.FixtureRequest) -> Iterator[FakeFlashInfer]:
    """One fake per release for the module's tests (about 1,500 of them: a fake's entry
    imports its ``flashinfer.comm`` afresh, most of what a test here took). Each test builds
    its own wrappers and planner and reads only the calls made after it started. The tests
    after the last of them (spans, settings, planners of stand-in wrappers) read nothing of
    FlashInfer: that the newest release's fake is still installed under them changes
    nothing they check."""
    with fake_flashinfer(request.param) as fake:
        yield fake


@pytest.fixture(autouse=True)
def _switch_off() -> Iterator[None]:
    with determinism.deterministic(False):
        yield


def assert_typed(error: BaseException) -> None:
    assert type(error) is PlannerConfigError
    assert isinstance(error, InvalidArgumentError)
    assert isinstance(error, FiCompatError)
    assert isinstance(error, ValueError)
    assert isinstance(error, TypeError)
    assert str(error).startswith("expected ")


def plans(kit: FakeFlashInfer, since: int = 0) -> list[Any]:
    return [call for call in kit.calls[since:] if call.name.endswith(".plan")]


# ---------------------------------------------------------------------------- tables

# A step's arguments, made from the good ones (one PlanArgs per wrapper of the layout).
BAD_STEPS: list[tuple[str, Callable[[list[PlanArgs]], object]]] = [
    ("fewer", lambda good: good[:-1]),
    ("more", lambda good: [*good, good[0]]),
    ("none", lambda good: None),
    ("bare-planargs", lambda good: good[0]),
    ("tuple-of-tuples", lambda good: tuple(tuple(a.args) for a in good)),
    ("list-of-dicts", lambda good: [dict(a.kwargs) for a in good]),
    ("none-elements", lambda good: [None] * len(good)),
    ("last-element-none", lambda good: [*good[:-1], None]),
    ("str", lambda good: "PlanArgs"),
    ("str-of-the-right-length", lambda good: "x" * len(good)),
    ("bytes-of-the-right-length", lambda good: b"x" * len(good)),
    ("dict", lambda good: dict(enumerate(good))),
    ("set", lambda good: set(good)),
    ("iterator", lambda good: iter(good)),
    ("nested", lambda good: [good]),
    ("planargs-class", lambda good: [PlanArgs] * len(good)),
    ("int", lambda good: len(good)),
]

# What plan_prefill(paged=<good>, ragged=...) refuses.
BAD_RAGGED: list[tuple[str, Callable[[PlanArgs], object]]] = [
    ("str", lambda good: "ragged"),
    ("args-tuple", lambda good: tuple(good.args)),
    ("list", lambda good: [good]),
    ("tuple", lambda good: (good,)),
    ("dict", lambda good: dict(good.kwargs)),
    ("false", lambda good: False),
    ("zero", lambda good: 0),
    ("planargs-class", lambda good: PlanArgs),
]

# Constructor keyword arguments that replace the good ones of Wrappers.base().
Ctor = Callable[[Wrappers], dict[str, Any]]
BAD_CONSTRUCTIONS: list[tuple[str, Ctor]] = [
    ("layout-upper-case", lambda w: {"layout": w.layout.name}),
    ("layout-padded", lambda w: {"layout": f" {w.layout.value}"}),
    ("layout-empty", lambda w: {"layout": ""}),
    ("layout-unknown", lambda w: {"layout": "full"}),
    ("layout-none", lambda w: {"layout": None}),
    ("layout-int", lambda w: {"layout": 0}),
    ("layout-enum-class", lambda w: {"layout": Layout}),
    ("layout-object", lambda w: {"layout": object()}),
    ("prefill-bare-wrapper", lambda w: {"prefill": w.make(PAGED)}),
    ("prefill-str", lambda w: {"prefill": PAGED}),
    ("prefill-iterator", lambda w: {"prefill": iter(w.paged())}),
    ("prefill-set", lambda w: {"prefill": set(w.paged())}),
    ("prefill-dict", lambda w: {"prefill": dict(enumerate(w.paged()))}),
    ("prefill-wrong-count", lambda w: {"prefill": [w.make(PAGED) for _ in range(3 - w.n)]}),
    ("prefill-one-too-many", lambda w: {"prefill": [*w.paged(), w.make(PAGED)]}),
    ("prefill-none-elements", lambda w: {"prefill": [None] * w.n}),
    ("prefill-str-elements", lambda w: {"prefill": [PAGED] * w.n}),
    ("prefill-object-elements", lambda w: {"prefill": [object() for _ in range(w.n)]}),
    ("prefill-class-elements", lambda w: {"prefill": [type(w.make(PAGED))] * w.n}),
    ("prefill-without-plan", lambda w: {"prefill": [NoPlan() for _ in range(w.n)]}),
    ("prefill-plan-not-callable", lambda w: {"prefill": [PlanIsNotCallable() for _ in range(w.n)]}),
    ("prefill-nested", lambda w: {"prefill": [w.paged()]}),
    ("prefill-decode-wrappers", lambda w: {"prefill": w.decode()}),
    ("prefill-same-wrapper-twice", lambda w: {"prefill": [w.make(PAGED)] * 2}),
    ("decode-bare-wrapper", lambda w: {"decode": w.make(DECODE)}),
    ("decode-str", lambda w: {"decode": DECODE}),
    ("decode-iterator", lambda w: {"decode": iter(w.decode())}),
    ("decode-wrong-count", lambda w: {"decode": [w.make(DECODE) for _ in range(3 - w.n)]}),
    ("decode-one-too-many", lambda w: {"decode": [*w.decode(), w.make(DECODE)]}),
    ("decode-none-elements", lambda w: {"decode": [None] * w.n}),
    ("decode-last-none", lambda w: {"decode": [*w.decode()[:-1], None]}),
    ("decode-str-elements", lambda w: {"decode": ["decode"] * w.n}),
    ("decode-object-elements", lambda w: {"decode": [object() for _ in range(w.n)]}),
    ("decode-class-elements", lambda w: {"decode": [type(w.make(DECODE))] * w.n}),
    ("decode-without-plan", lambda w: {"decode": [NoPlan() for _ in range(w.n)]}),
    ("decode-plan-not-callable", lambda w: {"decode": [PlanIsNotCallable() for _ in range(w.n)]}),
    ("decode-nested", lambda w: {"decode": [w.decode()]}),
    ("decode-same-wrapper-twice", lambda w: {"decode": [w.make(DECODE)] * 2}),
    ("ragged-str", lambda w: {"ragged": RAGGED}),
    ("ragged-list", lambda w: {"ragged": [w.make(RAGGED)]}),
    ("ragged-tuple", lambda w: {"ragged": (w.make(RAGGED),)}),
    ("ragged-object", lambda w: {"ragged": object()}),
    ("ragged-class", lambda w: {"ragged": type(w.make(RAGGED))}),
    ("ragged-false", lambda w: {"ragged": False}),
    ("ragged-without-plan", lambda w: {"ragged": NoPlan()}),
    ("ragged-decode-wrapper", lambda w: {"ragged": w.make(DECODE)}),
    ("settings-str", lambda w: {"settings": "deterministic"}),
    ("settings-dict", lambda w: {"settings": {"deterministic": True}}),
    ("settings-true", lambda w: {"settings": True}),
    ("settings-false", lambda w: {"settings": False}),
    ("settings-class", lambda w: {"settings": Settings}),
    ("capabilities-str", lambda w: {"capabilities": NEWEST}),
    ("capabilities-dict", lambda w: {"capabilities": {"flashinfer": NEWEST}}),
    ("capabilities-object", lambda w: {"capabilities": object()}),
    ("no-wrappers", lambda w: {"prefill": (), "ragged": None, "decode": ()}),
]

# window_left for a sliding-window planner; any window_left for the other layouts.
BAD_WINDOWS: list[object] = [None, -1, True, False, 2.5, "4", np.int64(4)]
STRAY_WINDOWS: list[object] = [0, 3, -1, "4"]

# Classmethod calls: (id, factory(wrappers) -> planner).
BAD_CLASSMETHODS: list[tuple[str, Callable[[Wrappers], object]]] = [
    ("single-list-as-decode", lambda w: AttentionPlanner.single(decode=[w.make(DECODE)])),
    ("single-tuple-as-prefill", lambda w: AttentionPlanner.single(prefill=(w.make(PAGED),))),
    ("single-str-as-ragged", lambda w: AttentionPlanner.single(ragged=RAGGED)),
    ("single-object-as-decode", lambda w: AttentionPlanner.single(decode=object())),
    ("single-settings-str", lambda w: AttentionPlanner.single(decode=w.make(DECODE), settings="x")),
    ("single-nothing", lambda w: AttentionPlanner.single()),
    (
        "sliding-bare-wrapper",
        lambda w: AttentionPlanner.sliding_window(2, decode=w.make(DECODE)),
    ),
    (
        "sliding-str-window",
        lambda w: AttentionPlanner.sliding_window("2", decode=(w.make(DECODE), w.make(DECODE))),
    ),
    (
        "sliding-one-wrapper",
        lambda w: AttentionPlanner.sliding_window(2, decode=(w.make(DECODE),)),
    ),
    (
        "sliding-str-decode",
        lambda w: AttentionPlanner.sliding_window(2, decode="ab"),
    ),
    (
        "cross-bare-wrapper",
        lambda w: AttentionPlanner.cross_attention(prefill=w.make(PAGED)),
    ),
    (
        "cross-none-element",
        lambda w: AttentionPlanner.cross_attention(decode=(w.make(DECODE), None)),
    ),
    (
        "cross-capabilities-str",
        lambda w: AttentionPlanner.cross_attention(
            decode=(w.make(DECODE), w.make(DECODE)), capabilities="caps"
        ),
    ),
]

# Settings(**kwargs).
BAD_SETTINGS: list[dict[str, Any]] = [
    {"deterministic": "false"},
    {"deterministic": "true"},
    {"deterministic": ""},
    {"deterministic": 0},
    {"deterministic": 1},
    {"deterministic": np.bool_(True)},
    {"deterministic": [True]},
    {"cuda_graph": "false"},
    {"cuda_graph": None},
    {"cuda_graph": 0},
    {"cuda_graph": 1},
    {"cuda_graph": np.bool_(False)},
    {"prefill_split_size": 0},
    {"prefill_split_size": -2},
    {"prefill_split_size": True},
    {"prefill_split_size": 2.0},
    {"prefill_split_size": "4096"},
    {"disable_split_kv": "true"},
    {"disable_split_kv": 1},
    {"cuda_graph": True, "disable_split_kv": False},
    {"decode_split_size": 0},
    {"decode_split_size": False},
    {"decode_split_size": "2048"},
]

_T = torch.tensor([9, 3, 17], dtype=torch.int32)
_PREFIX = torch.tensor([5, 0, 16], dtype=torch.int32)
_SHORT = torch.tensor([9, 3], dtype=torch.int32)
_FLOAT = torch.tensor([9.0, 3.0, 17.0])
_BOOL = torch.tensor([True, False, True])
_MATRIX = torch.tensor([[9, 3, 17]], dtype=torch.int32)
_SCALAR = torch.tensor(9, dtype=torch.int32)
_META = torch.zeros(3, dtype=torch.int32, device="meta")


class _Stub:
    def plan(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("span arithmetic never plans")


def _planner(layout: Layout) -> AttentionPlanner:
    return AttentionPlanner(
        layout,
        decode=[_Stub() for _ in layout.roles],
        window_left=window_for(layout),
    )


# Span arithmetic: (id, call).
BAD_SPANS: list[tuple[str, Callable[[], object]]] = [
    ("full-list", lambda: full_span([9, 3])),
    ("full-none", lambda: full_span(None)),
    ("full-float", lambda: full_span(_FLOAT)),
    ("full-bool", lambda: full_span(_BOOL)),
    ("full-2d", lambda: full_span(_MATRIX)),
    ("full-0d", lambda: full_span(_SCALAR)),
    ("full-numpy", lambda: full_span(np.array([9, 3]))),
    ("window-decode-list", lambda: window_decode_span([9, 3], 4)),
    ("window-decode-float", lambda: window_decode_span(_FLOAT, 4)),
    ("window-decode-negative-window", lambda: window_decode_span(_T, -1)),
    ("window-decode-bool-window", lambda: window_decode_span(_T, True)),
    ("window-decode-str-window", lambda: window_decode_span(_T, "4")),
    ("window-decode-float-window", lambda: window_decode_span(_T, 2.5)),
    ("window-decode-none-window", lambda: window_decode_span(_T, None)),
    ("window-prefill-short-prefix", lambda: window_prefill_span(_T, _SHORT, 4, ragged=False)),
    ("window-prefill-list-prefix", lambda: window_prefill_span(_T, [5, 0, 16], 4, ragged=False)),
    ("window-prefill-float-prefix", lambda: window_prefill_span(_T, _FLOAT, 4, ragged=False)),
    ("window-prefill-other-device", lambda: window_prefill_span(_T, _META, 4, ragged=False)),
    ("window-prefill-negative-window", lambda: window_prefill_span(_T, _PREFIX, -1, ragged=True)),
    ("window-prefill-ragged-str", lambda: window_prefill_span(_T, _PREFIX, 4, ragged="false")),
    ("window-prefill-ragged-int", lambda: window_prefill_span(_T, _PREFIX, 4, ragged=1)),
    ("window-prefill-ragged-none", lambda: window_prefill_span(_T, _PREFIX, 4, ragged=None)),
    ("cross-decoder-list", lambda: cross_attention_decoder_span([9, 3], _SHORT)),
    ("cross-decoder-short-encoder", lambda: cross_attention_decoder_span(_T, _SHORT)),
    ("cross-decoder-none-encoder", lambda: cross_attention_decoder_span(_T, None)),
    ("cross-encoder-float", lambda: cross_attention_encoder_span(_FLOAT)),
    ("cross-encoder-tuple", lambda: cross_attention_encoder_span((9, 3))),
    ("planner-single-decode-list", lambda: _planner(Layout.SINGLE).decode_spans([9, 3])),
    ("planner-single-decode-encoder-list", lambda: _planner(Layout.SINGLE).decode_spans(_T, [1])),
    ("planner-single-prefill-none-prefix", lambda: _planner(Layout.SINGLE).prefill_spans(_T, None)),
    (
        "planner-single-prefill-ragged-str",
        lambda: _planner(Layout.SINGLE).prefill_spans(_T, _PREFIX, ragged="no"),
    ),
    ("planner-window-decode-float", lambda: _planner(Layout.SLIDING_WINDOW).decode_spans(_FLOAT)),
    (
        "planner-window-prefill-none-prefix",
        lambda: _planner(Layout.SLIDING_WINDOW).prefill_spans(_T, None),
    ),
    (
        "planner-window-prefill-short-prefix",
        lambda: _planner(Layout.SLIDING_WINDOW).prefill_spans(_T, _SHORT),
    ),
    (
        "planner-window-prefill-ragged-int",
        lambda: _planner(Layout.SLIDING_WINDOW).prefill_spans(_T, _PREFIX, ragged=0),
    ),
    ("planner-cross-decode-no-encoder", lambda: _planner(Layout.CROSS_ATTENTION).decode_spans(_T)),
    (
        "planner-cross-decode-short-encoder",
        lambda: _planner(Layout.CROSS_ATTENTION).decode_spans(_T, _SHORT),
    ),
    (
        "planner-cross-prefill-meta-encoder",
        lambda: _planner(Layout.CROSS_ATTENTION).prefill_spans(_T, _PREFIX, _META),
    ),
    (
        "planner-cross-prefill-2d",
        lambda: _planner(Layout.CROSS_ATTENTION).prefill_spans(_MATRIX, _MATRIX, _MATRIX),
    ),
]


def test_the_tables_count() -> None:
    """The number of bad inputs, so a shrinking table shows up in review."""
    counts = {
        "steps": len(BAD_STEPS),
        "ragged": len(BAD_RAGGED),
        "constructions": len(BAD_CONSTRUCTIONS),
        "windows": len(BAD_WINDOWS) + len(STRAY_WINDOWS),
        "classmethods": len(BAD_CLASSMETHODS),
        "settings": len(BAD_SETTINGS),
        "spans": len(BAD_SPANS),
    }
    assert counts == {
        "steps": 17,
        "ragged": 8,
        "constructions": 55,
        "windows": 11,
        "classmethods": 13,
        "settings": 23,
        "spans": 39,
    }


def test_the_errors_are_invalid_argument_errors() -> None:
    assert issubclass(PlannerConfigError, InvalidArgumentError)
    for base in (FiCompatError, ValueError, TypeError):
        assert issubclass(PlannerConfigError, base)


# ---------------------------------------------------------------------------- per step


def good_planner(
    kit: FakeFlashInfer, layout: Layout, on: bool
) -> tuple[AttentionPlanner, Wrappers, dict[str, Any]]:
    w = Wrappers(kit, layout)
    base = w.base()
    with determinism.deterministic(on):
        planner = AttentionPlanner(**base)
    return planner, w, base


@pytest.mark.parametrize(("case", "make"), BAD_STEPS, ids=[case for case, _ in BAD_STEPS])
@pytest.mark.parametrize("on", MODES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_plan_decode_refuses_a_bad_step_whole(
    kit: FakeFlashInfer, layout: Layout, on: bool, case: str, make: Any
) -> None:
    planner, w, _ = good_planner(kit, layout, on)
    bad = make([w.args(DECODE) for _ in range(w.n)])
    before = len(kit.calls)
    with pytest.raises(PlannerConfigError) as info:
        planner.plan_decode(bad)
    assert_typed(info.value)
    assert kit.calls[before:] == []
    assert f"exactly {w.n} PlanArgs" in str(info.value)


@pytest.mark.parametrize(("case", "make"), BAD_STEPS, ids=[case for case, _ in BAD_STEPS])
@pytest.mark.parametrize("with_ragged", [False, True], ids=["paged", "paged+ragged"])
@pytest.mark.parametrize("on", MODES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_plan_prefill_refuses_bad_paged_arguments_whole(
    kit: FakeFlashInfer, layout: Layout, on: bool, with_ragged: bool, case: str, make: Any
) -> None:
    planner, w, _ = good_planner(kit, layout, on)
    bad = make([w.args(PAGED) for _ in range(w.n)])
    ragged = w.args(RAGGED) if with_ragged else None
    before = len(kit.calls)
    with pytest.raises(PlannerConfigError) as info:
        planner.plan_prefill(bad, ragged)
    assert_typed(info.value)
    assert kit.calls[before:] == []  # not even the ragged wrapper, which plans first


@pytest.mark.parametrize(("case", "make"), BAD_RAGGED, ids=[case for case, _ in BAD_RAGGED])
@pytest.mark.parametrize("on", MODES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_plan_prefill_refuses_bad_ragged_arguments_whole(
    kit: FakeFlashInfer, layout: Layout, on: bool, case: str, make: Any
) -> None:
    planner, w, _ = good_planner(kit, layout, on)
    paged = [w.args(PAGED) for _ in range(w.n)]
    before = len(kit.calls)
    with pytest.raises(PlannerConfigError) as info:
        planner.plan_prefill(paged, make(w.args(RAGGED)))
    assert_typed(info.value)
    assert kit.calls[before:] == []


@pytest.mark.parametrize("on", MODES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_ragged_arguments_without_a_ragged_wrapper_plan_nothing(
    kit: FakeFlashInfer, layout: Layout, on: bool
) -> None:
    w = Wrappers(kit, layout)
    with determinism.deterministic(on):
        planner = AttentionPlanner(
            layout, prefill=w.paged(), decode=w.decode(), window_left=window_for(layout)
        )
    before = len(kit.calls)
    with pytest.raises(PlannerConfigError, match="ragged") as info:
        planner.plan_prefill([w.args(PAGED) for _ in range(w.n)], w.args(RAGGED))
    assert_typed(info.value)
    assert kit.calls[before:] == []


@pytest.mark.parametrize("on", MODES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_good_steps_still_plan_every_wrapper_once(
    kit: FakeFlashInfer, layout: Layout, on: bool
) -> None:
    """The control: the same planners accept list and tuple steps and plan each wrapper once."""
    planner, w, base = good_planner(kit, layout, on)
    before = len(kit.calls)
    planner.plan_decode(tuple(w.args(DECODE) for _ in range(w.n)))
    planner.plan_prefill([w.args(PAGED) for _ in range(w.n)], w.args(RAGGED))
    planned = [call.instance for call in plans(kit, before)]
    wrappers = [*base["decode"], base["ragged"], *base["prefill"]]
    assert planned == wrappers


# ---------------------------------------------------------------------------- construction


def _ids(table: list[tuple[str, Any]]) -> list[str]:
    return [case for case, _ in table]


@pytest.mark.parametrize(("case", "change"), BAD_CONSTRUCTIONS, ids=_ids(BAD_CONSTRUCTIONS))
@pytest.mark.parametrize("on", MODES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_constructor_refuses_bad_arguments(
    kit: FakeFlashInfer, layout: Layout, on: bool, case: str, change: Ctor
) -> None:
    w = Wrappers(kit, layout)
    kwargs = {**w.base(), **change(w)}
    before = len(kit.calls)
    with determinism.deterministic(on), pytest.raises(PlannerConfigError) as info:
        AttentionPlanner(**kwargs)
    assert_typed(info.value)
    assert kit.calls[before:] == []


@pytest.mark.parametrize("window", BAD_WINDOWS, ids=repr)
@pytest.mark.parametrize("on", MODES)
def test_sliding_window_refuses_bad_windows(kit: FakeFlashInfer, on: bool, window: object) -> None:
    w = Wrappers(kit, Layout.SLIDING_WINDOW)
    with determinism.deterministic(on), pytest.raises(PlannerConfigError) as info:
        AttentionPlanner(**{**w.base(), "window_left": window})
    assert_typed(info.value)


@pytest.mark.parametrize("window", STRAY_WINDOWS, ids=repr)
@pytest.mark.parametrize("layout", [Layout.SINGLE, Layout.CROSS_ATTENTION], ids=str)
def test_other_layouts_refuse_any_window(
    kit: FakeFlashInfer, layout: Layout, window: object
) -> None:
    w = Wrappers(kit, layout)
    with pytest.raises(PlannerConfigError) as info:
        AttentionPlanner(**{**w.base(), "window_left": window})
    assert_typed(info.value)


@pytest.mark.parametrize(("case", "build"), BAD_CLASSMETHODS, ids=_ids(BAD_CLASSMETHODS))
@pytest.mark.parametrize("on", MODES)
def test_classmethods_refuse_bad_arguments(
    kit: FakeFlashInfer, on: bool, case: str, build: Callable[[Wrappers], object]
) -> None:
    w = Wrappers(kit, Layout.SINGLE)
    with determinism.deterministic(on), pytest.raises(PlannerConfigError) as info:
        build(w)
    assert_typed(info.value)


@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_layout_values_and_none_sequences_are_accepted(kit: FakeFlashInfer, layout: Layout) -> None:
    """The control for the layout and sequence rows: what is documented still works."""
    w = Wrappers(kit, layout)
    planner = AttentionPlanner(**{**w.base(), "layout": layout.value, "prefill": None})
    assert planner.layout is layout
    assert [t.role for t in planner.targets] == ["ragged", *layout.roles]
    tupled = AttentionPlanner(**{**w.base(), "decode": tuple(w.decode())})
    assert len(tupled.targets) == 2 * w.n + 1


@pytest.mark.parametrize(
    "kwargs", BAD_SETTINGS, ids=[",".join(f"{k}={v!r}" for k, v in s.items()) for s in BAD_SETTINGS]
)
def test_settings_refuse_garbage(kwargs: dict[str, Any]) -> None:
    with pytest.raises(PlannerConfigError) as info:
        Settings(**kwargs)
    assert_typed(info.value)


def test_settings_take_real_bools() -> None:
    for value in (True, False):
        assert Settings(cuda_graph=value).cuda_graph is value
        assert Settings(deterministic=value).deterministic is value
    assert Settings(deterministic=None).deterministic is None


# ---------------------------------------------------------------------------- spans


@pytest.mark.parametrize(("case", "call"), BAD_SPANS, ids=_ids(BAD_SPANS))
def test_span_helpers_refuse_bad_input(case: str, call: Callable[[], object]) -> None:
    with pytest.raises(PlannerConfigError) as info:
        call()
    assert_typed(info.value)


def test_span_helpers_take_integer_tensors_of_either_width() -> None:
    for dtype in (torch.int32, torch.int64):
        seq, prefix = _T.to(dtype), _PREFIX.to(dtype)
        assert window_prefill_span(seq, prefix, 4, ragged=True).kv_lens.dtype == dtype
        assert len(_planner(Layout.SLIDING_WINDOW).prefill_spans(seq, prefix)) == 2
        assert len(_planner(Layout.CROSS_ATTENTION).decode_spans(seq, prefix)) == 2


# ---------------------------------------------------------------------------- property


_JUNK = st.sampled_from([None, "x", 0, (), {}, b"", PlanArgs, object()])


def _steps(good: PlanArgs) -> st.SearchStrategy[object]:
    """Possibly malformed step arguments built around one good PlanArgs."""
    element = st.one_of(st.just(good), _JUNK, st.builds(lambda a: tuple(a.args), st.just(good)))
    elements = st.lists(element, max_size=4)
    return st.one_of(
        elements,
        elements.map(tuple),
        elements.map(iter),
        st.just(good),
        _JUNK,
        st.text(max_size=3),
    )


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_a_step_plans_every_wrapper_once_or_nothing(release: str, layout: Layout) -> None:
    with fake_flashinfer(release) as fake:
        w = Wrappers(fake, layout)

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(
            on=st.booleans(),
            phase=st.sampled_from(["prefill", "decode"]),
            data=st.data(),
        )
        def check(on: bool, phase: str, data: st.DataObject) -> None:
            base = w.base()
            with determinism.deterministic(on):
                planner = AttentionPlanner(**base)
            kind = DECODE if phase == "decode" else PAGED
            step = data.draw(_steps(w.args(kind)), label="step")
            ragged = None
            if phase == "prefill":
                ragged = data.draw(
                    st.one_of(st.none(), st.just(w.args(RAGGED)), _JUNK), label="ragged"
                )
            before = len(fake.calls)
            try:
                if phase == "decode":
                    planner.plan_decode(step)
                else:
                    planner.plan_prefill(step, ragged)
            except PlannerConfigError as error:
                assert_typed(error)
                assert fake.calls[before:] == []
                return
            planned = [call.instance for call in plans(fake, before)]
            expected = base["decode"] if phase == "decode" else list(base["prefill"])
            if ragged is not None:
                expected = [base["ragged"], *expected]
            assert planned == expected

        check()


class PlanViaGetattr:
    """``plan`` exists only through ``__getattr__``: callable, but invisible to a static probe."""

    use_tensor_cores = True

    def __getattr__(self, name: str) -> Any:
        if name == "plan":
            return lambda *args, **kwargs: None
        raise AttributeError(name)


class _Descriptor:
    """Not callable itself; its ``__get__`` hands out a function."""

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        return lambda *args, **kwargs: None


class PlanViaDescriptor:
    use_tensor_cores = True
    plan = _Descriptor()


@pytest.mark.parametrize("wrapper_type", [PlanViaGetattr, PlanViaDescriptor])
def test_a_plan_the_probe_cannot_see_is_fine_off_and_refused_when_deterministic(
    wrapper_type: type,
) -> None:
    """Callable ``plan`` passes the argument check; determinism still needs to read it."""
    AttentionPlanner.single(decode=wrapper_type())
    with determinism.deterministic(True), pytest.raises(DeterminismUnavailableError) as info:
        AttentionPlanner.single(decode=wrapper_type())
    assert not isinstance(info.value, InvalidArgumentError)
