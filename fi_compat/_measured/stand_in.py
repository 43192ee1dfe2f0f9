"""Run one probe against the installed release, with a stand-in for GPU 0 (run by path).

``python stand_in.py PROBE`` is what :mod:`fi_compat._measured.installed` starts: it runs
the probe script ``PROBE`` as ``__main__`` after replacing torch's answers about GPU 0
with those of one fixed stand-in device (compute capability 9.0, 132 SMs: an H100), the
device the shipped measurements were made for by the real-release harness
(``tests/support/release_harness_site/sitecustomize.py``, ``FI_COMPAT_HARNESS_STUB_GPU``).
Some releases read GPU 0's properties while ``import flashinfer`` runs, and the attention
wrappers read its compute capability when they pick a backend: with the same stand-in,
the installed release is measured exactly as the shipped ones were.

The runner hides every GPU from the subprocess (``CUDA_VISIBLE_DEVICES=""``), so nothing
can be launched on one; should torch still report a device, this script refuses (exit 3)
rather than measure a real one. It imports no fi-compat and is never imported by it.
"""

from __future__ import annotations

import os
import runpy
import sys
from types import SimpleNamespace
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


def install() -> bool:
    """Replace ``torch.cuda.get_device_properties`` and ``get_device_capability`` with the
    stand-in's answers; False (nothing replaced) when torch reports a CUDA device."""
    import torch

    if torch.cuda.is_available():
        return False

    def get_device_properties(device: Any = None) -> SimpleNamespace:
        return STAND_IN

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return (STAND_IN.major, STAND_IN.minor)

    torch.cuda.get_device_properties = get_device_properties  # type: ignore[assignment]
    torch.cuda.get_device_capability = get_device_capability
    return True


def main(argv: list[str]) -> int:
    """Run ``argv[1]`` as ``__main__`` behind the stand-in; its exit status is the process's."""
    if len(argv) != 2:
        sys.stderr.write("usage: stand_in.py PROBE\n")
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    # The script's own directory is first on sys.path: no sibling may shadow a module.
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    if not install():
        sys.stderr.write("a CUDA device is visible to the probe: refusing to measure on it\n")
        return GPU_VISIBLE
    probe = argv[1]
    sys.argv = [probe]
    runpy.run_path(probe, run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
