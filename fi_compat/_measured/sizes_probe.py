"""In one release's subprocess: which call sizes one fused workspace serves.

Run by path, never imported by fi-compat at run time (it imports no fi-compat itself): by
:mod:`fi_compat._measured.installed` against the installed release, behind
:mod:`fi_compat._measured.stand_in`, and by ``tools/sizes.py`` against a release from the
release cache, with the real-release harness's ``sitecustomize`` in front of it (the CPU
workarounds). It prints
one JSON document on stdout and nothing else there. The names it looks up arrive in the
environment variable ``FI_COMPAT_SIZES_NAMES`` (JSON), from ``fi_compat._surface``.

Per backend (``trtllm``, and ``mnnvl`` where the release has it) a workspace is made by the
release's own ``create_allreduce_fusion_workspace`` for ``MAX_TOKENS`` x ``HIDDEN`` bf16 on
``WORLD`` ranks, with only what touches a device or other ranks replaced by recorders in the
FlashInfer modules' globals (see :func:`device_recorders`): the compiled modules' loaders,
the CUDA runtime, symmetric/multicast memory (which allocates exactly the bytes asked for),
the communication backends and barriers, and ``torch``'s CUDA device (CPU tensors instead).
Every size the workspace keeps is the release's own arithmetic.

Then, for every call shape in :data:`SHAPES` and every pattern in :data:`PATTERNS` the
release has, the release's public ``allreduce_fusion`` is called on that workspace; each
observation says whether it raised (type and message) or reached the compiled kernel, and
which token count and hidden size reached it (``token_num``/``hidden_dim`` keywords, else
the shape of the first 2-D tensor argument). ``workspace.is_buffer_size_sufficient`` is
asked about every shape too, and its signature reported. Verdicts are decided by
:mod:`fi_compat._measured.sizes`, never here.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import inspect
import json
import os
import sys
import traceback
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["HIDDEN", "MAX_TOKENS", "PATTERNS", "SHAPES", "WORLD", "main"]

#: The workspace: max_token_num, hidden_dim, world size and rank.
MAX_TOKENS, HIDDEN, WORLD, RANK = 250, 4096, 4, 1
#: Call shapes, name -> (tokens, hidden).
SHAPES: dict[str, tuple[int, int]] = {
    "same": (MAX_TOKENS, HIDDEN),
    "narrower_hidden": (MAX_TOKENS, HIDDEN // 2),
    "fewer_tokens": (8, HIDDEN),
    "more_tokens_product_fits": (2 * MAX_TOKENS, HIDDEN // 2),
    "one_token_over": (MAX_TOKENS + 1, HIDDEN),
    "more_tokens_product_over": (2 * MAX_TOKENS + 2, HIDDEN // 2),
    "double_tokens": (2 * MAX_TOKENS, HIDDEN),
    "wider_hidden_product_fits": (MAX_TOKENS // 2, 2 * HIDDEN),
    "wider_hidden_few_tokens": (8, 2 * HIDDEN),
    "wider_hidden_product_over": (MAX_TOKENS // 2 + 1, 2 * HIDDEN),
    "zero_tokens": (0, HIDDEN),
    "zero_hidden": (8, 0),
}
#: Patterns measured where the release's AllReduceFusionPattern has them.
PATTERNS = (
    "kARResidualRMSNorm",
    "kAllReduce",
    "kARResidualRMSNormFP8Quant",
    "kARResidualRMSNormFP4Quant",
)
BACKENDS = ("trtllm", "mnnvl")
#: Loaders of compiled modules, per FlashInfer module (a recorder stands in for each).
LOADERS = {
    "trtllm_ar": ("get_trtllm_comm_module",),
    "trtllm_mnnvl_ar": ("get_trtllm_mnnvl_comm_module",),
}
_FAKE_BASE = 0x7F0000000000


class SizeKernel:
    """A compiled module stand-in: every attribute is a recording no-op."""

    def __init__(self, owner: str, calls: list[dict[str, Any]]) -> None:
        self._owner, self._calls = owner, calls

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> None:
            self._calls.append({"module": self._owner, "name": name, "args": args, **kwargs})

        return record


class CudaRuntimeStub:
    """Any attribute is a callable returning a ``c_void_p`` (the CUDA runtime stand-in)."""

    def __init__(self, calls: list[str]) -> None:
        self._calls = calls

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(name)
            return ctypes.c_void_p(_FAKE_BASE)

        return record


class Backend:
    """A communication backend stand-in: one rank of ``WORLD``, barriers do nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._group = types.SimpleNamespace(group_name="0")
        self.group = self._group

    def Get_rank(self) -> int:
        return RANK

    def Get_size(self) -> int:
        return WORLD

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        pass

    def Barrier(self, *args: Any, **kwargs: Any) -> None:
        pass

    def allgather(self, data: Any) -> list[Any]:
        return [data] * WORLD

    def bcast(self, data: Any, root: int = 0) -> Any:
        return data

    def Split(self, *args: Any, **kwargs: Any) -> Backend:
        return self


class Memory:
    """Symmetric / multicast memory stand-in: exactly the bytes asked for, on the CPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import torch

        size = kwargs.get("buf_size", args[0] if args else 0)
        self.buf_size = self.buffer_size = int(size)
        self.mapped = True
        self.comm_backend = Backend()
        self.mcast_device_memory = self
        self.tensor = torch.zeros(1, dtype=torch.int64)
        self.uc_ptrs = self.buffer_ptrs = self.get_buffer_ptrs_host()
        self.buffer_ptrs_dev = self.signal_pad_ptrs_dev = _FAKE_BASE
        self.multicast_ptr = _FAKE_BASE + 0x100000

    def get_buffer_ptrs_host(self) -> list[int]:
        return [_FAKE_BASE + rank * 4096 for rank in range(WORLD)]

    def get_buffer_ptrs_dev(self) -> int:
        return _FAKE_BASE

    def get_unicast_ptr(self, rank: int) -> int:
        return _FAKE_BASE + rank * 4096

    def get_multicast_ptr(self) -> int:
        return _FAKE_BASE + 0x100000

    def get_signal_pad_ptrs_dev(self) -> int:
        return _FAKE_BASE

    def lamport_initialize(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


def _alloc(size_bytes: int, world_size: int, dtype: Any, *args: Any, **kwargs: Any) -> Any:
    import torch

    element = torch.empty(0, dtype=dtype).element_size()
    tensor = torch.zeros(max(1, size_bytes // element), dtype=dtype)
    return [_FAKE_BASE + rank * 4096 for rank in range(world_size)], tensor, Memory(size_bytes)


class _Cuda:
    """``torch.cuda`` with one device of index 0 that never runs anything."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def current_device(self) -> int:
        return 0

    def device_count(self) -> int:
        return WORLD

    def synchronize(self, *args: Any) -> None:
        pass

    def is_available(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _Distributed:
    """``torch.distributed`` with a WORLD group that has a name and barriers that return."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.group = types.SimpleNamespace(WORLD=types.SimpleNamespace(group_name="0"))

    def barrier(self, *args: Any, **kwargs: Any) -> None:
        pass

    def get_rank(self, *args: Any) -> int:
        return RANK

    def get_world_size(self, *args: Any) -> int:
        return WORLD

    def is_initialized(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _Torch:
    """A module's ``torch`` global: the real torch, with CUDA devices made CPU devices."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.cuda = _Cuda(real.cuda)
        self.distributed = _Distributed(real.distributed)

    def device(self, *args: Any, **kwargs: Any) -> Any:
        return self._real.device("cpu")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@contextlib.contextmanager
def device_recorders(calls: list[dict[str, Any]], names: dict[str, str]) -> Iterator[list[str]]:
    """Replace, in FlashInfer's comm modules, every global that touches a device or other
    ranks; yield the list the CUDA runtime stand-in records into; restore all on exit.
    ``names`` are the probe's names (the torch.distributed backend class's among them)."""
    import torch

    runtime: list[str] = []
    replacements: dict[str, Any] = {
        "cudart": CudaRuntimeStub(runtime),
        "SymmDeviceMemory": Memory,
        "McastGPUBuffer": Memory,
        "_alloc_symm_buffer_bytes": _alloc,
        names["backend_class"]: Backend,
        "MPIBackend": Backend,
        "mpi_barrier": lambda: None,
        "dist": _Distributed(torch.distributed),
        "torch": _Torch(torch),
        "is_confidential_compute": lambda *args, **kwargs: False,
    }
    saved: list[tuple[dict[str, Any], str, Any]] = []
    for name in list(sys.modules):
        module = sys.modules[name]
        if not name.startswith("flashinfer.comm") or module is None:
            continue
        namespace = vars(module)
        short = name.rsplit(".", 1)[-1]
        wanted = dict(replacements)
        for loader in LOADERS.get(short, ()):
            kernel = SizeKernel(short, calls)
            wanted[loader] = lambda *args, _kernel=kernel, **kwargs: _kernel
        for key, value in wanted.items():
            if key in namespace:
                saved.append((namespace, key, namespace[key]))
                namespace[key] = value
    try:
        yield runtime
    finally:
        for namespace, key, value in reversed(saved):
            namespace[key] = value


def _summary(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return {"tensor": list(value.shape), "dtype": str(value.dtype).replace("torch.", "")}
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_summary(item) for item in value]
    return f"<{type(value).__name__}>"


def reached(call: dict[str, Any]) -> list[int] | None:
    """The (tokens, hidden) a kernel call carries: its ``token_num``/``hidden_dim``
    keywords, else the shape of its first 2-D tensor argument."""
    import torch

    if isinstance(call.get("token_num"), int) and isinstance(call.get("hidden_dim"), int):
        return [call["token_num"], call["hidden_dim"]]
    values = [*call.get("args", ()), *(v for k, v in call.items() if k not in ("args",))]
    for value in values:
        if isinstance(value, torch.Tensor) and value.dim() == 2:
            return [int(value.shape[0]), int(value.shape[1])]
    return None


def _tensors(
    pattern_name: str, tokens: int, hidden: int, number: int, layout: Any
) -> dict[str, Any]:
    """The public call's keyword arguments for one pattern and shape."""
    import torch

    torch.manual_seed(number)
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16)
    kwargs: dict[str, Any] = {"input": x}
    if pattern_name == "kAllReduce":
        kwargs["output"] = torch.empty_like(x)
        return kwargs
    kwargs.update(
        residual_in=torch.randn_like(x),
        residual_out=torch.empty_like(x),
        norm_out=torch.empty_like(x),
        rms_gamma=torch.randn(hidden, dtype=torch.bfloat16),
        rms_eps=1e-5,
    )
    if pattern_name == "kARResidualRMSNormFP8Quant":
        kwargs["norm_out"] = None
        kwargs["quant_out"] = torch.empty(tokens, hidden, dtype=torch.float8_e4m3fn)
        kwargs["scale_factor"] = torch.ones(1, dtype=torch.float32)
    elif pattern_name == "kARResidualRMSNormFP4Quant":
        kwargs["norm_out"] = None
        kwargs["quant_out"] = torch.empty(tokens, hidden // 2, dtype=torch.uint8)
        rows = (tokens + 127) // 128 * 128
        columns = (hidden // 16 + 3) // 4 * 4
        kwargs["scale_out"] = torch.empty(rows * columns, dtype=torch.float8_e4m3fn)
        kwargs["scale_factor"] = torch.ones(1, dtype=torch.float32)
        kwargs["layout_code"] = layout
    return kwargs


def _create(comm: Any, names: dict[str, str], backend: str) -> tuple[Any | None, dict[str, Any]]:
    import torch

    factory = getattr(comm, names["factory"])
    accepted = inspect.signature(factory).parameters
    arguments: dict[str, Any] = {
        "backend": backend,
        "world_size": WORLD,
        "rank": RANK,
        "max_token_num": MAX_TOKENS,
        "hidden_dim": HIDDEN,
        "dtype": torch.bfloat16,
        "gpus_per_node": WORLD,
    }
    if "comm_backend" in accepted:
        arguments["comm_backend"] = Backend()
    info: dict[str, Any] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            workspace = factory(**{k: v for k, v in arguments.items() if k in accepted})
    except Exception as error:
        info["error"] = f"{type(error).__name__}: {error}"
        info["traceback"] = traceback.format_exc(limit=-4)
        return None, info
    info["class"] = type(workspace).__name__
    metadata = getattr(workspace, "metadata", None)
    if isinstance(metadata, dict):
        info["metadata"] = {
            key: value for key, value in metadata.items() if isinstance(value, (bool, int, str))
        }
    for attribute in ("buffer_size_bytes", "workspace_size_bytes", "tp_size", "rank"):
        value = getattr(type(workspace), attribute, None)
        if value is None:
            value = vars(workspace).get(attribute)
        if isinstance(value, int):
            info[attribute] = value
    sufficient = getattr(workspace, "is_buffer_size_sufficient", None)
    if sufficient is not None:
        try:
            info["sufficient_signature"] = str(inspect.signature(sufficient))
        except (TypeError, ValueError):
            info["sufficient_signature"] = None
    return workspace, info


def measure_backend(comm: Any, names: dict[str, str], backend: str) -> dict[str, Any]:
    import torch

    calls: list[dict[str, Any]] = []
    pattern_class = getattr(comm, names["pattern_class"])
    result: dict[str, Any] = {}
    with device_recorders(calls, names) as runtime:
        workspace, info = _create(comm, names, backend)
        result["workspace"] = info
        result["creation_kernel_calls"] = sorted({c["name"] for c in calls})
        result["creation_runtime_calls"] = sorted(set(runtime))
        if workspace is None:
            return result
        sufficient = getattr(workspace, "is_buffer_size_sufficient", None)
        answers: dict[str, Any] = {}
        for shape, (tokens, hidden) in SHAPES.items():
            if sufficient is None:
                break
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    answers[shape] = bool(sufficient(WORLD, tokens, hidden, torch.bfloat16))
            except Exception as error:
                answers[shape] = f"{type(error).__name__}: {error}"
        result["sufficient"] = answers
        public = getattr(comm, names["fusion"])
        layout_class = getattr(comm, "QuantizationSFLayout", None)
        layout: Any = None
        if layout_class is not None:
            layout = getattr(layout_class, "SWIZZLED_128x4", None)
        patterns: dict[str, Any] = {}
        for number, pattern_name in enumerate(PATTERNS):
            if not hasattr(pattern_class, pattern_name):
                continue
            pattern = getattr(pattern_class, pattern_name)
            observations: dict[str, Any] = {}
            for shape, (tokens, hidden) in SHAPES.items():
                kwargs = _tensors(pattern_name, tokens, hidden, number, layout)
                kwargs = {k: v for k, v in kwargs.items() if v is not None}
                calls.clear()
                observation: dict[str, Any] = {"shape": [tokens, hidden]}
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        public(workspace=workspace, pattern=pattern, **kwargs)
                except Exception as error:
                    observation["error"] = f"{type(error).__name__}: {error}"
                    frames = traceback.extract_tb(error.__traceback__)
                    observation["raised_in"] = (
                        f"{os.path.basename(frames[-1].filename)}:{frames[-1].name}"
                        if frames
                        else None
                    )
                observation["kernel"] = [c["name"] for c in calls]
                observation["reached"] = [reached(c) for c in calls]
                observations[shape] = observation
            patterns[pattern_name] = {"code": int(pattern), "shapes": observations}
        result["patterns"] = patterns
    return result


def measure() -> dict[str, Any]:
    names = json.loads(os.environ["FI_COMPAT_SIZES_NAMES"])
    import flashinfer

    document: dict[str, Any] = {
        "probe": 1,
        "version": getattr(flashinfer, "__version__", None),
        "location": os.path.dirname(getattr(flashinfer, "__file__", None) or ""),
        "workspace": {
            "max_token_num": MAX_TOKENS,
            "hidden_dim": HIDDEN,
            "world_size": WORLD,
            "dtype": "bfloat16",
        },
    }
    try:
        comm = importlib.import_module(names["comm"])
    except Exception as error:
        document["error"] = f"import {names['comm']}: {type(error).__name__}: {error}"
        return document
    for key in ("fusion", "factory", "pattern_class"):
        if not hasattr(comm, names[key]):
            document["error"] = f"{names['comm']} has no {names[key]}"
            return document
    factory = getattr(comm, names["factory"])
    backend_parameter = inspect.signature(factory).parameters.get("backend")
    document["factory_backends"] = repr(
        None if backend_parameter is None else backend_parameter.annotation
    )
    document["backends"] = {backend: measure_backend(comm, names, backend) for backend in BACKENDS}
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
