"""``python -m tools.add_release V``: one command adds a release to the shipped data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools import add_release


def test_a_release_joins_the_list_in_version_order_once(tmp_path: Path) -> None:
    listed = tmp_path / "releases.txt"
    listed.write_text("# comment\n0.7.2\n0.7.2rc6\n0.7.2.post1\n", encoding="utf-8")
    assert add_release.add_to_list("0.7.4", listed) is True
    assert listed.read_text(encoding="utf-8") == "# comment\n0.7.2rc6\n0.7.2\n0.7.2.post1\n0.7.4\n"
    assert add_release.add_to_list("0.7.4", listed) is False
    assert (
        add_release.add_to_list("0.7.2post1", listed) is False
    )  # the same release, spelt otherwise
    assert add_release.add_to_list("0.7.3rc1", listed) is True
    names = listed.read_text(encoding="utf-8").splitlines()[1:]
    assert names == ["0.7.2rc6", "0.7.2", "0.7.2.post1", "0.7.3rc1", "0.7.4"]


def test_a_final_release_is_recorded_measured_and_everything_derived_refreshed() -> None:
    steps = add_release.steps("0.7.4")
    commands = [" ".join(argv[1:]) for _, argv in steps]
    assert commands == [
        "-m tools.record 0.7.4",
        "-m tools.reach 0.7.4",
        "-m tools.layers 0.7.4",
        "-m tools.sizes 0.7.4",
        "-m tests.support.release_classes --write",
        "scripts/gen_compat_table.py --write",
        "-m tools.charts --write",
    ]
    assert all(argv[0] == sys.executable for _, argv in steps)


def test_a_pre_release_is_recorded_not_measured() -> None:
    commands = [argv[1:3] for _, argv in add_release.steps("0.7.5rc1")]
    assert ["-m", "tools.reach"] not in commands
    assert commands[0] == ["-m", "tools.record"]


def test_a_release_that_names_none_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        add_release.main(["not-a-release"])
    assert caught.value.code == 2
    assert "expected a PEP 440 release" in capsys.readouterr().err
