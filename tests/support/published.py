"""Every way the suite fetches a published file, by name, to be proven on empty caches.

The suite downloads published files in five ways, all through the release cache
(:class:`tools.releases.ReleaseCache`): an engine's wheel for the Python the engine needs
(:mod:`tests.support.engine_wheels`), a FlashInfer release wheel for the release matrix, a
FlashInfer release for the measurements (``tools/reach.py``, ``tools/layers.py``,
``tools/sizes.py``: the wheel, else the sdist), and the CUDA runtime and triton that old
releases import (:mod:`tests.support.release_harness`).
:data:`PUBLISHED` names each, calling the very code the tests call;
``tests/release/test_fresh_machine.py`` runs every one that this interpreter's run uses in a
fresh process whose pip cache and release cache are empty, so a download that only works
warm fails in the suite and not on a contributor's first ``make test``.

    python -m tests.support.published NAME   # fetch one; prints the file's path
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from tests.support.engine_wheels import ENGINES, Engine, engine_wheel
from tests.support.release_harness import RELEASES, TRITON, Harness
from tools.releases import ReleaseCache

__all__ = ["PUBLISHED", "Published", "applies_here", "main"]


@dataclass(frozen=True)
class Published:
    """One way the suite fetches a published file, and whether a run without FlashInfer
    (the Python 3.10 run) uses it."""

    fetch: Callable[[], Path]
    needs_flashinfer: bool


def _engine(engine: Engine) -> Callable[[], Path]:
    return lambda: engine_wheel(engine)


def _matrix_release() -> Path:
    # the release matrix's download, of the newest release it imports
    return Harness().download(f"flashinfer-python=={max(RELEASES, key=Version)}")


def _measured_release() -> Path:
    # tools/reach.py's release_environment, tools/layers.py and tools/sizes.py ask so: the
    # wheel where there is one, else the sdist (0.5.3 is the oldest release they measure).
    return ReleaseCache().download("flashinfer-python==0.5.3", wheel_only=False)


def _cuda_runtime() -> Path:
    # downloaded and unpacked, as the matrix preloads it for releases up to 0.6.13
    return Harness().cudart()


def _triton() -> Path:
    return Harness().download(TRITON)


#: Every way the suite fetches a published file, by a name for the test ids.
PUBLISHED: dict[str, Published] = {
    **{
        f"engine-{name}": Published(_engine(engine), False)
        for name, engine in sorted(ENGINES.items())
    },
    "matrix-release": Published(_matrix_release, True),
    "measured-release": Published(_measured_release, True),
    "cuda-runtime": Published(_cuda_runtime, True),
    "triton": Published(_triton, True),
}


def applies_here() -> list[str]:
    """The names of the fetches this interpreter's run makes: the FlashInfer ones only where
    flashinfer-python is installed (the tests that make them skip elsewhere)."""
    try:
        importlib.metadata.version("flashinfer-python")
        installed = True
    except importlib.metadata.PackageNotFoundError:
        installed = False
    return [name for name, entry in PUBLISHED.items() if installed or not entry.needs_flashinfer]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.published")
    parser.add_argument("name", choices=sorted(PUBLISHED))
    args = parser.parse_args(argv)
    print(PUBLISHED[args.name].fetch())
    return 0


if __name__ == "__main__":
    sys.exit(main())
