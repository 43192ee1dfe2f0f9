"""The GPU 0 stand-in the installed release's probes run behind (``_measured/stand_in.py``).

Each case runs the script by path, as :mod:`fi_compat._measured.installed` does, with a
made-up ``torch`` first on the path: one that reports no CUDA device (the stand-in answers
for GPU 0) and one that reports a device (the stand-in refuses to measure on it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fi_compat._measured import stand_in

SCRIPT = Path(stand_in.__file__)

#: A torch whose ``cuda`` reports a device or not, and says when it was imported.
TORCH = """\
import sys
sys.stderr.write("torch imported\\n")


class cuda:
    @staticmethod
    def is_available():
        return {available}

    @staticmethod
    def get_device_capability(device=None):
        return (8, 6)

    @staticmethod
    def get_device_properties(device=None):
        raise RuntimeError("a real device was read")
"""

READS_GPU = """\
import torch
print(torch.cuda.get_device_capability(), torch.cuda.get_device_properties(0).name)
"""


def _run(tmp_path: Path, probe: str, *, available: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "torch").mkdir(exist_ok=True)
    (tmp_path / "torch" / "__init__.py").write_text(TORCH.format(available=available))
    (tmp_path / "probe.py").write_text(probe)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "probe.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_a_probe_that_reads_gpu_0_gets_the_stand_in(tmp_path: Path) -> None:
    done = _run(tmp_path, READS_GPU, available=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"(9, 0) {stand_in.STAND_IN.name}\n"


def test_a_probe_that_never_imports_torch_does_not_pay_for_it(tmp_path: Path) -> None:
    done = _run(tmp_path, "print('measured')\n", available=False)
    assert (done.returncode, done.stdout) == (0, "measured\n")
    assert "torch imported" not in done.stderr


def test_a_visible_device_is_refused_before_the_probe_reads_it(tmp_path: Path) -> None:
    done = _run(tmp_path, READS_GPU + "print('measured')\n", available=True)
    assert done.returncode == stand_in.GPU_VISIBLE
    assert done.stdout == ""
    assert "refusing to measure on it" in done.stderr
    assert "a real device was read" not in done.stderr


def test_a_torch_imported_before_the_script_is_checked_at_once(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import torch\n")
    done = _run(tmp_path, "print('measured')\n", available=True)
    assert done.returncode == stand_in.GPU_VISIBLE
    assert done.stdout == ""


@pytest.mark.parametrize("argv", [[], ["a", "b"]])
def test_the_script_takes_exactly_one_probe(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "usage: stand_in.py PROBE" in done.stderr
