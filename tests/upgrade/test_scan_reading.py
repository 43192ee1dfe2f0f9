"""How ``fi-compat scan`` reads what engines write: Python's scopes, containers of
FlashInfer objects, functions that return one, ``global`` names, a failed import's ``None``,
a package's binding over its submodule, objects a release builds at import, and names read
as values. Each case has its counterpart that must not be followed."""

from __future__ import annotations

import textwrap
from pathlib import Path

from fi_compat.upgrade import Category, Finding, diff_releases, scan_tree


def _scan(tmp_path: Path, source: str, old: str, new: str) -> list[Finding]:
    (tmp_path / "engine.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return list(scan_tree(tmp_path, old, new).findings)


def _at(findings: list[Finding], line: int) -> list[Finding]:
    return [f for f in findings if f.line == line]


def test_a_name_a_function_binds_means_nothing_in_the_next_one(tmp_path: Path) -> None:
    source = """\
    def uses():
        from flashinfer import top_k
        top_k(x, 2, deterministic=True)

    def other(top_k):
        top_k(x, 2, deterministic=True)

    def third():
        top_k(x, 2, deterministic=True)
    """
    findings = _scan(tmp_path, source, "0.7.2.post1", "0.6.5")
    assert [f.rule for f in _at(findings, 3)] == ["keyword-missing"]
    assert not _at(findings, 6)  # a parameter of that name is not FlashInfer's
    assert not _at(findings, 9)  # nor a name only another function bound


def test_a_name_bound_anew_is_its_new_value_but_none_is_a_fallback(tmp_path: Path) -> None:
    source = """\
    try:
        import flashinfer.comm as comm
    except ImportError:
        comm = None
    comm.allreduce_fusion(x, trigger_completion_at_end=True)
    comm = object()
    comm.allreduce_fusion(x, trigger_completion_at_end=True)
    """
    findings = _scan(tmp_path, source, "0.7.2.post1", "0.6.5")
    assert [f.rule for f in _at(findings, 5)] == ["keyword-missing"]
    assert not _at(findings, 7)


def test_containers_of_wrappers_are_followed(tmp_path: Path) -> None:
    source = """\
    from flashinfer import BatchDecodeWithPagedKVCacheWrapper as W

    class Runner:
        def __init__(self):
            self.wrappers = []
            for _ in range(2):
                self.wrappers.append(W(None))
            self.by_id = {0: W(None)}

        def run(self, i):
            self.wrappers[i].plan(fixed_split_size=1)
            for w in self.wrappers:
                w.plan(fixed_split_size=1)
            for j, w in enumerate(self.wrappers):
                w.plan(fixed_split_size=1)
            for w in self.by_id.values():
                w.plan(fixed_split_size=1)
            mixed = [W(None), object()]
            mixed[0].plan(fixed_split_size=1)
    """
    findings = _scan(tmp_path, source, "0.3.1", "0.4.0")
    for line in (11, 13, 15, 17):
        assert [f.rule for f in _at(findings, line)] == ["keyword-added"], line
    assert not _at(findings, 19)  # a list of two kinds holds no one kind


def test_a_function_returning_a_flashinfer_object_is_followed(tmp_path: Path) -> None:
    source = """\
    import flashinfer.comm as fc

    _ws = None

    def get_ws():
        global _ws
        if _ws is not None:
            return _ws
        _ws = _make()
        return _ws

    def _make():
        ws = fc.create_allreduce_fusion_workspace(backend="trtllm")
        return ws

    def use():
        get_ws().destroy()
        ws = get_ws()
        ws.checkpoint_prepare()

    def not_one():
        return 3

    def other():
        not_one().checkpoint_prepare()
    """
    findings = _scan(tmp_path, source, "0.7.2.post1", "0.6.5")
    (prepare,) = _at(findings, 19)
    assert prepare.target == "flashinfer.comm.create_allreduce_fusion_workspace.checkpoint_prepare"
    # 0.6.5's TRTLLM workspace hands out what it wraps through __getattr__: not a break
    assert prepare.category is Category.UNVERIFIED
    assert "__getattr__" in prepare.message
    assert not _at(findings, 25)


def test_a_package_binding_wins_over_its_submodule(tmp_path: Path) -> None:
    """``flashinfer.mamba`` binds the function ``selective_state_update`` over its submodule
    of that name, as Python resolves it: the call's keywords are the function's."""
    source = """\
    class K:
        def __init__(self):
            from flashinfer.mamba import selective_state_update
            self._kernel = selective_state_update

        def __call__(self, s):
            self._kernel(s, rand_seed=1)
    """
    findings = _scan(tmp_path, source, "0.7.2.post1", "0.6.5")
    (refused,) = _at(findings, 7)
    assert (refused.rule, refused.category) == ("keyword-missing", Category.BREAKS)


def test_names_read_as_values_and_probed_get_a_verdict(tmp_path: Path) -> None:
    source = """\
    import inspect
    import flashinfer.comm as comm
    create = comm.create_allreduce_fusion_workspace
    params = inspect.signature(
        comm.allreduce_fusion
    ).parameters
    """
    findings = _scan(tmp_path, source, "0.7.2", "0.7.2.post1")
    assert [f.rule for f in _at(findings, 3)] == ["unchanged"]
    assert [(f.rule, f.kind) for f in _at(findings, 5)] == [("unchanged", "attribute")]


def test_an_object_a_release_builds_at_import_is_its_class(tmp_path: Path) -> None:
    """``flashinfer.comm.cuda_ipc.cudart`` is a ``CudaRTLibrary()`` (0.6.x): its methods are
    the class's (lmdeploy calls ``cudart.cudaSetDevice``)."""
    source = """\
    from flashinfer.comm.cuda_ipc import cudart
    cudart.cudaSetDevice(0)
    cudart.no_such_method(0)
    """
    findings = _scan(tmp_path, source, "0.6.5", "0.6.8")
    assert [f.category for f in _at(findings, 2)] == [Category.UNCHANGED]
    (unlisted,) = _at(findings, 3)  # a class record lists methods, not every attribute
    assert unlisted.category is Category.UNVERIFIED
    assert "records of flashinfer.comm.cuda_ipc.CudaRTLibrary list no" in unlisted.message


def test_the_judge_and_the_diff_cite_the_same_change(tmp_path: Path) -> None:
    """One comparison: the release a finding cites for a keyword is the diff's."""
    source = """\
    import flashinfer.comm as comm
    comm.create_allreduce_fusion_workspace(backend="trtllm", group=None)
    """
    findings = _scan(tmp_path, source, "0.6.8", "0.7.2.post1")
    (added,) = [f for f in _at(findings, 2) if f.rule == "keyword-added"]
    diff = diff_releases("0.6.8", "0.7.2.post1")
    (change,) = [
        c
        for c in diff.changes
        if c.kind == "keyword-added"
        and c.parameter == "group"
        and c.subject.endswith("create_allreduce_fusion_workspace")
    ]
    assert added.release == change.release == "0.6.10.post1"
