"""The engines' pinned wheels, downloaded once, and their packages unpacked.

Every test that needs an engine's published wheel gets it here, and every wheel comes the
way FlashInfer's releases do: ``pip download --no-deps`` into the release cache
(:mod:`tools.releases`, ``$FI_COMPAT_RELEASE_CACHE``), announced when it is fetched, taken
from the cache after that. No test looks for a wheel anywhere else. An engine is never
installed or imported as a package.

Each engine's wheel is asked for the Python its release declares (``Engine.python``), not
the running one's: SGLang 0.5.23 and vLLM 0.33.0 need Python 3.11, and the Python 3.10 run,
which reads their sources with fi-compat's scanner and runs their fusion-policy functions,
would otherwise be told there is no such release. Nothing here needs torch.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tools.releases import ReleaseCache

__all__ = ["ENGINES", "Engine", "engine_wheel", "unpack"]


@dataclass(frozen=True)
class Engine:
    """One engine module to run: its pinned wheel, the file in it and its module name, and
    the Python its wheel is published for (the oldest its ``Requires-Python`` admits)."""

    requirement: str
    member: str
    module: str
    python: str

    @property
    def root(self) -> str:
        return self.module.partition(".")[0]


ENGINES: Mapping[str, Engine] = {
    "sglang": Engine(
        "sglang==0.5.23",
        "sglang/srt/layers/attention/flashinfer_backend.py",
        "sglang.srt.layers.attention.flashinfer_backend",
        "3.11",  # Requires-Python: >=3.11 (a cp311 wheel)
    ),
    "vllm": Engine(
        "vllm==0.33.0",
        "vllm/v1/attention/backends/flashinfer.py",
        "vllm.v1.attention.backends.flashinfer",
        "3.11",  # Requires-Python: >=3.11,<3.15 (an abi3 wheel)
    ),
}


def engine_wheel(engine: Engine) -> Path:
    """The engine's wheel, downloaded once into the release cache for ``engine.python``.

    Raises
    ------
    tools.releases.RegistryUnreachableError
        The wheel is not cached and the registry cannot be reached (the caller skips).
    tools.releases.DownloadError
        The registry answered and the download failed (a real failure).
    """
    return ReleaseCache().download(engine.requirement, wheel_only=True, python=engine.python)


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
