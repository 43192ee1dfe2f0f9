"""After ``pip install fi-compat`` an engine's own suite gets ``fake_flashinfer`` for free."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ENGINE_TEST = textwrap.dedent(
    """
    import pytest

    def test_engine_against_065(fake_flashinfer):
        fi = fake_flashinfer("0.6.5")
        import flashinfer.comm as comm
        with pytest.raises(TypeError, match="unexpected keyword argument 'group'"):
            comm.create_allreduce_fusion_workspace(world_size=2, rank=0, group=object())
        assert fi.record.release == "0.6.5"
    """
)


def test_fixture_reaches_an_engine_suite_through_the_entry_point(tmp_path: Path) -> None:
    (tmp_path / "test_engine.py").write_text(ENGINE_TEST)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
