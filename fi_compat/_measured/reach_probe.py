"""In one release's subprocess: call each attention wrapper's ``plan``, record the kernel calls.

Run by path, never imported by fi-compat at run time (it imports no fi-compat itself):
by :mod:`fi_compat._measured.installed` against the installed release, behind
:mod:`fi_compat._measured.stand_in`, and by ``tools/reach.py`` against a release from the
release cache, with the real-release harness's ``sitecustomize`` (CUDA runtime preload,
stand-ins for GPU 0's properties) in front of it. It prints one JSON document on stdout
and nothing else there; FlashInfer's own output goes to stderr.

The probe is the ``reach_*`` modules beside this file, each one role, imported through
:func:`load`:

* :mod:`~fi_compat._measured.reach_cpu`: what lets the release import and plan on the
  CPU (``pin_memory`` dropped, the stand-in GPU's compute capability, the attention
  modules imported);
* :mod:`~fi_compat._measured.reach_recorders`: every compiled-module loader replaced by a
  recorder, whose calls are the *kernel boundary*: what FlashInfer hands to its compiled
  planner;
* :mod:`~fi_compat._measured.reach_hooks`: the device-dependent choices of
  ``backend="auto"``, answered in turn with each answer the release's code can give;
* :mod:`~fi_compat._measured.reach_arguments` and
  :mod:`~fi_compat._measured.reach_backends`: what each family's wrapper is built and
  planned with, and which backends its class offers;
* :mod:`~fi_compat._measured.reach_measure`: the runs, without the split settings, then
  with ``(7919, False)``, ``(7920, False)``, ``(7919, True)`` and ``(None, True)``, then once
  more without, and the document they make;
* :mod:`~fi_compat._measured.reach_names`: the FlashInfer names it looks up, handed over
  by the runner in ``FI_COMPAT_REACH_NAMES``.

Device queries outside those hooks see the harness's stand-in GPU (compute capability
9.0). Verdicts are decided by :mod:`fi_compat._measured.reach`, never here.

Those modules import one another relatively. Run by path, this file has no package and
the subprocess's path may hold no fi-compat (or another copy of it), and
:mod:`~fi_compat._measured.stand_in` takes this directory off ``sys.path`` so that no
module here shadows another: :func:`load` imports them as :data:`PACKAGE`, a package made
here whose path is this directory and whose ``__init__`` never runs. Nothing of fi-compat
is imported, and only the ``reach_*`` modules are read.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["PACKAGE", "load", "main"]

#: The package the probe's modules are imported as when this file runs by path.
PACKAGE = "_fi_compat_reach_probe"


def load(name: str) -> ModuleType:
    """The probe's module ``name`` (``reach_measure``): from fi-compat's package when this
    module was imported from it, else from :data:`PACKAGE`, made on first use (its path:
    this file's directory)."""
    if __package__:
        return importlib.import_module(f"{__package__}.{name}")
    if PACKAGE not in sys.modules:
        spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
        spec.submodule_search_locations = [str(Path(__file__).resolve().parent)]
        sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)
    return importlib.import_module(f"{PACKAGE}.{name}")


def main() -> int:
    """Print the measurement as JSON on stdout; FlashInfer's own output goes to stderr."""
    stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        document = load("reach_measure").measure()
    finally:
        sys.stdout = stdout
    json.dump(document, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
