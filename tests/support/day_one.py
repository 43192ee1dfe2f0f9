"""Fresh interpreters on the day-one path: a cache of the test's own, a release set aside."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fi_compat._local import CACHE_ENV, UNRECORDED_ENV

__all__ = ["run_python"]


def run_python(argv: list[str], cache: Path, left_out: str | None) -> str:
    """The standard output of ``python ARGV`` with ``cache`` as fi-compat's cache and
    ``left_out`` set aside (``FI_COMPAT_UNRECORDED``; None: nothing), which must succeed."""
    env = {**os.environ, CACHE_ENV: str(cache)}
    env.pop(UNRECORDED_ENV, None)
    if left_out is not None:
        env[UNRECORDED_ENV] = left_out
    done = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env, timeout=1800
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
