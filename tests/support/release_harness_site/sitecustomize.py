"""Start-up hook for the real-release matrix subprocesses (``tests/support/release_harness.py``).

The harness copies this file into its cache and puts that directory first on ``PYTHONPATH``
of a subprocess that imports one real flashinfer-python release; Python imports it at
start-up, before any user code. Each workaround is switched on by an environment variable,
so one release can be imported with and without it:

``FI_COMPAT_HARNESS_CUDART=<path to libcudart.so.12>``
    Load the CUDA runtime with ``RTLD_GLOBAL`` before anything else. Releases up to 0.6.13
    run ``CudaRTLibrary()`` while ``flashinfer.comm`` is imported; it looks for a mapped file
    whose name starts with ``libcudart`` in ``/proc/self/maps``, asserts that one is there,
    and binds a few ``cuda*`` symbols with ``ctypes`` without calling them. Loading the
    library from the ``nvidia-cuda-runtime-cu12`` wheel is exactly what a CUDA build of
    torch does; no CUDA function is called and no GPU is needed.

``FI_COMPAT_HARNESS_STUB_GPU=1``
    When torch reports no CUDA device, replace ``torch.cuda.get_device_properties`` and
    ``torch.cuda.get_device_capability`` with stand-ins describing one fixed fake device.
    Releases 0.6.8 to 0.6.10.post1 and 0.6.14 to 0.7.0.post1 read ``NUM_SMS`` (and from
    0.6.14 ``_GPU_MAJOR``) of GPU 0 at module level in
    ``flashinfer/gdn_kernels/gdn_decode_bf16_state.py`` while ``import flashinfer`` runs;
    the values only size kernel launches later. The stand-ins change no ``def``, no
    signature and no source the probe reads. Every call is logged with its caller so the
    harness can check that nothing else asked. torch is imported here with coverage
    paused, when the run is measured (its import runs none of fi_compat's code).

``FI_COMPAT_HARNESS_DEFER_ANNOTATIONS=<module>[,<module>...]``
    Compile these modules as if they began with ``from __future__ import annotations``.
    0.6.16 to 0.6.16.post3's ``flashinfer/comm/fd_exchange.py`` annotates with
    ``array.array[int]``, evaluated at import, which raises ``TypeError`` below Python 3.12
    (the record's ``comm_requires_python``); 0.6.16.post4 quoted the annotation, which is
    the same change. Only the annotation's evaluation is deferred: every statement runs as
    written, so the release's comm code can be measured on an interpreter that has a CPU
    build of torch (3.11 here; 3.12 has none on these machines).

``FI_COMPAT_HARNESS_LOG=<path>``
    At exit, write what was done as JSON: the library loaded, the stub calls (function and
    caller ``file:line``) and whether ``triton`` was imported.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import sys
from types import SimpleNamespace
from typing import Any

_LOG: dict[str, Any] = {
    "cudart": None,
    "gpu_stub": False,
    "gpu_calls": [],
    "deferred_annotations": [],
}

#: What the stand-ins report: one device of compute capability 9.0 with 132 SMs (an H100).
FAKE_DEVICE = SimpleNamespace(
    name="fi-compat harness stand-in (no GPU)",
    major=9,
    minor=0,
    multi_processor_count=132,
    total_memory=80 * 1024**3,
)


def _caller() -> str:
    frame = sys._getframe(2)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _import_torch() -> Any:
    """``import torch``, with coverage paused across it where the run is measured (the
    suite's subprocess patch starts coverage before this file runs). torch runs none of
    fi_compat's code while it imports, so nothing measured is lost; traced, its import
    costs about half as much again."""
    coverage = sys.modules.get("coverage")
    measuring = coverage.Coverage.current() if coverage is not None else None
    if measuring is not None:
        measuring.stop()
    try:
        import torch
    finally:
        if measuring is not None:
            measuring.start()
    return torch


def _install_gpu_stub() -> None:
    torch = _import_torch()

    if torch.cuda.is_available():
        return

    def get_device_properties(device: Any = None) -> SimpleNamespace:
        _LOG["gpu_calls"].append({"function": "get_device_properties", "caller": _caller()})
        return FAKE_DEVICE

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        _LOG["gpu_calls"].append({"function": "get_device_capability", "caller": _caller()})
        return (FAKE_DEVICE.major, FAKE_DEVICE.minor)

    torch.cuda.get_device_properties = get_device_properties
    torch.cuda.get_device_capability = get_device_capability
    _LOG["gpu_stub"] = True


class _DeferredAnnotations:
    """A meta path finder: the listed modules' own spec, compiled with annotations deferred."""

    def __init__(self, modules: set[str]) -> None:
        self.modules = modules

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.modules:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _DeferringLoader(spec.loader.name, spec.loader.path)
        return spec


def _deferring_loader() -> type:
    import __future__

    import importlib.machinery

    class Loader(importlib.machinery.SourceFileLoader):
        def get_code(self, fullname: str) -> Any:
            # Compiled from the source each time, never from bytecode cached without the flag.
            _LOG["deferred_annotations"].append(self.name)
            path = self.get_filename(fullname)
            flags = __future__.annotations.compiler_flag
            return compile(self.get_data(path), path, "exec", flags=flags, dont_inherit=True)

    return Loader


_DeferringLoader: Any = None


def _write_log(path: str) -> None:
    _LOG["triton_imported"] = "triton" in sys.modules
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(_LOG, handle)


def _main() -> None:
    log = os.environ.get("FI_COMPAT_HARNESS_LOG")
    if log:
        atexit.register(_write_log, log)
    cudart = os.environ.get("FI_COMPAT_HARNESS_CUDART")
    if cudart:
        ctypes.CDLL(cudart, mode=ctypes.RTLD_GLOBAL)
        _LOG["cudart"] = cudart
    if os.environ.get("FI_COMPAT_HARNESS_STUB_GPU") == "1":
        _install_gpu_stub()
    deferred = os.environ.get("FI_COMPAT_HARNESS_DEFER_ANNOTATIONS")
    if deferred:
        global _DeferringLoader
        _DeferringLoader = _deferring_loader()
        modules = {name.strip() for name in deferred.split(",") if name.strip()}
        sys.meta_path.insert(0, _DeferredAnnotations(modules))


_main()
