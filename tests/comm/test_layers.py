"""The lowest-layer binder (``fi_compat/comm/_layers.py``) on doubles: every refusal.

The real releases are in ``test_layers_real.py`` (installed) and ``test_layers_wheels.py``
(every path). Here plain functions of this module stand in for FlashInfer's, so that each
reason to stay on the public call can be provoked alone: wrappers that are not FlashInfer's,
a legacy function under another decorator, parameters that cannot be placed, sources the
runtime does not know, a workspace that lacks an attribute, and the shipped data's shape.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from typing import Any

import pytest
from typing_extensions import deprecated

from fi_compat._measured.layers import FIXED, HANDLES_ATTACHED, PER_CALL, SOURCES
from fi_compat.comm import _layers
from fi_compat.comm._layers import measured

# ------------------------------------------------------------------------- the doubles


def legacy_double(a: Any, b: Any, c: Any = "c-default", d: Any = None) -> tuple[Any, ...]:
    return (a, b, c, d)


@deprecated("use the unified API")
def deprecated_double(a: Any, b: Any) -> tuple[Any, ...]:
    return (a, b)


def keyword_only_double(a: Any, *, b: Any) -> None:
    return None


class Workspace:
    world_size = 4
    rank = 1


def _spec() -> Any:
    from fi_compat.comm._types import Spec

    return Spec(4, 1, 16, 256, None, -1)  # type: ignore[arg-type]  # dtype unused here


def _sha(function: Any) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()


# --------------------------------------------------------------------------- wrappers


def test_a_plain_function_is_its_own_layer() -> None:
    assert _layers._function_below(legacy_double) == (legacy_double, None)


def test_a_wrapper_that_is_not_flashinfers_trace_wrapper_is_refused() -> None:
    @functools.wraps(legacy_double)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return legacy_double(*args, **kwargs)

    function, why = _layers._function_below(wrapper)
    assert function is None
    assert why is not None
    assert "is wrapped by" in why
    assert "API logging" in why


def test_the_trace_switch_unknown_is_refused() -> None:
    # A function named like FlashInfer's trace wrapper, in a file of that name, without the
    # switch in its closure: the switch cannot be read, so trace dumping may be on.
    namespace: dict[str, Any] = {}
    code = compile(
        "def _auto_dump_wrapper(*args, **kwargs):\n    return None\n", "api_logging.py", "exec"
    )
    exec(code, namespace)
    wrapper = namespace["_auto_dump_wrapper"]
    wrapper.__wrapped__ = legacy_double
    assert _layers._trace_dumping(wrapper) is None
    function, why = _layers._function_below(wrapper)
    assert function is None
    assert why is not None
    assert "trace dumping is on" in why


def _trace_wrapper(switch: Any) -> Any:
    """A double of FlashInfer's trace wrapper whose closure holds ``switch``."""
    namespace: dict[str, Any] = {}
    code = compile(
        "def make(_is_trace_dump_enabled, inner):\n"
        "    def _auto_dump_wrapper(*args, **kwargs):\n"
        "        _is_trace_dump_enabled()\n"
        "        return inner(*args, **kwargs)\n"
        "    return _auto_dump_wrapper\n",
        "api_logging.py",
        "exec",
    )
    exec(code, namespace)
    wrapper = namespace["make"](switch, legacy_double)
    wrapper.__wrapped__ = legacy_double
    return wrapper


def test_the_trace_switch_is_read_through_the_wrappers_closure() -> None:
    assert _layers._function_below(_trace_wrapper(lambda: False)) == (legacy_double, None)
    function, why = _layers._function_below(_trace_wrapper(lambda: True))
    assert function is None
    assert why is not None
    assert "FLASHINFER_TRACE_DUMP" in why

    def broken() -> bool:
        raise RuntimeError("no environment")

    assert _layers._trace_dumping(_trace_wrapper(broken)) is None


def test_too_many_trace_wrappers_are_refused() -> None:
    layer: Any = legacy_double
    for _ in range(5):
        outer = _trace_wrapper(lambda: False)
        outer.__wrapped__ = layer
        layer = outer
    function, why = _layers._function_below(layer)
    assert function is None
    assert why is not None
    assert "more than four" in why


def test_the_legacy_function_is_taken_below_deprecated_only() -> None:
    assert _layers._legacy_below(legacy_double) is legacy_double
    below = _layers._legacy_below(deprecated_double)
    assert below is not None
    assert below is deprecated_double.__wrapped__  # type: ignore[attr-defined]

    @functools.wraps(legacy_double)
    def other(*args: Any) -> Any:
        return legacy_double(*args)

    assert _layers._legacy_below(other) is None
    assert _layers._legacy_below(len) is None
    assert _layers._legacy_below(None) is None
    twice = deprecated("again")(deprecated_double)
    assert _layers._legacy_below(twice) is None


def test_a_source_digest_needs_source() -> None:
    assert _layers._digest(legacy_double.__code__) == _sha(legacy_double)
    namespace: dict[str, Any] = {}
    exec(compile("def f():\n    return 1\n", "<generated>", "exec"), namespace)
    assert _layers._digest(namespace["f"].__code__) is None
    assert _layers._digest(None) is None


# ----------------------------------------------------------------------------- recipes


def _arguments(**sources: Any) -> dict[str, Any]:
    return {"a": "view:input", "b": "workspace.world_size", **sources}


def test_a_recipe_places_every_source() -> None:
    recipe = _layers._recipe(
        legacy_double,
        _arguments(c={"constant": 7}, d="default"),
        _spec(),
        Workspace(),
        pattern=1,
    )
    assert not isinstance(recipe, str)
    fixed, pick, allocate = recipe
    assert fixed == (4, 7, None)
    per_call = tuple(f"<{name}>" for name in PER_CALL)
    assert pick((*fixed, *per_call)) == ("<view:input>", 4, 7, None)
    assert allocate is False


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"a": "view:input"}, "parameters are not those measured"),
        (_arguments(c="the moon", d="default"), "unknown source 'the moon'"),
        (_arguments(c="workspace.missing", d="default"), "the workspace has no missing"),
        ({"a": "default", "b": "tokens", "c": "default", "d": "default"}, "a has no default"),
    ],
)
def test_a_recipe_that_cannot_be_placed_is_refused(arguments: dict[str, Any], why: str) -> None:
    recipe = _layers._recipe(legacy_double, arguments, _spec(), Workspace(), pattern=1)
    assert isinstance(recipe, str)
    assert why in recipe


def test_a_keyword_only_parameter_is_refused() -> None:
    recipe = _layers._recipe(
        keyword_only_double, {"a": "view:input", "b": "tokens"}, _spec(), Workspace(), pattern=1
    )
    assert isinstance(recipe, str)
    assert "cannot be passed by position" in recipe


def test_a_one_parameter_function_is_refused() -> None:
    def one(a: Any) -> None:
        return None

    recipe = _layers._recipe(one, {"a": "tokens"}, _spec(), Workspace(), pattern=1)
    assert isinstance(recipe, str)
    assert "fewer than two" in recipe


# --------------------------------------------------------------------------- decisions


def test_an_unknown_or_public_release_keeps_the_public_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_layers, "measured", lambda: {"1.0": {"layer": "public", "detail": "x"}})
    for version, why in ((None, "not measured"), ("2.0", "not measured"), ("1.0", ": x")):
        launcher, decision = _layers.lowest_layer(
            version, _spec(), fusion=legacy_double, native=Workspace(), pattern=1
        )
        assert launcher is None
        assert decision.startswith("the public allreduce_fusion")
        assert why in decision


def test_a_fusion_without_its_namespace_names_keeps_the_public_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = {
        "layer": "legacy",
        "detail": "",
        "fusion_source": _sha(legacy_double),
        "legacy_source": "",
        "arguments": {},
        "checks": [],
    }
    monkeypatch.setattr(_layers, "measured", lambda: {"1.0": entry})
    launcher, decision = _layers.lowest_layer(
        "1.0", _spec(), fusion=legacy_double, native=Workspace(), pattern=1
    )
    assert launcher is None
    assert "is not a TRTLLMAllReduceFusionWorkspace" in decision


# ------------------------------------------------------------------------ shipped data


def test_the_shipped_data_names_only_known_sources_and_checks() -> None:
    releases = measured()
    assert releases, "layers.json holds no release"
    assert set(PER_CALL) | set(FIXED) == SOURCES
    for version, entry in releases.items():
        assert entry["layer"] in ("legacy", "public"), version
        if entry["layer"] != "legacy":
            continue
        assert set(entry["checks"]) <= {HANDLES_ATTACHED}, version
        for name, source in entry["arguments"].items():
            assert (isinstance(source, dict) and set(source) == {"constant"}) or (
                source in SOURCES
            ), (version, name, source)
        assert len(entry["fusion_source"]) == len(entry["legacy_source"]) == 64


# ------------------------------------------------ a FlashInfer that raises while inspected
#
# The binder resolves the workspace class and the legacy function in the fused function's
# module globals: for ``fusion_double`` that is this module, so these two names stand in
# for FlashInfer's.


class TRTLLMAllReduceFusionWorkspace:
    world_size = 4
    rank = 1
    workspace_tensor = "pointers"
    metadata = ("the", "metadata")


def trtllm_allreduce_fusion(
    allreduce_in: Any, world_size: Any, token_num: Any, metadata: Any = None
) -> None:
    return None


def fusion_double(**kwargs: Any) -> None:
    return None


def _double_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {
        "layer": "legacy",
        "detail": "",
        "fusion_source": _sha(fusion_double),
        "legacy_source": _sha(trtllm_allreduce_fusion),
        "arguments": {
            "allreduce_in": "view:input",
            "world_size": "workspace.world_size",
            "token_num": "tokens",
            "metadata": "workspace.metadata",
        },
        "checks": [],
    }
    monkeypatch.setattr(_layers, "measured", lambda: {"1.0": entry})


def test_the_doubles_are_bound_lower(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: with nothing raising, the doubles pass every check."""
    pytest.importorskip("torch", reason="the launch needs torch")
    _double_entry(monkeypatch)
    launcher, decision = _layers.lowest_layer(
        "1.0", _spec(), fusion=fusion_double, native=TRTLLMAllReduceFusionWorkspace(), pattern=1
    )
    assert launcher is not None, decision
    assert decision.startswith("calls go to trtllm_allreduce_fusion")


class RaisingWorkspace(TRTLLMAllReduceFusionWorkspace):
    @property
    def world_size(self) -> int:  # type: ignore[override]
        raise RuntimeError("CUDA driver not loaded")


class RaisingClass:
    @property  # type: ignore[misc]  # read-only on purpose: reading it raises
    def __class__(self) -> type:
        raise OSError("no device")


class RaisingWrapped:
    def __call__(self, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        raise ValueError(f"cannot read {name}")


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class RaisingUnprintably(TRTLLMAllReduceFusionWorkspace):
    @property
    def metadata(self) -> tuple[str, str]:  # type: ignore[override]
        raise UnprintableError


@pytest.mark.parametrize(
    ("fusion", "native", "raised"),
    [
        (lambda: fusion_double, RaisingWorkspace, "RuntimeError: CUDA driver not loaded"),
        (lambda: fusion_double, RaisingClass, "OSError: no device"),
        (RaisingWrapped, TRTLLMAllReduceFusionWorkspace, "ValueError: cannot read"),
        (lambda: fusion_double, RaisingUnprintably, "UnprintableError"),
    ],
    ids=["attribute", "class", "wrapped", "unprintable"],
)
def test_whatever_flashinfer_raises_while_inspected_keeps_the_public_call(
    monkeypatch: pytest.MonkeyPatch, fusion: Any, native: Any, raised: str
) -> None:
    _double_entry(monkeypatch)
    launcher, decision = _layers.lowest_layer(
        "1.0", _spec(), fusion=fusion(), native=native(), pattern=1
    )
    assert launcher is None
    assert decision.startswith("the public allreduce_fusion: inspecting FlashInfer")
    assert raised in decision


def test_an_interrupt_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted() -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(_layers, "measured", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _layers.lowest_layer(
            "1.0", _spec(), fusion=fusion_double, native=TRTLLMAllReduceFusionWorkspace(), pattern=1
        )
