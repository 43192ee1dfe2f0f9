"""``reach.json`` against the flashinfer-python installed here, measured in a subprocess.

The reach probe (``fi_compat/_measured/reach_probe.py``) runs against the installed
release with the real-release harness's CPU workarounds; the verdicts must equal the
shipped entry for that version. A version the file does not cover is a failure:
``python -m tools.reach`` must be run for it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest

from tools.reach import OUTPUT, SITE_TEMPLATE, ReleaseEnvironment, classify_release, run_probe

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]


def test_installed_release_matches_the_shipped_entry(tmp_path: Path) -> None:
    version = importlib.metadata.version("flashinfer-python")
    releases = json.loads(OUTPUT.read_text(encoding="utf-8"))["releases"]
    assert version in releases, f"reach.json has no entry for {version}: run python -m tools.reach"
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE_TEMPLATE.read_text(encoding="utf-8"))
    spec = importlib.util.find_spec("flashinfer")
    assert spec is not None
    assert spec.origin is not None
    # The installed package's parent directory, first on the path (it is there anyway).
    installed = Path(spec.origin).resolve().parent.parent
    environment = ReleaseEnvironment(version, installed, site, cudart=None)
    document = run_probe(environment)
    assert document["location"].startswith(str(installed)), document["location"]
    assert classify_release(document) == releases[version]
