"""What lets a release's attention wrappers import and plan on a machine without a GPU.

Used by the reach probe and by the wrapper-state probe of the tests
(``tests/support/wrapper_probe.py``), each in a release's subprocess:

* ``pin_memory=True`` is dropped from torch's factory functions and ``Tensor.pin_memory``
  returns the tensor (there is no pinned allocator without CUDA); ``torch.cuda.device`` is
  a no-op context, the current device is 0 and the current stream a recorder. Nothing else
  in torch is touched (:func:`patch_torch`).
* FlashInfer's ``get_compute_capability`` answers as the harness's stand-in GPU
  (:data:`STAND_IN_CAPABILITY`) for the CPU device (:func:`patch_compute_capability`).
* The modules the attention families live in are imported, so that their compiled-module
  loaders can be replaced (:func:`import_attention_modules`; the loaders:
  :mod:`fi_compat._measured.reach_recorders`).
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

from .reach_names import NAMES
from .reach_recorders import Stub, flashinfer_modules

__all__ = [
    "STAND_IN_CAPABILITY",
    "import_attention_modules",
    "patch_compute_capability",
    "patch_torch",
]

#: What device queries outside the ``auto`` hooks see: the harness's stand-in GPU (an H100).
STAND_IN_CAPABILITY = (9, 0)


def patch_torch(torch: Any) -> None:
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


def patch_compute_capability() -> None:
    """Answer ``get_compute_capability`` for the CPU device as the harness's stand-in GPU."""
    originals = {
        id(vars(module)["get_compute_capability"])
        for module in flashinfer_modules()
        if callable(vars(module).get("get_compute_capability"))
    }

    def get_compute_capability(device: Any = None) -> tuple[int, int]:
        return STAND_IN_CAPABILITY

    for module in flashinfer_modules():
        if id(vars(module).get("get_compute_capability")) in originals:
            module.get_compute_capability = get_compute_capability


def import_attention_modules() -> None:
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
