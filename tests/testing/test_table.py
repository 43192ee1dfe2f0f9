"""The generated tables: their content, and every copy in docs/ is current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fi_compat._surface import ATTENTION_FAMILIES
from fi_compat.attention import Verdict, measured_releases, split_reach
from fi_compat.errors import InvalidArgumentError
from fi_compat.testing._table import CAPABILITIES, _runs, compat_table
from scripts.gen_compat_table import TARGETS, main, stale
from tools.doc_tables import (
    REACH_END,
    REACH_START,
    TABLE_END,
    TABLE_START,
    policy_markers,
    policy_table,
    reach_table,
    refresh,
)
from tools.policy_cases import ENGINES

ROOT = Path(__file__).resolve().parents[2]
MARKERS = (
    TABLE_START,
    TABLE_END,
    REACH_START,
    REACH_END,
    *(marker for engine in ENGINES for marker in policy_markers(engine)),
)


def _block(text: str, start: str, end: str) -> str:
    assert text.count(start) == 1
    assert text.count(end) == 1
    return text[text.index(start) + len(start) : text.index(end)]


def _marked_files() -> list[str]:
    """Every Markdown file of the README and docs/ that holds a table marker."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [
        path.relative_to(ROOT).as_posix()
        for path in paths
        if any(marker in path.read_text(encoding="utf-8") for marker in MARKERS)
    ]


def test_every_file_with_a_table_is_a_target() -> None:
    assert _marked_files() == sorted(TARGETS, key=lambda name: (name != "README.md", name))


@pytest.mark.parametrize("name", TARGETS)
def test_every_copy_is_the_generated_one(name: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    assert refresh(text) == text, (
        f"{name}: generated table drifted: run python scripts/gen_compat_table.py --write"
    )
    assert stale() == []


def test_each_table_is_where_the_docs_say() -> None:
    # the README links to the docs site's table rather than keeping a copy of its own
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert TABLE_START not in readme
    assert "(docs/releases.md)" in readme
    releases = (ROOT / "docs" / "releases.md").read_text(encoding="utf-8")
    assert _block(releases, TABLE_START, TABLE_END) == "\n" + compat_table()
    attention = (ROOT / "docs" / "guide" / "attention.md").read_text(encoding="utf-8")
    section = attention[attention.index("## What reaches the kernel, measured") :]
    assert REACH_START in section
    assert _block(attention, REACH_START, REACH_END) == "\n" + reach_table()
    for engine in ENGINES:
        guide = (ROOT / "docs" / "migration" / f"{engine}.md").read_text(encoding="utf-8")
        start, end = policy_markers(engine)
        section = guide[guide.index("## Fusion policy") :]
        assert section.index(start) < section.index("\n## ")
        assert _block(guide, start, end) == "\n" + policy_table(engine)


def test_refresh_rewrites_a_stale_block_and_keeps_the_rest() -> None:
    text = f"before\n{TABLE_START}\nold\n{TABLE_END}\nafter {REACH_START}x{REACH_END}\n"
    assert refresh(text) == (
        f"before\n{TABLE_START}\n{compat_table()}{TABLE_END}\n"
        f"after {REACH_START}\n{reach_table()}{REACH_END}\n"
    )
    assert refresh("no markers") == "no markers"


@pytest.mark.parametrize(
    "text",
    [
        TABLE_START,
        TABLE_END,
        f"{TABLE_END}{TABLE_START}",
        f"{TABLE_START}{TABLE_START}{TABLE_END}",
        f"{TABLE_START}{TABLE_END}{TABLE_END}",
        f"{REACH_START}{TABLE_END}",
    ],
)
def test_refresh_refuses_unpaired_markers(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="in pairs"):
        refresh(text)


def test_write_and_check_modes(tmp_path: Path) -> None:
    for name in TARGETS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"{TABLE_START}\nold\n{TABLE_END}\n", encoding="utf-8")
    assert stale(tmp_path) == list(TARGETS)
    assert main(["--check"], root=tmp_path) == 1
    assert main(["--write"], root=tmp_path) == 0
    assert stale(tmp_path) == []
    assert main(["--check"], root=tmp_path) == 0
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_compat_table.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")


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
    assert rows[cuda] == ["0.2.6", "0.6.13 (absent from 0.2.7 to 0.2.7) |"]


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
    policy = "".join("\n" + policy_table(engine) for engine in ENGINES)
    assert done.stdout == compat_table() + "\n" + reach_table() + policy


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
    with pytest.raises(InvalidArgumentError, match=r"^expected "):
        compat_table(releases)  # type: ignore[arg-type]
