"""The first ``make test`` on a machine that has never run it: every download from nothing.

A download that only works from a warm cache passes wherever the suite has run before and
fails on a contributor's first run (the Python 3.10 run once fetched SGLang 0.5.23 and vLLM
0.33.0 only because an earlier Python 3.11 run had cached them). Each way the suite fetches
a published file (:data:`tests.support.published.PUBLISHED`) runs here in a fresh process
of this interpreter with an empty pip cache (``PIP_CACHE_DIR``) and an empty release cache
(``FI_COMPAT_RELEASE_CACHE``), through the very code the tests call; the Python 3.10 run
proves its own (the engines) and the Python 3.11 run all of them.

Marker ``release``: part of ``make test`` and ``make release-check``, not of ``make test-fast``.
It needs the package registry, as ``make test`` does to set itself up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.published import applies_here
from tools.releases import parse_release_file

pytestmark = pytest.mark.release

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", applies_here())
def test_fetched_from_empty_caches(name: str, tmp_path: Path) -> None:
    pip_cache, release_cache = tmp_path / "pip", tmp_path / "releases"
    environment = {
        **os.environ,
        "PIP_CACHE_DIR": str(pip_cache),
        "FI_COMPAT_RELEASE_CACHE": str(release_cache),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.published", name],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"{name} from empty caches:\n{done.stdout}\n{done.stderr}"
    fetched = Path(done.stdout.strip().splitlines()[-1])
    assert fetched.is_relative_to(release_cache), fetched  # not a file from elsewhere
    downloads = [p for p in (release_cache / "downloads").iterdir() if p.is_file()]
    assert downloads, "nothing was downloaded"
    assert all(parse_release_file(p.name) is not None for p in downloads)
