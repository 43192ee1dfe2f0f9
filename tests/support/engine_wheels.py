"""The engines' pinned wheels, found or downloaded once, and their packages unpacked.

Wheels come from ``$FI_COMPAT_ENGINE_WHEELS`` (directories, ``os.pathsep``-separated),
``/tmp/sgl`` and ``/tmp/vllm``, else ``pip download --no-deps`` into the release cache
(:mod:`tools.releases`); an engine is never installed or imported as a package. Nothing
here needs torch, so the Python 3.10 run (which has none) can read the engines' sources.
"""

from __future__ import annotations

import glob
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tools.releases import ReleaseCache

__all__ = ["ENGINES", "Engine", "engine_wheel", "unpack"]


@dataclass(frozen=True)
class Engine:
    """One engine module to run: its pinned wheel, the file in it and its module name."""

    requirement: str
    member: str
    module: str

    @property
    def root(self) -> str:
        return self.module.partition(".")[0]


ENGINES: Mapping[str, Engine] = {
    "sglang": Engine(
        "sglang==0.5.23",
        "sglang/srt/layers/attention/flashinfer_backend.py",
        "sglang.srt.layers.attention.flashinfer_backend",
    ),
    "vllm": Engine(
        "vllm==0.33.0",
        "vllm/v1/attention/backends/flashinfer.py",
        "vllm.v1.attention.backends.flashinfer",
    ),
}


def engine_wheel(engine: Engine) -> Path:
    """The engine's wheel: from ``$FI_COMPAT_ENGINE_WHEELS``, ``/tmp/sgl`` or ``/tmp/vllm``,
    else downloaded once into the release cache.

    Raises
    ------
    tools.releases.RegistryUnreachableError
        The wheel is nowhere here and the registry cannot be reached (the caller skips).
    """
    name, _, version = engine.requirement.partition("==")
    dirs = [d for d in os.environ.get("FI_COMPAT_ENGINE_WHEELS", "").split(os.pathsep) if d]
    for directory in [*dirs, "/tmp/sgl", "/tmp/vllm"]:
        found = sorted(glob.glob(os.path.join(directory, f"{name}-{version}-*.whl")))
        if found:
            return Path(found[-1])
    return ReleaseCache().download(engine.requirement, wheel_only=True)


def unpack(engine: Engine, into: Path) -> Path:
    """The engine's Python package (``vllm/``, ``sglang/``) unpacked from its wheel under
    ``into``: its ``*.py`` files only, as the source tree an engine's repository holds."""
    wheel = engine_wheel(engine)
    prefix = f"{engine.root}/"
    with zipfile.ZipFile(wheel) as archive:
        members = [
            name for name in archive.namelist() if name.startswith(prefix) and name.endswith(".py")
        ]
        archive.extractall(into, members)
    return into / engine.root
