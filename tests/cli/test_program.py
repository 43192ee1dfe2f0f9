"""The program around the commands: the collector's settings while a command runs, and
``console``, the ``fi-compat`` entry point."""

from __future__ import annotations

import gc
import subprocess
import sys
from typing import Any

import pytest

from fi_compat import cli
from fi_compat.upgrade import _diff


def test_a_command_runs_with_fewer_collections_and_leaves_the_settings_as_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[int, int, int]] = []
    real = _diff.diff_releases

    def spy(old: str, new: str) -> Any:
        seen.append(gc.get_threshold())
        return real(old, new)

    monkeypatch.setattr("fi_compat.upgrade.diff_releases", spy)
    before = gc.get_threshold()
    assert cli.main(["diff", "0.7.2", "0.7.2.post1", "--json"]) == 0
    assert gc.get_threshold() == before
    assert seen
    assert seen[0][0] >= 100_000
    assert seen[0][1:] == before[1:]


def test_the_settings_are_restored_when_the_command_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(old: str, new: str) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr("fi_compat.upgrade.diff_releases", broken)
    before = gc.get_threshold()
    with pytest.raises(RuntimeError, match="boom"):
        cli.main(["diff", "0.7.2", "0.7.2.post1"])
    assert gc.get_threshold() == before


@pytest.mark.parametrize(("arguments", "status"), [(["diff", "0.7.2", "0.7.2"], 0), ([], 2)])
def test_the_program_exits_with_the_command_s_status(arguments: list[str], status: int) -> None:
    """``python -m fi_compat`` runs ``console``: the command's output and its status, the
    interpreter ending normally after the freeze (exit handlers run, stdout flushed)."""
    done = subprocess.run(
        [sys.executable, "-m", "fi_compat", *arguments],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == status, done.stderr
    if status == 0:
        assert done.stdout.startswith("flashinfer 0.7.2 -> 0.7.2")
    assert "Traceback" not in done.stderr
