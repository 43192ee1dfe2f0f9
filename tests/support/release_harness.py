"""Harness for the real-release matrix: real flashinfer-python wheels, imported in subprocesses.

Each release is downloaded and extracted once by the release cache the recorder uses too
(:mod:`tools.releases`: ``pip download --no-deps`` into ``$FI_COMPAT_RELEASE_CACHE``, else
``$XDG_CACHE_HOME/fi-compat/releases``, else ``~/.cache/fi-compat/releases``, never the
repository), and imported by ``python -m fi_compat report --json`` in a subprocess of this
interpreter with the extracted release first on ``PYTHONPATH``. Everything else the
releases import (torch 2.13.0 CPU, apache-tvm-ffi, nvidia-cutlass-dsl, ...) comes from the
test venv, which is never modified.

A CPU machine needs three workarounds, applied by ``tests/support/release_harness_site/
sitecustomize.py`` in the subprocess only (its docstring says exactly what each does):

* the CUDA runtime from the ``nvidia-cuda-runtime-cu12`` wheel, loaded before the import
  (``flashinfer.comm`` up to 0.6.13 asserts that ``libcudart`` is mapped);
* stand-ins for ``torch.cuda.get_device_properties`` / ``get_device_capability`` (some
  releases read GPU 0 at module level while ``import flashinfer`` runs);
* the ``triton`` wheel, extracted next to the release (``flashinfer.comm`` 0.6.10 to 0.6.13
  imports it).

Run ``python -m tests.support.release_harness [VERSION ...]`` from the repository root to print the
reports by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fi_compat._local import CACHE_ENV
from fi_compat.report import REQUIREMENTS
from fi_compat.testing import ReleaseRecord
from tools.releases import DownloadError, RegistryUnreachableError, ReleaseCache
from tools.results import ResultCache

__all__ = [
    "CUDA_RUNTIME",
    "NINE",
    "RELEASES",
    "TRITON",
    "DownloadError",
    "Harness",
    "ImportRun",
    "Prepared",
    "RegistryUnreachableError",
    "ReleaseNeeds",
    "expected_answers",
    "expected_torch_dist_backend",
    "recorded_keywords",
    "reported_answers",
]

#: The CUDA runtime whose ``libcudart.so.12`` is preloaded for releases up to 0.6.13.
CUDA_RUNTIME = "nvidia-cuda-runtime-cu12==12.9.79"
#: The triton ``flashinfer.comm`` 0.6.10 to 0.6.13 imports (3.6.0 was current then).
TRITON = "triton==3.6.0"

SITE_TEMPLATE = Path(__file__).resolve().parent / "release_harness_site" / "sitecustomize.py"

#: Seconds one subprocess may take before the harness gives up on it.
SUBPROCESS_TIMEOUT = 600


@dataclass(frozen=True)
class ReleaseNeeds:
    """What one release needs to import on a CPU machine, found by importing it here.

    Attributes
    ----------
    cuda_runtime
        ``import flashinfer.comm`` asserts that libcudart is loaded (up to 0.6.13).
    gpu_query
        ``import flashinfer`` reads GPU 0 at module level (0.6.8 to 0.6.11.post3 and
        0.6.14 to 0.7.0.post1, in ``gdn_kernels/gdn_decode_bf16_state.py``).
    triton
        ``import flashinfer.comm`` imports triton (0.6.10 to 0.6.13).
    """

    cuda_runtime: bool
    gpu_query: bool
    triton: bool


#: The releases the matrix imports: the oldest wheel-era release still in use, each release
#: that changed a probed answer or an import hazard, and the newest.
RELEASES: dict[str, ReleaseNeeds] = {
    "0.5.3": ReleaseNeeds(cuda_runtime=True, gpu_query=False, triton=False),
    "0.6.0": ReleaseNeeds(cuda_runtime=True, gpu_query=False, triton=False),  # unified API
    "0.6.5": ReleaseNeeds(cuda_runtime=True, gpu_query=False, triton=False),
    "0.6.8": ReleaseNeeds(cuda_runtime=True, gpu_query=True, triton=False),  # trigger_...
    "0.6.10": ReleaseNeeds(cuda_runtime=True, gpu_query=True, triton=True),
    "0.6.10.post1": ReleaseNeeds(cuda_runtime=True, gpu_query=True, triton=True),  # group=
    "0.6.13": ReleaseNeeds(cuda_runtime=True, gpu_query=False, triton=True),
    "0.6.14": ReleaseNeeds(cuda_runtime=False, gpu_query=True, triton=False),
    "0.6.15": ReleaseNeeds(cuda_runtime=False, gpu_query=True, triton=False),  # plan(**kw)
    "0.6.18": ReleaseNeeds(cuda_runtime=False, gpu_query=True, triton=False),
    "0.7.0.post1": ReleaseNeeds(cuda_runtime=False, gpu_query=True, triton=False),
    "0.7.1": ReleaseNeeds(cuda_runtime=False, gpu_query=False, triton=False),
    "0.7.2.post1": ReleaseNeeds(cuda_runtime=False, gpu_query=False, triton=False),
}


# ------------------------------------------------------ expectations from the recorded data

#: The nine probed items as ``(section, owner, keyword)``, taken from ``--require``'s table.
NINE: tuple[tuple[str, str, str], ...] = tuple(
    item for items in REQUIREMENTS.values() for item in items
)


def expected_answers(
    record: ReleaseRecord, *, comm_available: bool = True
) -> dict[tuple[str, str, str], str]:
    """What the probe must answer for :data:`NINE`, read from a release's recorded signatures.

    With ``comm_available=False`` (``import flashinfer.comm`` failed), every comm answer is
    ``unknown`` and the attention answers are unchanged.
    """
    return {
        (section, owner, keyword): (
            "unknown"
            if section == "comm" and not comm_available
            else record.acceptance(owner, keyword)
        )
        for section, owner, keyword in NINE
    }


def expected_torch_dist_backend(record: ReleaseRecord) -> tuple[str | None, str]:
    """Where ``TorchDistBackend`` lives and the answer for ``bcast_root_is_group_local``."""
    if not record.comm_exists:  # no flashinfer.comm to probe (0.2.0.post1 to 0.2.7)
        return None, "unknown"
    backend = record.torch_dist_backend
    if backend is None:
        return None, "unsupported"
    group_local = backend.bcast_root_is_group_local
    status = "unknown" if group_local is None else ("supported" if group_local else "unsupported")
    return f"{backend.module or backend.defined_in}.TorchDistBackend", status


def reported_answers(report: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    """The statuses a ``fi-compat report --json`` document gives for :data:`NINE`."""
    return {
        (section, owner, keyword): (
            report["comm"]["kwargs"] if section == "comm" else report["attention"]
        )[owner][keyword]["status"]
        for section, owner, keyword in NINE
    }


def recorded_keywords(record: ReleaseRecord, qualname: str) -> tuple[list[str], bool] | None:
    """Keyword names of a recorded callable, following ``**kwargs`` forwards like the probe.

    Returns the sorted names and whether a ``**kwargs`` stays unresolved, or None when the
    release has no such callable. ``qualname`` is ``"allreduce_fusion"`` or
    ``"BatchDecodeWithPagedKVCacheWrapper.plan"``.
    """
    func = record.function(qualname)
    if func is None:
        return None
    owner_name = qualname.rpartition(".")[0]
    owner = record.wrapper(owner_name) if owner_name else None
    names = set(func.keyword_names)
    seen = {func.name}
    while func.var_keyword is not None:
        target = func.forwards_kwargs_to
        following = owner.method(target) if owner is not None and target else None
        if following is None or following.name in seen:
            return sorted(names), True
        func = following
        seen.add(func.name)
        names |= set(func.keyword_names)
    return sorted(names), False


# ------------------------------------------------------------------------------ harness


@dataclass(frozen=True)
class Prepared:
    """One release ready to import: the directories and files its subprocess needs."""

    version: str
    needs: ReleaseNeeds
    release_dir: Path
    site_dir: Path
    cudart: Path
    triton_dir: Path | None


@dataclass(frozen=True)
class ImportRun:
    """One ``python -m fi_compat report --json`` in a release's subprocess."""

    version: str
    cuda_runtime: bool
    returncode: int
    stdout: str
    stderr: str
    harness_log: dict[str, Any]

    @property
    def report(self) -> dict[str, Any]:
        """The decoded JSON report."""
        decoded: dict[str, Any] = json.loads(self.stdout)
        return decoded

    def describe(self) -> str:
        """Exit status and both streams, for a failure message."""
        return (
            f"flashinfer-python {self.version} (CUDA runtime preloaded: {self.cuda_runtime})\n"
            f"exit status {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        )


class Harness:
    """Downloads, caches and imports real releases. One per test session."""

    def __init__(self, root: Path | None = None) -> None:
        self.cache = ReleaseCache(root)
        self.root = self.cache.root
        self.results = ResultCache(self.root / "results")

    def download(self, requirement: str) -> Path:
        """The wheel for a pinned ``name==version``, downloaded once into the cache.

        Raises
        ------
        RegistryUnreachableError
            pip could not reach the registry (the caller skips, saying so).
        DownloadError
            pip reached it and failed anyway (a real failure).
        """
        return self.cache.download(requirement, wheel_only=True)

    def site_dir(self) -> Path:
        """A directory holding a fresh copy of the sitecustomize template."""
        return self.cache.site(SITE_TEMPLATE)

    def cudart(self) -> Path:
        """``libcudart.so.12`` from the extracted ``nvidia-cuda-runtime-cu12`` wheel."""
        root = self.cache.extract(self.download(CUDA_RUNTIME))
        found = sorted(root.glob("nvidia/cuda_runtime/lib/libcudart.so*"))
        if not found:
            raise DownloadError(f"no libcudart.so* in {root}")
        return found[0]

    def prepare(self, version: str) -> Prepared:
        """Download and extract ``version`` and whatever its import needs."""
        needs = RELEASES[version]
        release_dir = self.cache.extract(self.download(f"flashinfer-python=={version}"))
        triton_dir = self.cache.extract(self.download(TRITON)) if needs.triton else None
        return Prepared(
            version=version,
            needs=needs,
            release_dir=release_dir,
            site_dir=self.site_dir(),
            cudart=self.cudart(),
            triton_dir=triton_dir,
        )

    # ------------------------------------------------------------------------- imports

    def environment(self, prepared: Prepared, *, cuda_runtime: bool, log: Path) -> dict[str, str]:
        """The subprocess environment: the release first on the path, the workarounds on."""
        path = [prepared.site_dir, prepared.release_dir]
        if prepared.triton_dir is not None:
            path.append(prepared.triton_dir)
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PYTHON", "FI_COMPAT_HARNESS_"))
        }
        env.update(
            PYTHONPATH=os.pathsep.join(str(entry) for entry in path),
            PYTHONNOUSERSITE="1",
            FI_COMPAT_HARNESS_STUB_GPU="1",
            FI_COMPAT_HARNESS_LOG=str(log),
        )
        if cuda_runtime:
            env["FI_COMPAT_HARNESS_CUDART"] = str(prepared.cudart)
        return env

    def _run(
        self, prepared: Prepared, arguments: list[str], *, cuda_runtime: bool
    ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="fi-compat-release-") as scratch:
            log = Path(scratch) / "harness.json"
            env = self.environment(prepared, cuda_runtime=cuda_runtime, log=log)
            # An empty fi-compat cache of the run's own, as on a fresh machine, so that the
            # run reads nothing but its inputs and is made once per input (tools.results).
            env[CACHE_ENV] = str(Path(scratch) / "fi-compat-cache")
            done = self.results.run(
                [sys.executable, *arguments],
                env=env,
                cwd=Path(scratch),
                timeout=SUBPROCESS_TIMEOUT,
            )
            harness_log = json.loads(log.read_text(encoding="utf-8")) if log.is_file() else {}
        return done, harness_log

    def report(self, prepared: Prepared, *, cuda_runtime: bool) -> ImportRun:
        """Run ``python -m fi_compat report --json`` against the release."""
        done, harness_log = self._run(
            prepared, ["-m", "fi_compat", "report", "--json"], cuda_runtime=cuda_runtime
        )
        return ImportRun(
            version=prepared.version,
            cuda_runtime=cuda_runtime,
            returncode=done.returncode,
            stdout=done.stdout,
            stderr=done.stderr,
            harness_log=harness_log,
        )

    def comm_traceback(self, prepared: Prepared, *, cuda_runtime: bool) -> str:
        """The full traceback of ``import flashinfer.comm`` in the same environment."""
        done, _ = self._run(prepared, ["-c", "import flashinfer.comm"], cuda_runtime=cuda_runtime)
        return done.stderr or f"import flashinfer.comm exited {done.returncode} without output"


def main(argv: list[str]) -> int:
    """Print the JSON report of each release given (default: all of :data:`RELEASES`)."""
    harness = Harness()
    for version in argv or list(RELEASES):
        prepared = harness.prepare(version)
        for cuda_runtime in (True, False):
            run = harness.report(prepared, cuda_runtime=cuda_runtime)
            print(f"# {version}, CUDA runtime preloaded: {cuda_runtime}, exit {run.returncode}")
            print(json.dumps({"harness": run.harness_log, "report": run.report}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
