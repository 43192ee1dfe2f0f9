"""In a real release's subprocess: run :data:`tests.support.wrapper_cases.CASES` on it.

Run by :func:`tests.support.wrapper_cases` users through ``tools.reach.run_in_release``,
with the reach probe's CPU workarounds and recorders (``fi_compat/_measured/reach_cpu.py``
and ``reach_recorders.py``, imported by path through ``reach_probe.load``, as the probe
does: pinned memory dropped, the stand-in GPU's compute capability, every compiled-module
loader replaced by a recorder), so that ``plan`` and ``run`` execute the release's own
Python up to its kernels. Prints one JSON document: case name -> its outcome.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    spec = importlib.util.spec_from_file_location(
        "reach_probe", ROOT / "fi_compat" / "_measured" / "reach_probe.py"
    )
    assert spec is not None
    assert spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    cpu = probe.load("reach_cpu")
    recorders = probe.load("reach_recorders")
    import flashinfer
    import torch

    from tests.support.wrapper_cases import CASES, outcome

    cpu.patch_torch(torch)
    cpu.import_attention_modules()
    recorders.replace_loaders()
    cpu.patch_compute_capability()
    found = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, case in CASES.items():
            found[name] = outcome(torch, flashinfer, case)
    document = {"probe": 1, "version": flashinfer.__version__, "location": flashinfer.__file__}
    print(json.dumps({**document, "cases": found}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
