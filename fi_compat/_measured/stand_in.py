"""Run one probe against the installed release, with a stand-in for GPU 0 (run by path).

``python stand_in.py PROBE`` is what :mod:`fi_compat._measured.installed` starts: it runs
the probe script ``PROBE`` as ``__main__`` after replacing torch's answers about GPU 0
with those of one fixed stand-in device (compute capability 9.0, 132 SMs: an H100), the
device the shipped measurements were made for by the real-release harness
(``tests/support/release_harness_site/sitecustomize.py``, ``FI_COMPAT_HARNESS_STUB_GPU``).
Some releases read GPU 0's properties while ``import flashinfer`` runs, and the attention
wrappers read its compute capability when they pick a backend: with the same stand-in,
the installed release is measured exactly as the shipped ones were.

The stand-in is put in place as torch finishes importing, whoever imports it first (the
release, or the probe): a probe that never imports torch does not pay for it, and nothing
can read GPU 0 before the stand-in answers.

The runner hides every GPU from the subprocess (``CUDA_VISIBLE_DEVICES=""``), so nothing
can be launched on one; should torch still report a device, this script refuses (exit 3,
at torch's import, before anything else runs) rather than measure a real one. It imports no
fi-compat and is never imported by it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
from collections.abc import Sequence
from types import ModuleType, SimpleNamespace
from typing import Any

#: Exit status when torch reports a CUDA device although the runner hid them.
GPU_VISIBLE = 3

#: What the stand-ins report (the real-release harness's device).
STAND_IN = SimpleNamespace(
    name="fi-compat stand-in (no GPU)",
    major=9,
    minor=0,
    multi_processor_count=132,
    total_memory=80 * 1024**3,
)


def install(torch: Any) -> bool:
    """Replace ``torch.cuda.get_device_properties`` and ``get_device_capability`` with the
    stand-in's answers; False (nothing replaced) when torch reports a CUDA device."""
    if torch.cuda.is_available():
        return False

    def get_device_properties(device: Any = None) -> SimpleNamespace:
        return STAND_IN

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return (STAND_IN.major, STAND_IN.minor)

    torch.cuda.get_device_properties = get_device_properties
    torch.cuda.get_device_capability = get_device_capability
    return True


def _refuse() -> None:
    sys.stderr.write("a CUDA device is visible to the probe: refusing to measure on it\n")
    sys.stderr.flush()
    os._exit(GPU_VISIBLE)


class AfterTorch(importlib.abc.MetaPathFinder):
    """Finds ``torch`` as the other finders do, and installs the stand-in once its module
    has run (or refuses, exiting, when torch reports a CUDA device)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)  # once: the spec below is found without this finder
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if loader is None:
            return spec
        run_module = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            if not install(module):
                _refuse()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def main(argv: list[str]) -> int:
    """Run ``argv[1]`` as ``__main__`` behind the stand-in; its exit status is the process's."""
    if len(argv) != 2:
        sys.stderr.write("usage: stand_in.py PROBE\n")
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    # The script's own directory is first on sys.path: no sibling may shadow a module.
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    if "torch" in sys.modules:  # imported before this script ran (a start-up hook)
        if not install(sys.modules["torch"]):
            _refuse()
    else:
        sys.meta_path.insert(0, AfterTorch())
    probe = argv[1]
    sys.argv = [probe]
    runpy.run_path(probe, run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
