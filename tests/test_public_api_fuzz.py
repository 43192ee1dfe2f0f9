"""Hypothesis fuzz of the public API: a correct result or a typed fi-compat error, nothing else.

Every argument of every fuzzed entry point is drawn either from its valid values or from
values that are invalid for it (wrong types, truthy strings, out-of-range numbers,
malformed tensors). The oracle is simple and strict:

* every argument valid: the call succeeds and its result is checked against an
  independent computation;
* some argument invalid: the call raises a :class:`~fi_compat.errors.FiCompatError` that
  is an :class:`~fi_compat.errors.InvalidArgumentError` (so a ``TypeError`` and a
  ``ValueError``), and nothing reached the fake FlashInfer.

Any other exception (``AttributeError``, a raw torch error, ...) fails the test. The
number of examples per test is set below; the total is what the closing note of issue 10
reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fi_compat.comm as comm
from fi_compat import determinism
from fi_compat.attention import Settings
from fi_compat.capabilities import get_capabilities
from fi_compat.errors import FiCompatError, InvalidArgumentError
from fi_compat.policy import (
    FUSION_ARCHITECTURES,
    Deployment,
    FusionChoice,
    FusionDecision,
    ScatterMode,
    align_dummy_run_num_tokens,
    decide_fusion,
    should_fuse_mlp_allreduce_with_next_layer,
)
from fi_compat.report import missing
from fi_compat.testing import FakeFlashInfer, available_releases, fake_flashinfer

NEWEST = available_releases()[-1]
EXAMPLES = 150
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ------------------------------------------------------------------- argument strategies


@dataclass(frozen=True)
class Arg:
    """One drawn argument: its value and whether it is valid for its parameter."""

    value: Any
    valid: bool


def _valid(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Arg]:
    return strategy.map(lambda value: Arg(value, True))


def _invalid(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Arg]:
    return strategy.map(lambda value: Arg(value, False))


def either(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Arg]:
    """Mostly valid values, so that the all-valid case is common, with invalid ones mixed in."""
    return st.one_of(_valid(good), _valid(good), _valid(good), _invalid(bad))


_OPAQUE = st.sampled_from([object(), [], {}, (), b"x", bytearray(b"x"), 1j, Ellipsis, print])
#: Values that are never a bool: the truthy and falsy things engines pass by mistake.
NOT_BOOL = st.one_of(
    st.none(),
    st.integers(-2, 2),
    st.floats(allow_nan=True),
    st.sampled_from(["false", "true", "0", "1", "", "no", "False"]),
    _OPAQUE,
)
BOOL = either(st.booleans(), NOT_BOOL)
#: Never an int of the right kind: bools, floats, strings, opaque objects.
NOT_INT = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.sampled_from(["1", "2", "4096"]),
    _OPAQUE,
)


def int_at_least(low: int, high: int) -> st.SearchStrategy[Arg]:
    return either(st.integers(low, high), st.one_of(NOT_INT, st.integers(-5, low - 1)))


#: ``fixed_split_size`` as ``Settings`` takes it: a positive page count, or None / -1 for none.
SPLIT_SIZE = either(
    st.one_of(st.integers(1, 1 << 16), st.sampled_from([None, -1])),
    st.one_of(
        NOT_INT.filter(lambda value: value is not None),
        st.integers(-5, 0).filter(lambda value: value != -1),
    ),
)


def _all_valid(args: dict[str, Arg]) -> bool:
    return all(arg.valid for arg in args.values())


def _values(args: dict[str, Arg]) -> dict[str, Any]:
    return {name: arg.value for name, arg in args.items()}


def _typed(error: BaseException) -> None:
    """The only acceptable failure: a typed fi-compat error for a bad argument."""
    assert isinstance(error, FiCompatError), repr(error)
    assert isinstance(error, InvalidArgumentError), repr(error)
    assert isinstance(error, TypeError)
    assert isinstance(error, ValueError)
    message = str(error)
    assert message.startswith("expected "), message


def _outcome(call: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, result) or (False, the typed error); anything else propagates and fails."""
    try:
        return True, call()
    except FiCompatError as error:
        _typed(error)
        return False, error


# ------------------------------------------------------------------------ determinism


@FUZZ
@given(arg=BOOL)
def test_set_deterministic(arg: Arg) -> None:
    with determinism.deterministic(False):
        ok, _ = _outcome(lambda: determinism.set_deterministic(arg.value))
        assert ok is arg.valid
        assert determinism.is_deterministic() is (arg.value if arg.valid else False)


@FUZZ
@given(arg=BOOL)
def test_deterministic_block(arg: Arg) -> None:
    def enter() -> bool:
        with determinism.deterministic(arg.value):
            return determinism.is_deterministic()

    ok, inside = _outcome(enter)
    assert ok is arg.valid
    if ok:
        assert inside is arg.value
    assert determinism.is_deterministic() is False


# ----------------------------------------------------------------------------- policy

_ARCHITECTURES = st.sampled_from([*sorted(FUSION_ARCHITECTURES), "LlamaForCausalLM"])
deployment_args = st.fixed_dictionaries(
    {
        "architecture": either(
            _ARCHITECTURES, st.one_of(st.just(""), st.none(), st.integers(), _OPAQUE)
        ),
        "compute_capability": either(
            st.tuples(st.integers(0, 12), st.integers(0, 9)),
            st.one_of(
                st.none(),
                st.just("9.0"),
                st.lists(st.integers(0, 12), min_size=2, max_size=2),
                st.tuples(st.integers(0, 12)),
                st.tuples(st.integers(0, 12), st.integers(0, 9), st.integers(0, 9)),
                st.tuples(st.booleans(), st.integers(0, 9)),
                st.tuples(st.integers(-9, -1), st.integers(0, 9)),
            ),
        ),
        "device_name": either(st.text(max_size=12), st.one_of(st.none(), st.integers(), _OPAQUE)),
        "tp_size": int_at_least(1, 16),
        "nnodes": int_at_least(1, 4),
        "dp_attention": BOOL,
        "attn_cp_size": int_at_least(1, 4),
        "moe_a2a_backend": either(
            st.sampled_from(["none", "deepep", "mooncake"]),
            st.one_of(st.just(""), st.none(), st.integers(), _OPAQUE),
        ),
        "deterministic": BOOL,
        "fusion_choice": either(
            st.sampled_from(list(FusionChoice)),
            st.one_of(st.sampled_from(["enable", "disable", None, 1, True]), _OPAQUE),
        ),
    }
)


@FUZZ
@given(args=deployment_args)
def test_deployment_and_decision(args: dict[str, Arg]) -> None:
    ok, result = _outcome(lambda: decide_fusion(Deployment(**_values(args))))
    assert ok is _all_valid(args)
    if ok:
        assert isinstance(result, FusionDecision)
        values = _values(args)
        if values["deterministic"] or values["fusion_choice"] is FusionChoice.ENFORCE_DISABLE:
            assert result.enabled is False
        if values["tp_size"] == 1 or values["dp_attention"]:
            assert result.enabled is False


@FUZZ
@given(
    args=st.fixed_dictionaries(
        {
            "fusion_enabled": either(st.booleans(), NOT_BOOL),
            "mlp_mode": either(
                st.sampled_from(list(ScatterMode)), st.one_of(st.just("full"), NOT_INT)
            ),
            "is_last_layer": BOOL,
            "tp_size": int_at_least(1, 16),
            "num_tokens": int_at_least(0, 5000),
            "max_fusion_tokens": int_at_least(1, 4096),
        }
    )
)
def test_should_fuse(args: dict[str, Arg]) -> None:
    values = _values(args)
    ok, result = _outcome(lambda: should_fuse_mlp_allreduce_with_next_layer(**values))
    assert ok is _all_valid(args)
    if ok:
        expected = (
            values["fusion_enabled"]
            and values["mlp_mode"] in (ScatterMode.TP_ATTN_FULL, ScatterMode.FULL)
            and not values["is_last_layer"]
            and values["tp_size"] > 1
            and 0 < values["num_tokens"] <= values["max_fusion_tokens"]
        )
        assert result is expected


@FUZZ
@given(
    args=st.fixed_dictionaries(
        {
            "num_tokens": int_at_least(0, 10_000),
            "attn_tp_size": int_at_least(1, 16),
            "require_mlp_sync": BOOL,
        }
    )
)
def test_align_dummy_run(args: dict[str, Arg]) -> None:
    values = _values(args)
    ok, result = _outcome(lambda: align_dummy_run_num_tokens(**values))
    assert ok is _all_valid(args)
    if ok:
        size = values["attn_tp_size"]
        tokens = values["num_tokens"]
        expected = math.ceil(tokens / size) * size if values["require_mlp_sync"] else tokens
        assert result == expected


# -------------------------------------------------------------------------- attention


@FUZZ
@given(
    args=st.fixed_dictionaries(
        {
            "deterministic": either(
                st.sampled_from([None, False]), NOT_BOOL.filter(lambda value: value is not None)
            ),
            "prefill_split_size": SPLIT_SIZE,
            "decode_split_size": SPLIT_SIZE,
            "cuda_graph": BOOL,
            "disable_split_kv": either(
                st.sampled_from([None, True, False]),
                NOT_BOOL.filter(lambda value: value is not None),
            ),
        }
    )
)
def test_settings(args: dict[str, Arg]) -> None:
    values = _values(args)
    with determinism.deterministic(False):
        ok, result = _outcome(lambda: Settings(**values).resolved())
    graph_with_split = values["cuda_graph"] is True and values["disable_split_kv"] is False
    assert ok is (_all_valid(args) and not graph_with_split)
    if ok:
        assert result.deterministic is False
        assert result.split_kwargs("decode") == {}


# ------------------------------------------------------------------------------ comm

HIDDEN = 8
MAX_TOKENS = 4
FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def _tensor(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator).to(dtype)


_NOT_TENSOR = st.one_of(
    st.none(),
    st.lists(st.floats(-1, 1), max_size=3),
    st.sampled_from(["tensor", 1.0, 3]),
    _OPAQUE,
)


@st.composite
def rmsnorm_calls(draw: st.DrawFn, *, fixed_dtype: torch.dtype | None) -> dict[str, Arg]:
    """The arguments of one ``allreduce_residual_rmsnorm`` call, each valid or not.

    ``fixed_dtype`` is the workspace's dtype; None means no workspace (the unfused path),
    where the input itself sets the dtype and the hidden size, so the input's invalid
    values are only those that are invalid whatever the other tensors are.
    """
    dtype = fixed_dtype or draw(st.sampled_from(FLOATS))
    tokens = draw(st.integers(1, MAX_TOKENS))
    seed = draw(st.integers(0, 1000))

    def tensor(
        shape: tuple[int, ...], offset: int, *, sets_shape: bool, output: bool = False
    ) -> st.SearchStrategy[Arg]:
        def make(s: tuple[int, ...], d: torch.dtype = dtype) -> torch.Tensor:
            return _tensor(s, torch.float32, seed + offset).to(d)

        shapes = [(1, *shape), shape[1:] or (2, 2), (0, *shape[1:])]
        if not sets_shape:
            shapes.append((*shape[:-1], shape[-1] + 1))
        dtypes = [torch.int64, torch.float64, torch.bool, torch.int8]
        if not sets_shape:
            dtypes += [d for d in FLOATS if d is not dtype]
        bad = [
            _NOT_TENSOR.filter(lambda value: value is not None) if output else _NOT_TENSOR,
            st.sampled_from(shapes).map(make),
            st.sampled_from(dtypes).map(lambda d: make(shape, d)),
        ]
        if fixed_dtype is not None and len(shape) == 2 and shape[0] > 1:
            bad.append(st.just(shape).map(lambda s: make((s[1], s[0])).t()))  # strided
        return either(st.just(shape).map(make), st.one_of(*bad))

    shape = (tokens, HIDDEN)
    args = {
        "input": draw(tensor(shape, 0, sets_shape=fixed_dtype is None)),
        "residual": draw(tensor(shape, 1, sets_shape=False)),
        "weight": draw(tensor((HIDDEN,), 2, sets_shape=False)),
        "eps": draw(
            either(
                st.floats(0, 1e-2),
                st.one_of(
                    st.sampled_from([math.nan, math.inf, -1.0, "1e-6", None, True, b"x"]),
                    _OPAQUE,
                ),
            )
        ),
        "fp32_acc": draw(BOOL),
        "trigger_completion_at_end": draw(BOOL),
        "launch_with_pdl": draw(BOOL),
        "use_oneshot": draw(
            either(
                st.sampled_from([None, True, False]),
                NOT_BOOL.filter(lambda value: value is not None),
            )
        ),
    }
    for name in ("norm_out", "residual_out"):
        args[name] = draw(
            st.one_of(
                st.just(Arg(None, True)),
                tensor(shape, 3 if name == "norm_out" else 4, sets_shape=False, output=True),
            )
        )
    if draw(st.integers(0, 9)) == 0 and args["norm_out"].value is not None:
        args["residual_out"] = Arg(args["norm_out"].value, False)  # the two outputs aliased
    return args


def _expected(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One process: no reduction; add in float32, round, norm over the rounded residual."""
    residual_out = (x.to(torch.float32) + residual.to(torch.float32)).to(x.dtype)
    wide = residual_out.to(torch.float32)
    scale = torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (wide * scale * weight.to(torch.float32)).to(x.dtype), residual_out


def _call(values: dict[str, Any], workspace: Any) -> tuple[torch.Tensor, torch.Tensor]:
    values = dict(values)
    return comm.allreduce_residual_rmsnorm(
        values.pop("input"),
        values.pop("residual"),
        values.pop("weight"),
        workspace=workspace,
        **values,
    )


@FUZZ
@given(args=rmsnorm_calls(fixed_dtype=None))
def test_unfused_call_without_workspace(args: dict[str, Arg]) -> None:
    values = _values(args)
    snapshot = {
        name: value.clone() for name, value in values.items() if isinstance(value, torch.Tensor)
    }
    ok, result = _outcome(lambda: _call(values, None))
    assert ok is _all_valid(args)
    if not ok:
        for name, before in snapshot.items():  # nothing was written on refusal
            assert torch.equal(values[name], before), name
        return
    norm_out, residual_out = result
    expected_norm, expected_residual = _expected(
        snapshot["input"], snapshot["residual"], snapshot["weight"], values["eps"]
    )
    assert torch.equal(residual_out, expected_residual)
    torch.testing.assert_close(norm_out, expected_norm)
    for name in ("norm_out", "residual_out"):
        if values[name] is not None:
            assert result[name == "residual_out"] is values[name]


@contextmanager
def _fused_workspace(dtype: torch.dtype) -> Iterator[tuple[FakeFlashInfer, comm.FusionWorkspace]]:
    with fake_flashinfer(NEWEST) as fake:
        workspace = comm.create_workspace(2, 0, MAX_TOKENS, HIDDEN, dtype, device="cpu")
        assert workspace.api == "unified"
        yield fake, workspace
        workspace.destroy()


@pytest.mark.parametrize("prepared", [False, True], ids=["checked", "prepared"])
def test_fused_call_reaches_the_kernel_only_when_valid(prepared: bool) -> None:
    dtype = torch.bfloat16
    with _fused_workspace(dtype) as (fake, workspace):

        @FUZZ
        @given(args=rmsnorm_calls(fixed_dtype=dtype))
        def check(args: dict[str, Arg]) -> None:
            values = _values(args)
            before = len(fake.calls_to("allreduce_fusion"))
            if prepared:
                rest = dict(values)
                tensors = (rest.pop("input"), rest.pop("residual"), rest.pop("weight"))
                ok, result = _outcome(lambda: workspace.prepare(*tensors, **rest)())
            else:
                ok, result = _outcome(lambda: _call(values, workspace))
            calls = fake.calls_to("allreduce_fusion")[before:]
            assert ok is _all_valid(args)
            if not ok:
                assert calls == []
                return
            (call,) = calls
            arguments = call.arguments
            assert arguments["input"] is values["input"]
            assert arguments["residual_in"] is values["residual"]
            assert arguments["rms_gamma"] is values["weight"]
            assert arguments["rms_eps"] == values["eps"]
            assert arguments["norm_out"] is result[0]
            assert arguments["residual_out"] is result[1]
            for name in ("launch_with_pdl", "trigger_completion_at_end", "fp32_acc"):
                assert arguments[name] is values[name]

        check()


_DEVICES = st.sampled_from(["tpu", "cuda:x", 3.5, -2, "", b"cpu", "meta:0"])
workspace_args = st.fixed_dictionaries(
    {
        "world_size": either(st.sampled_from([2, 4, 8]), st.one_of(NOT_INT, st.integers(-2, 1))),
        "max_token_num": int_at_least(1, 64),
        "hidden_dim": int_at_least(1, 64),
        "dtype": either(
            st.sampled_from(FLOATS),
            st.one_of(st.sampled_from([torch.int64, torch.float64, "bfloat16"]), _OPAQUE),
        ),
        "device": either(st.sampled_from(["cpu", torch.device("cpu")]), _DEVICES),
        "force_oneshot_support": BOOL,
        "fallback": BOOL,
        "factory_options": either(
            st.sampled_from([None, {}]),
            st.one_of(
                st.sampled_from(
                    [
                        {"max_token_num": 4},
                        {"world_size": 2},
                        {"dtype": torch.float16},
                        {"hidden_dim": 8},
                        {"rank": 0},
                        {1: 2},
                        [("top_k", 2)],
                        "top_k=2",
                    ]
                ),
                # an empty dict is a mapping of no options: valid, so not among the bad ones
                _OPAQUE.filter(lambda value: value != {}),
            ),
        ),
    }
)


def test_create_workspace_refuses_before_flashinfer() -> None:
    with fake_flashinfer(NEWEST) as fake:

        @FUZZ
        @given(args=workspace_args, rank=st.integers(0, 7))
        def check(args: dict[str, Arg], rank: int) -> None:
            values = _values(args)
            world = values["world_size"]
            rank_ok = isinstance(world, int) and not isinstance(world, bool) and rank < world
            before = len(fake.calls)
            ok, workspace = _outcome(
                lambda: comm.create_workspace(
                    values.pop("world_size"),
                    rank,
                    values.pop("max_token_num"),
                    values.pop("hidden_dim"),
                    values.pop("dtype"),
                    **values,
                )
            )
            assert ok is (_all_valid(args) and rank_ok)
            if not ok:
                assert fake.calls[before:] == []
                return
            assert workspace.api == "unified"
            (created,) = fake.calls_to("create_allreduce_fusion_workspace")[-1:]
            assert created.arguments["max_token_num"] == workspace.max_token_num
            assert created.arguments["world_size"] == workspace.world_size
            assert created.arguments["hidden_dim"] == workspace.hidden_dim
            workspace.destroy()

        check()


# ---------------------------------------------------------------------------- report


def _reported() -> list[str]:
    """Names the report prints for its answers, as ``--require`` takes them."""
    capabilities = get_capabilities()
    return sorted(
        {
            *(
                f"{owner}.{keyword}"
                for table in (capabilities.comm.kwargs, capabilities.attention)
                for owner, answers in table.items()
                for keyword in answers
            ),
            "group",
            "fixed_split_size",
            "flashinfer",
            "comm",
        }
    )


_REPORTED = _reported()


@FUZZ
@given(
    names=st.lists(
        st.one_of(
            st.sampled_from(_REPORTED).map(lambda name: (name, True)),
            # "~" starts no name the report prints.
            st.text(max_size=30).map(lambda text: (f"~{text}".replace(",", ";"), False)),
            st.sampled_from(_REPORTED).map(lambda name: (f"foo.bar.{name}", False)),
        ),
        max_size=4,
    )
)
def test_require_names(names: list[tuple[str, bool]]) -> None:
    ok, lacking = _outcome(lambda: missing(get_capabilities(), [name for name, _ in names]))
    assert ok is all(known for _, known in names)
    if ok:
        assert isinstance(lacking, list)
        assert all(isinstance(entry, str) for entry in lacking)
