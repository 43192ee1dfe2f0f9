"""README's FlashInfer table must equal the table generated from the recorded releases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fi_compat._surface import ATTENTION_FAMILIES
from fi_compat.attention import Verdict, measured_releases, split_reach
from fi_compat.testing._table import (
    CAPABILITIES,
    REACH_END,
    REACH_START,
    TABLE_END,
    TABLE_START,
    _runs,
    compat_table,
    reach_table,
)

ROOT = Path(__file__).resolve().parents[2]


def _readme_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(TABLE_START) == 1
    assert text.count(TABLE_END) == 1
    section = text[text.index("## FlashInfer releases") :]
    assert section.index(TABLE_START) < section.index("\n## ")
    return text[text.index(TABLE_START) + len(TABLE_START) : text.index(TABLE_END)]


def test_readme_table_is_the_generated_one() -> None:
    assert _readme_block() == "\n" + compat_table(), (
        "README table drifted: run python scripts/gen_compat_table.py --write"
    )


def test_table_rows_name_the_first_release() -> None:
    rows = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:]
        for line in compat_table().splitlines()
        if line.startswith("| ") and not line.startswith(("| Capability", "| ---"))
    }
    assert len(rows) == len(CAPABILITIES)
    assert rows["`group=` on `create_allreduce_fusion_workspace`"] == ["0.6.10.post1", "— |"]
    assert rows["`trigger_completion_at_end=` on `allreduce_fusion`"] == ["0.6.8", "— |"]
    cuda = "Hazard: `import flashinfer.comm` needs a loaded CUDA runtime (`AssertionError`)"
    assert rows[cuda] == ["0.2.9", "0.6.13 |"]


def test_runs_of_consecutive_releases() -> None:
    names = ["a", "b", "c", "d", "e"]
    assert _runs([True, True, False, True, False], names) == [("a", "b"), ("d", "d")]
    assert _runs([False] * 5, names) == []


def test_table_on_a_subset_says_never() -> None:
    table = compat_table(["0.6.13", "0.6.14", "0.6.15"])
    assert "(0.6.13 to 0.6.15)" in table
    assert "| `TorchDistBackend` in `flashinfer.comm.comm_backend` | never | — |" in table
    assert (
        "| `BatchDecodeWithPagedKVCacheWrapper.plan(**kwargs)` forwards to `_plan_impl` " in table
    )


def test_script_prints_the_table() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_compat_table.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == compat_table() + "\n" + reach_table()


def test_readme_reach_table_is_the_generated_one() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(REACH_START) == 1
    assert text.count(REACH_END) == 1
    block = text[text.index(REACH_START) + len(REACH_START) : text.index(REACH_END)]
    assert block == "\n" + reach_table(), (
        "README reach table drifted: run python scripts/gen_compat_table.py --write"
    )


def test_reach_table_rows_follow_the_data() -> None:
    rows = {
        tuple(cell.strip(" `|") for cell in line.split(" | ")[:2]): line.split(" | ")[2]
        for line in reach_table().splitlines()
        if line.startswith("| `")
    }
    releases = measured_releases()
    span = f"{releases[0]} to {releases[-1]}"
    for family in ATTENTION_FAMILIES[:3]:
        assert rows[family, "fa2"] == f"reaches {span} |"
    assert rows["BatchPrefillWithPagedKVCacheWrapper", "fa3"] == f"dropped {span} |"
    for family, backend in rows:
        for release in releases:
            answer = split_reach(release, family, backend)
            if answer.verdict is not Verdict.UNKNOWN and backend != "all":
                assert str(answer.verdict) in rows[family, backend], (family, backend, release)
    mla = rows["BatchMLAPagedAttentionWrapper", "all"]
    assert mla.startswith("refused ")


@pytest.mark.parametrize("releases", ["0.6.5", b"0.6.5", 5, [5], ["0.6.5", None], []])
def test_compat_table_refuses_malformed_releases(releases: object) -> None:
    from fi_compat.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"^expected "):
        compat_table(releases)  # type: ignore[arg-type]
