"""``fi-compat report``: text, JSON, ``--require`` and hazards, against fake releases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fi_compat.capabilities import get_capabilities
from fi_compat.cli import main
from fi_compat.hazards import hazards
from fi_compat.report import UnknownRequirementError, build_report, missing
from tests.support import fakes
from tests.support.fakes import FakePackage

NINE = [
    ("comm", "create_allreduce_fusion_workspace", "group"),
    ("comm", "create_allreduce_fusion_workspace", "comm_backend"),
    ("comm", "allreduce_fusion", "trigger_completion_at_end"),
    *[
        ("attention", f"{wrapper}.plan", keyword)
        for wrapper in (
            "BatchPrefillWithPagedKVCacheWrapper",
            "BatchPrefillWithRaggedKVCacheWrapper",
            "BatchDecodeWithPagedKVCacheWrapper",
        )
        for keyword in ("fixed_split_size", "disable_split_kv")
    ],
]


def nine_statuses(report: dict[str, object]) -> list[str]:
    out = []
    for section, owner, keyword in NINE:
        table = report["comm"]["kwargs"] if section == "comm" else report["attention"]  # type: ignore[index]
        out.append(table[owner][keyword]["status"])  # type: ignore[index]
    return out


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["report", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_shape(fake_package: FakePackage, capsys: pytest.CaptureFixture[str]) -> None:
    fake_package(fakes.package(version="0.7.2"))
    code, out, _ = run_cli(capsys, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["fi_compat"]["version"]
    assert report["flashinfer"]["installed"] is True
    assert report["flashinfer"]["version"] == "0.7.2"
    assert report["flashinfer"]["import_error"] is None
    assert report["comm"]["available"] is True
    assert report["comm"]["error"] is None
    assert report["comm"]["unified_api"] is True
    assert report["comm"]["legacy_api"] is True
    assert nine_statuses(report) == ["supported"] * 9
    for answer in report["comm"]["kwargs"]["allreduce_fusion"].values():
        assert set(answer) == {"status", "reason"}
    assert "torch" in report
    assert "hazards" in report


def test_text_report_names_everything(
    fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_package(fakes.package(version="0.6.5", comm=fakes.OLD_COMM))
    code, out, _ = run_cli(capsys)
    assert code == 0
    assert "flashinfer        0.6.5" in out
    assert "workspace-without-group" in out
    assert "allreduce-without-trigger-completion" in out
    group_line = next(line for line in out.splitlines() if line.strip().startswith("group"))
    assert "unsupported" in group_line


def test_broken_comm_exits_zero_and_reports_error(
    fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_package(
        fakes.package(
            version="0.6.5",
            comm_raises='AssertionError("libcudart is not loaded in the current process")',
        )
    )
    code, out, _ = run_cli(capsys, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["comm"]["available"] is False
    assert report["comm"]["error"] == (
        "AssertionError: libcudart is not loaded in the current process"
    )
    assert [h["id"] for h in report["hazards"]] == ["comm-needs-cuda-runtime"]
    assert nine_statuses(report)[:3] == ["unknown"] * 3


def test_require_exit_codes(fake_package: FakePackage, capsys: pytest.CaptureFixture[str]) -> None:
    fake_package(fakes.package(version="0.6.5", comm=fakes.OLD_COMM))
    code, _, err = run_cli(capsys, "--require", "comm_backend,fixed_split_size")
    assert code == 0, err
    code, _, err = run_cli(capsys, "--require", "group,trigger_completion_at_end,fixed_split_size")
    assert code == 1
    assert "create_allreduce_fusion_workspace(group=): unsupported" in err
    assert "needs FlashInfer 0.6.10.post1+" in err
    assert "allreduce_fusion(trigger_completion_at_end=): unsupported" in err
    assert "fixed_split_size" not in err
    code, _, err = run_cli(capsys, "--require", "group,bogus")
    assert code == 2
    assert "unknown requirement 'bogus'" in err


def test_require_qualified_and_flags(fake_package: FakePackage) -> None:
    fake_package(
        fakes.package(version="0.5.3", comm=fakes.LEGACY_COMM, wrappers=fakes.OLD_WRAPPERS)
    )
    caps = get_capabilities()
    assert missing(caps, ["legacy_api", "comm", "flashinfer"]) == []
    lacking = missing(
        caps, ["unified_api", "BatchDecodeWithPagedKVCacheWrapper.plan.disable_split_kv"]
    )
    assert len(lacking) == 2
    assert lacking[0].startswith("unified_api: unavailable")
    assert lacking[1].startswith("BatchDecodeWithPagedKVCacheWrapper.plan(disable_split_kv=)")
    with pytest.raises(UnknownRequirementError):
        missing(caps, ["allreduce_fusion.not_a_kwarg"])


def test_unknown_counts_as_missing(fake_package: FakePackage) -> None:
    fake_package(fakes.package(wrappers=fakes.DIRECT_WRAPPERS + fakes.OPAQUE_DECODE))
    lacking = missing(get_capabilities(), ["fixed_split_size"])
    assert lacking == [
        "BatchDecodeWithPagedKVCacheWrapper.plan(fixed_split_size=): unknown "
        "(BatchDecodeWithPagedKVCacheWrapper.plan takes **kwargs whose destination cannot be "
        "resolved: no call forwards **kwargs; needs FlashInfer 0.4.0+)"
    ]


def test_hazards_for_old_release(fake_package: FakePackage) -> None:
    fake_package(fakes.package(version="0.6.11", comm=fakes.OLD_COMM, wrappers=fakes.OLD_WRAPPERS))
    ids = [hazard.id for hazard in hazards(get_capabilities())]
    assert ids == [
        "import-queries-gpu",
        "comm-needs-triton",
        "workspace-without-group",
        "allreduce-without-trigger-completion",
        "determinism-unavailable",
    ]


def test_source_build_gets_no_release_hazards(fake_package: FakePackage) -> None:
    fake_package(fakes.package(version="0.0.0+unknown"))
    ids = [hazard.id for hazard in hazards(get_capabilities())]
    assert ids == ["source-build"]


def test_not_installed_report(no_flashinfer: None) -> None:
    report = build_report(get_capabilities())
    assert report["flashinfer"] == {
        "installed": False,
        "version": None,
        "source_build": False,
        "import_error": None,
        "location": None,
    }
    assert [h["id"] for h in report["hazards"]] == ["flashinfer-not-installed"]


def test_console_script_in_subprocess_with_broken_comm(
    fake_package: FakePackage, tmp_path: Path
) -> None:
    """``python -m fi_compat report`` as an engine's CI would run it."""
    root = fake_package(fakes.package(comm_raises='OSError("libcudart.so.12: cannot open")'))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *sys.path])}
    result = subprocess.run(
        [sys.executable, "-m", "fi_compat", "report", "--json", "--require", "group"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["comm"]["error"] == "OSError: libcudart.so.12: cannot open"
    assert report["require"]["missing"] == [
        "create_allreduce_fusion_workspace(group=): unknown (flashinfer.comm unavailable: "
        "OSError: libcudart.so.12: cannot open; needs FlashInfer 0.6.10.post1+)"
    ]


def test_no_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "report" in capsys.readouterr().err


def _bad_report_calls() -> list[tuple[str, Any]]:
    from fi_compat.report import parse_requirements, render_text

    caps = get_capabilities()
    calls: list[tuple[str, Any]] = []
    bad: object
    for bad in (None, 5, "caps", {}, caps.comm):
        calls += [
            (f"build_report({bad!r:.20})", lambda bad=bad: build_report(bad)),
            (f"render_text({bad!r:.20})", lambda bad=bad: render_text(bad)),
            (f"hazards({bad!r:.20})", lambda bad=bad: hazards(bad)),
            (f"missing({bad!r:.20}, ...)", lambda bad=bad: missing(bad, ["group"])),
        ]
    for names in (None, 5, "group", b"group", [1], ["group", None], [("group",)]):
        calls.append((f"missing(caps, {names!r})", lambda names=names: missing(caps, names)))
    for text in (None, 5, ["group"], b"group"):
        calls.append((f"parse_requirements({text!r})", lambda t=text: parse_requirements(t)))
    for argv in (5, "report", b"report", [5], ["report", None]):
        calls.append((f"main({argv!r})", lambda argv=argv: main(argv)))
    return calls


BAD_REPORT_CALLS = _bad_report_calls()


@pytest.mark.parametrize(
    "call", [call for _, call in BAD_REPORT_CALLS], ids=[name for name, _ in BAD_REPORT_CALLS]
)
def test_report_functions_refuse_malformed_arguments(call: Any) -> None:
    from fi_compat.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"^expected ") as caught:
        call()
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value, ValueError)


def test_missing_takes_any_iterable_of_names() -> None:
    caps = get_capabilities()
    assert missing(caps, (name for name in ["flashinfer"])) == missing(caps, ["flashinfer"])


def test_split_reach_section_is_the_measurement_of_the_installed_release(
    fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    from fi_compat.attention import family_reach

    fake_package(fakes.package(version="0.7.2"))
    code, out, _ = run_cli(capsys, "--json")
    assert code == 0
    section = json.loads(out)["split_reach"]
    assert (section["measured"], section["release"]) == (True, "0.7.2")
    paged = section["families"]["BatchPrefillWithPagedKVCacheWrapper"]
    facts = family_reach("0.7.2", "BatchPrefillWithPagedKVCacheWrapper")
    assert facts is not None
    assert paged["plan_takes"] is facts.plan_accepts
    assert {b: a["verdict"] for b, a in paged["backends"].items()} == {
        b: str(a.verdict) for b, a in facts.backends.items()
    }
    assert paged["backends"]["fa2"]["verdict"] == "reaches"
    assert paged["backends"]["fa3"]["verdict"] == "dropped"
    _, text, _ = run_cli(capsys)
    lines = text.splitlines()
    at = lines.index("  BatchPrefillWithPagedKVCacheWrapper")
    block = [line.split(maxsplit=2) for line in lines[at + 1 : at + 1 + len(facts.backends)]]
    assert [backend for backend, *_ in block] == sorted(facts.backends)
    assert {backend: word for backend, word, _ in block}["fa2"] == "served"
    assert {backend: word for backend, word, _ in block}["fa3"] == "refused"
    assert paged["backends"]["fa2"]["deterministic"] == "served"
    assert paged["backends"]["fa3"]["deterministic"] == "refused"
    assert "  BatchMLAPagedAttentionWrapper" in lines


def test_split_reach_section_of_an_unmeasured_release(
    fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_package(fakes.package(version="0.3.1"))
    assert run_cli(capsys, "--json")[0] == 0
    _, out, _ = run_cli(capsys, "--json")
    assert json.loads(out)["split_reach"] == {"measured": False, "release": "0.3.1", "families": {}}
    _, text, _ = run_cli(capsys)
    assert "flashinfer 0.3.1 was not measured: a deterministic planner or wrapper refuses" in text


def test_no_split_reach_lines_without_flashinfer(no_flashinfer: None) -> None:
    from fi_compat.report import render_text

    text = render_text(get_capabilities())
    assert "split settings reach the kernel" not in text
    assert build_report(get_capabilities())["split_reach"]["measured"] is False
