"""``python ARGV`` in a fresh interpreter, as a user's machine runs it, made once per input.

The run gets a fi-compat cache of its own (``cache``, else an empty one in its scratch
directory) and no shipped release set aside unless ``left_out`` names one; everything else
comes from this process's environment. It is made once per input (:mod:`tools.results`):
this checkout, the interpreter and its installed distributions, the arguments and the files
in ``cache`` before the run; what the run leaves in ``cache`` is part of its result.

:func:`support_json` runs one of this checkout's ``tests.support`` modules that way and reads
the JSON it prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fi_compat._local import CACHE_ENV, UNRECORDED_ENV
from tools.results import ResultCache

__all__ = ["fresh_python", "support_json"]

ROOT = Path(__file__).resolve().parents[2]


def fresh_python(
    argv: Sequence[str],
    *,
    cache: Path | None = None,
    left_out: str | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """The finished run of ``python ARGV`` (see the module docstring); raises what
    :func:`subprocess.run` raises (``TimeoutExpired``)."""
    env = dict(os.environ)
    env.pop(UNRECORDED_ENV, None)
    if left_out is not None:
        env[UNRECORDED_ENV] = left_out
    with tempfile.TemporaryDirectory(prefix="fi-compat-fresh-") as scratch:
        own = Path(scratch) / "fi-compat-cache" if cache is None else cache
        own.mkdir(parents=True, exist_ok=True)
        env[CACHE_ENV] = str(own)
        return ResultCache().run(
            [sys.executable, *argv],
            env=env,
            cwd=Path(scratch),
            own=[] if cache is None else [cache],
            timeout=timeout,
        )


def support_json(module: str, *argv: str, timeout: float) -> dict[str, Any]:
    """The JSON that ``python -m MODULE ARGV`` printed, for a ``tests.support`` module of this
    checkout (found through ``PYTHONPATH``: the run starts in a scratch directory outside
    it), made once per input by :func:`fresh_python`, after checking that it succeeded
    (else failing with what it said)."""
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        patch.setenv("PYTHONPATH", os.pathsep.join(paths))
        done = fresh_python(["-m", module, *argv], timeout=timeout)
    command = " ".join(["python -m", module, *argv])
    assert done.returncode == 0, f"{command} exited with {done.returncode}:\n{done.stderr}"
    document: dict[str, Any] = json.loads(done.stdout)
    return document
