"""How ``fi-compat scan`` reads a name rebound to a fallback where FlashInfer is missing.

Engines keep a module only where it has a function (``comm = comm if hasattr(comm, "f") else
None``) and put a stand-in where an import failed (``except ImportError: Wrapper = object``).
The name stays FlashInfer's along the branch where it is, so its uses are judged; the
fallback binds nothing of FlashInfer; a rebinding to something else drops the binding.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from fi_compat._engine_source.fallbacks import branch, kept_through
from fi_compat.upgrade import Category, Finding, scan_tree

#: A keyword 0.7.2.post1 takes and 0.6.5 refuses, and one 0.4.0 takes and 0.3.1 does not.
REFUSED = ("0.7.2.post1", "0.6.5")
ADDED = ("0.3.1", "0.4.0")


def _scan(tmp_path: Path, source: str, old: str, new: str) -> list[Finding]:
    (tmp_path / "engine.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return list(scan_tree(tmp_path, old, new).findings)


def _rules(findings: list[Finding], line: int) -> list[str]:
    return [f.rule for f in findings if f.line == line]


# ------------------------------------------------------------- a conditional expression


def test_a_module_kept_where_a_guard_finds_its_function_stays_flashinfer_s(
    tmp_path: Path,
) -> None:
    source = """\
    try:
        import flashinfer.comm as comm
        comm = comm if hasattr(comm, "allreduce_fusion") else None
    except ImportError:
        comm = None

    if comm is not None:
        def fuse(x):
            return comm.allreduce_fusion(x, trigger_completion_at_end=True)
        workspace = comm.PcieIpcAllReduceWorkspace

    comm.allreduce_fusion(x, trigger_completion_at_end=True)
    workspace = comm.PcieIpcAllReduceWorkspace
    """
    findings = _scan(tmp_path, source, *REFUSED)
    assert _rules(findings, 9) == ["keyword-missing"]
    assert _rules(findings, 12) == ["keyword-missing"]
    # ``comm`` holds the guard's answer: an ``if`` testing it guards what it runs
    missing = {f.line: f.category for f in findings if f.rule == "name-missing"}
    assert missing == {10: Category.BEHAVIOUR, 13: Category.BREAKS}
    assert {f.line for f in findings} == {2, 3, 9, 10, 12, 13}  # the fallbacks bind nothing


def test_a_flashinfer_name_or_a_fallback_in_either_arm(tmp_path: Path) -> None:
    source = """\
    import flashinfer
    import flashinfer.comm

    class Local:
        pass

    comm = flashinfer.comm if ready else None
    comm.allreduce_fusion(x, trigger_completion_at_end=True)
    fuse = Local if slow else flashinfer.comm.allreduce_fusion
    fuse(x, trigger_completion_at_end=True)
    nested = None if a else (flashinfer.comm if b else object)
    nested.allreduce_fusion(x, trigger_completion_at_end=True)
    """
    findings = _scan(tmp_path, source, *REFUSED)
    for line in (8, 10, 12):
        assert _rules(findings, line) == ["keyword-missing"], line


def test_a_conditional_naming_nothing_of_flashinfer_drops_the_binding(tmp_path: Path) -> None:
    source = """\
    import torch
    import flashinfer.comm as comm

    comm = torch.distributed if hasattr(torch, "distributed") else None
    comm.allreduce_fusion(x, trigger_completion_at_end=True)
    fuse = comm.allreduce_fusion if ready else None
    fuse(x, trigger_completion_at_end=True)
    """
    findings = _scan(tmp_path, source, *REFUSED)
    assert {f.line for f in findings} == {2}  # the import alone


def test_two_flashinfer_meanings_bind_neither(tmp_path: Path) -> None:
    source = """\
    import flashinfer.comm as comm

    fuse = comm.allreduce_fusion if ready else comm.trtllm_allreduce_fusion
    fuse(x, trigger_completion_at_end=True)
    same = comm.allreduce_fusion if ready else comm.allreduce_fusion
    same(x, trigger_completion_at_end=True)
    """
    findings = _scan(tmp_path, source, *REFUSED)
    assert not _rules(findings, 4)
    assert _rules(findings, 6) == ["keyword-missing"]


def test_an_instance_chosen_by_a_conditional_is_followed(tmp_path: Path) -> None:
    source = """\
    from flashinfer import BatchDecodeWithPagedKVCacheWrapper

    class Runner:
        def __init__(self, sliding):
            self.full = BatchDecodeWithPagedKVCacheWrapper(None)
            self.window = BatchDecodeWithPagedKVCacheWrapper(None) if sliding else None
            self.active = self.window if sliding else self.full

        def run(self):
            self.active.plan(fixed_split_size=1)
            self.window.plan(fixed_split_size=1)
    """
    findings = _scan(tmp_path, source, *ADDED)
    assert _rules(findings, 10) == ["keyword-added"]
    assert _rules(findings, 11) == ["keyword-added"]


# ------------------------------------------------------------- a try's handler


def test_a_class_with_a_stand_in_where_its_import_fails_stays_flashinfer_s(
    tmp_path: Path,
) -> None:
    source = """\
    try:
        from flashinfer import BatchDecodeWithPagedKVCacheWrapper
    except ImportError:
        BatchDecodeWithPagedKVCacheWrapper = object

    class Runner:
        def __init__(self):
            self.wrapper = BatchDecodeWithPagedKVCacheWrapper(None)
            self.chunks = [BatchDecodeWithPagedKVCacheWrapper(None) for _ in range(2)]

        def run(self, i):
            self.wrapper.plan(fixed_split_size=1)
            self.chunks[i].plan(fixed_split_size=1)
            return self.wrapper.run(q)
    """
    findings = _scan(tmp_path, source, *ADDED)
    assert Category.UNCHANGED in {f.category for f in findings if f.line == 8}
    assert "call" in {f.kind for f in findings if f.line == 9}
    assert _rules(findings, 12) == ["keyword-added"]
    assert _rules(findings, 13) == ["keyword-added"]
    assert [f.target for f in findings if f.line == 14] == [
        "flashinfer.BatchDecodeWithPagedKVCacheWrapper.run"
    ]
    assert not [f for f in findings if f.line in (3, 4)]  # the fallback binds nothing


def test_a_stand_in_class_or_none_keeps_the_binding_too(tmp_path: Path) -> None:
    source = """\
    try:
        from flashinfer import BatchDecodeWithPagedKVCacheWrapper as Wrapper
        import flashinfer.comm as comm
    except ImportError:
        class Wrapper:
            pass
        comm = None
    else:
        early = Wrapper(None)
        early.plan(fixed_split_size=1)

    wrapper = Wrapper(None)
    wrapper.plan(fixed_split_size=1)
    comm.create_allreduce_fusion_workspace(backend="trtllm")
    """
    findings = _scan(tmp_path, source, *ADDED)
    assert _rules(findings, 10) == ["keyword-added"]  # ``else:`` runs where the body did
    assert _rules(findings, 13) == ["keyword-added"]
    assert [f.target for f in findings if f.line == 14] == [
        "flashinfer.comm.create_allreduce_fusion_workspace"
    ]


def test_a_stand_in_function_of_the_handler_keeps_the_binding(tmp_path: Path) -> None:
    source = """\
    try:
        from flashinfer import BatchDecodeWithPagedKVCacheWrapper as Wrapper
    except ImportError:
        def unavailable(*args):
            raise RuntimeError("no FlashInfer")
        Wrapper = unavailable

    wrapper = Wrapper(None)
    wrapper.plan(fixed_split_size=1)
    """
    findings = _scan(tmp_path, source, *ADDED)
    assert _rules(findings, 9) == ["keyword-added"]
    assert not [f for f in findings if 3 <= f.line <= 6]


def test_what_a_handler_binds_from_flashinfer_is_what_the_name_holds(tmp_path: Path) -> None:
    source = """\
    try:
        from flashinfer.comm import allreduce_fusion as fuse
    except ImportError:
        from flashinfer.comm import trtllm_allreduce_fusion as fuse
    fuse(x)
    """
    findings = _scan(tmp_path, source, *REFUSED)
    assert [f.target for f in findings if f.line == 5] == [
        "flashinfer.comm.trtllm_allreduce_fusion"
    ]


def test_a_rebinding_outside_the_handler_drops_the_binding(tmp_path: Path) -> None:
    source = """\
    import torch

    try:
        from flashinfer import BatchDecodeWithPagedKVCacheWrapper
    except ImportError:
        BatchDecodeWithPagedKVCacheWrapper = object
    BatchDecodeWithPagedKVCacheWrapper = torch.nn.Module
    wrapper = BatchDecodeWithPagedKVCacheWrapper(None)
    wrapper.plan(fixed_split_size=1)

    try:
        import other_kernels as comm
    except ImportError:
        comm = object
    comm.allreduce_fusion(x, trigger_completion_at_end=True)
    """
    findings = _scan(tmp_path, source, *ADDED)
    assert {f.line for f in findings} == {4}  # the import alone


def test_a_stand_in_s_binding_is_passed_on_to_the_modules_importing_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "__init__.py").write_text("", encoding="utf-8")
    kernels = """\
    try:
        from flashinfer import BatchDecodeWithPagedKVCacheWrapper
    except ImportError:
        BatchDecodeWithPagedKVCacheWrapper = object
    """
    user = """\
    from engine.kernels import BatchDecodeWithPagedKVCacheWrapper

    wrapper = BatchDecodeWithPagedKVCacheWrapper(None)
    wrapper.plan(fixed_split_size=1)
    """
    (tmp_path / "engine" / "kernels.py").write_text(textwrap.dedent(kernels), encoding="utf-8")
    (tmp_path / "engine" / "user.py").write_text(textwrap.dedent(user), encoding="utf-8")
    findings = scan_tree(tmp_path, *ADDED).findings
    assert [f.rule for f in findings if f.path == "engine/user.py" and f.line == 4] == [
        "keyword-added"
    ]


# ------------------------------------------------------------- the helpers themselves


def test_branch_takes_the_one_arm_meaning_flashinfer() -> None:
    meanings = {"comm": "flashinfer.comm", "other": "flashinfer.other"}

    def meaning(node: ast.expr) -> str | None:
        return meanings.get(node.id) if isinstance(node, ast.Name) else None

    def pick(text: str) -> str:
        value = ast.parse(text, mode="eval").body
        return ast.unparse(branch(value, meaning))

    assert pick("comm if hasattr(comm, 'f') else None") == "comm"
    assert pick("None if a else (object if b else comm)") == "comm"
    assert pick("comm if a else comm") == "comm"
    assert pick("comm if a else other") == "comm if a else other"
    assert pick("None if a else object") == "None if a else object"
    assert pick("comm") == "comm"


def test_kept_through_gives_back_only_what_a_fallback_replaced() -> None:
    def ours(path: str) -> bool:
        return path.startswith("flashinfer")

    body = ({"W": "flashinfer.W", "V": "flashinfer.V", "t": "torch"}, {"w": "flashinfer.W"})
    after: tuple[dict[str, str], dict[str, str]] = ({"V": "flashinfer.old.V", "t": "np"}, {})
    kept_through(body, after, ours)
    # a fallback (``np``, nothing) gives the body's back; a handler's own FlashInfer stays
    assert after == (
        {"W": "flashinfer.W", "V": "flashinfer.old.V", "t": "np"},
        {"w": "flashinfer.W"},
    )
    body = ({}, {"w": "flashinfer.W"})
    after = ({"w": "other"}, {})
    kept_through(body, after, ours)
    assert after == ({}, {"w": "flashinfer.W"})  # an object again, not a module
