"""The diff and the scan over every module of every recorded release, pre-releases included:
the uses engines make beyond comm and attention (MoE, autotuner, submodules imported as
names, private helpers) are judged, and what a release ships is never called missing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fi_compat._records import available_releases, load_release, module_introduced_in
from fi_compat.errors import UnknownReleaseError
from fi_compat.upgrade import Category, Finding, diff_releases, scan_tree


def _scan(tmp_path: Path, source: str, old: str, new: str) -> list[Finding]:
    (tmp_path / "engine.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return list(scan_tree(tmp_path, old, new).findings)


def _on(findings: list[Finding], line: int) -> list[Finding]:
    return [finding for finding in findings if finding.line == line]


def test_pre_releases_and_old_releases_are_recorded() -> None:
    releases = available_releases()
    assert "0.7.1rc2" in releases
    assert "0.2.9rc2" in releases
    assert releases[0].startswith("0.2.0")
    assert len(releases) == len(set(releases)) >= 100
    assert releases.index("0.7.1rc2") < releases.index("0.7.1") < releases.index("0.7.2")


def test_an_unrecorded_release_names_its_neighbours() -> None:
    with pytest.raises(UnknownReleaseError, match=r"nearest: 0\.7\.2\.post1 below, 0\.7\.4 above"):
        load_release("0.7.3")
    with pytest.raises(UnknownReleaseError, match=r"nearest: 0\.7\.4 below, none above"):
        load_release("0.7.5")
    with pytest.raises(UnknownReleaseError, match=r"fi-compat record 0\.7\.3"):
        load_release("0.7.3")
    with pytest.raises(
        UnknownReleaseError, match=r"nearest: 0\.6\.16\.post4 below, 0\.6\.17rc1 above"
    ):
        load_release("0.6.16.post5")
    with pytest.raises(UnknownReleaseError, match="not a PEP 440 version"):
        load_release("banana")


def test_the_diff_lists_what_moe_code_meets() -> None:
    diff = diff_releases("0.6.5", "0.7.2.post1")
    by_subject: dict[str, list[str]] = {}
    for change in diff.changes:
        by_subject.setdefault(change.subject, []).append(f"{change.kind}: {change.detail}")
    moe = [
        line
        for subject, lines in by_subject.items()
        if subject.endswith("trtllm_fp4_block_scale_moe")
        for line in lines
    ]
    assert any("per_token_scale" in line for line in moe), moe
    tuner = [
        line
        for subject, lines in by_subject.items()
        if subject in ("flashinfer.autotune", "flashinfer.autotuner.autotune")
        for line in lines
    ]
    assert any("cache=" in line for line in tuner), tuner
    added = [c for c in diff.changes if c.kind == "name-added" and c.subject == "flashinfer.moe_ep"]
    assert len(added) == 1
    assert added[0].release == module_introduced_in("flashinfer.moe_ep")
    # a module that comes with its package is said once, by the package
    assert not [c for c in diff.changes if c.subject.startswith("flashinfer.moe_ep.")]
    for change in diff.changes:
        assert change.release is not None, change


@pytest.mark.parametrize(("old", "new"), [("0.7.1rc2", "0.7.2"), ("0.2.3", "0.2.9rc2")])
def test_diffs_from_pins_engines_made(old: str, new: str) -> None:
    diff = diff_releases(old, new)
    assert diff.old == old
    assert diff.new == new
    assert diff.changes


def test_a_submodule_imported_as_a_name_is_there(tmp_path: Path) -> None:
    first = module_introduced_in("flashinfer.gdn_decode")
    assert first is not None
    releases = available_releases()
    old = releases[releases.index(first)]
    findings = _scan(tmp_path, "from flashinfer import gdn_decode\n", old, "0.7.2.post1")
    assert [f.category for f in _on(findings, 1)] == [Category.UNCHANGED], findings
    # ... and before the module existed, its import is newly available
    before = releases[releases.index(first) - 1]
    findings = _scan(tmp_path, "from flashinfer import gdn_decode\n", before, "0.7.2.post1")
    assert [f.category for f in _on(findings, 1)] == [Category.AVAILABLE], findings


def test_a_name_of_a_shipped_module_is_judged_not_missing(tmp_path: Path) -> None:
    source = """\
        from flashinfer.fp4_quantization import fp4_quantize
        from flashinfer.fused_moe import trtllm_fp4_block_scale_moe
        from flashinfer.utils import _get_range_buf
        import flashinfer
        flashinfer.__version__
        """
    findings = _scan(tmp_path, source, "0.6.5", "0.7.2.post1")
    for line in range(1, 6):
        for finding in _on(findings, line):
            assert "missing" not in finding.message, finding
            assert finding.category is not Category.BREAKS, finding


def test_a_call_that_fails_on_the_old_release_is_judged(tmp_path: Path) -> None:
    source = """\
        from flashinfer.fused_moe import trtllm_fp4_block_scale_moe
        trtllm_fp4_block_scale_moe(a, b, per_token_scale=s)
        """
    # a downgrade to 0.6.5: per_token_scale is not taken there
    findings = _scan(tmp_path, source, "0.7.2.post1", "0.6.5")
    assert any(f.category is Category.BREAKS for f in _on(findings, 2)), findings


def test_a_positional_call_over_a_parameter_renamed_in_place_is_unchanged(tmp_path: Path) -> None:
    # flashinfer.gemm.gemm_base._get_cache_buf(name, bytes, device) on 0.6.5 became
    # (name, num_bytes, device): vLLM 0.33.0 calls it positionally, which still works; a
    # call passing bytes= by keyword does not
    source = """\
        from flashinfer.gemm.gemm_base import _get_cache_buf
        _get_cache_buf("workspace", 1 << 20, device)
        _get_cache_buf("workspace", bytes=1 << 20, device=device)
        """
    findings = _scan(tmp_path, source, "0.6.5", "0.7.2.post1")
    assert not [f for f in _on(findings, 2) if f.category is Category.BREAKS], findings
    assert any(f.category is Category.BREAKS for f in _on(findings, 3)), findings
