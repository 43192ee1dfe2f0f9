"""``--require`` names for per-call sizes, checkpointing and deterministic family x backend.

Every name is in :data:`fi_compat.report.REQUIREMENT_NAMES` and in the JSON report's
``requirements``; ``fi-compat report --require NAME`` exits 0 where it is met and 1 where it
is not (naming it), and 2 for a name it does not know, naming what was given. The text report
says, per family and backend, ``served`` or ``refused`` for a deterministic run.
"""

from __future__ import annotations

import json

import pytest

from fi_compat._requirements.comm import checkpoint_support, size_support
from fi_compat._requirements.names import CHECKPOINT_KINDS, SIZE_KINDS
from fi_compat.attention import _reach
from fi_compat.capabilities import get_capabilities
from fi_compat.cli import main
from fi_compat.report import (
    REQUIREMENT_NAMES,
    UnknownRequirementError,
    build_report,
    missing,
    parse_requirements,
    render_text,
)
from fi_compat.testing import fake_flashinfer

DECODE = "BatchDecodeWithPagedKVCacheWrapper"
GRAPH = "CUDAGraphBatchDecodeWithPagedKVCacheWrapper"
PAGED = "BatchPrefillWithPagedKVCacheWrapper"
SIZES = [f"per_call_sizes:{kind}" for kind in SIZE_KINDS]
CHECKPOINTS = [f"checkpointing:{kind}" for kind in CHECKPOINT_KINDS]
DETERMINISTIC = [f"deterministic:{f}:{b}" for f, b in _reach.measured_pairs()]
NEW_NAMES = [*SIZES, *CHECKPOINTS, *DETERMINISTIC]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["report", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_kinds_are_the_workspace_kinds() -> None:
    assert SIZE_KINDS == ("trtllm", "mnnvl", "mnnvl-cutedsl", "legacy")
    assert (*SIZE_KINDS, "reference") == CHECKPOINT_KINDS  # a reference workspace refuses too


def test_every_measured_family_and_backend_has_a_name() -> None:
    pairs = {
        (f, b)
        for entry in _reach.reach_data().values()
        for f in entry
        for b in entry[f]["backends"]
    }
    assert {(f, b) for f, b in _reach.measured_pairs()} == pairs
    assert f"deterministic:{PAGED}:auto" in DETERMINISTIC
    assert f"deterministic:{GRAPH}:default" in DETERMINISTIC
    assert "deterministic:fast_decode_plan:fa2" in DETERMINISTIC


def test_every_new_name_is_accepted_and_in_the_json_requirements() -> None:
    assert set(NEW_NAMES) <= set(REQUIREMENT_NAMES)
    assert parse_requirements(",".join(NEW_NAMES)) == NEW_NAMES
    with fake_flashinfer("0.7.2.post1"):
        requirements = build_report(get_capabilities())["requirements"]
    assert set(NEW_NAMES) <= set(requirements)
    assert {requirements[name]["status"] for name in NEW_NAMES} == {"met", "missing"}


@pytest.mark.parametrize("release", ["0.6.5", "0.6.15", "0.7.2.post1"])
def test_the_cli_answers_each_new_name_as_the_json_report(
    release: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_flashinfer(release):
        code, out, _ = run_cli(capsys, "--json")
        assert code == 0
        requirements = json.loads(out)["requirements"]
        codes = {}
        for name in NEW_NAMES:
            code, _, err = run_cli(capsys, "--require", name)
            codes[name] = code
            if requirements[name]["status"] == "met":
                assert code == 0, (name, err)
            else:
                assert code == 1, name
                assert name in err, err
    assert set(codes.values()) == {0, 1}


@pytest.mark.parametrize(
    ("release", "met"),
    [
        ("0.5.3", set()),  # the legacy API only
        ("0.6.14", set()),  # torch symmetric memory: FlashInfer has no checkpointing yet
        ("0.6.15", {"trtllm", "mnnvl"}),
        ("0.7.2.post1", {"trtllm", "mnnvl"}),  # its MNNVL CuTe DSL workspace has none
    ],
    ids=["0.5.3", "0.6.14", "0.6.15", "0.7.2.post1"],
)
def test_checkpointing_is_met_where_the_workspace_has_flashinfers_methods(
    release: str, met: set[str]
) -> None:
    with fake_flashinfer(release):
        caps = get_capabilities()
        answers = checkpoint_support(caps)
        assert {n.partition(":")[2] for n, a in answers.items() if a.supported} == met
        for kind in CHECKPOINT_KINDS:
            lacking = missing(caps, [f"checkpointing:{kind}"])
            assert (lacking == []) is (kind in met)
            if lacking:
                assert lacking[0].startswith(f"checkpointing:{kind}: "), lacking
    assert "legacy" not in met


def test_checkpointing_of_an_unrecorded_build_is_unknown() -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        setattr(fi.flashinfer, "__version__", "0.0.0+unknown")  # noqa: B010 - a module
        answers = checkpoint_support(get_capabilities(refresh=True))
    assert answers["checkpointing:trtllm"].status.value == "unknown"
    assert "not a recorded release" in answers["checkpointing:trtllm"].reason
    assert answers["checkpointing:legacy"].status.value == "unsupported"


def test_without_comm_every_workspace_kind_is_missing_with_the_reason() -> None:
    with fake_flashinfer("0.7.2.post1", comm_import_error=OSError("no libcudart")):
        caps = get_capabilities()
        for answers in (checkpoint_support(caps), size_support(caps)):
            assert {a.supported for a in answers.values()} == {False}
            assert all(
                "libcudart" in a.reason
                for n, a in answers.items()
                if n != "checkpointing:reference"
            )


def test_per_call_sizes_follow_size_support() -> None:
    with fake_flashinfer("0.7.2.post1"):
        caps = get_capabilities()
        answers = size_support(caps)
        requirements = build_report(caps)["requirements"]
        text = render_text(caps)
    for name, support in answers.items():
        assert requirements[name]["status"] == ("met" if support.supported else "missing")
        assert (missing(caps, [name]) == []) is support.supported
    assert "per_call_sizes:<kind>" in text
    assert "checkpointing:<kind>" in text


HOSTILE = [
    "deterministic:",
    "deterministic",
    "deterministic::fa2",
    f"deterministic:{PAGED}",
    f"deterministic:{PAGED}:",
    f"deterministic:{PAGED}:FA2",
    f"deterministic:{PAGED.lower()}:fa2",
    f"Deterministic:{PAGED}:fa2",
    f"deterministic:{PAGED}:no-such-backend",
    f"deterministic:{PAGED}:fa2:extra",
    f"deterministic:{PAGED}::fa2",
    f"deterministic:flashinfer.{PAGED}:fa2",
    "deterministic:NotAFamily:fa2",
    f"deterministic:{GRAPH}:auto",  # the class takes no backend=: its key is default
    "per_call_sizes:",
    "per_call_sizes",
    "per_call_sizes:TRTLLM",
    "per_call_sizes:auto",
    "per_call_sizes:trtllm:extra",
    "checkpointing:",
    "checkpointing:Legacy",
    "checkpointing:nccl",
    "checkpointing:trtllm:",
]


@pytest.mark.parametrize("name", HOSTILE, ids=[repr(name) for name in HOSTILE])
def test_hostile_names_are_refused_naming_what_was_given(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UnknownRequirementError, match="unknown requirement") as info:
        parse_requirements(name)
    assert repr(name) in str(info.value)
    with pytest.raises(UnknownRequirementError):
        missing(get_capabilities(), [name])
    code, _, err = run_cli(capsys, "--require", name)
    assert code == 2
    assert repr(name) in err


def test_the_attention_section_says_served_or_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with fake_flashinfer("0.7.2.post1"):
        code, text, _ = run_cli(capsys)
        assert code == 0
        report = build_report(get_capabilities())
    assert "deterministic accepts" not in text
    lines = text.splitlines()
    at = lines.index(f"  {PAGED}")
    block = {line.split()[0]: line.split()[1] for line in lines[at + 1 : at + 8]}
    assert block["fa2"] == "served"
    assert block["fa3"] == "refused"
    assert block["auto"] == "refused"
    graph = lines[lines.index(f"  {GRAPH}") + 1].split()
    assert graph[:2] == ["default", "refused"]
    assert "auto" in " ".join(graph[2:])
    decode = next(line for line in lines[lines.index(f"  {DECODE}") :] if "fa2" in line)
    assert "served" in decode
    assert "use_tensor_cores=True" in decode
    families = report["split_reach"]["families"]
    for family, facts in families.items():
        for backend, answer in facts["backends"].items():
            name = f"deterministic:{family}:{backend}"
            status = report["requirements"][name]["status"]
            assert answer["deterministic"] == ("served" if status == "met" else "refused"), name
            assert answer["why"]
