"""``python ARGV`` in a fresh interpreter, as a user's machine runs it, made once per input.

The run gets a fi-compat cache of its own (``cache``, else an empty one in its scratch
directory) and no shipped release set aside unless ``left_out`` names one; everything else
comes from this process's environment. It is made once per input (:mod:`tools.results`):
this checkout, the interpreter and its installed distributions, the arguments and the files
in ``cache`` before the run; what the run leaves in ``cache`` is part of its result.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from fi_compat._local import CACHE_ENV, UNRECORDED_ENV
from tools.results import ResultCache

__all__ = ["fresh_python"]


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
