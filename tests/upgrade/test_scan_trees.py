"""``fi-compat scan`` over several roots, and names one scanned module passes to another.

An engine may import FlashInfer through its own kernel package (tokenspeed imports its
wrappers from tokenspeed-kernel): what a module binds from FlashInfer at its top level is
followed into every scanned module importing it (absolutely, relatively, as a module's
attribute, by a star, through chains), when both are scanned. Each case has a counterpart
that must not be followed.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from fi_compat.cli import main
from fi_compat.upgrade import Category, Finding, scan_tree, to_sarif

#: ``top_k(..., deterministic=True)``: taken on 0.7.2.post1, refused on 0.6.5.
OLD, NEW = "0.7.2.post1", "0.6.5"
CALL = "top_k(x, 2, deterministic=True)"


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def _breaks(findings: tuple[Finding, ...], path: str) -> list[tuple[int, str, str]]:
    return [
        (f.line, f.rule, f.target)
        for f in findings
        if f.path == path and f.category is Category.BREAKS
    ]


@pytest.fixture
def trees(tmp_path: Path) -> Path:
    _write(
        tmp_path / "kernels",
        {
            "kern/__init__.py": "from .attn import top_k\n",
            "kern/attn.py": """\
                from flashinfer import top_k
                from flashinfer import BatchDecodeWithPagedKVCacheWrapper as Wrapper
                from flashinfer import top_p_sampling_from_probs as top_p
                top_p = wrap(top_p)
                wrapper = Wrapper(buffer)

                def local():
                    from flashinfer import min_p_sampling_from_probs
                """,
            "kern/star.py": "from .attn import *\n",
        },
    )
    _write(
        tmp_path / "engine",
        {
            "eng/__init__.py": "",
            "eng/run.py": f"""\
                from kern.attn import top_k, top_p, min_p_sampling_from_probs
                {CALL}
                top_p(probs, 0.9, deterministic=True)
                min_p_sampling_from_probs(probs, 0.1, deterministic=True)
                """,
            "eng/forms.py": f"""\
                import kern.attn as ka
                import kern.attn
                from kern import top_k as tk
                from kern.star import *
                ka.{CALL}
                kern.attn.{CALL}
                tk(x, 2, deterministic=True)
                {CALL}
                """,
            "eng/objects.py": """\
                from kern.attn import wrapper, Wrapper

                def plan(w=Wrapper):
                    w(buffer, "NHD").plan(indptr, indices, last, 8, 8, 128, 16)

                wrapper.plan(indptr, indices, last, 8, 8, 128, 16)
                out = wrapper.run(q, kv)
                out.view(-1)
                """,
            "eng/sub/__init__.py": "",
            "eng/sub/deep.py": f"""\
                from ..run import top_k
                from ...kern import top_k as beyond
                {CALL}
                beyond(x, 2, deterministic=True)
                """,
        },
    )
    return tmp_path


def test_a_name_passed_by_a_scanned_package_is_followed(trees: Path) -> None:
    result = scan_tree([trees / "engine", trees / "kernels"], OLD, NEW)
    expected = ("keyword-missing", "flashinfer.top_k")
    assert _breaks(result.findings, "engine/eng/run.py") == [(2, *expected)]
    # every form of import reaches the same function
    assert _breaks(result.findings, "engine/eng/forms.py") == [
        (line, *expected) for line in (5, 6, 7, 8)
    ]
    # through the engine's own module, relatively; not above the top-level package
    assert _breaks(result.findings, "engine/eng/sub/deep.py") == [(3, *expected)]


def test_what_a_module_binds_anew_or_in_a_function_is_not_passed(trees: Path) -> None:
    findings = scan_tree([trees / "engine", trees / "kernels"], OLD, NEW).findings
    lines = {f.line for f in findings if f.path == "engine/eng/run.py"}
    assert 3 not in lines  # ``top_p = wrap(top_p)``: the module's name is no longer FlashInfer's
    assert 4 not in lines  # bound inside a function of the module: not the module's


def test_objects_and_parameter_defaults_are_followed(trees: Path) -> None:
    findings = scan_tree([trees / "engine", trees / "kernels"], OLD, NEW).findings
    at = {(f.line, f.target) for f in findings if f.path == "engine/eng/objects.py"}
    wrapper = "flashinfer.BatchDecodeWithPagedKVCacheWrapper"
    assert (4, wrapper) in at  # ``w=Wrapper``: the parameter is the class
    assert (6, f"{wrapper}.plan") in at  # the module's object, imported
    assert (7, f"{wrapper}.run") in at
    assert not [t for line, t in at if line == 8]  # ``run`` returns a tensor, not FlashInfer's


def test_without_the_package_passing_them_nothing_is_claimed(trees: Path) -> None:
    result = scan_tree(trees / "engine", OLD, NEW)
    assert result.findings == ()
    assert result.root == str(trees / "engine")
    assert result.roots == (str(trees / "engine"),)


def test_several_roots_are_relative_to_the_directory_holding_them(trees: Path) -> None:
    roots = [str(trees / "engine"), str(trees / "kernels")]
    result = scan_tree(roots, OLD, NEW)
    assert result.root == str(trees.resolve())
    assert result.roots == tuple(roots)
    assert {f.path.split("/")[0] for f in result.findings} == {"engine", "kernels"}
    document = result.to_dict()
    assert document["roots"] == roots
    assert document["root"] == str(trees.resolve())
    sarif = to_sarif(result)["runs"][0]
    assert sarif["originalUriBaseIds"]["SRCROOT"]["uri"] == trees.resolve().as_uri() + "/"


def test_a_file_under_two_roots_is_read_once(trees: Path) -> None:
    kernels = trees / "kernels"
    once = scan_tree(kernels, OLD, NEW)
    twice = scan_tree([kernels, kernels / "kern" / "attn.py", kernels], OLD, NEW)
    assert twice.files == once.files == 3
    assert len(twice.findings) == len(once.findings)


def test_the_command_takes_several_paths(
    trees: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(trees)
    status = main(["scan", "engine", "kernels", "--from", OLD, "--to", NEW, "--json"])
    document = json.loads(capsys.readouterr().out)
    assert status == 1
    assert document["roots"] == ["engine", "kernels"]
    assert any(f["path"] == "engine/eng/run.py" for f in document["findings"])
    assert main(["scan", "engine", "--from", OLD, "--to", NEW]) == 0
    assert "scanned under engine\n" in capsys.readouterr().out
    assert main(["scan", "engine", "missing", "--from", OLD, "--to", NEW]) == 2
    assert "missing" in capsys.readouterr().err


def test_modules_are_named_as_python_imports_them(tmp_path: Path) -> None:
    """A directory inside a package is one without an ``__init__.py`` (SGLang's ``srt/``);
    a directory above every package (a repository's ``python/``) is not part of the name."""
    _write(
        tmp_path,
        {
            "python/eng/__init__.py": "",
            "python/eng/srt/layers/kern.py": "from flashinfer import top_k\n",
            "python/eng/srt/models/model.py": f"""\
                from eng.srt.layers.kern import top_k
                from python.eng.srt.layers.kern import top_k as wrong
                {CALL}
                wrong(x, 2, deterministic=True)
                """,
        },
    )
    result = scan_tree(tmp_path, OLD, NEW)
    assert _breaks(result.findings, "python/eng/srt/models/model.py") == [
        (3, "keyword-missing", "flashinfer.top_k")
    ]


def test_a_hidden_directory_keeps_its_name_among_several_roots(trees: Path) -> None:
    hidden = trees / ".vendored"
    _write(hidden, {"kern2/__init__.py": "from flashinfer import top_k\n"})
    result = scan_tree([trees / "engine", hidden], OLD, NEW)
    assert any(f.path == ".vendored/kern2/__init__.py" for f in result.findings)


def test_a_relative_root_inside_a_package_names_modules_from_the_package(
    trees: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fi-compat scan .`` inside ``kern/``: its modules are still ``kern.*``."""
    _write(
        trees / "kernels",
        {"kern/user.py": f"from kern.attn import top_k\n{CALL}\n"},
    )
    monkeypatch.chdir(trees / "kernels" / "kern")
    result = scan_tree(".", OLD, NEW)
    assert _breaks(result.findings, "user.py") == [(2, "keyword-missing", "flashinfer.top_k")]


# ------------------------------------------------------------ one tree, several bumps


def test_a_tree_judged_against_several_bumps_is_read_once_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fi_compat._engine_source import read_module, walk

    _write(tmp_path, {"engine.py": f"from flashinfer import top_k\n{CALL}\n"})
    read: list[str] = []
    original = read_module

    def counting(data: bytes, path: str, *args: object, **kwargs: object) -> object:
        read.append(path)
        return original(data, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(walk, "read_module", counting)  # the name the walk reads files with
    monkeypatch.setattr(walk, "_RECENT", {})
    first = scan_tree(tmp_path, OLD, NEW)
    again = scan_tree(tmp_path, OLD, NEW)
    other = scan_tree(tmp_path, NEW, OLD)
    assert read == ["engine.py"]  # three bumps, one reading
    assert again == first
    assert _breaks(first.findings, "engine.py")
    assert not _breaks(other.findings, "engine.py")  # each bump still judged on its own
    # another text at the same time stamp: read again
    path = tmp_path / "engine.py"
    stat = path.stat()
    path.write_text(path.read_text().replace(", deterministic=True", ""), encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = scan_tree(tmp_path, OLD, NEW)
    assert read == ["engine.py", "engine.py"]
    assert not _breaks(changed.findings, "engine.py")
    # a file added is a tree of its own
    _write(tmp_path, {"more.py": "import flashinfer\n"})
    scan_tree(tmp_path, OLD, NEW)
    assert sorted(read) == ["engine.py", "engine.py", "engine.py", "more.py"]
