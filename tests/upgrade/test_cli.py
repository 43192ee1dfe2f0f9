"""``fi-compat scan --to installed`` and the text both commands print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fi_compat.cli import _scan as scan_command
from fi_compat.cli import main
from fi_compat.testing import fake_flashinfer

SOURCE = "import flashinfer.comm as fc\nfc.create_allreduce_fusion_workspace(group=None)\n"


@pytest.mark.parametrize(("installed", "verdict"), [("0.6.8", "breaks"), ("0.7.2", "unchanged")])
def test_to_installed_judges_against_the_release_the_probe_finds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], installed: str, verdict: str
) -> None:
    (tmp_path / "engine.py").write_text(SOURCE, encoding="utf-8")
    argv = ["scan", str(tmp_path), "--from", "0.7.2.post1", "--to", "installed", "--json"]
    with fake_flashinfer(installed):
        status = main([*argv, "--all"])
    document = json.loads(capsys.readouterr().out)
    assert document["new"] == installed
    call = [f for f in document["findings"] if f["kind"] == "call"]
    assert [f["category"] for f in call] == [verdict]
    assert status == (1 if verdict == "breaks" else 0)


def test_to_installed_without_flashinfer_is_a_command_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        scan_command, "_installed", lambda: (None, "no FlashInfer is installed here")
    )
    assert main(["scan", str(tmp_path), "--from", "0.6.5", "--to", "installed"]) == 2
    assert "no FlashInfer is installed" in capsys.readouterr().err


def test_the_text_groups_findings_by_file_and_hides_unchanged_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0.6.10 -> 0.6.10.post1: group= arrives, and no import hazard changes.
    (tmp_path / "a.py").write_text(SOURCE, encoding="utf-8")
    (tmp_path / "b.py").write_text("from flashinfer.comm import allreduce_fusion\n", "utf-8")
    argv = ["scan", str(tmp_path), "--from", "0.6.10", "--to", "0.6.10.post1"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"flashinfer 0.6.10 -> 0.6.10.post1: 2 files scanned under {tmp_path}"
    assert lines[1:3] == ["", "a.py"]
    assert lines[3].startswith("  2:1: newly available: ")
    assert lines[3].endswith("(keyword-added) [0.6.10.post1]")
    assert "b.py" not in lines  # only unchanged uses there
    assert lines[-1] == (
        "0 breaks, 0 changes behaviour, 0 loses determinism, 0 unverified, 1 newly available, "
        "2 unchanged; 0 files not scanned"
    )
    main([*argv, "--all"])
    assert "b.py" in capsys.readouterr().out.splitlines()
