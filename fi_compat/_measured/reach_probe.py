"""In one release's subprocess: call each attention wrapper's ``plan``, record the kernel calls.

Run by path, never imported by fi-compat at run time (it imports no fi-compat itself):
by :mod:`fi_compat._measured.installed` against the installed release, behind
:mod:`fi_compat._measured.stand_in`, and by ``tools/reach.py`` against a release from the
release cache, with the real-release harness's ``sitecustomize`` (CUDA runtime preload,
stand-ins for GPU 0's properties) in front of it. It prints one JSON document on stdout
and nothing else there; FlashInfer's own output goes to stderr.

What it does, so that a plan can run on a CPU machine without changing what it decides:

* ``pin_memory=True`` is dropped from torch's factory functions and ``Tensor.pin_memory``
  returns the tensor (there is no pinned allocator without CUDA); ``torch.cuda.device`` is
  a no-op context. Nothing else in torch is touched.
* Every compiled-module loader of the release (each ``get_*module*`` / ``gen_*module*``
  function in a ``flashinfer`` module, and ``setup_cubin_loader``) is replaced by one
  returning a :class:`Stub`: any attribute of it is a function that records its call.
  That call is the *kernel boundary*: what FlashInfer hands to its compiled planner. A
  loader that builds a FlashInfer Python class instead (trtllm-gen decode's
  ``TrtllmGenDecodeModule``, whose ``plan`` is a no-op) runs for real, so the boundary
  is the compiled module that class loads.
* A wrapper attribute holding another FlashInfer object with a ``plan`` method (the
  CuTe-DSL wrappers) gets that ``plan`` replaced by a recorder too.
* The device-dependent choices of ``backend="auto"`` (``determine_attention_backend``,
  ``_should_use_fmha_v2_sm120``, ``_blackwell_ragged_auto_upgrade`` and decode's
  ``_auto_decode_prefers_cudnn``) are replaced, in turn, by each answer the release's code
  can give (read from their source or varied over the device inputs), and ``plan`` is
  measured under every combination of the ones it consulted.

Device queries outside those hooks see the harness's stand-in GPU (compute capability
9.0). The plan is two requests of 20 and 23 tokens, 4 query and 4 KV heads of dimension 64,
pages of 16, bf16, ``kv_layout="NHD"``; when ``plan`` fails asking for ``HND`` (trtllm-gen,
prims) or for causal attention (trtllm-gen prefill), the backend is measured again that
way and the report says so.

For each family, backend and answer it runs ``plan`` without the split settings, then with
``(7919, False)``, ``(7920, False)``, ``(7919, True)`` and ``(None, True)``, then once more
without (a plan that fails only when repeated is the probe's state, not a refusal), each
on a fresh wrapper with fresh tensors, and reports each run's error (if any), the boundary
calls with their plain arguments, and the wrapper attributes that hold a sentinel
afterwards. Verdicts are decided by :mod:`fi_compat._measured.reach`, never here.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import itertools
import json
import os
import re
import sys
import textwrap
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["CANDIDATE_BACKENDS", "FAMILIES", "SETTINGS", "Stub", "main"]

#: The split settings of the measured runs, as ``(fixed_split_size, disable_split_kv)``.
SETTINGS: tuple[tuple[int | None, bool], ...] = ((7919, False), (7920, False), (7919, True))
#: The CUDA-graph pair: FlashInfer maps ``None`` to ``-1``.
GRAPH_SETTINGS: tuple[int | None, bool] = (None, True)

#: Backend values tried on every family that takes ``backend=``; a release offers the ones
#: its class source spells as a string literal and its constructor does not reject.
CANDIDATE_BACKENDS: tuple[str, ...] = (
    "auto",
    "fa2",
    "fa3",
    "cudnn",
    "cutlass",
    "trtllm-gen",
    "cute-dsl",
    "cute-dsl-prims",
    "cute-dsl-monolithic",
    "cute-dsl-modular",
    "fmha_v2",
    "cutile",
    "xqa",
    "prims-ts",
    "cake",
)

#: Names fi-compat spells in ``fi_compat._surface`` alone, handed over by its runner
#: (this module imports no fi-compat): the decode module and its fast plan's name.
NAMES: dict[str, Any] = json.loads(os.environ.get("FI_COMPAT_REACH_NAMES", "{}"))

#: The families to measure, as exported from top-level ``flashinfer``
#: (``fi_compat._surface.ATTENTION_FAMILIES``, in its order: paged prefill, ragged prefill,
#: decode, CUDA-graph decode, then the others).
FAMILIES: tuple[str, ...] = tuple(NAMES.get("families", ()))
PAGED_FAMILY, RAGGED_FAMILY, DECODE_FAMILY, GRAPH_DECODE_FAMILY = (*FAMILIES, "", "", "", "")[:4]
#: Families whose ``kv_indptr`` counts tokens, not pages.
RAGGED = frozenset({RAGGED_FAMILY})
#: Families whose query rows are one token per request.
DECODE_LIKE = frozenset(
    {
        DECODE_FAMILY,
        GRAPH_DECODE_FAMILY,
        "PODWithPagedKVCacheWrapper",
        "BatchMLAPagedAttentionWrapper",
    }
)

#: What device queries outside the ``auto`` hooks see: the harness's stand-in GPU (an H100).
STAND_IN_CAPABILITY = (9, 0)

#: Functions that load compiled code: the module loaders, and the cubin loader hook-up.
LOADER = re.compile(r"^(get|gen)_\w*module\w*$|^setup_cubin_loader$")
#: ``__init__`` errors that say the backend value itself is not one the class offers.
INVALID_BACKEND = re.compile(
    r"(unsupported|invalid|unknown|unrecognized|unrecognised)\s+(attention\s+)?backend"
    r"|backend\s*(must be|should be|is not one of)|not a valid backend"
    r"|does not support backend\s*="
    r"|backend (is )?not yet supported|backend is not supported for",
    re.IGNORECASE,
)

#: A numpydoc ``backend : str`` entry, up to the next parameter or section.
BACKEND_DOC = re.compile(r"^\s*backend\s*:[^\n]*\n((?:[ \t]+[^\n]*\n|[ \t]*\n)*)", re.MULTILINE)
#: A value spelled as inline code in such an entry.
DOC_VALUE = re.compile(r"``([A-Za-z0-9_-]+)``")

#: KV layouts tried in turn: the second only when ``plan`` fails asking for it (trtllm-gen).
LAYOUTS = ("NHD", "HND")

#: An ``assert`` that checks the backend value against the offered ones.
REJECTING_ASSERT = re.compile(r"assert\s+.*backend\w*\s+(not\s+)?in\b")

#: The calls recorded since the last reset: ``(boundary, args, kwargs)``.
CALLS: list[dict[str, Any]] = []
#: The ``auto`` hooks consulted since the last reset.
CONSULTED: set[str] = set()
#: The answer each ``auto`` hook gives now.
ANSWERS: dict[str, Any] = {}


# ----------------------------------------------------------------------- values and stubs


def plain(value: Any) -> Any:
    """A JSON-able picture of an argument: scalars as they are, anything else by its type."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and len(value) <= 8:
        return [plain(item) for item in value]
    module = type(value).__module__
    if module.startswith("torch") and type(value).__name__ == "dtype":
        return f"<{value}>"
    return f"<{type(value).__name__}>"


class Stub:
    """A compiled module, or anything it returned: attributes are recording functions.

    Calling a stub records ``(its dotted path, the plain arguments)`` in :data:`CALLS` and
    returns another stub, so whatever FlashInfer does with a plan's result works.
    """

    def __init__(self, path: str) -> None:
        self._path = path

    def __getattr__(self, name: str) -> Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{self._path}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Stub:
        CALLS.append(
            {
                "boundary": self._path,
                "args": [plain(arg) for arg in args],
                "kwargs": {key: plain(value) for key, value in sorted(kwargs.items())},
            }
        )
        return Stub(f"{self._path}()")

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __getitem__(self, key: Any) -> Stub:
        return Stub(f"{self._path}[]")

    def __len__(self) -> int:
        return 0

    def __int__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return True


def _loader(name: str) -> Callable[..., Stub]:
    def load(*args: Any, **kwargs: Any) -> Stub:
        return Stub(f"{name}(...)")

    load.__name__ = name
    return load


def _recording_plan(path: str) -> Callable[..., Stub]:
    def plan(*args: Any, **kwargs: Any) -> Stub:
        return Stub(path)(*args, **kwargs)

    return plan


# ----------------------------------------------------------------- the CPU workarounds


def _patch_torch(torch: Any) -> None:
    """Drop ``pin_memory`` everywhere torch would need a pinned allocator."""
    for name in ("empty", "zeros", "ones", "full", "tensor", "arange", "empty_like", "zeros_like"):
        original = getattr(torch, name)

        def factory(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            kwargs.pop("pin_memory", None)
            return __original(*args, **kwargs)

        setattr(torch, name, factory)
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    torch.cuda.device = lambda *args, **kwargs: contextlib.nullcontext()
    torch.cuda.current_stream = lambda *args, **kwargs: Stub("torch.cuda.current_stream()")
    torch.cuda.current_device = lambda: 0


def _patch_compute_capability() -> None:
    """Answer ``get_compute_capability`` for the CPU device as the harness's stand-in GPU."""
    originals = {
        id(vars(module)["get_compute_capability"])
        for module in _flashinfer_modules()
        if callable(vars(module).get("get_compute_capability"))
    }

    def get_compute_capability(device: Any = None) -> tuple[int, int]:
        return STAND_IN_CAPABILITY

    for module in _flashinfer_modules():
        if id(vars(module).get("get_compute_capability")) in originals:
            module.get_compute_capability = get_compute_capability


def _flashinfer_modules() -> list[Any]:
    return [
        module
        for name, module in sorted(sys.modules.items())
        if module is not None and (name == "flashinfer" or name.startswith("flashinfer."))
    ]


def _import_attention_modules() -> None:
    """Import the modules the families live in, so their loaders can be replaced."""
    for name in (
        "flashinfer.prefill",
        NAMES["decode_module"],
        "flashinfer.mla",
        "flashinfer.attention",
        "flashinfer.pod",
        "flashinfer.sparse",
        "flashinfer.cascade",
        "flashinfer.utils",
        "flashinfer.jit.cubin_loader",
    ):
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _replace_loaders() -> list[str]:
    """Replace every compiled-module loader in every imported flashinfer module."""
    replaced: set[str] = set()
    for module in _flashinfer_modules():
        for name, value in list(vars(module).items()):
            function = inspect.unwrap(value) if callable(value) else None
            if not (LOADER.match(name) and inspect.isfunction(function)):
                continue
            if _builds_python_module(function):
                continue  # its module is Python code: it runs, and loads compiled code itself
            setattr(module, name, _loader(name))
            replaced.add(name)
    return sorted(replaced)


def _builds_python_module(function: Any) -> bool:
    """Whether a loader instantiates a FlashInfer Python class (``TrtllmGenDecodeModule()``).

    Such a "module" is Python code whose ``plan`` may ignore what it is given (trtllm-gen
    decode's is a no-op): the loader is kept so that the kernel boundary is the compiled
    module that Python class loads, not the class.
    """
    tree = _function_source(function)
    if tree is None:
        return False
    names = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    scope = getattr(function, "__globals__", {})
    return any(
        inspect.isclass(scope.get(name))
        and (getattr(scope[name], "__module__", "") or "").startswith("flashinfer")
        for name in names
    )


# --------------------------------------------------------------------- the auto hooks


def _function_source(func: Any) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None


def _returned_strings(func: Any) -> list[str]:
    tree = _function_source(func)
    if tree is None:
        return []
    return sorted(
        {
            node.value.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Return)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        }
    )


def _compared_strings(func: Any, name: str) -> list[str]:
    """String constants compared with the variable ``name`` in the function's body."""
    tree = _function_source(func)
    if tree is None:
        return []
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Name)
            and node.left.id == name
        ):
            for comparator in node.comparators:
                if isinstance(comparator, ast.Constant) and isinstance(comparator.value, str):
                    found.add(comparator.value)
    return sorted(found)


#: Device inputs of decode's ``_auto_decode_prefers_cudnn``, per answer label.
DECODE_CUDNN_DEVICES: dict[str, dict[str, Any]] = {
    "sm100 with cuDNN": {
        "compute_capability": (10, 0),
        "frontend_serves_frost_decode": True,
        "cudnn_available": True,
        "frontend_leads_short_caches": True,
        "frost_runtime_available": True,
    },
    "sm90": {
        "compute_capability": (9, 0),
        "frontend_serves_frost_decode": False,
        "cudnn_available": False,
        "frontend_leads_short_caches": False,
        "frost_runtime_available": False,
    },
}


def _install_hooks() -> dict[str, list[Any]]:
    """Replace the device-dependent ``auto`` choices; returns each hook's possible answers."""
    hooks: dict[str, list[Any]] = {}
    originals: dict[str, Any] = {}
    for module in _flashinfer_modules():
        for name in (
            "determine_attention_backend",
            "_should_use_fmha_v2_sm120",
            "_blackwell_ragged_auto_upgrade",
            "_auto_decode_prefers_cudnn",
        ):
            value = vars(module).get(name)
            if inspect.isfunction(value) and name not in originals:
                originals[name] = value
    if "determine_attention_backend" in originals:
        answers = _returned_strings(originals["determine_attention_backend"]) or ["fa2"]
        hooks["determine_attention_backend"] = sorted(answers, key=lambda a: a != "fa2")
    if "_should_use_fmha_v2_sm120" in originals:
        hooks["_should_use_fmha_v2_sm120"] = [False, True]
    if "_blackwell_ragged_auto_upgrade" in originals:
        upgrade = originals["_blackwell_ragged_auto_upgrade"]
        hooks["_blackwell_ragged_auto_upgrade"] = [None, *_compared_strings(upgrade, "backend")]
    if "_auto_decode_prefers_cudnn" in originals:
        hooks["_auto_decode_prefers_cudnn"] = sorted(DECODE_CUDNN_DEVICES, reverse=True)

    def constant(name: str) -> Callable[..., Any]:
        def hook(*args: Any, **kwargs: Any) -> Any:
            CONSULTED.add(name)
            return ANSWERS[name]

        return hook

    def decode_cudnn(*args: Any, **kwargs: Any) -> Any:
        CONSULTED.add("_auto_decode_prefers_cudnn")
        original = originals["_auto_decode_prefers_cudnn"]
        accepted = inspect.signature(original).parameters
        device = DECODE_CUDNN_DEVICES[ANSWERS["_auto_decode_prefers_cudnn"]]
        kwargs.update({key: value for key, value in device.items() if key in accepted})
        if "override" in accepted:
            kwargs["override"] = ""
        return original(*args, **kwargs)

    for module in _flashinfer_modules():
        for name in hooks:
            if name in vars(module) and vars(module)[name] is originals[name]:
                replacement = decode_cudnn if name == "_auto_decode_prefers_cudnn" else None
                setattr(module, name, replacement or constant(name))
    for name, answers in hooks.items():
        ANSWERS[name] = answers[0]
    return hooks


def _label(answers: dict[str, Any]) -> str:
    if not answers:
        return "default"
    return ", ".join(f"{name}={value!r}" for name, value in sorted(answers.items()))


# ----------------------------------------------------------------------- arguments


def _tensors(torch: Any, family: str) -> dict[str, Any]:
    """Two requests of 20 and 23 tokens in pages of 16; 3 query rows each (1 for decode)."""
    i32 = torch.int32
    rows = 1 if family in DECODE_LIKE else 3
    paged = {
        "qo_indptr": torch.tensor([0, rows, 2 * rows], dtype=i32),
        "kv_indptr": torch.tensor([0, 2, 4], dtype=i32),
        "indices": torch.arange(4, dtype=i32),
        "last_page_len": torch.tensor([4, 7], dtype=i32),
        "kv_len_arr": torch.tensor([20, 23], dtype=i32),
    }
    if family in RAGGED:
        paged["kv_indptr"] = torch.tensor([0, 20, 43], dtype=i32)
    return paged


def _plan_values(torch: Any, family: str) -> dict[str, Any]:
    t = _tensors(torch, family)
    values: dict[str, Any] = {
        "qo_indptr": t["qo_indptr"],
        "paged_kv_indptr": t["kv_indptr"],
        "kv_indptr": t["kv_indptr"],
        "indptr": t["kv_indptr"],
        "paged_kv_indices": t["indices"],
        "kv_indices": t["indices"],
        "indices": t["indices"],
        "paged_kv_last_page_len": t["last_page_len"],
        "last_page_len": t["last_page_len"],
        "kv_len_arr": t["kv_len_arr"],
        "num_qo_heads": 4,
        "num_kv_heads": 4,
        "head_dim": 64,
        "head_dim_qk": 64,
        "head_dim_vo": 64,
        "page_size": 16,
        "batch_size": 2,
        "num_heads": 16,
        "head_dim_ckv": 512,
        "head_dim_kpe": 64,
        "causal": False,
        "sm_scale": 0.125,
        "q_data_type": torch.bfloat16,
        "kv_data_type": torch.bfloat16,
        "M": 32,
        "N": 32,
        "R": 16,
        "C": 16,
        "block_mask_map": torch.ones((4, 2, 2), dtype=torch.bool),
        "block_row_sz": torch.full((4, 2), 16, dtype=torch.int32),
        "block_col_sz": torch.full((4, 2), 16, dtype=torch.int32),
    }
    if family == "BlockSparseAttentionWrapper":
        values["indptr"] = torch.tensor([0, 2, 4], dtype=torch.int32)
        values["indices"] = torch.tensor([0, 1, 0, 1], dtype=torch.int32)
    if family == "MultiLevelCascadeAttentionWrapper":
        i32 = torch.int32
        shared = {
            "qo": torch.tensor([0, 6], dtype=i32),
            "kv": torch.tensor([0, 1], dtype=i32),
            "idx": torch.tensor([4], dtype=i32),
            "last": torch.tensor([16], dtype=i32),
        }
        t = _tensors(torch, family)
        values["qo_indptr_arr"] = [shared["qo"], t["qo_indptr"]]
        values["paged_kv_indptr_arr"] = [shared["kv"], t["kv_indptr"]]
        values["paged_kv_indices_arr"] = [shared["idx"], t["indices"]]
        values["paged_kv_last_page_len"] = [shared["last"], t["last_page_len"]]
    for name in list(values):
        for suffix in ("_p", "_d"):
            values.setdefault(name + suffix, values[name])
    return values


def _plan_parameters(cls: Any) -> tuple[list[inspect.Parameter], set[str]]:
    """``plan``'s parameters, and the keyword names it accepts through ``**kwargs`` forwards."""
    plan = inspect.signature(cls.plan)
    parameters = [p for name, p in plan.parameters.items() if name != "self"]
    forwarded: set[str] = set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        impl = getattr(cls, NAMES.get("plan_impl", ""), None)
        if impl is not None:
            forwarded = set(inspect.signature(impl).parameters) - {"self"}
    return parameters, forwarded


def _plan_call(torch: Any, family: str, cls: Any) -> tuple[list[Any], dict[str, Any]]:
    values = _plan_values(torch, family)
    parameters, forwarded = _plan_parameters(cls)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.name in values:
            if parameter.kind is parameter.POSITIONAL_ONLY:
                args.append(values[parameter.name])
            else:
                kwargs[parameter.name] = values[parameter.name]
        elif parameter.default is parameter.empty:
            raise LookupError(f"no probe value for plan's parameter {parameter.name!r}")
    for name in sorted(forwarded - set(kwargs)):
        if name in ("q_data_type", "kv_data_type"):
            kwargs[name] = values[name]
    return args, kwargs


def _init_values(torch: Any, family: str) -> dict[str, Any]:
    t = _tensors(torch, family)
    return {
        "float_workspace_buffer": torch.empty(1 << 22, dtype=torch.uint8),
        "workspace_buffer": torch.empty(1 << 22, dtype=torch.uint8),
        "kv_layout": "NHD",
        "use_tensor_cores": True,
        "num_levels": 2,
        "indptr_buffer": t["kv_indptr"].clone(),
        "indices_buffer": t["indices"].clone(),
        "last_page_len_buffer": t["last_page_len"].clone(),
        "device": "cpu",
    }


def _construct(torch: Any, family: str, cls: Any, backend: str | None, layout: str = "NHD") -> Any:
    values = {**_init_values(torch, family), "kv_layout": layout}
    kwargs: dict[str, Any] = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name == "backend":
            if backend is not None:
                kwargs[name] = backend
        elif name in values:
            kwargs[name] = values[name]
        elif parameter.default is parameter.empty:
            raise LookupError(f"no probe value for __init__'s parameter {name!r}")
    return cls(**kwargs)


# ------------------------------------------------------------------------- measuring


def _error(error: BaseException) -> str:
    """``Type: message``; for an empty message, where it was raised and that line's source."""
    message = " ".join(str(error).split())
    if not message:
        frames = traceback.extract_tb(error.__traceback__)
        if frames:
            frame = frames[-1]
            parts = frame.filename.replace("\\", "/").split("/")
            where = (
                "/".join(parts[parts.index("flashinfer") :]) if "flashinfer" in parts else parts[-1]
            )
            message = f"at {where}:{frame.lineno} ({(frame.line or '').strip()})"
    if len(message) > 300:
        message = message[:297] + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def _sentinel_attributes(wrapper: Any) -> dict[str, Any]:
    """Wrapper attributes holding a sentinel of the settings after a plan."""
    kept: dict[str, Any] = {}
    for name, value in sorted(vars(wrapper).items()):
        if isinstance(value, bool):
            continue
        if isinstance(value, int) and value in (7919, 7920):
            kept[name] = value
    return kept


def _wrap_sub_planners(wrapper: Any) -> list[str]:
    """Replace ``plan`` of FlashInfer objects the wrapper holds by recorders."""
    wrapped: list[str] = []
    for name, value in sorted(vars(wrapper).items()):
        module = type(value).__module__ or ""
        if isinstance(value, Stub) or not module.startswith("flashinfer"):
            continue
        if callable(getattr(value, "plan", None)):
            with contextlib.suppress(AttributeError, TypeError):
                value.plan = _recording_plan(f"self.{name}.plan")
                wrapped.append(name)
    return wrapped


def _run(
    call: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], owner: Any
) -> dict[str, Any]:
    CALLS.clear()
    CONSULTED.clear()
    error: str | None = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call(*args, **kwargs)
    except Exception as caught:
        error = _error(caught)
    return {
        "error": error,
        "calls": [dict(entry) for entry in CALLS],
        "kept": _sentinel_attributes(owner),
        "consulted": sorted(CONSULTED),
    }


def _fresh(value: Any) -> Any:
    """A copy of the plan arguments with new tensors: a plan may keep or change its inputs."""
    if isinstance(value, dict):
        return {key: _fresh(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_fresh(item) for item in value]
    clone = getattr(value, "clone", None)
    return clone() if callable(clone) and not isinstance(value, Stub) else value


def _settings_kwargs(settings: tuple[int | None, bool]) -> dict[str, Any]:
    return {"fixed_split_size": settings[0], "disable_split_kv": settings[1]}


def _measure_runs(
    make: Callable[[], tuple[Any, Callable[..., Any]]],
    args: list[Any],
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """Baseline and settings runs, each on a fresh wrapper (and a fresh planned state)."""
    runs: list[dict[str, Any]] = []
    baseline: dict[str, Any] | None = None
    repeat: dict[str, Any] | None = None
    for index, settings in enumerate((None, *SETTINGS, GRAPH_SETTINGS, None)):
        try:
            owner, call = make()
        except Exception as caught:
            run = {"error": "setup: " + _error(caught), "calls": [], "kept": {}, "consulted": []}
        else:
            extra = {} if settings is None else _settings_kwargs(settings)
            run = _run(call, _fresh(args), {**_fresh(kwargs), **extra}, owner)
        if settings is not None:
            runs.append({"settings": list(settings), **run})
        elif index == 0:
            baseline = run
        else:
            repeat = run
    return {"baseline": baseline, "runs": runs, "repeat": repeat}


def _answer_sets(hooks: dict[str, list[Any]], consulted: set[str]) -> list[dict[str, Any]]:
    names = sorted(name for name in hooks if name in consulted)
    return [
        dict(zip(names, combination, strict=True))
        for combination in itertools.product(*(hooks[name] for name in names))
    ]


def _measure_resolutions(
    hooks: dict[str, list[Any]],
    make: Callable[[], tuple[Any, Callable[..., Any]]],
    args: list[Any],
    kwargs: dict[str, Any],
) -> dict[str, Any]:
    """Runs under every combination of answers of the ``auto`` hooks the plan consulted."""
    defaults = {name: answers[0] for name, answers in hooks.items()}
    ANSWERS.update(defaults)
    first = _measure_runs(make, args, kwargs)
    consulted = {name for run in (first["baseline"], *first["runs"]) for name in run["consulted"]}
    if not consulted:
        return {"default": first}
    results: dict[str, Any] = {}
    measured: set[str] = set()
    for _ in range(4):  # a hook may be consulted only under another's answer
        for answers in _answer_sets(hooks, consulted):
            label = _label(answers)
            if label in measured:
                continue
            measured.add(label)
            ANSWERS.update(defaults)
            ANSWERS.update(answers)
            results[label] = _measure_runs(make, args, kwargs)
        seen = {
            name
            for result in results.values()
            for run in (result["baseline"], *result["runs"])
            for name in run["consulted"]
        }
        if seen <= consulted:
            break
        consulted |= seen
    ANSWERS.update(defaults)
    return results


def _construct_any_layout(
    torch: Any, family: str, cls: Any, backend: str | None
) -> tuple[Any, str]:
    """A wrapper in the first KV layout its ``__init__`` accepts for this backend."""
    for layout in LAYOUTS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return _construct(torch, family, cls, backend, layout), layout
        except Exception as caught:
            other = [item for item in LAYOUTS if item != layout]
            if layout != LAYOUTS[0] or not any(item in str(caught) for item in other):
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _wants(resolutions: dict[str, Any], word: str) -> bool:
    """Whether ``plan`` failed without the settings, asking for ``word`` (``HND``, causal)."""
    errors = [str(result["baseline"]["error"] or "") for result in resolutions.values()]
    return any(word.lower() in error.lower() for error in errors)


def _offered_backends(cls: Any) -> list[str]:
    """Candidates spelled as a string literal in the class's own source (or its bases')."""
    text = ""
    for klass in cls.__mro__:
        if (klass.__module__ or "").startswith("flashinfer"):
            with contextlib.suppress(OSError, TypeError):
                text += inspect.getsource(klass)
    documented = set(DOC_VALUE.findall(_backend_doc(cls)))
    return [
        c for c in CANDIDATE_BACKENDS if f'"{c}"' in text or f"'{c}'" in text or c in documented
    ]


def _backend_doc(cls: Any) -> str:
    """The ``backend`` entry of the constructor's (or the class's) numpydoc parameters."""
    for doc in (inspect.getdoc(cls.__init__) or "", inspect.getdoc(cls) or ""):
        match = BACKEND_DOC.search(doc)
        if match:
            return match.group(1)
    return ""


def _rejects_value(error: BaseException, message: str) -> bool:
    """Whether ``__init__`` refused the backend value itself (not the CPU it runs on)."""
    if INVALID_BACKEND.search(message):
        return True
    frames = traceback.extract_tb(error.__traceback__)
    line = frames[-1].line if frames else ""
    return isinstance(error, AssertionError) and bool(REJECTING_ASSERT.search(line or ""))


def _backend_attribute(wrapper: Any, requested: str) -> list[str]:
    return sorted(name for name, value in vars(wrapper).items() if value == requested)


#: Where a wrapper keeps the backend it was built with: the requested value where a release
#: rewrites ``_backend`` when it resolves ``auto`` (the decode wrapper of 0.7.2), else
#: ``_backend``.
CONSTRUCTED_BACKEND_ATTRIBUTES = ("_requested_backend", "_backend")


def _constructed_backend(torch: Any, family: str, cls: Any) -> str | None:
    """The backend an instance built without ``backend=`` holds after ``__init__``.

    Not the signature's default: a class without ``backend=`` may still hand one to its
    base (the CUDA-graph decode wrapper passes the decode wrapper's ``"auto"`` on), and that
    is what ``plan`` resolves. :mod:`fi_compat._measured.reach` records it as such a class's
    ``default_backend`` (a class with ``backend=`` keeps its signature's default: its
    ``__init__`` may resolve ``"auto"`` for the stand-in GPU). None when the instance cannot
    be built or holds no str.
    """
    try:
        wrapper, _layout = _construct_any_layout(torch, family, cls, None)
    except Exception:  # the class cannot be built on the CPU: nothing read
        return None
    for name in CONSTRUCTED_BACKEND_ATTRIBUTES:
        value = vars(wrapper).get(name)
        if isinstance(value, str):
            return value
    return None


def _measure_family(
    torch: Any, flashinfer: Any, family: str, hooks: dict[str, list[Any]]
) -> dict[str, Any]:
    cls = getattr(flashinfer, family)
    init = inspect.signature(cls.__init__).parameters
    takes_backend = "backend" in init
    default = init["backend"].default if takes_backend else None
    result: dict[str, Any] = {
        "has_plan": callable(getattr(cls, "plan", None)),
        "takes_backend": takes_backend,
        "default_backend": default if isinstance(default, str) else None,
        "backend_attributes": [],
        "backend_attributes_after_plan": [],
        "backends": {},
    }
    if not result["has_plan"]:
        return result
    try:
        args, kwargs = _plan_call(torch, family, cls)
    except LookupError as error:
        result["error"] = str(error)
        return result
    result["constructed_backend"] = _constructed_backend(torch, family, cls)
    backends: list[str | None] = list(_offered_backends(cls)) if takes_backend else [None]
    for backend in backends:
        key = backend if backend is not None else "default"
        try:
            probe, first_layout = _construct_any_layout(torch, family, cls, backend)
        except Exception as caught:
            message = _error(caught)
            if backend is not None and _rejects_value(caught, message):
                continue  # the release does not offer this value
            result["backends"][key] = {"init_error": message}
            continue
        if backend is not None and not result["backend_attributes"]:
            result["backend_attributes"] = _backend_attribute(probe, backend)

        layout, causal = first_layout, False
        for _ in range(3):

            def make(
                backend: str | None = backend, layout: str = layout
            ) -> tuple[Any, Callable[..., Any]]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    wrapper = _construct(torch, family, cls, backend, layout)
                _wrap_sub_planners(wrapper)
                return wrapper, wrapper.plan

            call_kwargs = {**kwargs, "causal": True} if causal else kwargs
            resolutions = _measure_resolutions(hooks, make, args, call_kwargs)
            if _wants(resolutions, LAYOUTS[1]) and layout == LAYOUTS[0]:
                layout = LAYOUTS[1]
            elif _wants(resolutions, "causal") and not causal and "causal" in kwargs:
                causal = True
            else:
                break
        result["backends"][key] = {
            "init_error": None,
            "kv_layout": layout,
            "causal": causal,
            "resolutions": resolutions,
        }
        if backend == "auto":
            # Which attribute still holds the requested value once plan resolved it.
            with contextlib.suppress(Exception):
                wrapper, call = make()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    call(*args, **kwargs)
                result["backend_attributes_after_plan"] = _backend_attribute(wrapper, "auto")
    return result


def _measure_fast_decode_plan(
    torch: Any, flashinfer: Any, hooks: dict[str, list[Any]], decode: dict[str, Any]
) -> dict[str, Any] | None:
    module = sys.modules.get(NAMES["decode_module"])
    fast = getattr(module, NAMES["fast_plan"], None)
    if fast is None:
        return None
    cls = getattr(flashinfer, DECODE_FAMILY)
    parameters = inspect.signature(fast).parameters
    result: dict[str, Any] = {
        "takes": "fixed_split_size" in parameters and "disable_split_kv" in parameters,
        "backends": {},
    }
    args, kwargs = _plan_call(torch, DECODE_FAMILY, cls)
    fast_kwargs = {key: value for key, value in kwargs.items() if key in parameters}
    for key, entry in decode.get("backends", {}).items():
        if entry.get("init_error") is not None:
            result["backends"][key] = {"init_error": "decode wrapper: " + entry["init_error"]}
            continue
        backend = None if key == "default" else key
        layout = str(entry.get("kv_layout", LAYOUTS[0]))
        plan_kwargs = {**kwargs, "causal": True} if entry.get("causal") else kwargs

        def make(
            backend: str | None = backend,
            layout: str = layout,
            plan_kwargs: dict[str, Any] = plan_kwargs,
        ) -> tuple[Any, Callable[..., Any]]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                wrapper = _construct(torch, DECODE_FAMILY, cls, backend, layout)
                _wrap_sub_planners(wrapper)
                wrapper.plan(*_fresh(args), **_fresh(plan_kwargs))
            return wrapper, lambda *a, **k: fast(wrapper, *a, **k)

        resolutions = _measure_resolutions(hooks, make, args, fast_kwargs)
        result["backends"][key] = {"init_error": None, "resolutions": resolutions}
    return result


def measure() -> dict[str, Any]:
    """Import the release on the path and measure every family it exports."""
    import torch

    _patch_torch(torch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flashinfer = importlib.import_module("flashinfer")
        _import_attention_modules()
    loaders = _replace_loaders()
    _patch_compute_capability()
    hooks = _install_hooks()
    families: dict[str, Any] = {}
    for family in FAMILIES:
        if getattr(flashinfer, family, None) is None:
            continue
        try:
            families[family] = _measure_family(torch, flashinfer, family, hooks)
        except Exception as caught:
            families[family] = {"error": _error(caught), "traceback": traceback.format_exc()}
    fast: dict[str, Any] | None = None
    if DECODE_FAMILY in families and "backends" in families[DECODE_FAMILY]:
        try:
            fast = _measure_fast_decode_plan(torch, flashinfer, hooks, families[DECODE_FAMILY])
        except Exception as caught:
            fast = {"error": _error(caught), "traceback": traceback.format_exc()}
    return {
        "probe": 1,
        "version": str(getattr(flashinfer, "__version__", "")),
        "location": str(getattr(flashinfer, "__file__", "")),
        "loaders": loaders,
        "hooks": {name: [plain(a) for a in answers] for name, answers in hooks.items()},
        "families": families,
        "fast_plan": fast,
    }


def main() -> int:
    """Print the measurement as JSON on stdout; FlashInfer's own output goes to stderr."""
    stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        document = measure()
    finally:
        sys.stdout = stdout
    json.dump(document, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
