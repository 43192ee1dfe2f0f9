"""``fi-compat report`` as a real process against hostile packages, and ``--require``'s table.

The subprocess tests run ``python -m fi_compat report`` with the hostile package first on
``PYTHONPATH``: import-time output at the file-descriptor level, a closed stdout pipe, an
ASCII-only stdout, re-entrant ``get_capabilities()`` calls (under a timeout, so a deadlock
fails instead of hanging). The ``--require`` tests check that it accepts exactly the names
the report prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fi_compat._requirements.names import FLAGS
from fi_compat.capabilities import get_capabilities
from fi_compat.cli import main
from fi_compat.cli._output import EXIT_BROKEN_PIPE
from fi_compat.errors import InvalidArgumentError
from fi_compat.report import (
    REQUIREMENT_NAMES,
    REQUIREMENTS,
    UnknownRequirementError,
    build_report,
    missing,
    parse_requirements,
)
from tests.support import fakes
from tests.support.fakes import FakePackage
from tests.support.hostile import HOSTILE_PACKAGES, Hostile, process_env

TIMEOUT = 180


def _report(root: Path, cwd: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "fi_compat", "report", *argv],
        capture_output=True,
        env=process_env(root, **env),
        cwd=cwd,
        timeout=TIMEOUT,
        check=False,
    )


def _hostile(name: str) -> Hostile:
    return next(hostile for hostile in HOSTILE_PACKAGES if hostile.id == name)


# ------------------------------------------------------------------- real processes

SUBPROCESS_CASES = (
    "comm-raises-SystemExit-0",
    "comm-raises-SystemExit-3",
    "init-raises-custom-BaseException",
    "comm-raises-nothing-prints",
    "noise-init-os-write-fd1",
    "noise-init-c-printf",
    "noise-comm-print",
    "getattr-comm-RuntimeError",
    "path-int",
    "version-huge-release",
    "comm-signature-non-str-keys",
    "comm-signature-name-not-str",
)


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_report_process(name: str, fake_package: FakePackage, tmp_path: Path) -> None:
    hostile = _hostile(name)
    root = fake_package(hostile.files)
    result = _report(root, tmp_path, "--json")
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 0, stderr
    assert b"Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert report["fi_compat"]["version"]
    result = _report(root, tmp_path, "--require", "group")
    group = ("comm", "create_allreduce_fusion_workspace", "group")
    assert result.returncode == (0 if group in hostile.supported else 1), result.stderr
    assert result.stdout.startswith(b"fi-compat ")
    assert b"Traceback" not in result.stderr


def test_import_time_output_goes_to_stderr(fake_package: FakePackage, tmp_path: Path) -> None:
    extra = (
        'print("py-print")\nimport os\nos.write(1, b"fd-write\\n")\n'
        'import ctypes\nctypes.CDLL(None).printf(b"c-printf\\n")\n'
    )
    root = fake_package(fakes.package(extra=extra))
    result = _report(root, tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)
    for noise in (b"py-print", b"fd-write", b"c-printf"):
        assert noise not in result.stdout
        assert noise in result.stderr


def test_closed_pipe(fake_package: FakePackage, tmp_path: Path) -> None:
    """``fi-compat report --json | head -c 0``: no traceback, status 128 + SIGPIPE."""
    root = fake_package(fakes.package(comm_raises='RuntimeError("x" * 100000)'))
    process = subprocess.Popen(
        [sys.executable, "-m", "fi_compat", "report", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=process_env(root),
        cwd=tmp_path,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()  # the reader goes away before the report is written
    try:
        stderr = process.stderr.read()
        code = process.wait(timeout=TIMEOUT)
    finally:
        process.kill()
        process.stderr.close()
    assert code == EXIT_BROKEN_PIPE == 141
    assert b"Traceback" not in stderr
    assert b"Exception ignored" not in stderr


def test_closed_pipe_in_process(
    fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_package(fakes.package())

    class Closed:
        encoding = "utf-8"

        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            raise OSError("no file descriptor")

    saved = sys.stdout
    sys.stdout = Closed()
    try:
        code = main(["report", "--require", "group"])
    finally:
        sys.stdout = saved
    assert code == EXIT_BROKEN_PIPE
    assert "Traceback" not in capsys.readouterr().err


def test_ascii_stdout_with_non_ascii_error(fake_package: FakePackage, tmp_path: Path) -> None:
    root = fake_package(fakes.package(comm_raises='RuntimeError("caf\\u00e9 \\u2615 \\ud800")'))
    result = _report(root, tmp_path, "--require", "group", PYTHONIOENCODING="ascii")
    assert result.returncode == 1, result.stderr
    assert b"Traceback" not in result.stderr
    result.stdout.decode("ascii")  # nothing but ASCII
    assert b"caf\\xe9 \\u2615 \\ud800" in result.stdout
    assert b"caf\\xe9" in result.stderr
    result = _report(root, tmp_path, "--json", PYTHONIOENCODING="ascii")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.decode("ascii"))
    assert report["comm"]["error"] == "RuntimeError: caf\u00e9 \u2615 \ud800"


REENTRANT_INIT = """
import threading

import fi_compat.capabilities as _capabilities

__version__ = "0.7.2"
from .wrappers import *

NESTED = _capabilities.get_capabilities()
NESTED_REFRESH = _capabilities.get_capabilities(refresh=True)
OTHER = []
WAITER = threading.Thread(target=lambda: OTHER.append(_capabilities.get_capabilities()))
WAITER.start()
"""

REENTRANT_CHECK = """
import json
import fi_compat.capabilities as capabilities
outer = capabilities.get_capabilities()
import flashinfer
flashinfer.WAITER.join(60)
nested = flashinfer.NESTED
print(json.dumps({
    "outer_in_progress": outer.flashinfer.probe_in_progress,
    "outer_importable": outer.flashinfer.importable,
    "outer_group": outer.comm.kwargs["create_allreduce_fusion_workspace"]["group"].status.value,
    "nested_in_progress": nested.flashinfer.probe_in_progress,
    "nested_refresh_in_progress": flashinfer.NESTED_REFRESH.flashinfer.probe_in_progress,
    "nested_statuses": sorted({
        s.status.value
        for table in (nested.comm.kwargs, nested.attention)
        for answers in table.values()
        for s in answers.values()
    }),
    "cached_is_outer": capabilities.get_capabilities() is outer,
    "other_thread_got_outer": len(flashinfer.OTHER) == 1 and flashinfer.OTHER[0] is outer,
}))
"""


def test_reentrant_get_capabilities(fake_package: FakePackage, tmp_path: Path) -> None:
    files = fakes.package()
    files["flashinfer/__init__.py"] = REENTRANT_INIT
    root = fake_package(files)
    result = subprocess.run(
        [sys.executable, "-c", REENTRANT_CHECK],
        capture_output=True,
        text=True,
        env=process_env(root),
        cwd=tmp_path,
        timeout=TIMEOUT,  # a deadlock fails here instead of hanging the suite
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "outer_in_progress": False,
        "outer_importable": True,
        "outer_group": "supported",
        "nested_in_progress": True,
        "nested_refresh_in_progress": True,
        "nested_statuses": ["unknown"],
        "cached_is_outer": True,
        "other_thread_got_outer": True,
    }
    report = _report(root, tmp_path, "--json", "--require", "group")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["flashinfer"]["import_error"] is None


# --------------------------------------------------------------------- --require's table


def printed_names(report: dict[str, object]) -> set[str]:
    """Every ``--require`` name the report prints, read from ``build_report`` output."""
    names: set[str] = {"bcast_root_is_group_local", *FLAGS, *REQUIREMENTS}
    comm = report["comm"]
    assert isinstance(comm, dict)
    assert "bcast_root_is_group_local" in comm
    for prefix, table in (
        ("flashinfer.comm.", comm["kwargs"]),
        ("flashinfer.", report["attention"]),
    ):
        assert isinstance(table, dict)
        for owner, answers in table.items():
            for keyword in answers:
                names.add(f"{owner}.{keyword}")
                names.add(f"{prefix}{owner}.{keyword}")
    signatures = report["signatures"]
    assert isinstance(signatures, dict)
    for qualified, shape in signatures.items():
        owner = qualified.removeprefix("flashinfer.comm.").removeprefix("flashinfer.")
        table = comm["kwargs"] if qualified.startswith("flashinfer.comm.") else report["attention"]
        assert isinstance(table, dict)
        for keyword in table.get(owner, {}):
            assert isinstance(shape, dict)
            names.add(f"{qualified}.{keyword}")
    requirements = report["requirements"]
    assert isinstance(requirements, dict)
    # The names of each answer table that is not a keyword's, as its requirements list them.
    names.update(name for name in requirements if name.startswith(NAMED_PREFIXES))
    return names


#: The ``--require`` names the JSON report's ``requirements`` lists beyond the keyword tables.
NAMED_PREFIXES = (
    "dropin:",
    "AllReduceFusionPattern.",
    "reference:",
    "per_call_sizes:",
    "checkpointing:",
    "deterministic:",
    "fast_decode_plan",
    "torch.distributed",
)


def test_require_accepts_exactly_what_the_report_prints(fake_package: FakePackage) -> None:
    fake_package(_hostile("bcast-attribute-call").files)  # everything supported
    caps = get_capabilities()
    report = build_report(caps)
    names = printed_names(report)
    assert names == set(REQUIREMENT_NAMES) == set(report["requirements"])
    for name in sorted(names):
        assert parse_requirements(name) == [name]
        lacking = missing(caps, [name])
        assert report["requirements"][name]["status"] == ("missing" if lacking else "met")
        if not name.startswith(NAMED_PREFIXES):  # this fake's comm and wrappers are old ones
            assert lacking == [], name  # everything else is supported by this fake


@pytest.mark.parametrize(
    "name",
    [
        "trtllm_allreduce_fusion.trigger_completion_at_end",
        "flashinfer.BatchDecodeWithPagedKVCacheWrapper.plan.fixed_split_size",
        "flashinfer.comm.allreduce_fusion.trigger_completion_at_end",
        "trtllm_create_ipc_workspace_for_all_reduce_fusion.group",
        "bcast_root_is_group_local",
    ],
)
def test_require_names_from_the_issue(
    name: str, fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_package(fakes.package())
    expected = 1 if name == "bcast_root_is_group_local" else 0  # no TorchDistBackend here
    assert main(["report", "--require", name]) == expected, capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        "foo.bar.allreduce_fusion.trigger_completion_at_end",
        "comm.allreduce_fusion.trigger_completion_at_end",
        "flashinfer.allreduce_fusion.trigger_completion_at_end",
        "flashinfer.comm.BatchDecodeWithPagedKVCacheWrapper.plan.fixed_split_size",
        "BatchDecodeWithPagedKVCacheWrapper.fixed_split_size",
        "plan.fixed_split_size",
        "allreduce_fusion.not_a_kwarg",
        "dropin:",
        "dropin:allreduce_fusion",
        "dropin:allreduce_fusion.",
        "dropin:allreduce_fusion.not_an_argument",
        "dropin:allreduce_fusion.input",
        "dropin:allreduce_fusion.pattern",
        "dropin:create_allreduce_fusion_workspace",
        "dropin:create_allreduce_fusion_workspace.world_size",
        "dropin:create_allreduce_fusion_workspace.backend",
        "dropin:create_allreduce_fusion_workspace.not_an_option",
        "AllReduceFusionPattern",
        "AllReduceFusionPattern.kNotAPattern",
        "allreduce_fusion.kAllReduce",
        "flashinfer.comm.AllReduceFusionPattern.kAllReduce",
        "reference:AllReduceFusionPattern",
        "reference:allreduce_fusion.residual_in",
        "Fast_decode_plan",
        "flashinfer.decode.fast_decode_plan",
        "torch",
        "torch.distributed.init_process_group",
        "DROPIN:allreduce_fusion.weight_bias",
        "allreduce_fusion.weight_bias",
        "group,,comm",
        "group,",
        ",",
        " ",
        "group, ,comm",
    ],
)
def test_require_refuses(
    text: str, fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_package(fakes.package())
    with pytest.raises(UnknownRequirementError):
        parse_requirements(text)
    assert main(["report", "--require", text]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # refused before probing or printing anything
    assert "unknown requirement" in captured.err


def test_unknown_requirement_error_is_an_invalid_argument() -> None:
    assert issubclass(UnknownRequirementError, InvalidArgumentError)
    with pytest.raises(ValueError, match="expected a name that fi-compat report prints"):
        parse_requirements("nope")
    with pytest.raises(TypeError):
        parse_requirements("group,,comm")


def test_empty_require_checks_nothing(
    fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_package(fakes.package(comm_raises="SystemExit(0)"))
    assert parse_requirements("") == []
    assert main(["report", "--require", ""]) == 0
    assert main(["report", "--require", "group"]) == 1
    assert "group=): unknown" in capsys.readouterr().err


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}\.", fullmatch=True),
    name=st.sampled_from(sorted(REQUIREMENT_NAMES)),
)
def test_random_prefixes_are_refused(prefix: str, name: str) -> None:
    candidate = prefix + name
    assume(candidate not in REQUIREMENT_NAMES)
    with pytest.raises(UnknownRequirementError):
        parse_requirements(candidate)
    with pytest.raises(UnknownRequirementError):
        parse_requirements(f"group,{candidate}")
