"""The per-call path does no release work: no signature inspection, dict building or logging.

A profiler hook records every Python and C function entered during one call; the Python
functions of fi-compat among them are disassembled to show they build no dict and splat
no keywords. The calls run on fakes of the newest release and of a legacy-only release.
(Behind a forwarding wrapper, such as the ``deprecated`` legacy entry points of 0.6.0+, the
arguments go by keyword: the wrapper builds its own ``**kwargs`` dict anyway.)
"""

from __future__ import annotations

import dis
import gc
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
from fi_compat.testing import FakeFlashInfer, available_releases, fake_flashinfer, load_release

TOKENS, HIDDEN = 4, 64
DTYPE = torch.bfloat16
NEWEST = available_releases()[-1]
LEGACY_ONLY = next(v for v in reversed(available_releases()) if not load_release(v).unified_api)
# Opcodes that build a dict (CPython also compiles a call with more than 15 literal
# keywords into one).
DICT_OPS = {"BUILD_MAP", "BUILD_CONST_KEY_MAP", "DICT_MERGE", "DICT_UPDATE", "MAP_ADD"}
FORBIDDEN_MODULES = ("inspect", "logging", "fi_compat.capabilities", "fi_compat._signature")


class Entered:
    """Functions entered during a call: Python code objects and C callables."""

    def __init__(self) -> None:
        self.code: list[types.CodeType] = []
        self.modules: list[str] = []
        self.builtins: list[Any] = []

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.code.append(frame.f_code)
            self.modules.append(str(frame.f_globals.get("__name__", "")))
        elif event == "c_call":
            self.builtins.append(arg)


def _profile(call: Callable[[], object]) -> Entered:
    entered = Entered()
    sys.setprofile(entered)
    try:
        call()
    finally:
        sys.setprofile(None)
    return entered


def _ours(entered: Entered) -> list[types.CodeType]:
    return [
        code
        for code, module in zip(entered.code, entered.modules, strict=True)
        if module.startswith("fi_compat.comm")
    ]


def _qualname(code: types.CodeType) -> str:
    """``code.co_qualname``, which Python 3.10 lacks: there, the function that runs ``code``."""
    if sys.version_info >= (3, 11):
        return code.co_qualname
    functions = [f for f in gc.get_referrers(code) if isinstance(f, types.FunctionType)]
    return functions[0].__qualname__ if functions else code.co_name


def _assert_no_release_work(entered: Entered) -> None:
    forbidden = [m for m in entered.modules if m.startswith(FORBIDDEN_MODULES)]
    assert not forbidden, forbidden
    for code in _ours(entered):
        assert not _builds_dicts(code), _qualname(code)


def _builds_dicts(code: Any) -> set[str]:
    """The dict-building opcodes in ``code``, and a ``**`` splat (CALL_FUNCTION_EX with
    its keyword flag; a positional ``*args`` splat builds no dict)."""
    found = set()
    for instruction in dis.get_instructions(code):
        if instruction.opname in DICT_OPS:
            found.add(instruction.opname)
        elif instruction.opname == "CALL_FUNCTION_EX" and (instruction.arg or 0) & 1:
            found.add("CALL_FUNCTION_EX **")
    return found


@pytest.fixture(params=[NEWEST, LEGACY_ONLY])
def release(request: pytest.FixtureRequest) -> Iterator[FakeFlashInfer]:
    with fake_flashinfer(request.param) as fake:
        yield fake


def _tensors() -> tuple[torch.Tensor, ...]:
    x = torch.randn(TOKENS, HIDDEN, dtype=DTYPE)
    return x, torch.randn_like(x), torch.randn(HIDDEN, dtype=DTYPE)


def test_checked_call_does_no_release_work(release: FakeFlashInfer) -> None:
    workspace = comm.create_workspace(2, 0, 8, HIDDEN, DTYPE, device="cpu")
    x, r, w = _tensors()
    norm_out, residual_out = torch.empty_like(x), torch.empty_like(x)

    def call() -> None:
        comm.allreduce_residual_rmsnorm(
            x, r, w, workspace=workspace, norm_out=norm_out, residual_out=residual_out
        )

    call()  # the first call is no different; run it once anyway to load anything lazy
    release.clear_calls()
    entered = _profile(call)
    assert len(release.calls) == 1
    _assert_no_release_work(entered)
    names = {_qualname(code) for code in _ours(entered)}
    assert "allreduce_residual_rmsnorm" in names
    assert len(_ours(entered)) <= 4, names  # facade, run, validate (and a legacy launch)


def test_prepared_call_enters_nothing_of_ours_but_the_launch(release: FakeFlashInfer) -> None:
    workspace = comm.create_workspace(2, 0, 8, HIDDEN, DTYPE, device="cpu")
    prepared = workspace.prepare(*_tensors())
    release.clear_calls()
    entered = _profile(prepared)
    assert len(release.calls) == 1
    _assert_no_release_work(entered)
    assert [_qualname(code) for code in _ours(entered)] == ["PreparedAllReduce.__call__"]
    # Between the prepared call and the release's function: only functools.partial.
    assert not [b for b in entered.builtins if getattr(b, "__module__", "") == "torch"]


def test_the_checks_catch_dict_building() -> None:
    """The opcode check is not vacuous: a dict built per call is seen."""

    def builds(values: Any) -> Any:
        return {"input": values}

    def splats(function: Callable[..., Any], values: dict[str, Any]) -> Any:
        return function(**values)

    def sixteen_keywords(function: Callable[..., Any], v: Any) -> Any:
        return function(
            a=v, b=v, c=v, d=v, e=v, f=v, g=v, h=v, i=v, j=v, k=v, l=v, m=v, n=v, o=v, p=v
        )

    def positional(function: Callable[..., Any], values: list[Any]) -> Any:
        return function(*values)

    for function in (builds, splats, sixteen_keywords):
        assert _builds_dicts(function.__code__), function.__name__
    assert not _builds_dicts(positional.__code__)
