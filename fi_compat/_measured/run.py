"""Running one probe in a subprocess: its environment, its time limit, its one JSON document.

A probe (``reach_probe.py``, ``layers_probe.py``, ``sizes_probe.py``) imports one
FlashInfer release for real and prints one JSON document on stdout. It runs in a
subprocess so that what it replaces (compiled-module loaders, device queries) never
touches the process that asked, and so that a release that crashes, hangs or prints
anything else is a finding (:class:`Probed` with an ``error``), never an exception in the
caller. The maintainers' ``tools/`` run it against a release from the release cache;
:mod:`fi_compat._measured.installed` against the installed one.

Nothing here imports torch or FlashInfer.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from packaging.version import Version

__all__ = ["ProbeRunner", "Probed", "check_document", "probe_environment", "run", "run_here"]

#: Environment variables the subprocess does not inherit: the interpreter's own settings
#: (its path is given explicitly), the real-release harness's switches (given explicitly
#: where wanted) and FlashInfer's own switches (logging, trace dumps: they change what the
#: release's Python does).
_NOT_INHERITED = ("PYTHON", "FI_COMPAT_HARNESS_", "FLASHINFER_")
#: Lines of the subprocess's stderr a failure quotes.
_TAIL_LINES = 15


@dataclass(frozen=True)
class Probed:
    """What one probe subprocess gave: its document, or why there is none."""

    document: dict[str, Any] | None
    error: str | None = None


class ProbeRunner(Protocol):
    """What starts a probe's subprocess and waits for it: :func:`run_here`, or one that
    answers a run it has made before from the same inputs (the maintainers' tools)."""

    def __call__(
        self, argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]: ...


def run_here(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and wait, its output captured as text; raises what
    :func:`subprocess.run` raises."""
    return subprocess.run(
        argv, capture_output=True, text=True, check=False, cwd=cwd, env=env, timeout=timeout
    )


def probe_environment(
    path: Sequence[Path], extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """This process's environment for a probe: ``path`` as ``PYTHONPATH`` (in this order,
    nothing else), no user site, none of :data:`_NOT_INHERITED`, then ``extra``."""
    variables = {
        key: value for key, value in os.environ.items() if not key.startswith(_NOT_INHERITED)
    }
    variables.update(
        PYTHONPATH=os.pathsep.join(str(entry) for entry in path),
        PYTHONNOUSERSITE="1",
        **(extra or {}),
    )
    return variables


def check_document(version: str, stdout: str) -> Probed:
    """The probe's JSON report, checked to be one and to be of ``version`` (compared as
    PEP 440 versions; ``flashinfer.__version__`` as the subprocess imported it)."""
    try:
        document = json.loads(stdout)
    except json.JSONDecodeError as error:
        return Probed(None, f"flashinfer-python {version}: the probe printed no JSON ({error})")
    if not isinstance(document, dict) or document.get("probe") != 1:
        return Probed(None, f"flashinfer-python {version}: the probe printed an unknown document")
    found = document.get("version")
    if not _same_version(found, version):
        return Probed(
            None,
            f"flashinfer-python {version}: the subprocess imported flashinfer {found!r} "
            f"from {document.get('location')!r}",
        )
    return Probed(document)


def _same_version(found: object, version: str) -> bool:
    if found == version:
        return True
    if not isinstance(found, str):
        return False
    try:
        return Version(found) == Version(version)
    except ValueError:  # InvalidVersion, or digits beyond int()'s limit
        return False


def run(
    argv: Sequence[str],
    *,
    version: str,
    env: Mapping[str, str],
    timeout: float,
    runner: ProbeRunner = run_here,
) -> Probed:
    """Run ``argv`` in a scratch directory with exactly ``env`` (by ``runner``); the
    document it prints (:func:`check_document`), or why there is none: it could not start,
    timed out, exited non-zero (the end of its stderr quoted) or printed something else."""
    with tempfile.TemporaryDirectory(prefix="fi-compat-probe-") as scratch:
        try:
            done = runner(list(argv), cwd=Path(scratch), env=dict(env), timeout=timeout)
        except subprocess.TimeoutExpired:
            return Probed(
                None, f"flashinfer-python {version}: the probe timed out after {timeout:g} s"
            )
        except OSError as error:
            return Probed(None, f"flashinfer-python {version}: the probe could not start: {error}")
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-_TAIL_LINES:])
        return Probed(
            None, f"flashinfer-python {version}: the probe exited {done.returncode}\n{tail}"
        )
    return check_document(version, done.stdout)
