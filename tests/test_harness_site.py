"""The real-release harness's start-up hook imports torch with coverage paused.

``tests/support/release_harness_site/sitecustomize.py`` imports torch at start-up to put the
GPU 0 stand-ins in place. In ``make test`` every such subprocess is measured, and coverage
starts before the hook runs; torch's import executes none of fi_compat's code, so the hook
stops coverage across it and starts it again after. Each case runs the hook in a fresh
interpreter with a made-up ``torch`` first on the path that records whether a tracer was
set while it was imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.release_harness import SITE_TEMPLATE

pytest.importorskip("coverage", reason="the hook pauses coverage")

#: A torch that says whether anything traced its import, and has no CUDA device.
TORCH = """\
import sys

TRACED_WHILE_IMPORTED = sys.gettrace() is not None


class cuda:
    @staticmethod
    def is_available():
        return False
"""

#: Runs the hook (as Python runs ``sitecustomize`` at start-up) after starting coverage or
#: not, then says what torch saw and whether tracing went on after the hook.
RUN = """\
import importlib.util, json, sys
measuring = sys.argv[1] == "measured"
if measuring:
    import coverage
    started = coverage.Coverage(data_file=None, config_file=False)
    started.start()
spec = importlib.util.spec_from_file_location("sitecustomize", sys.argv[2])
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)
import torch
traced_after = sys.gettrace() is not None
if measuring:
    started.stop()
print(json.dumps({
    "torch_traced": torch.TRACED_WHILE_IMPORTED,
    "traced_after": traced_after,
    "stubbed": hook._LOG["gpu_stub"],
}))
"""


def _run(tmp_path: Path, mode: str) -> dict[str, bool]:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(TORCH, encoding="utf-8")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("COVERAGE_", "PYTHON", "FI_COMPAT_HARNESS_"))
    }
    env.update(PYTHONPATH=str(tmp_path), FI_COMPAT_HARNESS_STUB_GPU="1")
    done = subprocess.run(
        [sys.executable, "-c", RUN, mode, str(SITE_TEMPLATE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, bool] = json.loads(done.stdout)
    return answer


def test_torch_is_imported_with_coverage_paused_and_coverage_goes_on_after(
    tmp_path: Path,
) -> None:
    assert _run(tmp_path, "measured") == {
        "torch_traced": False,
        "traced_after": True,
        "stubbed": True,
    }


def test_an_unmeasured_run_imports_torch_as_it_did(tmp_path: Path) -> None:
    assert _run(tmp_path, "unmeasured") == {
        "torch_traced": False,
        "traced_after": False,
        "stubbed": True,
    }
