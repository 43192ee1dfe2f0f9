"""Hostile inputs at every public comm entry point: typed errors, and nothing reaches FlashInfer.

The tables below are the bad inputs; each row is run against every entry point it applies
to, on three fakes: the newest release (unified API, ``trigger_completion_at_end``), 0.6.5
(unified API without it) and 0.5.3 (legacy API only). Every row asserts

* the exact fi-compat error class, which is a ``FiCompatError`` and, like every
  ``InvalidArgumentError``, both a ``TypeError`` and a ``ValueError``; and
* that not a single call reached the fake FlashInfer (``kit.calls`` did not grow).

``VALID`` holds the edge values that must keep working.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pytest
from packaging.version import Version

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
from fi_compat.errors import (
    CallSizeUnsupportedError,
    FiCompatError,
    InvalidArgumentError,
    WorkspaceMismatchError,
)
from fi_compat.testing import FakeFlashInfer, available_releases, fake_flashinfer, load_release

try:
    import numpy
except ImportError:  # pragma: no cover - numpy ships with torch here
    numpy = None  # type: ignore[assignment]

NEWEST = available_releases()[-1]
NO_TRIGGER = "0.6.5"
LEGACY = "0.5.3"
RELEASES = (NEWEST, NO_TRIGGER, LEGACY)
TOKENS, HIDDEN, MAX_TOKENS = 4, 64, 8
DTYPE = torch.bfloat16
RMSNORM = comm.AllReduceFusionPattern.kARResidualRMSNorm
FP8_QUANT = comm.AllReduceFusionPattern.kARResidualRMSNormFP8Quant

Args = dict[str, Any]
Mutate = Callable[[Args], None]


class _FlashInferWorkspace:
    """Marker: replaced, at run time, by FlashInfer's own workspace object from the fake."""

    def __repr__(self) -> str:
        return "<flashinfer workspace>"


FI_WORKSPACE: Any = _FlashInferWorkspace()

#: Things that are not tensors, for every tensor argument.
NOT_TENSORS: list[tuple[str, Any]] = [
    ("None", None),
    ("list", []),
    ("nested list", [[0.0] * HIDDEN] * TOKENS),
    ("str", "input"),
    ("int", 1),
    ("float", 1.5),
    ("object", object()),
    ("flashinfer workspace", FI_WORKSPACE),
]
if numpy is not None:
    NOT_TENSORS.append(("numpy array", numpy.zeros((TOKENS, HIDDEN), dtype=numpy.float32)))

#: Things that are not bools, for every boolean switch.
NOT_BOOLS: list[tuple[str, Any]] = [
    ("'false'", "false"),
    ("'true'", "true"),
    ("0", 0),
    ("1", 1),
    ("None", None),
    ("1.0", 1.0),
]
if numpy is not None:
    NOT_BOOLS.append(("numpy.bool_", numpy.bool_(True)))

#: Bad values of eps: not a real number, not finite, negative.
BAD_EPS: list[tuple[str, Any]] = [
    ("nan", math.nan),
    ("inf", math.inf),
    ("-inf", -math.inf),
    ("-1.0", -1.0),
    ("-1", -1),
    ("'abc'", "abc"),
    ("None", None),
    ("True", True),
    ("False", False),
    ("list", [1e-6]),
    ("complex", 1e-6 + 0j),
    ("tensor", torch.tensor(1e-6)),
]


def _set(**values: Any) -> Mutate:
    return lambda args: args.update(values)


def _each(**change: Callable[[Any], Any]) -> Mutate:
    """Apply each function to the argument of that name."""

    def mutate(args: Args) -> None:
        for name, function in change.items():
            args[name] = function(args[name])

    return mutate


#: What the drop-in refuses as its ``workspace`` argument.
NOT_WORKSPACES: tuple[object, ...] = (None, "workspace", [], 1, (1, 2), torch.zeros(8))


def _cast(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda tensor: tensor.to(dtype)


def _all_tensors(function: Callable[[torch.Tensor], torch.Tensor]) -> Mutate:
    return _each(input=function, residual=function, weight=function)


def _tokens(count: int) -> Mutate:
    def mutate(args: Args) -> None:
        args["input"] = torch.randn(count, HIDDEN, dtype=DTYPE)
        args["residual"] = torch.randn(count, HIDDEN, dtype=DTYPE)

    return mutate


def _strided(tensor: torch.Tensor) -> torch.Tensor:
    """A non-contiguous tensor of the same shape."""
    if tensor.dim() == 1:
        return torch.randn(HIDDEN * 2, dtype=tensor.dtype)[::2]
    return torch.randn(HIDDEN, tensor.shape[0], dtype=tensor.dtype).t()


def _same_output(args: Args) -> None:
    args["norm_out"] = args["residual_out"] = torch.empty_like(args["input"])


def _output_is_norm_out(args: Args) -> None:
    args["norm_out"] = args["output"] = torch.empty_like(args["input"])


@dataclass(frozen=True)
class Case:
    """One bad input of a call: ``mutate`` turns a good call's arguments into it."""

    id: str
    mutate: Mutate
    error: type[FiCompatError]
    #: Refused only where a workspace says what fits (max tokens, contiguity).
    workspace_only: bool = False


# ----------------------------------------------------------------------------- the tables

#: Tensor arguments of allreduce_residual_rmsnorm / prepare that do not fit.
TENSOR_CASES: list[Case] = [
    *(
        Case(f"{slot}={label}", _set(**{slot: value}), WorkspaceMismatchError)
        for slot in ("input", "residual", "weight")
        for label, value in NOT_TENSORS
    ),
    *(
        Case(f"{slot}={label}", _set(**{slot: value}), WorkspaceMismatchError)
        for slot in ("norm_out", "residual_out")
        for label, value in NOT_TENSORS
        if value is not None  # None asks for the output to be allocated
    ),
    *(
        Case(f"all {dtype}", _all_tensors(_cast(dtype)), WorkspaceMismatchError)
        for dtype in (torch.int64, torch.int32, torch.float64, torch.bool, torch.int8)
    ),
    *(
        Case(f"input {dtype}", _each(input=_cast(dtype)), WorkspaceMismatchError)
        for dtype in (torch.int64, torch.float64, torch.bool, torch.float16)
    ),
    Case("residual float16", _each(residual=lambda t: t.half()), WorkspaceMismatchError),
    Case("weight float32", _each(weight=lambda t: t.float()), WorkspaceMismatchError),
    Case("zero tokens", _tokens(0), WorkspaceMismatchError),
    # Over every rule: exact, product, and MNNVL's lamport buffer, whose allocation is
    # rounded up to a granularity that leaves room for far more than max_token_num.
    Case("too many tokens", _tokens(MAX_TOKENS * 1000), WorkspaceMismatchError, True),
    Case("input 1-D", _each(input=lambda t: t[0].contiguous()), WorkspaceMismatchError),
    Case("input 3-D", _each(input=lambda t: t[None]), WorkspaceMismatchError),
    Case("input 0-D", _set(input=torch.tensor(1.0, dtype=DTYPE)), WorkspaceMismatchError),
    Case(
        "wider than the workspace holds",
        _all_tensors(lambda t: torch.cat([t] * 4096, dim=-1)),
        WorkspaceMismatchError,
        True,
    ),
    Case("zero width", _all_tensors(lambda t: t[..., :0]), WorkspaceMismatchError),
    Case("residual shape", _each(residual=lambda t: t[:-1]), WorkspaceMismatchError),
    Case("weight 2-D", _each(weight=lambda t: t[None]), WorkspaceMismatchError),
    Case("weight short", _each(weight=lambda t: t[:-1]), WorkspaceMismatchError),
    *(
        Case(f"{slot} non-contiguous", _each(**{slot: _strided}), WorkspaceMismatchError, True)
        for slot in ("input", "residual", "weight")
    ),
    *(
        Case(
            f"{slot} non-contiguous",
            _set(**{slot: torch.randn(HIDDEN, TOKENS, dtype=DTYPE).t()}),
            WorkspaceMismatchError,
            True,
        )
        for slot in ("norm_out", "residual_out")
    ),
    *(
        Case(
            f"{slot} float32",
            _set(**{slot: torch.empty(TOKENS, HIDDEN, dtype=torch.float32)}),
            WorkspaceMismatchError,
        )
        for slot in ("norm_out", "residual_out")
    ),
    *(
        Case(
            f"{slot} shape",
            _set(**{slot: torch.empty(TOKENS + 1, HIDDEN, dtype=DTYPE)}),
            WorkspaceMismatchError,
        )
        for slot in ("norm_out", "residual_out")
    ),
    Case("norm_out is residual_out", _same_output, WorkspaceMismatchError),
    Case("norm_out is weight", lambda a: a.update(norm_out=a["weight"]), WorkspaceMismatchError),
    Case(
        "residual_out is weight",
        lambda a: a.update(residual_out=a["weight"]),
        WorkspaceMismatchError,
    ),
]

#: eps and the boolean switches.
SCALAR_CASES: list[Case] = [
    *(Case(f"eps={label}", _set(eps=value), InvalidArgumentError) for label, value in BAD_EPS),
    *(
        Case(f"{flag}={label}", _set(**{flag: value}), InvalidArgumentError)
        for flag in ("fp32_acc", "trigger_completion_at_end", "launch_with_pdl")
        for label, value in NOT_BOOLS
    ),
    *(
        Case(f"use_oneshot={label}", _set(use_oneshot=value), InvalidArgumentError)
        for label, value in NOT_BOOLS
        if value is not None  # None lets FlashInfer choose
    ),
]

#: Something that is not a FusionWorkspace as allreduce_residual_rmsnorm's workspace.
WORKSPACE_CASES: list[Case] = [
    Case(f"workspace={label}", _set(workspace=value), InvalidArgumentError)
    for label, value in NOT_TENSORS
    if value is not None  # None runs the unfused path
] + [
    Case("workspace=True", _set(workspace=True), InvalidArgumentError),
    Case("workspace=tensor", _set(workspace=torch.zeros(8)), InvalidArgumentError),
]

#: Extra arguments of the drop-in allreduce_fusion (on a FusionWorkspace); ``mutate``
#: sees allreduce_residual_rmsnorm's names (residual, weight, eps), renamed afterwards.
DROPIN_CASES: list[Case] = [
    *(
        Case(f"pattern={value!r}", _set(pattern=value), InvalidArgumentError)
        for value in ("1", 1.0, None, True, 99, -1, [1])
    ),
    # Off the fast path (an ``output`` given, or another pattern): every tensor is checked.
    Case(
        "output shape",
        _set(output=torch.empty(TOKENS + 1, HIDDEN, dtype=DTYPE)),
        WorkspaceMismatchError,
    ),
    Case("output str", _set(output="output"), WorkspaceMismatchError),
    Case(
        "residual_in shape, output given",
        lambda a: a.update(output=torch.empty_like(a["input"]), residual=a["residual"][:-1]),
        WorkspaceMismatchError,
    ),
    Case(
        "residual_in shape, FP8 pattern",
        lambda a: a.update(
            pattern=FP8_QUANT,
            residual=a["residual"][:-1],
            quant_out=torch.empty(TOKENS, HIDDEN, dtype=torch.float8_e4m3fn),
        ),
        WorkspaceMismatchError,
    ),
    Case(
        "rms_gamma float32, output given",
        lambda a: a.update(output=torch.empty_like(a["input"]), weight=a["weight"].float()),
        WorkspaceMismatchError,
    ),
    Case("output is norm_out", _output_is_norm_out, WorkspaceMismatchError),
    Case(
        "zero tokens, output given",
        lambda a: a.update(input=a["input"][:0], residual=a["residual"][:0], output=a["input"][:0]),
        WorkspaceMismatchError,
    ),
    Case("quant_out str", _set(pattern=FP8_QUANT, quant_out="q"), WorkspaceMismatchError),
    Case("scale_out list", _set(pattern=FP8_QUANT, scale_out=[]), WorkspaceMismatchError),
    Case("weight_bias str", _set(weight_bias="x"), InvalidArgumentError),
    Case("weight_bias nan", _set(weight_bias=math.nan), InvalidArgumentError),
    Case("layout_code str", _set(layout_code="a"), InvalidArgumentError),
    Case("block_quant_group_size float", _set(block_quant_group_size=1.5), InvalidArgumentError),
    Case("moe_finalize_backend", _set(moe_finalize_backend="x"), InvalidArgumentError),
    Case("scale_factor str", _set(scale_factor="x"), InvalidArgumentError),
    Case(
        "residual_in=None, FP8 pattern",
        _set(pattern=FP8_QUANT, residual=None),
        InvalidArgumentError,
    ),
    Case("rms_gamma=None, FP8 pattern", _set(pattern=FP8_QUANT, weight=None), InvalidArgumentError),
]

#: The drop-in on FlashInfer's own workspace object: passed through, but not garbage.
NATIVE_CASES: list[Case] = [
    *(
        Case(f"input={label}", _set(input=value), InvalidArgumentError)
        for label, value in NOT_TENSORS
    ),
    *(
        Case(f"pattern={value!r}", _set(pattern=value), InvalidArgumentError)
        for value in ("1", 1.0, None, True)
    ),
    *(
        Case(f"workspace={value!r}", _set(workspace=value), InvalidArgumentError)
        for value in NOT_WORKSPACES
    ),
    Case("rms_eps=nan", _set(rms_eps=math.nan), InvalidArgumentError),
    Case("rms_eps='abc'", _set(rms_eps="abc"), InvalidArgumentError),
    Case("launch_with_pdl='false'", _set(launch_with_pdl="false"), InvalidArgumentError),
    Case("fp32_acc=0", _set(fp32_acc=0), InvalidArgumentError),
]

CREATE_BASE: Args = {
    "world_size": 2,
    "rank": 0,
    "max_token_num": MAX_TOKENS,
    "hidden_dim": HIDDEN,
    "dtype": DTYPE,
    "device": "cpu",
}

#: create_workspace(**CREATE_BASE | change) -> error.
CREATE_CASES: list[tuple[Args, type[FiCompatError]]] = [
    *(({"world_size": value}, WorkspaceMismatchError) for value in (0, -1, 2.0, "2", None, True)),
    *(({"rank": value}, WorkspaceMismatchError) for value in (-1, 2, "0", None, 0.0)),
    *(({"max_token_num": value}, WorkspaceMismatchError) for value in (0, 1.5, None, "8")),
    *(({"hidden_dim": value}, WorkspaceMismatchError) for value in (0, "64", None)),
    *(
        ({"dtype": value}, WorkspaceMismatchError)
        for value in (torch.int64, torch.float64, torch.bool, "bfloat16", None, float)
    ),
    *(
        ({"device": value}, InvalidArgumentError)
        for value in ("tpu", 3.5, "cuda:x", object(), "meta", -1, True, [], "cuda:-1")
    ),
    *(({"api": value}, InvalidArgumentError) for value in ("fused", None, 1, "REFERENCE")),
    *(
        ({"backend": value}, InvalidArgumentError)
        for value in ("nccl", None, 1, "TRTLLM", "", b"trtllm", ["trtllm"])
    ),
    *(({"gpus_per_node": value}, InvalidArgumentError) for value in (0, "8", 1.5, True)),
    *(({"force_oneshot_support": value}, InvalidArgumentError) for _, value in NOT_BOOLS),
    *(({"fallback": value}, InvalidArgumentError) for _, value in NOT_BOOLS),
    *(
        ({"factory_options": value}, InvalidArgumentError)
        for value in (
            [("top_k", 8)],
            "top_k",
            1,
            {1: 2},
            {("top_k",): 8},
            {"max_token_num": 4},
            {"max_token_num": MAX_TOKENS},
            {"world_size": 2},
            {"rank": 0},
            {"hidden_dim": HIDDEN},
            {"dtype": DTYPE},
            {"backend": "trtllm"},
            {"group": None},
            {"comm_backend": None},
            {"gpus_per_node": 1},
            {"force_oneshot_support": True},
            {"tp_rank": 0},
            {"tp_size": 2},
            {"use_fp32_lamport": True},
            {"create_metadata": True},
            {"device": "cpu"},
            {"top_k": "8"},
            {"top_k": 0},
            {"rms_eps": "x"},
            {"rms_eps": math.nan},
            {"rms_eps": -1.0},
            {"apply_rms_norm": "false"},
            {"add_residual": 0},
        )
    ),
    # No fused kernel runs 1 rank; the TRT-LLM one runs 2, 4, 8 or 16.
    ({"world_size": 1, "api": "unified"}, InvalidArgumentError),
    ({"world_size": 1, "api": "legacy"}, InvalidArgumentError),
    ({"world_size": 1, "fallback": False}, InvalidArgumentError),
    ({"world_size": 1, "backend": "mnnvl", "fallback": False}, InvalidArgumentError),
    ({"world_size": 3, "rank": 1, "backend": "trtllm", "fallback": False}, InvalidArgumentError),
    ({"world_size": 32, "backend": "trtllm", "fallback": False}, InvalidArgumentError),
    (
        {"world_size": 6, "backend": "trtllm", "api": "auto", "fallback": False},
        InvalidArgumentError,
    ),
]

DROPIN_CREATE_BASE: Args = {
    "world_size": 2,
    "rank": 0,
    "max_token_num": MAX_TOKENS,
    "hidden_dim": HIDDEN,
    "dtype": DTYPE,
}

#: create_allreduce_fusion_workspace(**DROPIN_CREATE_BASE | change) -> error.
DROPIN_CREATE_CASES: list[tuple[Args, type[FiCompatError]]] = [
    ({"world_size": None}, WorkspaceMismatchError),
    ({"rank": 5}, WorkspaceMismatchError),
    ({"dtype": None}, WorkspaceMismatchError),
    ({"dtype": torch.int64}, WorkspaceMismatchError),
    ({"backend": "nccl"}, InvalidArgumentError),
    ({"backend": None}, InvalidArgumentError),
    ({"force_oneshot_support": "no"}, InvalidArgumentError),
    ({"force_oneshot_support": None}, InvalidArgumentError),
    ({"gpus_per_node": 0}, InvalidArgumentError),
    ({"top_k": "8"}, InvalidArgumentError),
    ({"top_k": 0}, InvalidArgumentError),
    ({"rms_eps": math.nan}, InvalidArgumentError),
    ({"weight_bias": "x"}, InvalidArgumentError),
    ({"apply_rms_norm": "false"}, InvalidArgumentError),
    ({"dynamic_fp8": 1}, InvalidArgumentError),
    ({"world_size": 1}, InvalidArgumentError),
    ({"world_size": 3, "rank": 0, "backend": "trtllm"}, InvalidArgumentError),
]

#: Edge values that must keep working: name -> change to a good call.
VALID: list[tuple[str, Mutate]] = [
    ("defaults", _set()),
    (
        "in place: norm_out=input, residual_out=residual",
        lambda a: a.update(norm_out=a["input"], residual_out=a["residual"]),
    ),
    ("eps=0", _set(eps=0)),
    ("eps=1 (int)", _set(eps=1)),
    ("eps=0.0", _set(eps=0.0)),
    ("eps float subclass", _set(eps=type("Eps", (float,), {})(1e-5))),
    ("eps Fraction", _set(eps=Fraction(1, 10**6))),
    ("1 token", _tokens(1)),
    ("max tokens", _tokens(MAX_TOKENS)),
    ("use_oneshot=True", _set(use_oneshot=True)),
    ("use_oneshot=False", _set(use_oneshot=False)),
    ("all switches False", _set(fp32_acc=False, launch_with_pdl=False)),
    ("fp32_acc=True", _set(fp32_acc=True)),
]
if numpy is not None:
    VALID.append(("eps numpy.float64", _set(eps=numpy.float64(1e-6))))
    VALID.append(("eps numpy.float32", _set(eps=numpy.float32(1e-6))))

#: How many bad inputs the tables hold (each is run on every entry point it applies to).
BAD_INPUTS = (
    len(TENSOR_CASES)
    + len(SCALAR_CASES)
    + len(WORKSPACE_CASES)
    + len(DROPIN_CASES)
    + len(NATIVE_CASES)
    + len(CREATE_CASES)
    + len(DROPIN_CREATE_CASES)
)


def test_the_tables() -> None:
    assert BAD_INPUTS >= 250, BAD_INPUTS
    assert load_release(NEWEST).accepts("allreduce_fusion", "trigger_completion_at_end")
    assert load_release(NO_TRIGGER).unified_api
    assert not load_release(NO_TRIGGER).accepts("allreduce_fusion", "trigger_completion_at_end")
    assert not load_release(LEGACY).unified_api


# ---------------------------------------------------------------------------- machinery


@pytest.fixture(scope="module", params=RELEASES)
def kit(request: pytest.FixtureRequest) -> Iterator[FakeFlashInfer]:
    with fake_flashinfer(request.param) as fake:
        yield fake


def _workspace(**options: Any) -> comm.FusionWorkspace:
    workspace = comm.create_workspace(2, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu", **options)
    assert workspace.fused
    return workspace


def _good_args() -> Args:
    x = torch.randn(TOKENS, HIDDEN, dtype=DTYPE)
    return {
        "input": x,
        "residual": torch.randn_like(x),
        "weight": torch.randn(HIDDEN, dtype=DTYPE),
        "eps": 1e-6,
        "norm_out": None,
        "residual_out": None,
        "use_oneshot": None,
        "fp32_acc": False,
        "trigger_completion_at_end": True,
        "launch_with_pdl": True,
    }


def _resolve(args: Args, native: Any) -> Args:
    return {name: native if value is FI_WORKSPACE else value for name, value in args.items()}


def _refused(kit: FakeFlashInfer, expected: type[FiCompatError], call: Callable[[], Any]) -> None:
    before = len(kit.calls)
    with pytest.raises(FiCompatError) as caught:
        call()
    error = caught.value
    assert type(error) is expected, f"{type(error).__name__}: {error}"
    assert isinstance(error, TypeError)
    assert isinstance(error, ValueError)
    assert str(error).startswith("expected "), str(error)
    assert _launches(kit, before) == [], "a bad input reached FlashInfer"


#: The one FlashInfer call a check may make: the MNNVL workspace's own size check, asked
#: with the call's sizes (ints and the dtype, never a tensor) once its tensors have passed.
_SIZE_QUERY = "is_buffer_size_sufficient"


def _launches(kit: FakeFlashInfer, before: int) -> list[str]:
    """The calls that reached FlashInfer since ``before``, but its own size checks."""
    launched = []
    for call in kit.calls[before:]:
        if call.name.endswith(f".{_SIZE_QUERY}"):
            assert not any(isinstance(value, torch.Tensor) for value in call.arguments.values())
            continue
        launched.append(call.name)
    return launched


def _facade(args: Args, workspace: Any) -> Any:
    args = dict(args)
    return comm.allreduce_residual_rmsnorm(
        args.pop("input"),
        args.pop("residual"),
        args.pop("weight"),
        workspace=args.pop("workspace", workspace),
        **args,
    )


def _prepare(args: Args, workspace: comm.FusionWorkspace) -> Any:
    args = dict(args)
    return workspace.prepare(args.pop("input"), args.pop("residual"), args.pop("weight"), **args)


_DROPIN_NAMES = {"residual": "residual_in", "weight": "rms_gamma", "eps": "rms_eps"}


def _dropin_args(args: Args, workspace: Any) -> Args:
    renamed = {_DROPIN_NAMES.get(name, name): value for name, value in args.items()}
    renamed.setdefault("workspace", workspace)
    renamed.setdefault("pattern", RMSNORM)
    return renamed


def _ids(case: Case) -> str:
    return case.id


# ------------------------------------------------------------- allreduce_residual_rmsnorm


@pytest.mark.parametrize("case", TENSOR_CASES + SCALAR_CASES + WORKSPACE_CASES, ids=_ids)
def test_checked_call_refuses(kit: FakeFlashInfer, case: Case) -> None:
    workspace = _workspace()
    args = _good_args()
    case.mutate(args)
    args = _resolve(args, workspace.native)
    _refused(kit, case.error, lambda: _facade(args, workspace))
    workspace.destroy()


@pytest.mark.parametrize("case", TENSOR_CASES + SCALAR_CASES, ids=_ids)
def test_unfused_call_refuses(kit: FakeFlashInfer, case: Case) -> None:
    args = _good_args()
    case.mutate(args)
    args = _resolve(args, _workspace().native)
    if case.workspace_only:
        before = len(kit.calls)
        _facade(args, None)  # nothing to check these against without a workspace: valid
        assert kit.calls[before:] == []
        return
    _refused(kit, case.error, lambda: _facade(args, None))


@pytest.mark.parametrize(("name", "mutate"), VALID, ids=[name for name, _ in VALID])
def test_valid_edges_still_work(kit: FakeFlashInfer, name: str, mutate: Mutate) -> None:
    workspace = _workspace()
    for target in (workspace, None):
        args = _good_args()
        mutate(args)
        expected = (args["norm_out"], args["residual_out"])
        before = len(kit.calls)
        norm_out, residual_out = _facade(args, target)
        if expected[0] is not None:
            assert norm_out is expected[0]
            assert residual_out is expected[1]
        assert norm_out.shape == residual_out.shape == args["input"].shape
        assert len(_launches(kit, before)) == (1 if target is workspace else 0)
    prepared = _prepare(args, workspace)
    before = len(kit.calls)
    prepared()
    assert len(_launches(kit, before)) == 1
    workspace.destroy()


def _narrower(**change: Callable[[Args], Any]) -> Mutate:
    """A call half the workspace's width (served where the release serves other widths),
    then ``change``: each function of the arguments gives that argument's value."""

    def mutate(args: Args) -> None:
        x = torch.randn(TOKENS, HIDDEN // 2, dtype=DTYPE)
        args.update(input=x, residual=torch.randn_like(x))
        args["weight"] = torch.randn(HIDDEN // 2, dtype=DTYPE)
        for name, function in change.items():  # in order: one may read another
            args[name] = function(args)

    return mutate


#: Tensors that do not fit a call of another width than the workspace's: each refused with
#: WorkspaceMismatchError on every release (on the legacy API, for the width itself).
NARROWER_CASES: list[Case] = [
    Case(
        "weight of the workspace's width",
        _narrower(weight=lambda a: torch.randn(HIDDEN, dtype=DTYPE)),
        WorkspaceMismatchError,
    ),
    Case(
        "residual of the workspace's width",
        _narrower(residual=lambda a: torch.randn(TOKENS, HIDDEN, dtype=DTYPE)),
        WorkspaceMismatchError,
    ),
    Case(
        "norm_out of the workspace's width",
        _narrower(norm_out=lambda a: torch.empty(TOKENS, HIDDEN, dtype=DTYPE)),
        WorkspaceMismatchError,
    ),
    Case(
        "input a strided view of a wider tensor",
        _narrower(input=lambda a: torch.randn(TOKENS, HIDDEN, dtype=DTYPE)[:, : HIDDEN // 2]),
        WorkspaceMismatchError,
    ),
    Case(
        "norm_out is residual_out",
        _narrower(
            norm_out=lambda a: torch.empty_like(a["input"]),
            residual_out=lambda a: a["norm_out"],
        ),
        WorkspaceMismatchError,
    ),
    Case(
        "norm_out is the weight",
        _narrower(norm_out=lambda a: a["weight"]),
        WorkspaceMismatchError,
    ),
    Case(
        "zero tokens",
        _narrower(input=lambda a: a["input"][:0], residual=lambda a: a["residual"][:0]),
        WorkspaceMismatchError,
    ),
]


@pytest.mark.parametrize("path", ["checked", "prepare", "dropin"])
@pytest.mark.parametrize("case", NARROWER_CASES, ids=_ids)
def test_a_narrower_call_with_a_bad_tensor_is_refused(
    kit: FakeFlashInfer, case: Case, path: str
) -> None:
    """Aliased or mismatched tensors on a call of another width: typed, nothing launched.
    On the legacy API, which serves its own width only, the refusal may be for the width
    (``CallSizeUnsupportedError``, a ``WorkspaceMismatchError`` too)."""
    workspace = _workspace()
    args = _good_args()
    case.mutate(args)
    if path == "prepare":
        call: Callable[[], Any] = lambda: _prepare(args, workspace)  # noqa: E731
    elif path == "dropin":
        call = lambda: comm.allreduce_fusion(**_dropin_args(args, workspace))  # noqa: E731
    else:
        call = lambda: _facade(args, workspace)  # noqa: E731
    if workspace.fit.rule != "exact":
        _refused(kit, case.error, call)
    else:
        before = len(kit.calls)
        with pytest.raises(WorkspaceMismatchError) as caught:
            call()
        assert str(caught.value).startswith("expected ")
        assert _launches(kit, before) == [], "a bad input reached FlashInfer"
    workspace.destroy()


@pytest.mark.parametrize("path", ["checked", "prepare", "dropin"])
def test_a_call_that_fits_only_by_the_product(kit: FakeFlashInfer, path: str) -> None:
    """Twice the tokens at half the width: within tokens x hidden, but neither bound alone.
    Served where the release serves any call that fits (its kernel gets the call's own
    sizes); refused before any launch where the workspace serves only its own width (the
    legacy API), with CallSizeUnsupportedError naming the release that serves it."""
    workspace = _workspace()
    x = torch.randn(2 * MAX_TOKENS, HIDDEN // 2, dtype=DTYPE)
    args = {**_good_args(), "input": x, "residual": torch.randn_like(x)}
    args["weight"] = torch.randn(HIDDEN // 2, dtype=DTYPE)

    def call() -> Any:
        if path == "prepare":
            return _prepare(args, workspace)()
        if path == "dropin":
            return comm.allreduce_fusion(**_dropin_args(args, workspace))
        return _facade(args, workspace)

    before = len(kit.calls)
    if workspace.fit.rule == "exact":
        with pytest.raises(CallSizeUnsupportedError) as caught:
            call()
        assert _launches(kit, before) == []
        assert caught.value.feature == "per_call_sizes:legacy"
        assert caught.value.introduced_in is not None
        assert Version(caught.value.introduced_in) > Version(kit.version)
    else:
        call()
        (launched,) = [c for c in kit.calls[before:] if not c.name.endswith(_SIZE_QUERY)]
        arguments = launched.arguments
        reached = (
            tuple(arguments["input"].shape)
            if "input" in arguments
            else (arguments["token_num"], arguments["hidden_dim"])
        )
        assert reached == (2 * MAX_TOKENS, HIDDEN // 2)
    workspace.destroy()


def test_int_eps_reaches_flashinfer_as_a_float(kit: FakeFlashInfer) -> None:
    workspace = _workspace()
    args = _good_args()
    args["eps"] = 0
    before = len(kit.calls)
    _facade(args, workspace)
    (call,) = kit.calls[before:]
    eps = call.arguments.get("rms_eps")
    assert eps.__class__ is float
    assert eps == 0.0
    workspace.destroy()


# ------------------------------------------------------------------------------- prepare


@pytest.mark.parametrize("case", TENSOR_CASES + SCALAR_CASES, ids=_ids)
def test_prepare_refuses(kit: FakeFlashInfer, case: Case) -> None:
    workspace = _workspace()
    args = _good_args()
    case.mutate(args)
    args = _resolve(args, workspace.native)
    _refused(kit, case.error, lambda: _prepare(args, workspace))
    assert not list(workspace._prepared)
    workspace.destroy()


# ------------------------------------------------------------------------------ drop-ins

_DROPIN_OVERRIDES: dict[str, type[FiCompatError]] = {
    # allreduce_fusion takes None there as "not given": then it is missing.
    "residual=None": InvalidArgumentError,
    "weight=None": InvalidArgumentError,
}


@pytest.mark.parametrize("path", ["fast", "checked"])
@pytest.mark.parametrize("case", TENSOR_CASES + SCALAR_CASES + DROPIN_CASES, ids=_ids)
def test_dropin_call_refuses(kit: FakeFlashInfer, case: Case, path: str) -> None:
    workspace = _workspace()
    args = _good_args()
    case.mutate(args)
    args = _resolve(_dropin_args(args, workspace), workspace.native)
    if path == "checked" and "output" not in args:
        # An output given takes the path that maps every argument to the release.
        args["output"] = torch.empty(TOKENS, HIDDEN, dtype=DTYPE)
    error = _DROPIN_OVERRIDES.get(case.id, case.error)
    _refused(kit, error, lambda: comm.allreduce_fusion(**args))
    workspace.destroy()


@pytest.mark.parametrize("path", ["fast", "checked"])
@pytest.mark.parametrize(("name", "mutate"), VALID, ids=[name for name, _ in VALID])
def test_dropin_valid_edges_still_work(
    kit: FakeFlashInfer, name: str, mutate: Mutate, path: str
) -> None:
    workspace = _workspace()
    args = _good_args()
    mutate(args)
    args = _dropin_args(args, workspace)
    if path == "checked":
        args["output"] = torch.empty_like(args["input"])
    before = len(kit.calls)
    result = comm.allreduce_fusion(**args)
    assert result.shape == args["input"].shape
    assert len(_launches(kit, before)) == 1
    workspace.destroy()


def _native(kit: FakeFlashInfer) -> Any:
    """FlashInfer's own workspace object, made by the fake's factory."""
    return kit.comm.create_allreduce_fusion_workspace(
        backend="auto",
        world_size=2,
        rank=0,
        max_token_num=MAX_TOKENS,
        hidden_dim=HIDDEN,
        dtype=DTYPE,
    )


@pytest.mark.parametrize("case", NATIVE_CASES, ids=_ids)
def test_dropin_on_a_native_workspace_refuses(kit: FakeFlashInfer, case: Case) -> None:
    if not kit.record.unified_api:
        pytest.skip("the release has no allreduce_fusion to pass a workspace object to")
    native = _native(kit)
    args = _good_args()
    case.mutate(args)
    args = _resolve(_dropin_args(args, native), native)
    _refused(kit, case.error, lambda: comm.allreduce_fusion(**args))


def test_dropin_on_a_native_workspace_passes_through(kit: FakeFlashInfer) -> None:
    if not kit.record.unified_api:
        pytest.skip("the release has no allreduce_fusion to pass a workspace object to")
    native = _native(kit)
    args = _dropin_args(_good_args(), native)
    args["norm_out"] = torch.empty_like(args["input"])
    args["residual_out"] = torch.empty_like(args["input"])
    before = len(kit.calls)
    comm.allreduce_fusion(**args)
    (call,) = kit.calls[before:]
    assert call.name == "allreduce_fusion"
    assert call.arguments["workspace"] is native


# -------------------------------------------------------------------------------- creation


def _stable_id(change: Args) -> str:
    """The case's repr without memory addresses: pytest-xdist's workers must collect the
    same ids."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(change))


@pytest.mark.parametrize(
    ("change", "error"), CREATE_CASES, ids=[_stable_id(change) for change, _ in CREATE_CASES]
)
def test_create_workspace_refuses(
    kit: FakeFlashInfer, change: Args, error: type[FiCompatError]
) -> None:
    _refused(kit, error, lambda: comm.create_workspace(**{**CREATE_BASE, **change}))


@pytest.mark.parametrize(
    ("change", "error"),
    DROPIN_CREATE_CASES,
    ids=[_stable_id(change) for change, _ in DROPIN_CREATE_CASES],
)
def test_dropin_create_refuses(
    kit: FakeFlashInfer, change: Args, error: type[FiCompatError]
) -> None:
    _refused(
        kit,
        error,
        lambda: comm.create_allreduce_fusion_workspace(**{**DROPIN_CREATE_BASE, **change}),
    )


def test_factory_options_cannot_shrink_the_workspace(kit: FakeFlashInfer) -> None:
    """The defect that started this: FlashInfer allocating 4 tokens, fi-compat allowing 16."""
    _refused(
        kit,
        InvalidArgumentError,
        lambda: comm.create_workspace(
            2, 0, 16, HIDDEN, DTYPE, device="cpu", factory_options={"max_token_num": 4}
        ),
    )


def test_valid_creation_edges(kit: FakeFlashInfer) -> None:
    # World size 1 falls back to the unfused path unless fallback=False.
    assert comm.create_workspace(1, 0, MAX_TOKENS, HIDDEN, DTYPE, device="cpu").api == "reference"
    before = len(kit.calls)
    for device in ("cpu", torch.device("cpu"), "cuda:0", 0, torch.device("cuda", 1)):
        comm.create_workspace(**{**CREATE_BASE, "device": device}).destroy()
    comm.create_workspace(**{**CREATE_BASE, "factory_options": {}}).destroy()
    comm.create_workspace(**{**CREATE_BASE, "world_size": 4, "rank": 3}).destroy()
    comm.create_workspace(**{**CREATE_BASE, "world_size": 16, "backend": "trtllm"}).destroy()
    if kit.record.unified_api:
        # FlashInfer may pick MNNVL (up to 64 ranks) for other sizes.
        comm.create_workspace(**{**CREATE_BASE, "world_size": 6, "backend": "mnnvl"}).destroy()
        comm.create_workspace(**{**CREATE_BASE, "world_size": 6}).destroy()
    assert kit.calls[before:]


def test_auto_backend_that_picks_trtllm_for_an_odd_world_is_refused(
    kit: FakeFlashInfer, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not kit.record.unified_api:
        pytest.skip("the legacy API is TRT-LLM: refused before the factory (CREATE_CASES)")
    factory = kit.comm.create_allreduce_fusion_workspace
    made: list[Any] = []

    def picks_trtllm(**kwargs: Any) -> Any:
        native = factory(**kwargs)
        native.backend = "trtllm"
        made.append(native)
        return native

    monkeypatch.setattr(kit.comm, "create_allreduce_fusion_workspace", picks_trtllm)
    with pytest.raises(InvalidArgumentError, match="2, 4, 8, 16"):
        comm.create_workspace(**{**CREATE_BASE, "world_size": 6})
    (native,) = made
    assert native.destroyed or kit.calls_to(f"{type(native).__name__}.destroy")
