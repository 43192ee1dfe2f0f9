"""In one release's subprocess: how the unified fused call reaches the TRT-LLM kernel.

Run by path, never imported by fi-compat at run time (it imports no fi-compat itself): by
:mod:`fi_compat._measured.installed` against the installed release, behind
:mod:`fi_compat._measured.stand_in`, and by ``tools/layers.py`` against a release from the
release cache, with the real-release harness's ``sitecustomize`` in front of it (the CPU
workarounds). It prints
one JSON document on stdout and nothing else there. The names it looks up arrive in the
environment variable ``FI_COMPAT_LAYERS_NAMES`` (JSON), from ``fi_compat._surface``.

On a TRT-LLM workspace stand-in (the release's own workspace class, made without
``__init__``, holding the attributes its fused call reads), the release's public
``allreduce_fusion`` is called for the residual RMSNorm pattern in three runs with
different switches, eps and tensors. In each run:

* the legacy fused function the public one calls (looked up in the public function's own
  module globals, where the call resolves it) is replaced by a recorder that forwards to
  it, so the probe sees every argument of that call;
* the compiled module's loader that the legacy function calls is replaced by a recorder,
  the kernel boundary, which records and does nothing;
* the public function's lines that run are traced (``sys.settrace`` on its code objects
  only) and reported as the statements they start.

Reported per release: the wrapper chain from the public name to the function FlashInfer
wrote, a SHA-256 of each function's source (the runtime compares them before it binds),
the legacy function's decorator, its parameters, each parameter's *source* (which of the
public call's arguments, workspace attributes or constants it was in every run; see
:func:`source_of`), the statements run, and whether each run reached the kernel. Verdicts
are decided by :mod:`fi_compat._measured.layers`, never here.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import json
import os
import sys
import textwrap
import traceback
import types
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["RUNS", "main", "source_of"]

#: Distinct values per run, so that each legacy argument matches exactly one source.
RUNS: tuple[dict[str, Any], ...] = (
    {
        "launch_with_pdl": True,
        "trigger_completion_at_end": False,
        "fp32_acc": False,
        "use_oneshot": None,
        "rms_eps": 1.5e-5,
    },
    {
        "launch_with_pdl": False,
        "trigger_completion_at_end": True,
        "fp32_acc": True,
        "use_oneshot": True,
        "rms_eps": 2.5e-5,
    },
    {
        "launch_with_pdl": True,
        "trigger_completion_at_end": False,
        "fp32_acc": True,
        "use_oneshot": False,
        "rms_eps": 3.5e-5,
    },
)
#: The stand-in workspace and tensors: tokens > world size (two-shot is allowed), and a call
#: narrower than the workspace (``WORKSPACE_HIDDEN``) that fits it, so a hidden size that
#: reaches the legacy call is told apart: the call's own (source ``hidden``) or the
#: workspace's (no source matches).
TOKENS, HIDDEN, WORLD, RANK, MAX_TOKENS = 6, 256, 4, 3, 64
WORKSPACE_HIDDEN = 2 * HIDDEN
#: Caller tensors whose flattened views the legacy call may receive.
VIEWED = ("input", "residual_in", "residual_out", "norm_out")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def describe(function: Any) -> dict[str, Any]:
    """Where a callable comes from: module, qualified name, code file and name."""
    code = getattr(function, "__code__", None)
    return {
        "module": getattr(function, "__module__", None),
        "qualname": getattr(function, "__qualname__", None),
        "code_name": getattr(code, "co_name", None),
        "code_file": os.path.basename(code.co_filename) if code is not None else None,
        "deprecated": hasattr(function, "__deprecated__"),
        "wrapped": hasattr(function, "__wrapped__"),
    }


def chain(function: Any) -> list[Any]:
    """``function`` and each ``__wrapped__`` below it, the innermost last."""
    layers = [function]
    while hasattr(layers[-1], "__wrapped__") and len(layers) < 8:
        layers.append(layers[-1].__wrapped__)
    return layers


class LayerKernel:
    """The compiled module stand-in: every attribute is a recording no-op."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> None:
            if args:
                kwargs = {**{f"#{i}": value for i, value in enumerate(args)}, **kwargs}
            self.calls.append((name, kwargs))

        return record


def source_of(value: Any, given: dict[str, Any], workspace: Any) -> set[str]:
    """Every source ``value`` can have come from in one run (empty: none of them).

    Tensors: a caller tensor by identity (``weight`` as ``rms_gamma``), the flattened view
    of one (``view:<name>``: a 1-D tensor on its storage, from its first element, of all
    its elements), a workspace tensor attribute (``workspace.<attr>``), or ``scratch``: a
    new 1-D tensor of the input's dtype, device and element count sharing no caller
    storage. Other objects: a workspace attribute by identity, else a given scalar of the
    same type and value, else nothing (the tool then compares values across runs).
    """
    import torch

    found: set[str] = set()
    for name, candidate in given.items():
        if value is candidate and not isinstance(value, (bool, int, float, type(None))):
            found.add(name)
    for attribute in ("workspace_tensor", "metadata", "world_size", "rank"):
        held = getattr(workspace, attribute, None)
        if value is held and not isinstance(value, (bool, int, float, type(None))):
            found.add(f"workspace.{attribute}")
    if isinstance(value, torch.Tensor) and not found:
        for name in VIEWED:
            tensor = given[name]
            if (
                value.dim() == 1
                and value.data_ptr() == tensor.data_ptr()
                and value.numel() == tensor.numel()
                and value.dtype == tensor.dtype
                and value.stride() == (1,)
            ):
                found.add(f"view:{name}")
        caller_storages = {
            given[name].untyped_storage().data_ptr() for name in (*VIEWED, "rms_gamma")
        }
        x = given["input"]
        if (
            not found
            and value.dim() == 1
            and value.numel() == x.numel()
            and value.dtype == x.dtype
            and value.device == x.device
            and value.untyped_storage().data_ptr() not in caller_storages
        ):
            found.add("scratch")
        return found
    if found:
        return found
    for name, candidate in given.items():
        if isinstance(candidate, (bool, int, float, type(None))) and (
            type(value) is type(candidate) and value == candidate
        ):
            found.add(name)
    for attribute in ("world_size", "rank"):
        held = getattr(workspace, attribute, None)
        if type(value) is type(held) and value == held:
            found.add(f"workspace.{attribute}")
    return found


def statements(lines: list[str], first: int) -> Callable[[set[int]], list[str]]:
    """Line numbers of a function's file -> the statements starting there, as source.

    ``lines`` and ``first`` are the function's source lines and first line number, as
    :func:`inspect.getsourcelines` gives them.
    """
    tree = ast.parse(textwrap.dedent("".join(lines)))
    starts: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            line = node.lineno + first - 1
            if isinstance(node, (ast.If, ast.While)):
                text = f"{type(node).__name__.lower()} {ast.unparse(node.test)}"
            elif isinstance(node, ast.For):
                text = f"for {ast.unparse(node.target)} in {ast.unparse(node.iter)}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                text = f"def {node.name}({ast.unparse(node.args)})"
            elif isinstance(node, ast.Try):
                text = "try"
            elif isinstance(node, ast.With):
                text = f"with {', '.join(ast.unparse(item) for item in node.items)}"
            else:
                text = ast.unparse(node)
            starts.setdefault(line, " ".join(text.split()))

    def texts(executed: set[int]) -> list[str]:
        return [starts[line] for line in sorted(executed) if line in starts]

    return texts


def trace_lines(filename: str, first: int, last: int, executed: set[int]) -> Callable[..., Any]:
    """A ``sys.settrace`` function recording into ``executed`` the lines run by code of
    ``filename`` that starts in lines ``first`` to ``last`` (excluded)."""

    def local(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            executed.add(frame.f_lineno)
        return local

    def tracer(frame: types.FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        frame_code = frame.f_code
        if frame_code.co_filename == filename and first <= frame_code.co_firstlineno < last:
            return local
        return None

    return tracer


def measure() -> dict[str, Any]:
    names = json.loads(os.environ["FI_COMPAT_LAYERS_NAMES"])
    import flashinfer
    import torch

    document: dict[str, Any] = {
        "probe": 1,
        "version": getattr(flashinfer, "__version__", None),
        "location": os.path.dirname(flashinfer.__file__ or ""),
    }
    try:
        comm = importlib.import_module(names["comm"])
    except Exception as error:
        document["error"] = f"import {names['comm']}: {type(error).__name__}: {error}"
        return document
    public = getattr(comm, names["fusion"], None)
    if public is None:
        document["error"] = f"{names['comm']} has no {names['fusion']}"
        return document
    layers = chain(public)
    original = layers[-1]
    document["chain"] = [describe(layer) for layer in layers]
    document["fusion_source"] = sha256(inspect.getsource(original))
    namespace = original.__globals__
    legacy = namespace.get(names["legacy"])
    workspace_class = namespace.get(names["workspace"])
    if legacy is None or workspace_class is None:
        document["error"] = (
            f"{names['fusion']}'s module has no {names['legacy']} or {names['workspace']}"
        )
        return document
    legacy_layers = chain(legacy)
    raw = legacy_layers[-1]
    document["legacy_chain"] = [describe(layer) for layer in legacy_layers]
    document["legacy_source"] = sha256(inspect.getsource(raw))
    signature = inspect.signature(raw)
    document["legacy_parameters"] = list(signature.parameters)
    accepted = inspect.signature(original).parameters
    pattern = getattr(namespace[names["pattern_class"]], names["pattern"])
    document["pattern"] = pattern

    kernel = LayerKernel()
    kernel_namespace = raw.__globals__
    getter = names["kernel_getter"]
    saved_getter = kernel_namespace.get(getter)
    kernel_namespace[getter] = lambda *args, **kwargs: kernel
    legacy_calls: list[dict[str, Any]] = []

    def recording_legacy(*args: Any, **kwargs: Any) -> Any:
        legacy_calls.append(dict(signature.bind(*args, **kwargs).arguments))
        return legacy(*args, **kwargs)

    namespace[names["legacy"]] = recording_legacy
    lines, first = inspect.getsourcelines(original)
    texts = statements(lines, first)
    span = (original.__code__.co_filename, first, first + len(lines))
    runs: list[dict[str, Any]] = []
    candidates: dict[str, set[str] | None] = dict.fromkeys(signature.parameters)
    constants: dict[str, list[Any]] = {name: [] for name in signature.parameters}
    try:
        for number, switches in enumerate(RUNS):
            workspace = object.__new__(workspace_class)
            workspace._destroyed = True  # nothing to free
            workspace.world_size, workspace.rank = WORLD, RANK
            workspace.workspace_tensor = torch.zeros(WORLD * 3, dtype=torch.int64)
            workspace.metadata = {
                "max_token_num": MAX_TOKENS,
                "tp_size": WORLD,
                "hidden_dim": WORKSPACE_HIDDEN,
                "use_fp32_lamport": False,
            }
            workspace.mem_handles = []
            torch.manual_seed(number)
            x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
            given: dict[str, Any] = {
                "input": x,
                "residual_in": torch.randn_like(x),
                "residual_out": torch.empty_like(x),
                "norm_out": torch.empty_like(x),
                "rms_gamma": torch.randn(HIDDEN, dtype=torch.bfloat16),
                "pattern": pattern,
                "tokens": TOKENS,
                "hidden": HIDDEN,
            }
            kwargs = {
                name: value for name, value in given.items() if name not in ("tokens", "hidden")
            }
            kwargs.update({name: value for name, value in switches.items() if name in accepted})
            given.update(switches)
            executed: set[int] = set()
            legacy_calls.clear()
            kernel.calls.clear()
            run: dict[str, Any] = {"switches": dict(switches), "error": None}
            previous = sys.gettrace()
            sys.settrace(trace_lines(*span, executed))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    public(workspace=workspace, **kwargs)
            except Exception as error:
                run["error"] = f"{type(error).__name__}: {error}"
                run["traceback"] = traceback.format_exc(limit=-3)
            finally:
                sys.settrace(previous)
            run["statements"] = texts(executed)
            run["legacy_calls"] = len(legacy_calls)
            run["kernel_calls"] = [name for name, _ in kernel.calls]
            runs.append(run)
            if len(legacy_calls) != 1:
                continue
            call = legacy_calls[0]
            for name, parameter in signature.parameters.items():
                if name in call:
                    value = call[name]
                    found = source_of(value, given, workspace)
                else:  # left to the legacy function's default
                    value, found = parameter.default, {"default"}
                known = candidates[name]
                candidates[name] = found if known is None else known & found
                plain = isinstance(value, (bool, int, float, str, type(None)))
                constants[name].append(value if plain else f"<{type(value).__name__}>")
    finally:
        namespace[names["legacy"]] = legacy
        if saved_getter is None:
            kernel_namespace.pop(getter, None)
        else:
            kernel_namespace[getter] = saved_getter
    document["runs"] = runs
    document["sources"] = {
        name: sorted(found) if found is not None else None for name, found in candidates.items()
    }
    document["values"] = constants
    return document


def main() -> int:
    """Print the measurement as JSON on stdout; FlashInfer's own output goes to stderr."""
    stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        document = measure()
    finally:
        sys.stdout = stdout
    json.dump(document, sys.stdout, sort_keys=True, default=repr)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
