"""``fi-compat diff``: what changes between two recorded releases, each citing its release.

The changes the issue names are checked line by line in the text an engine maintainer
reads; the JSON is validated against the schema the package ships and the docs describe;
each change's citation is checked against the records themselves (the fact has its old
value at ``last_before`` and its new value from ``release`` on).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import pytest

from fi_compat._records._facts import facts_of
from fi_compat._records._history import releases_between
from fi_compat.cli import main
from fi_compat.errors import InvalidArgumentError, UnknownReleaseError
from fi_compat.upgrade import Category, ReleaseDiff, diff_releases, render_diff

jsonschema = pytest.importorskip("jsonschema")


@functools.cache
def _diff(old: str, new: str) -> ReleaseDiff:
    """``diff_releases(old, new)``, worked out once per pair for this module's tests (a
    ``ReleaseDiff`` and its changes are frozen, so they share it; 0.6.8 to 0.7.2.post1
    alone is asked for seven times)."""
    return diff_releases(old, new)


def _schema(name: str) -> Any:
    return json.loads(resources.files("fi_compat.upgrade").joinpath(name).read_text("utf-8"))


def _line(text: str, *words: str) -> str:
    found = [line for line in text.splitlines() if all(word in line for word in words)]
    assert len(found) == 1, (words, found)
    return found[0]


def test_the_changes_the_issue_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "0.6.8", "0.7.2.post1"]) == 0
    text = capsys.readouterr().out
    group = _line(text, " flashinfer.comm.create_allreduce_fusion_workspace (also ", "group=")
    assert group.split()[0] == "0.6.10.post1"
    moved = _line(text, "TorchDistBackend", "flashinfer.comm.comm_backend")
    assert moved.split()[0] == "0.6.16"
    bias = _line(text, " flashinfer.comm.allreduce_fusion (also ", "weight_bias=")
    assert bias.split()[0] == "0.6.12"
    hazard = _line(text, "comm_requires_cuda_runtime", "import flashinfer.comm")
    assert hazard.split()[0] == "0.6.14"
    assert "it did up to 0.6.13" in hazard


def test_json_validates_against_the_shipped_schema(capsys: pytest.CaptureFixture[str]) -> None:
    schema = _schema("diff.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    for old, new in (("0.6.8", "0.7.2.post1"), ("0.7.2.post1", "0.2.9"), ("0.6.5", "0.6.5")):
        assert main(["diff", old, new, "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)
        assert (document["old"], document["new"]) == (old, new)


def test_the_schema_lists_every_change_kind_the_diff_can_give() -> None:
    kinds = set(_schema("diff.schema.json")["$defs"]["change"]["properties"]["kind"]["enum"])
    seen = {
        change.kind
        for old, new in (("0.2.9", "0.7.2.post1"), ("0.7.2.post1", "0.2.9"))
        for change in _diff(old, new).changes
    }
    assert seen <= kinds
    # every kind the schema lists is one the comparison's parts can give
    source = "".join(
        module.read_text("utf-8")
        for module in resources.files("fi_compat.upgrade").iterdir()
        if module.name.startswith("_compare")
    )
    assert {kind for kind in kinds if f'"{kind}"' in source} == kinds


def test_a_name_whose_home_the_record_does_not_give_has_not_moved() -> None:
    # 0.6.18rc10 records bsa_attn_fwd as a value whose home it does not give (0.6.17: a
    # function of bsa_attn): its kind changed, and no "defined in None" is said
    for old, new in (("0.6.17", "0.6.18rc10"), ("0.6.18rc10", "0.6.17")):
        changes = _diff(old, new).changes
        kinds = [c.kind for c in changes if c.subject == "flashinfer.cute_dsl.sparse.bsa_attn_fwd"]
        assert kinds == ["name-kind"]
        assert not [c for c in changes if c.kind == "name-moved" and not (c.old and c.new)]


def test_each_parameter_change_cites_where_the_records_change() -> None:
    diff = _diff("0.6.8", "0.7.2.post1")
    checked = 0
    for change in diff.changes:
        if change.kind != "keyword-added" or not change.detail.split()[1].endswith("="):
            continue  # "takes **kwargs" and the like
        assert change.release is not None
        assert change.last_before is not None
        name = change.detail.split()[1].rstrip("=")

        def value(release: str, name: str = name, subject: str = change.subject) -> Any:
            return facts_of(release).parameter(subject, name)

        final = value("0.7.2.post1")
        assert final is not None
        assert value("0.6.8") is None
        assert all(value(r) == final for r in releases_between(change.release, "0.7.2.post1"))
        assert value(change.last_before) != final
        assert releases_between("0.6.8", change.last_before)[-1] == change.last_before
        checked += 1
    assert checked > 100


def test_a_downgrade_reverses_the_upgrade() -> None:
    up = _diff("0.6.8", "0.7.2.post1")
    down = _diff("0.7.2.post1", "0.6.8")
    # every path: the bindings of one definition that arrive at different releases on the
    # way up all go at once on the way down (one change there, several here)
    added = {path for c in up.changes if c.kind == "name-added" for path in c.paths}
    removed = {path for c in down.changes if c.kind == "name-missing" for path in c.paths}
    assert added == removed
    assert down.releases == tuple(reversed(up.releases))


def test_the_same_release_has_no_changes() -> None:
    diff = _diff("0.7.2", "0.7.2")
    assert diff.changes == ()
    assert "no changes" not in render_diff(diff)  # just the header
    assert render_diff(diff) == "flashinfer 0.7.2 -> 0.7.2: 1 recorded release, 0 changes\n"


def test_category_filters_the_text_and_the_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", "0.6.8", "0.7.2.post1", "--category", "determinism,breaks"]) == 0
    text = capsys.readouterr().out
    assert "Breaks (" in text
    assert "Newly available (" not in text
    assert main(["diff", "0.6.8", "0.7.2.post1", "--json", "--category", "breaks"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {c["category"] for c in document["changes"]} == {"breaks"}
    assert document["summary"]["available"] > 0  # the summary counts them all


def test_split_reach_changes_are_listed_where_measured() -> None:
    diff = _diff("0.5.3", "0.6.0")
    lost = [c for c in diff.by_category(Category.DETERMINISM) if c.kind == "split-lost"]
    assert "BatchDecodeWithPagedKVCacheWrapper:auto" in {c.subject for c in lost}
    unmeasured = _diff("0.3.0", "0.6.0")
    assert not [c for c in unmeasured.changes if c.kind.startswith(("split", "backend"))]
    assert any("0.3.0" in note for note in unmeasured.notes)


def test_fi_compat_mappings_follow_the_releases() -> None:
    diff = _diff("0.6.0", "0.7.2.post1")
    mappings = {c.subject: c for c in diff.changes if c.kind == "mapping-changed"}
    assert mappings["group"].release == "0.6.10.post1"
    assert mappings["early_completion"].release == "0.6.8"
    assert mappings["weight_bias"].release == "0.6.12"
    assert mappings["checkpointing"].release == "0.6.15"


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [
        (None, "0.7.2", InvalidArgumentError),
        ("0.7.2", 7.2, InvalidArgumentError),
        ("", "0.7.2", InvalidArgumentError),
        ("0.7.2", "0.7.99", UnknownReleaseError),
        ("latest", "0.7.2", UnknownReleaseError),
    ],
)
def test_hostile_arguments_are_typed_errors(old: object, new: object, error: type) -> None:
    with pytest.raises(error):
        diff_releases(old, new)  # type: ignore[arg-type]


def test_a_renamed_parameter_is_one_change() -> None:
    diff = _diff("0.6.7.post3", "0.6.8")
    run = "flashinfer.BatchDecodeWithPagedKVCacheWrapper.run"
    (renamed,) = [c for c in diff.changes if c.subject == run and c.kind == "parameter-renamed"]
    assert renamed.category is Category.BREAKS
    assert renamed.detail.startswith("kv_block_scales is now called kv_cache_sf")
    assert renamed.release == "0.6.8"
    others = [c for c in diff.changes if c.subject == run and "kv_" in c.detail]
    assert others == [renamed]


def test_a_new_signature_is_not_a_row_of_renames() -> None:
    # xqa's required parameters were replaced wholesale in 0.5.0: removed and added.
    diff = _diff("0.4.1", "0.5.0")
    xqa = [c for c in diff.changes if c.subject == "flashinfer.xqa"]
    assert xqa
    assert not [c for c in xqa if c.kind == "parameter-renamed"]


#: What flashinfer.comm.mnnvl imported from the standard library until 0.6.16: a release
#: that stops importing them changes no API, and `diff` said each was a break.
IMPORTED_BY_MNNVL = ("ABC", "abstractmethod", "array", "contextlib", "platform", "random")


def test_what_a_module_only_imports_is_not_flashinfer_s_api() -> None:
    diff = _diff("0.6.8", "0.7.2.post1")
    subjects = {change.subject for change in diff.changes}
    for name in IMPORTED_BY_MNNVL:
        assert f"flashinfer.comm.mnnvl.{name}" not in subjects
    # ... and every name change left is about a name FlashInfer defines in a release binding it
    ends = (facts_of("0.6.8"), facts_of("0.7.2.post1"))
    for change in diff.changes:
        if not change.kind.startswith("name-"):
            continue
        module, _, name = change.subject.rpartition(".")
        homes = {
            facts.get(("defined", module, name)) or module
            for facts in ends
            if facts.get(("name", module, name)) is not None
        }
        if not homes:
            continue  # a module, a method or an enum member: no name a module binds
        assert any(h == "flashinfer" or h.startswith("flashinfer.") for h in homes), change


def test_a_name_flashinfer_defines_is_still_listed_when_it_goes() -> None:
    # the records hold the stdlib imports and the definitions alike: the filter keeps these
    diff = _diff("0.6.8", "0.7.2.post1")
    removed = {c.subject for c in diff.changes if c.kind == "name-missing"}
    assert removed, "0.6.8 -> 0.7.2.post1 removes names FlashInfer defined"
    ends = facts_of("0.6.8")
    for subject in removed:
        module, _, name = subject.rpartition(".")
        home = ends.get(("defined", module, name)) or module
        assert home.startswith("flashinfer"), subject


# ------------------------------------------------------------------ every path it is met at

#: The diffs the paths are checked on: an upgrade, a downgrade, and pre-release to final.
PATH_DIFFS = (("0.6.8", "0.7.2.post1"), ("0.7.2.post1", "0.2.9"), ("0.7.1rc2", "0.7.2"))


def _homes(path: str, ends: tuple[Any, ...]) -> set[str]:
    """Where either release that binds ``path`` (``module.name``) defines it."""
    module, _, name = path.rpartition(".")
    return {
        facts.get(("defined", module, name)) or module
        for facts in ends
        if facts.get(("name", module, name)) is not None
    }


def test_a_re_exported_change_names_the_module_engines_import_it_from(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's case: ``trtllm_fp4_block_scale_moe`` is defined in
    ``flashinfer.fused_moe.core`` and re-exported by ``flashinfer.fused_moe`` and
    ``flashinfer``; each of its changes is listed once, under the shortest path, and names
    the others, so grepping the diff for the module one imports from finds every change."""
    short = "flashinfer.trtllm_fp4_block_scale_moe"
    moe = "flashinfer.fused_moe.trtllm_fp4_block_scale_moe"
    core = "flashinfer.fused_moe.core.trtllm_fp4_block_scale_moe"
    diff = _diff("0.6.8", "0.7.2.post1")
    changes = [c for c in diff.changes if c.subject == short]
    kinds = {(c.kind, c.parameter) for c in changes}
    assert ("keyword-added", "per_token_scale") in kinds
    assert ("positional-shift", None) in kinds
    for change in changes:
        assert change.paths[0] == short
        assert {moe, core} <= set(change.paths[1:]), change.paths
    assert not [c for c in diff.changes if c.subject in (moe, core)]  # not listed again
    assert main(["diff", "0.6.8", "0.7.2.post1"]) == 0
    text = capsys.readouterr().out
    grepped = [line for line in text.splitlines() if moe in line]
    assert len(grepped) == len(changes)
    assert all(f" {short} (also " in line for line in grepped)
    assert main(["diff", "0.6.8", "0.7.2.post1", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    found = [c for c in document["changes"] if moe in c["paths"]]
    assert [c["subject"] for c in found] == [short] * len(changes)


@pytest.mark.parametrize(("old", "new"), PATH_DIFFS)
def test_every_path_binds_the_changed_definition(old: str, new: str) -> None:
    """Each change's paths: its subject first, no path twice, every other path a binding of
    the same definition in either release (for a method or a member, of its class), and
    no change listed again under another of its paths."""
    diff = _diff(old, new)
    ends = (facts_of(old), facts_of(new))
    subjects = {(c.kind, c.parameter, c.detail, c.release, c.subject) for c in diff.changes}
    several = 0
    for change in diff.changes:
        paths = change.paths
        if change.kind in ("import-hazard", "mapping-changed", "default-backend") or (
            change.kind.startswith(("split-", "backend-"))
        ):
            assert paths == (), change
            continue
        assert paths[0] == change.subject, change
        assert len(set(paths)) == len(paths), change
        if len(paths) == 1:
            continue
        several += 1
        module, _, name = change.subject.rpartition(".")
        suffix = ""
        if not any(facts.get(("name", module, name)) is not None for facts in ends):
            suffix, (module, _, name) = f".{name}", module.rpartition(".")  # a member's
        homes = _homes(f"{module}.{name}", ends)
        for path in paths:  # the same definition (where it moved: from either home)
            assert path.endswith(f".{name}{suffix}"), (change, path)
            assert _homes(path.removesuffix(suffix), ends) & homes, (change, path)
        for path in paths[1:]:
            again = (change.kind, change.parameter, change.detail, change.release, path)
            assert again not in subjects, (change, path)
    assert several, f"{old} -> {new} has no re-exported change to check"


def test_a_definition_that_comes_or_goes_is_one_change_at_every_path() -> None:
    """0.6.10.post1 drops decode_cp_a2a_allocate_workspace from its home and from
    flashinfer.comm, and brings decode_cp_a2a_allocate_mnnvl_workspace to both: one change
    each, naming both imports."""
    diff = _diff("0.6.10", "0.6.10.post1")
    names = {c.kind: c for c in diff.changes if c.kind in ("name-missing", "name-added")}
    assert len(names) == 2
    for kind, name in (
        ("name-missing", "decode_cp_a2a_allocate_workspace"),
        ("name-added", "decode_cp_a2a_allocate_mnnvl_workspace"),
    ):
        change = names[kind]
        assert change.paths == (f"flashinfer.comm.{name}", f"flashinfer.comm.dcp_alltoall.{name}")
        assert change.subject == change.paths[0]
        assert "flashinfer.comm and the other module listed" in change.detail
    factory = next(
        c for c in diff.changes if c.subject == "flashinfer.comm.create_allreduce_fusion_workspace"
    )
    assert factory.paths == (
        factory.subject,
        "flashinfer.comm.allreduce.create_allreduce_fusion_workspace",
    )


def test_a_re_export_dropped_alone_names_its_own_path() -> None:
    """0.2.7.post1's flashinfer.comm stops re-exporting JitSpec, which flashinfer.jit.core
    still defines: that import breaks, the home's does not."""
    diff = _diff("0.2.6.post1", "0.2.7.post1")
    (change,) = [c for c in diff.changes if c.subject == "flashinfer.comm.JitSpec"]
    assert change.kind == "name-missing"
    assert change.paths == ("flashinfer.comm.JitSpec",)
    assert change.detail.startswith("flashinfer.comm no longer binds JitSpec: ")


@pytest.mark.parametrize(("old", "new"), PATH_DIFFS)
def test_each_binding_change_holds_the_bindings_that_changed_alike(old: str, new: str) -> None:
    """A name-added, name-missing or name-kind change of bindings: every path is a binding
    that changed that way, at the release cited; a module's change names its own path."""
    diff = _diff(old, new)
    ends = (facts_of(old), facts_of(new))
    grouped = 0
    for change in diff.changes:
        if change.kind not in ("name-added", "name-missing", "name-kind"):
            continue
        if change.detail.startswith("new module:") or change.detail.endswith(
            "raises ModuleNotFoundError"
        ):
            assert change.paths == (change.subject,)
            continue
        module, _, name = change.subject.rpartition(".")
        if not any(facts.get(("name", module, name)) is not None for facts in ends):
            continue  # a method or an enum member
        grouped += len(change.paths) > 1
        for path in change.paths:
            module, _, name = path.rpartition(".")
            before, after = (facts.get(("name", module, name)) for facts in ends)
            assert (before, after) == (change.old, change.new), (change, path)
    assert grouped, f"{old} -> {new}: no definition came or went at several paths"


def test_the_text_names_exactly_the_other_paths() -> None:
    """The renderer prints what the change holds: ``(also ...)`` with ``paths[1:]``, nothing
    where the change is met at its subject alone."""
    diff = _diff("0.6.10", "0.6.10.post1")
    text = render_diff(diff)
    for change in diff.changes:
        line = _line(text, f" {change.subject}", f"{change.detail} ({change.kind})")
        if len(change.paths) > 1:
            assert f" {change.subject} (also {', '.join(change.paths[1:])}): " in line
        else:
            assert f" {change.subject}: " in line
            assert "(also " not in line
