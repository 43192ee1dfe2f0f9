"""Hostile trees: each file the scan cannot read or parse is a diagnostic, never a crash.

Also the walls around :func:`fi_compat.upgrade.scan_tree` and ``fi-compat scan``: arguments
of the wrong type or value are typed errors (exit status 2 on the command line), and the
exit status says what the documentation says it says.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from fi_compat._engine_source import MAX_BYTES
from fi_compat.cli import main
from fi_compat.errors import InvalidArgumentError, UnknownReleaseError
from fi_compat.upgrade import scan_tree

USE = "import flashinfer.comm\nflashinfer.comm.allreduce_fusion(x, workspace=w)\n"
#: A use that breaks between 0.7.2.post1 and 0.6.5.
BREAKING = "from flashinfer.comm import PcieIpcAllReduceWorkspace\n"


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "engine"
    root.mkdir()
    (root / "good.py").write_text(USE, encoding="utf-8")
    return root


def _diagnosed(root: Path) -> dict[str, str]:
    result = scan_tree(root, "0.6.5", "0.7.2.post1")
    return {d.path: d.message for d in result.diagnostics}


def test_a_syntax_error_is_reported_with_its_line(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "broken.py").write_text("import flashinfer\n\ndef f(:\n", encoding="utf-8")
    result = scan_tree(root, "0.6.5", "0.7.2.post1")
    (diagnostic,) = result.diagnostics
    assert diagnostic.path == "broken.py"
    assert diagnostic.line == 3
    assert diagnostic.message.startswith("syntax error")
    assert {f.path for f in result.findings} == {"good.py"}


def test_a_binary_file_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "blob.py").write_bytes(b"flashinfer\0\x01\x02" * 100)
    (root / "quiet.py").write_bytes(b"\0\0\0")
    found = _diagnosed(root)
    assert "binary" in found["blob.py"]
    assert "binary" in found["quiet.py"]


def test_bytes_not_in_the_declared_encoding_are_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "latin.py").write_bytes(b"import flashinfer\nname = '\xe9t\xe9'\n")
    (root / "declared.py").write_bytes(
        b"# -*- coding: latin-1 -*-\nimport flashinfer\nname = '\xe9t\xe9'\n"
    )
    (root / "unknown.py").write_bytes(b"# -*- coding: no-such-codec -*-\nimport flashinfer\n")
    (root / "bom.py").write_bytes(b"\xef\xbb\xbfimport flashinfer\n")
    found = _diagnosed(root)
    assert "not decodable" in found["latin.py"]
    assert "not decodable" in found["unknown.py"]
    assert "declared.py" not in found
    assert "bom.py" not in found


def test_a_huge_file_is_reported_not_read(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    with (root / "huge.py").open("wb") as handle:
        handle.truncate(MAX_BYTES + 1)  # sparse: no disk is spent
    assert "over the" in _diagnosed(root)["huge.py"]


def test_nesting_too_deep_for_the_parser_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "deep.py").write_text("import flashinfer\nx = " + "(" * 5000 + ")" * 5000 + "\n")
    (root / "deep_list.py").write_text("import flashinfer\nx = " + "[" * 200 + "]" * 200 + "\n")
    found = _diagnosed(root)
    assert "deep.py" in found
    assert "deep_list.py" not in found or "nested" in found["deep_list.py"]


@pytest.mark.skipif(sys.platform == "win32", reason="symbolic links")
def test_symbolic_link_loops_are_reported_and_never_followed(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "self.py").symlink_to(root / "self.py")
    (root / "a.py").symlink_to(root / "b.py")
    (root / "b.py").symlink_to(root / "a.py")
    sub = root / "pkg"
    sub.mkdir()
    (sub / "up").symlink_to(root, target_is_directory=True)  # a directory loop
    (sub / "mod.py").write_text(USE, encoding="utf-8")
    result = scan_tree(root, "0.6.5", "0.7.2.post1")
    found = {d.path: d.message for d in result.diagnostics}
    assert "not readable" in found["self.py"]
    assert "not readable" in found["a.py"]
    assert {f.path for f in result.findings} == {"good.py", "pkg/mod.py"}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_is_reported_without_blocking(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    os.mkfifo(root / "pipe.py")
    assert "not a regular file" in _diagnosed(root)["pipe.py"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    locked = root / "locked.py"
    locked.write_text(USE, encoding="utf-8")
    locked.chmod(0)
    try:
        assert "not readable" in _diagnosed(root)["locked.py"]
    finally:
        locked.chmod(0o644)


def test_a_file_is_scanned_by_its_own_name(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    result = scan_tree(root / "good.py", "0.6.5", "0.7.2.post1")
    assert result.files == 1
    assert {f.path for f in result.findings} == {"good.py"}


def test_files_that_never_mention_flashinfer_are_counted_not_parsed(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "other.py").write_text("def f(:\n", encoding="utf-8")  # broken, but unrelated
    result = scan_tree(root, "0.6.5", "0.7.2.post1")
    assert result.files == 2
    assert result.diagnostics == ()


# ------------------------------------------------------------------------------ walls


@pytest.mark.parametrize(
    "root",
    [None, 3, b"/tmp", [], (), [b"/tmp"], ["/nonexistent-root", None], {"/tmp"}, object()],
)
def test_a_root_of_the_wrong_type_is_a_typed_error(root: object) -> None:
    with pytest.raises(InvalidArgumentError, match="root"):
        scan_tree(root, "0.6.5", "0.7.2.post1")  # type: ignore[arg-type]


def test_every_root_of_several_is_checked_before_any_is_read(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import flashinfer\n")
    with pytest.raises(InvalidArgumentError, match="every item of root") as raised:
        scan_tree([tmp_path, tmp_path / "missing"], "0.6.5", "0.7.2.post1")
    assert "missing" in str(raised.value)


def test_a_root_that_does_not_exist_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="existing"):
        scan_tree(tmp_path / "nowhere", "0.6.5", "0.7.2.post1")


@pytest.mark.parametrize("release", [None, 0.65, "", ("0.6.5",)])
def test_a_release_of_the_wrong_type_is_a_typed_error(tmp_path: Path, release: object) -> None:
    with pytest.raises(InvalidArgumentError):
        scan_tree(tmp_path, release, "0.7.2.post1")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        scan_tree(tmp_path, "0.6.5", release)  # type: ignore[arg-type]


def test_an_unrecorded_release_is_a_lookup_error(tmp_path: Path) -> None:
    with pytest.raises(UnknownReleaseError):
        scan_tree(tmp_path, "0.6.5", "9.9.9")


# ------------------------------------------------------------------------------ exit status


def test_exit_status_zero_when_nothing_breaks_even_with_diagnostics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree(tmp_path)
    (root / "broken.py").write_text("import flashinfer\ndef f(:\n", encoding="utf-8")
    assert main(["scan", str(root), "--from", "0.6.5", "--to", "0.7.2.post1"]) == 0
    out = capsys.readouterr().out
    assert "not scanned:" in out
    assert "broken.py:2: syntax error" in out


def test_exit_status_one_with_strict_and_a_diagnostic(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "broken.py").write_text("import flashinfer\ndef f(:\n", encoding="utf-8")
    argv = ["scan", str(root), "--from", "0.6.5", "--to", "0.7.2.post1", "--strict"]
    assert main(argv) == 1


def test_exit_status_one_when_something_breaks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree(tmp_path)
    (root / "new.py").write_text(BREAKING, encoding="utf-8")
    assert main(["scan", str(root), "--from", "0.7.2.post1", "--to", "0.6.5"]) == 1
    assert "new.py" in capsys.readouterr().out
    assert main(["scan", str(root), "--from", "0.6.5", "--to", "0.7.2.post1"]) == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["scan", "{root}/nowhere", "--from", "0.6.5", "--to", "0.7.2.post1"],
        ["scan", "{root}", "--from", "9.9", "--to", "0.7.2.post1"],
        ["scan", "{root}", "--from", "0.6.5"],
        ["scan", "{root}", "--from", "0.6.5", "--to", "0.7.2", "--json", "--sarif"],
        ["diff", "0.6.5"],
        ["diff", "0.6.5", "nonsense"],
        ["diff", "0.6.5", "0.7.2", "--category", "breaks,loud"],
    ],
)
def test_a_bad_command_line_exits_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    argv = [part.format(root=tmp_path) for part in argv]
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse's own refusals
        status = int(stop.code or 0)
    assert status == 2
    assert capsys.readouterr().err


def test_json_and_sarif_carry_the_diagnostics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _tree(tmp_path)
    (root / "blob.py").write_bytes(b"flashinfer\0")
    main(["scan", str(root), "--from", "0.6.5", "--to", "0.7.2.post1", "--json"])
    document = json.loads(capsys.readouterr().out)
    assert [d["path"] for d in document["diagnostics"]] == ["blob.py"]
    main(["scan", str(root), "--from", "0.6.5", "--to", "0.7.2.post1", "--sarif"])
    log = json.loads(capsys.readouterr().out)
    (notification,) = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert notification["message"]["text"].startswith("blob.py: binary")


#: String annotations the reading parses (a parameter annotated with a FlashInfer class):
#: a NUL byte (ValueError on Python 3.10), nesting the parser cannot take (MemoryError),
#: and plain syntax errors.
HOSTILE_ANNOTATIONS = ["a\\x00b", "-" * 200_000 + "1", "not " * 100_000 + "x", "((((", "W["]


@pytest.mark.parametrize(
    "annotation", HOSTILE_ANNOTATIONS, ids=["nul", "minus", "not", "paren", "subscript"]
)
def test_a_string_annotation_the_parser_refuses_is_no_annotation(
    tmp_path: Path, annotation: str
) -> None:
    root = _tree(tmp_path)
    (root / "annotated.py").write_text(
        "from flashinfer import BatchDecodeWithPagedKVCacheWrapper as W\n"
        f'def plan(w: "{annotation}", v: W):\n'
        "    w.plan(no_such_keyword=1)\n"
        "    v.plan(no_such_keyword=1)\n",
        encoding="utf-8",
    )
    result = scan_tree(root, "0.7.2.post1", "0.7.2.post1")
    assert not result.diagnostics
    findings = [f for f in result.findings if f.path.endswith("annotated.py")]
    assert not [f for f in findings if f.line == 3]  # w: not an annotation the reading knows
    # v: the wrapper, whose plan takes no such keyword on either release
    assert [f.rule for f in findings if f.line == 4] == ["unchanged"]
    assert "raises TypeError on both" in next(f.message for f in findings if f.line == 4)


@pytest.mark.parametrize(
    "name",
    ["flashinfer.", "flashinfer..comm", "flashinfer.comm\\x00", "flashinfer.comm-x", " flashinfer"],
)
def test_an_import_module_string_that_names_no_module_is_not_read(
    tmp_path: Path, name: str
) -> None:
    """``importlib.import_module`` with a literal that is no dotted module name: neither an
    import nor a module the name it is bound to stands for."""
    root = _tree(tmp_path)
    (root / "dynamic.py").write_text(
        f'import importlib\nm = importlib.import_module("{name}")\nm.allreduce_fusion(x)\n',
        encoding="utf-8",
    )
    result = scan_tree(root, "0.7.2.post1", "0.6.5")
    assert not result.diagnostics
    assert not [f for f in result.findings if f.path.endswith("dynamic.py")]
