"""Every rule of ``fi-compat scan`` on a small tree written here, judged on real records.

Each case is a few lines an engine could write, scanned between two recorded releases whose
facts make the rule fire (the facts are the shipped records: ``fi-compat diff`` shows the
same change), and the finding is checked for its category, rule, line and cited release.
One rule the records never exercise between two releases (a keyword proven on one, taken
only by an unproven ``**kwargs`` on the other) is checked on records built here.
"""

from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from fi_compat._engine_source import read_module
from fi_compat._records import FunctionRecord, NameRecord, ParameterRecord, load_release
from fi_compat._records._facts import Facts
from fi_compat._records._format import ParameterKind
from fi_compat._records._history import History
from fi_compat.upgrade import RULES, Category, Finding, diff_releases, scan_tree
from fi_compat.upgrade._judge import judge

B, C, D, A, U = (
    Category.BREAKS,
    Category.BEHAVIOUR,
    Category.DETERMINISM,
    Category.AVAILABLE,
    Category.UNCHANGED,
)


def _scan(tmp_path: Path, source: str, old: str, new: str, **options: bool) -> list[Finding]:
    (tmp_path / "engine.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return list(scan_tree(tmp_path, old, new, **options).findings)


def _at(findings: list[Finding], line: int, rule: str | None = None) -> list[Finding]:
    return [f for f in findings if f.line == line and (rule is None or f.rule == rule)]


def _one(findings: list[Finding], line: int, rule: str) -> Finding:
    found = _at(findings, line, rule)
    assert len(found) == 1, (line, rule, findings)
    return found[0]


# (id, source, old, new, options, line, rule, category, release, words in the message)
CASES = [
    (
        "a removed name breaks its import",
        "from flashinfer.comm import PcieIpcAllReduceWorkspace\n",
        "0.7.2.post1",
        "0.6.5",
        {},
        1,
        "name-missing",
        B,
        "0.6.18.post1",
        ["ImportError"],
    ),
    (
        "a guarded import of a removed name changes behaviour",
        """\
        try:
            from flashinfer.comm import PcieIpcAllReduceWorkspace
        except ImportError:
            PcieIpcAllReduceWorkspace = None
        """,
        "0.7.2.post1",
        "0.6.5",
        {},
        2,
        "name-missing",
        C,
        "0.6.18.post1",
        ["caught"],
    ),
    (
        "a name missing on both releases is no change of the bump",
        "import flashinfer.comm as fc\nfc.no_such_function()\n",
        "0.6.5",
        "0.7.2.post1",
        {},
        2,
        "unchanged",
        U,
        None,
        ["missing on both", "raises AttributeError on both"],
    ),
    (
        "a new name is newly available",
        "import flashinfer.comm as fc\nws = fc.PcieIpcAllReduceWorkspace\n",
        "0.6.5",
        "0.7.2.post1",
        {},
        2,
        "name-added",
        A,
        "0.7.0",
        [],
    ),
    (
        "a moved class is noted on its import",
        "from flashinfer.comm.mnnvl import TorchDistBackend\n",
        "0.6.15",
        "0.6.16",
        {},
        1,
        "name-moved",
        C,
        "0.6.16",
        ["flashinfer.comm.comm_backend", "still works"],
    ),
    (
        "a keyword the new release lacks breaks the call",
        """\
        import flashinfer.comm as fc
        fc.create_allreduce_fusion_workspace(backend="trtllm", group=None)
        """,
        "0.7.2.post1",
        "0.6.8",
        {},
        2,
        "keyword-missing",
        B,
        "0.6.10",
        ["group=", "TypeError"],
    ),
    (
        "a keyword the new release brings is newly available",
        """\
        from flashinfer.comm import create_allreduce_fusion_workspace as create
        create(backend="trtllm", group=None)
        """,
        "0.6.8",
        "0.7.2.post1",
        {},
        2,
        "keyword-added",
        A,
        "0.6.10.post1",
        ["group="],
    ),
    (
        "a new required parameter breaks a call without it",
        """\
        import flashinfer.comm
        flashinfer.comm.trtllm_moe_finalize_allreduce_fusion(allreduce_in=x)
        """,
        "0.6.7.post3",
        "0.6.8",
        {},
        2,
        "required-missing",
        B,
        "0.6.8",
        ["quant_out"],
    ),
    (
        "positional arguments landing elsewhere break",
        """\
        from flashinfer.decode import fast_decode_plan
        fast_decode_plan(w, a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t)
        """,
        "0.6.15",
        "0.6.16",
        {},
        2,
        "positional-shift",
        B,
        "0.6.16",
        ["positional"],
    ),
    (
        "a default that changes under a call that leaves it out",
        """\
        import flashinfer
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(buffer, "NHD")
        wrapper.run(q, kv)
        """,
        "0.6.12",
        "0.6.13",
        {},
        3,
        "default-changed",
        C,
        "0.6.13",
        ["q_len_per_req"],
    ),
    (
        "a backend string the new release does not have",
        """\
        import flashinfer
        flashinfer.BatchDecodeWithPagedKVCacheWrapper(buffer, backend="prims-ts")
        """,
        "0.7.0.post1",
        "0.7.1",
        {},
        2,
        "backend-missing",
        B,
        "0.7.1",
        ["prims-ts"],
    ),
    (
        "a backend that stops carrying the split settings",
        """\
        from flashinfer import BatchDecodeWithPagedKVCacheWrapper
        BatchDecodeWithPagedKVCacheWrapper(buffer, backend="auto")
        """,
        "0.5.3",
        "0.6.0",
        {},
        2,
        "split-lost",
        D,
        "0.6.0",
        ["dropped"],
    ),
    (
        "a backend that starts carrying the split settings",
        """\
        from flashinfer import BatchDecodeWithPagedKVCacheWrapper
        BatchDecodeWithPagedKVCacheWrapper(buffer, backend="auto")
        """,
        "0.6.0",
        "0.5.3",
        {},
        2,
        "split-gained",
        A,
        "0.5.3",
        ["reach the kernel"],
    ),
    (
        "an import hazard that ends",
        "import flashinfer.comm\n",
        "0.6.13",
        "0.6.14",
        {},
        1,
        "import-hazard",
        C,
        "0.6.14",
        ["no longer raises AssertionError", "0.6.13"],
    ),
    (
        "an import hazard that appears, uncaught",
        """\
        try:
            import flashinfer.comm
        except ImportError:
            pass
        """,
        "0.6.14",
        "0.6.13",
        {},
        2,
        "import-hazard",
        B,
        "0.6.13",
        ["AssertionError", "nothing here catches it"],
    ),
    (
        "an import hazard that appears, caught",
        """\
        try:
            import flashinfer.comm
        except (ImportError, AssertionError):
            pass
        """,
        "0.6.14",
        "0.6.13",
        {},
        2,
        "import-hazard",
        C,
        "0.6.13",
        ["AssertionError", "catches it"],
    ),
    (
        "a hasattr guard that turns true",
        """\
        import flashinfer.comm as fc
        if hasattr(fc, "PcieIpcAllReduceWorkspace"):
            pass
        """,
        "0.6.5",
        "0.7.2.post1",
        {},
        2,
        "guard-flips",
        A,
        "0.7.0",
        ["True"],
    ),
    (
        "a getattr guard that turns false",
        """\
        import flashinfer.comm as fc
        workspace = getattr(fc, "PcieIpcAllReduceWorkspace", None)
        """,
        "0.7.2.post1",
        "0.6.5",
        {},
        2,
        "guard-flips",
        C,
        "0.6.18.post1",
        ["False"],
    ),
    (
        "a signature probe for one keyword",
        """\
        import inspect
        import flashinfer.comm as fc
        HAS_GROUP = "group" in inspect.signature(fc.create_allreduce_fusion_workspace).parameters
        """,
        "0.6.8",
        "0.7.2.post1",
        {},
        3,
        "signature-probe",
        C,
        "0.6.10.post1",
        ["True on 0.7.2.post1"],
    ),
    (
        "a signature probe through a variable",
        """\
        from inspect import signature
        from flashinfer.comm import allreduce_fusion
        sig = signature(allreduce_fusion)
        late = "trigger_completion_at_end" not in sig.parameters
        """,
        "0.6.7",
        "0.6.8",
        {},
        4,
        "signature-probe",
        C,
        "0.6.8",
        ["trigger_completion_at_end"],
    ),
    (
        "a whole-signature probe",
        """\
        import inspect
        import flashinfer.comm as fc
        inspect.signature(fc.allreduce_fusion)
        """,
        "0.6.11",
        "0.6.12",
        {},
        3,
        "signature-probe",
        C,
        "0.6.12",
        ["other parameters"],
    ),
    (
        "after the swap, fi-compat maps a keyword the release lacks",
        """\
        import flashinfer.comm as fc
        fc.create_allreduce_fusion_workspace(backend="trtllm", group=None)
        """,
        "0.7.2.post1",
        "0.6.8",
        {"fi_compat": True},
        2,
        "fi-compat-maps",
        C,
        "0.6.10",
        ["comm_backend"],
    ),
    (
        "after the swap, fi-compat refuses a missing name with a typed error",
        "from flashinfer.comm import PcieIpcAllReduceWorkspace\n",
        "0.7.2.post1",
        "0.6.5",
        {"fi_compat": True},
        1,
        "fi-compat-refuses",
        B,
        "0.6.18.post1",
        ["NameUnavailableError", "0.7.0"],
    ),
    (
        "after the swap, a name the upgrade removes is refused saying the release that did",
        "from flashinfer.comm import trtllm_custom_all_reduce\n",
        "0.6.18.post1",
        "0.7.0",
        {"fi_compat": True},
        1,
        "fi-compat-refuses",
        B,
        "0.7.0",
        ["NameUnavailableError", "saying 0.7.0 removed it"],
    ),
    (
        "after the swap, the CUDA-runtime hazard is gone",
        "import flashinfer.comm\n",
        "0.6.14",
        "0.6.13",
        {"fi_compat": True},
        1,
        "fi-compat-maps",
        U,
        "0.6.13",
        ["CUDA runtime", "never raises"],
    ),
    (
        "a name of a private module is unverified, saying why",
        "from flashinfer.mla._sparse_mla_sm120 import sparse_mla_sm120_decode_dsv4\n",
        "0.6.12",
        "0.7.2.post1",
        {},
        1,
        "unverified",
        Category.UNVERIFIED,
        None,
        ["a private module", "not the names it binds", "on 0.7.2.post1"],
    ),
    (
        "a use that meets the same on both",
        "from flashinfer.comm import allreduce_fusion\n",
        "0.7.2",
        "0.7.2.post1",
        {},
        1,
        "unchanged",
        U,
        None,
        [],
    ),
]


@pytest.mark.parametrize(
    ("source", "old", "new", "options", "line", "rule", "category", "release", "words"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_each_rule_fires_where_its_fact_changes(
    tmp_path: Path,
    source: str,
    old: str,
    new: str,
    options: dict[str, bool],
    line: int,
    rule: str,
    category: Category,
    release: str | None,
    words: list[str],
) -> None:
    found = [
        f
        for f in _at(_scan(tmp_path, source, old, new, **options), line, rule)
        if all(word in f.message for word in words)
    ]
    assert len(found) == 1, found
    finding = found[0]
    assert finding.category is category
    assert finding.release == release
    assert category in RULES[rule].categories


def test_a_move_the_scan_notes_is_the_one_the_diff_lists(tmp_path: Path) -> None:
    """The diff decides a move; the scan says it of an import, with the diff's release."""
    findings = _scan(tmp_path, "from flashinfer import ActivationType\n", "0.6.5", "0.7.2.post1")
    found = _one(findings, 1, "name-moved")
    (change,) = (
        c
        for c in diff_releases("0.6.5", "0.7.2.post1").changes
        if c.kind == "name-moved" and "flashinfer.ActivationType" in c.paths
    )
    assert (found.category, found.release) == (change.category, change.release) == (C, "0.6.7")
    assert f"defined in {change.new} on 0.7.2.post1 (in {change.old} on 0.6.5)" in found.message


def test_the_same_tree_is_unchanged_where_the_fact_did_not_change(tmp_path: Path) -> None:
    source = """\
        import flashinfer.comm as fc
        fc.create_allreduce_fusion_workspace(backend="trtllm", group=None)
        """
    findings = _scan(tmp_path, source, "0.6.10.post1", "0.7.2.post1")
    assert [f.rule for f in _at(findings, 2)] == ["unchanged"]


def _facts(release: str, params: tuple[tuple[str, ParameterKind, str | None], ...]) -> Facts:
    """The facts of a release (not in the store) whose flashinfer.comm binds one function."""
    parameters = tuple(ParameterRecord(name, kind, default) for name, kind, default in params)
    function = FunctionRecord("allreduce_fusion", "flashinfer.comm", (), parameters)
    name = NameRecord("allreduce_fusion", "function", "flashinfer.comm", function, None)
    names = {"flashinfer.comm": {"allreduce_fusion": name}}
    return Facts(release, replace(load_release("0.6.5"), release=release, names=names), {}, {})


def test_a_keyword_only_an_unproven_kwargs_takes_is_unverified() -> None:
    # No two recorded releases do this to a keyword, so the facts are built here.
    old = _facts(
        "1.0", (("input", "POSITIONAL_OR_KEYWORD", None), ("fp32_acc", "KEYWORD_ONLY", "False"))
    )
    new = _facts("2.0", (("input", "POSITIONAL_OR_KEYWORD", None), ("kwargs", "VAR_KEYWORD", None)))
    reading = read_module(
        b"import flashinfer.comm as fc\nfc.allreduce_fusion(x, fp32_acc=True)\n", "engine.py"
    )
    assert reading.diagnostic is None
    findings = judge(reading.uses, History((old, new)))
    found = _one(findings, 2, "keyword-unverified")
    assert found.category is Category.BEHAVIOUR
    assert found.release == "2.0"
    assert "**kwargs" in found.message


def test_every_rule_has_a_case_here() -> None:
    covered = {case[6] for case in CASES} | {"keyword-unverified"}
    assert covered == {kind for kind, rule in RULES.items() if "scan" in rule.commands}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_rule_is_described(rule: str) -> None:
    assert RULES[rule].id == rule
    assert RULES[rule].summary
    assert RULES[rule].categories


def test_a_probe_through_a_saved_parameters_mapping(tmp_path: Path) -> None:
    source = """\
        import inspect
        import flashinfer.comm as comm
        params = inspect.signature(comm.create_allreduce_fusion_workspace).parameters
        supports_group = "group" in params
        """
    findings = _scan(tmp_path, source, "0.6.8", "0.7.2.post1")
    probe = _one(findings, 4, "signature-probe")
    assert probe.release == "0.6.10.post1"
    assert not _at(findings, 3, "signature-probe")  # the keyword probe says it all


def test_a_keyword_that_was_renamed_says_its_new_name(tmp_path: Path) -> None:
    source = """\
        import flashinfer
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(buffer, "NHD")
        wrapper.run(q, kv, kv_block_scales=scales)
        """
    found = _one(_scan(tmp_path, source, "0.6.7.post3", "0.6.8"), 3, "keyword-missing")
    assert found.message.endswith("(it is called kv_cache_sf there)")
    assert found.release == "0.6.8"


def test_a_module_s_dunders_are_never_a_missing_name(tmp_path: Path) -> None:
    findings = _scan(
        tmp_path,
        """\
        import os
        import flashinfer
        import flashinfer.comm
        from flashinfer import __version__

        root = os.path.dirname(flashinfer.__file__)
        name = flashinfer.comm.__name__
        print(flashinfer.__version__, flashinfer.__spec__)
        """,
        "0.6.5",
        "0.7.2.post1",
    )
    assert not [f for f in findings if f.category is B], findings
    # Python sets these on every module: present on both releases
    assert _one(findings, 6, "unchanged").category is U
    assert _one(findings, 7, "unchanged").category is U
    # __version__ is bound by an import in both releases (recorded like any name): it moved
    # from flashinfer._build_meta to flashinfer.version, and the import still works
    assert [f.category for f in _at(findings, 4)] == [Category.BEHAVIOUR]


def test_a_private_module_is_known_to_ship_and_its_names_are_not(tmp_path: Path) -> None:
    """The records hold which private modules a release ships, not their names: SGLang 0.5.15
    imports ``flashinfer.mla._sparse_mla_sm120``, which 0.6.14 and later ship and 0.6.12 does
    not (its ``flashinfer.mla`` is a plain module). A name in it is unverified where the
    module ships on both; going down to a release without the module, the import breaks;
    a public name that neither release's module binds fails alike on both."""
    source = (
        "from flashinfer.mla._sparse_mla_sm120 import sparse_mla_sm120_decode_dsv4\n"
        "import flashinfer.mla\n"
        "flashinfer.mla._sparse_mla_sm120.sparse_mla_sm120_decode_dsv4(x)\n"
        "from flashinfer.mla import _sparse_mla_sm120\n"
        "from flashinfer.mla import no_such_public_name\n"
    )
    both = _scan(tmp_path, source, "0.7.2", "0.7.2.post1")
    for line in (1, 3):
        (only,) = _at(both, line)
        assert only.category is Category.UNVERIFIED, line
        assert "a private module" in only.message, line
    assert _one(both, 4, "unchanged").category is Category.UNCHANGED
    down = _scan(tmp_path, source, "0.7.2.post1", "0.6.12")
    for line in (1, 3, 4):
        (only,) = _at(down, line)
        assert (only.category, only.rule) == (Category.BREAKS, "name-missing"), line
        assert "flashinfer.mla._sparse_mla_sm120 (present on 0.7.2.post1" in only.message
    assert _one(down, 5, "unchanged").category is Category.UNCHANGED  # missing on both
    assert "raises ImportError on both" in _one(down, 5, "unchanged").message


def test_what_a_function_returns_is_not_flashinfer_s_where_its_annotation_says_so(
    tmp_path: Path,
) -> None:
    """``out = nvfp4_kv_dequantize(...)`` is a tensor (its recorded return annotation):
    ``out.reshape`` is torch's, not a FlashInfer name missing on both releases; the call
    itself is judged."""
    source = """\
    import flashinfer
    out = flashinfer.nvfp4_kv_dequantize(x, scale, global_scale)
    out = out.reshape(4, -1)
    """
    findings = _scan(tmp_path, source, "0.7.2", "0.7.2.post1")
    assert _at(findings, 2)
    assert not _at(findings, 3)


def test_a_drop_in_call_with_unread_keywords_is_unverified(tmp_path: Path) -> None:
    """``--fi-compat``: ``create_allreduce_fusion_workspace(**create_kw)`` (SGLang) may carry
    a keyword the drop-in refuses; the scan says it cannot see them, never that the drop-in
    passes every keyword."""
    source = """\
    import flashinfer.comm as comm
    workspace = comm.create_allreduce_fusion_workspace(backend="trtllm", **create_kw)
    workspace = comm.create_allreduce_fusion_workspace(backend="trtllm", world_size=2)
    """
    findings = _scan(tmp_path, source, "0.6.8", "0.7.2.post1", fi_compat=True)
    unverified = _one(findings, 2, "unverified")
    assert unverified.category is Category.UNVERIFIED
    assert "not read" in unverified.message
    assert "use_fp32_lamport" not in unverified.message or "raises TypeError" in unverified.message
    assert not [f for f in _at(findings, 2) if "passes every keyword" in f.message]
    assert any("passes every keyword" in f.message for f in _at(findings, 3))


LMDEPLOY_LIKE = """\
class FusedAllReduce:
    def workspace(self, group):
        try:
            return self._comm.create_allreduce_fusion_workspace(
                backend="trtllm", world_size=2, rank=0, max_token_num=8, hidden_dim=64,
                dtype=None, group=group,
            )
        except Exception as error:
            self.disable(error)

    def run(self, x, workspace):
        return self._comm.allreduce_fusion(
            input=x, workspace=workspace, pattern=0, trigger_completion_at_end=True
        )

    def initialize(self):
        import flashinfer.comm as comm

        self._comm = comm


class Unrelated:
    def run(self, x):
        return self._comm.allreduce_fusion(x, trigger_completion_at_end=True)
"""


def test_a_module_stored_on_self_is_followed_into_every_method_of_its_class(
    tmp_path: Path,
) -> None:
    """lmdeploy 0.18.0 keeps ``flashinfer.comm`` as ``self._comm`` (set in one method, read
    in others, some above it in the file): on a downgrade to 0.6.5 its ``group=`` raises
    TypeError inside a handler that catches it and turns fusion off, the failure the
    README opens with, and an uncaught keyword the release lacks still breaks. Another
    class's ``self._comm`` is not this one."""
    findings = _scan(tmp_path, LMDEPLOY_LIKE, "0.7.2.post1", "0.6.5")
    group = [f for f in _at(findings, 4, "keyword-missing") if "group=" in f.message]
    assert len(group) == 1
    assert group[0].category is Category.BEHAVIOUR
    assert "handler here catches" in group[0].message
    assert group[0].release == "0.6.10"
    trigger = _one(findings, 12, "keyword-missing")
    assert trigger.category is B
    assert "trigger_completion_at_end" in trigger.message
    assert not _at(findings, 25)  # Unrelated's self._comm is nothing fi-compat knows
    # the upgrade from 0.6.5 makes both available
    upgrade = _scan(tmp_path, LMDEPLOY_LIKE, "0.6.5", "0.7.2.post1")
    assert any(f.category is Category.AVAILABLE for f in _at(upgrade, 4))


def test_a_missing_keyword_breaks_unless_a_handler_catches_type_error(tmp_path: Path) -> None:
    source = """\
    import flashinfer.comm as comm
    try:
        comm.create_allreduce_fusion_workspace(backend="trtllm", group=None)
    except ValueError:
        pass
    try:
        comm.create_allreduce_fusion_workspace(backend="trtllm", group=None)
    except (TypeError, RuntimeError):
        pass
    """
    findings = _scan(tmp_path, source, "0.7.2.post1", "0.6.5")
    assert _one(findings, 3, "keyword-missing").category is B
    assert _one(findings, 7, "keyword-missing").category is Category.BEHAVIOUR


def test_a_module_imported_by_importlib_is_read_like_an_import(tmp_path: Path) -> None:
    """SGLang 0.5.23 reads ``flashinfer.norm`` through ``importlib.import_module``: the
    string is an import, and the name it is bound to is the module."""
    source = """\
    import importlib
    from importlib import import_module
    norm = importlib.import_module("flashinfer.norm")
    norm.rmsnorm(x, w)
    moe = import_module("flashinfer.moe_ep")
    other = importlib.import_module("json")
    """
    findings = _scan(tmp_path, source, "0.7.2.post1", "0.6.5")
    assert _one(findings, 4, "unchanged").category is U  # norm.rmsnorm: on both
    missing = [f for f in _at(findings, 5) if f.rule == "name-missing"]
    assert len(missing) == 1  # flashinfer.moe_ep arrived in 0.6.12
    assert missing[0].category is B
    assert "flashinfer.moe_ep" in missing[0].message
    assert not _at(findings, 6)


def test_a_wrapper_reaches_a_function_through_an_annotated_parameter(tmp_path: Path) -> None:
    """SGLang hands its wrappers to ``call_begin_forward(self, wrapper:
    BatchDecodeWithPagedKVCacheWrapper, ...)``: the calls on the parameter are the
    wrapper's; a keyword neither release takes, under a guard the reading cannot evaluate
    (the ``begin_forward`` SGLang swapped for fast_decode_plan), is unverified, and one
    unguarded fails alike on both (unchanged), neither a break; the parameter's name means
    nothing outside the function."""
    source = """\
    from typing import Optional
    from flashinfer import BatchDecodeWithPagedKVCacheWrapper

    def call_begin_forward(
        wrapper: BatchDecodeWithPagedKVCacheWrapper,
        ragged: "Optional[BatchDecodeWithPagedKVCacheWrapper]",
    ):
        wrapper.begin_forward(indptr, indices, last_page_len, 8, 1, 128, 16)
        ragged.plan(indptr, indices, last_page_len, 8, 1, 128, 16, fixed_split_size=64)
        if hasattr(wrapper.begin_forward, "func"):
            wrapper.begin_forward(indptr, global_override_indptr_cpu=cpu)
        wrapper.begin_forward(indptr, no_such_keyword=1)

    def elsewhere(wrapper):
        wrapper.plan(no_such_keyword=1)
    """
    findings = _scan(tmp_path, source, "0.3.1", "0.4.0")
    assert _one(findings, 8, "unchanged").category is U
    added = _one(findings, 9, "keyword-added")  # fixed_split_size= arrived in 0.4.0
    assert added.category is Category.AVAILABLE
    guarded = _one(findings, 11, "unverified")
    assert "global_override_indptr_cpu" in guarded.message
    unguarded = _one(findings, 12, "unchanged")  # taken on neither: fails on both alike
    assert "raises TypeError on both" in unguarded.message
    assert not _at(findings, 15)


def test_a_guard_s_answer_kept_in_a_name_guards_the_if_that_tests_it(tmp_path: Path) -> None:
    """SGLang 0.5.10 stores ``hasattr(wrapper.begin_forward, "func")`` in a variable and
    calls fast_decode_plan's keywords only under ``if`` that variable: guarded, as if the
    ``hasattr`` were written in the test; an unrelated variable guards nothing, but a use of
    the name the kept answer is about is not said to break."""
    source = """\
    import flashinfer.comm as comm
    available = hasattr(comm, "PcieIpcAllReduceWorkspace")
    other = len([])
    if available:
        comm.PcieIpcAllReduceWorkspace(group=None)
    if other:
        comm.PcieIpcAllReduceWorkspace(group=None)
    """
    findings = _scan(tmp_path, source, "0.7.2.post1", "0.6.8")
    guarded = [f for f in _at(findings, 5) if f.rule == "name-missing"]
    assert [f.category for f in guarded] == [Category.BEHAVIOUR]
    # an unrelated variable guards nothing, yet the file keeps hasattr's answer about the
    # name: whether that answer keeps line 7 from running is not read, so no break is said
    (kept,) = [f for f in _at(findings, 7) if f.rule != "unchanged"]
    assert (kept.category, kept.rule) == (Category.UNVERIFIED, "unverified")
    assert "keeps a guard's answer about it in available" in kept.message
    unkept = source.replace("available = hasattr", "available = getattr")
    plain = _scan(tmp_path, unkept, "0.7.2.post1", "0.6.8")
    assert [f.category for f in _at(plain, 7) if f.rule == "name-missing"] == [B]
