"""The walls of ``fi_compat.upgrade``: every bad argument is a typed error, and nothing of
FlashInfer (or torch) is ever imported; ``fi-compat scan --to installed`` against hostile
FlashInfer packages that raise, print or report nonsense as their version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fi_compat.errors import FiCompatError, InvalidArgumentError
from fi_compat.upgrade import (
    Category,
    diff_releases,
    render_diff,
    render_scan,
    scan_tree,
    to_sarif,
)
from tests.support.fakes import FakePackage
from tests.support.hostile import HOSTILE_PACKAGES, process_env

SOURCE = "import flashinfer.comm as fc\nfc.create_allreduce_fusion_workspace(group=None)\n"
#: Never a bool: the truthy and falsy values a caller passes by mistake.
NOT_BOOL: tuple[object, ...] = (None, 0, 1, "false", "", "no", 1.0, [], object())


class _BytesPath:
    """An ``os.PathLike`` whose ``__fspath__`` gives bytes."""

    def __fspath__(self) -> bytes:
        return b"/tmp"


class _RaisingPath:
    """An ``os.PathLike`` whose ``__fspath__`` raises."""

    def __fspath__(self) -> str:
        raise RuntimeError("no path for you")


def _id(value: object) -> str:
    """A stable test id (``repr`` of an object differs between xdist workers)."""
    text = repr(value)
    return text if " at 0x" not in text else type(value).__name__


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "engine.py").write_text(SOURCE, encoding="utf-8")
    return tmp_path


def _typed(call: Callable[[], object], name: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        call()
    error = caught.value
    assert isinstance(error, FiCompatError)
    assert isinstance(error, TypeError)
    assert isinstance(error, ValueError)
    assert str(error).startswith(f"expected {name}"), str(error)


@pytest.mark.parametrize(
    "root",
    [None, 3, True, b"/tmp", bytearray(b"/tmp"), [], (), {"/tmp"}, object(), _BytesPath(), "a\0b"],
    ids=_id,
)
def test_scan_tree_refuses_a_root_that_is_not_a_path(root: object) -> None:
    _typed(lambda: scan_tree(root, "0.6.5", "0.7.2.post1"), "root")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "item", [None, 3, b"/tmp", ["/tmp"], _BytesPath(), "a\0b", "/nonexistent/root"], ids=_id
)
def test_scan_tree_refuses_each_of_several_roots_that_is_not_a_path(
    tmp_path: Path, item: object
) -> None:
    root = _tree(tmp_path)
    for roots in ([root, item], (item, root)):
        _typed(
            lambda: scan_tree(roots, "0.6.5", "0.7.2.post1"),  # type: ignore[arg-type]  # noqa: B023
            "every item of root",
        )


def test_scan_tree_refuses_a_path_like_that_raises(tmp_path: Path) -> None:
    # A RuntimeError from __fspath__ is the caller's own error, passed on as it is.
    with pytest.raises(RuntimeError, match="no path for you"):
        scan_tree(_RaisingPath(), "0.6.5", "0.7.2.post1")


@pytest.mark.parametrize("value", NOT_BOOL, ids=_id)
def test_scan_tree_refuses_a_switch_that_is_not_a_bool(tmp_path: Path, value: object) -> None:
    root = _tree(tmp_path)
    _typed(
        lambda: scan_tree(root, "0.6.5", "0.7.2.post1", fi_compat=value),  # type: ignore[arg-type]
        "fi_compat",
    )


@pytest.mark.parametrize("result", [None, "result", {}, diff_releases("0.6.5", "0.6.8")], ids=_id)
def test_render_scan_and_to_sarif_refuse_what_is_not_a_scan_result(result: object) -> None:
    _typed(lambda: render_scan(result), "result")  # type: ignore[arg-type]
    _typed(lambda: to_sarif(result), "result")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", NOT_BOOL, ids=_id)
def test_render_scan_and_to_sarif_refuse_a_switch_that_is_not_a_bool(
    tmp_path: Path, value: object
) -> None:
    result = scan_tree(_tree(tmp_path), "0.6.5", "0.7.2.post1")
    _typed(lambda: render_scan(result, show_unchanged=value), "show_unchanged")  # type: ignore[arg-type]
    _typed(lambda: to_sarif(result, show_unchanged=value), "show_unchanged")  # type: ignore[arg-type]


@pytest.mark.parametrize("diff", [None, "0.6.5", object()], ids=_id)
def test_render_diff_refuses_what_is_not_a_diff(diff: object) -> None:
    _typed(lambda: render_diff(diff), "diff")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("categories", "name"),
    [
        ("breaks", "categories"),
        (b"breaks", "categories"),
        (3, "categories"),
        (None, "categories"),
        (["breaks"], "every item of categories"),
        ([Category.BREAKS, None], "every item of categories"),
    ],
    ids=_id,
)
def test_render_diff_refuses_categories_that_are_not_categories(
    categories: object, name: str
) -> None:
    diff = diff_releases("0.6.5", "0.6.8")
    _typed(lambda: render_diff(diff, categories=categories), name)  # type: ignore[arg-type]


def test_nothing_of_flashinfer_or_torch_is_imported(tmp_path: Path) -> None:
    """Every entry point, with good and bad arguments, in a fresh interpreter: afterwards
    neither FlashInfer (real or fake) nor torch is in ``sys.modules``."""
    root = _tree(tmp_path)
    script = textwrap.dedent(
        f"""
        import json, sys
        from fi_compat.upgrade import (
            Category, diff_releases, render_diff, render_scan, scan_tree, to_sarif,
        )
        calls = [
            lambda: render_diff(diff_releases("0.6.8", "0.7.2.post1")),
            lambda: diff_releases(None, "0.7.2"),
            lambda: diff_releases("0.7.2", "9.9"),
            lambda: to_sarif(scan_tree({str(root)!r}, "0.7.2.post1", "0.6.5", fi_compat=True)),
            lambda: render_scan(scan_tree({str(root)!r}, "0.5.3", "0.7.2.post1")),
            lambda: scan_tree(b"/tmp", "0.6.5", "0.7.2"),
            lambda: scan_tree({str(root)!r}, "0.6.5", "0.7.2", fi_compat="no"),
            lambda: render_diff(diff_releases("0.6.5", "0.6.8"), categories="breaks"),
            lambda: scan_tree([{str(root)!r}, {str(root)!r}], "0.7.2.post1", "0.6.5").to_dict(),
            lambda: scan_tree([{str(root)!r}, None], "0.6.5", "0.7.2"),
            lambda: scan_tree([], "0.6.5", "0.7.2"),
        ]
        outcomes = []
        for call in calls:
            try:
                call()
                outcomes.append("ok")
            except Exception as error:
                outcomes.append(type(error).__name__)
        loaded = sorted(
            name for name in sys.modules if name.split(".")[0] in ("flashinfer", "torch")
        )
        print(json.dumps({{"outcomes": outcomes, "loaded": loaded}}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    found = json.loads(done.stdout)
    assert found["outcomes"] == [
        "ok",
        "InvalidArgumentError",
        "UnknownReleaseError",
        "ok",
        "ok",
        "InvalidArgumentError",
        "InvalidArgumentError",
        "InvalidArgumentError",
        "ok",
        "InvalidArgumentError",
        "InvalidArgumentError",
    ]
    assert found["loaded"] == []


# ------------------------------------------------------------------ --to installed, hostile

INSTALLED_CASES = (
    "noise-init-print",
    "noise-init-os-write-fd1",
    "noise-init-c-printf",
    "noise-comm-print",
    "init-raises-custom-BaseException",
    "comm-raises-SystemExit-3",
    "getattr-flashinfer-RuntimeError",
    "path-int",
    "version-int",
    "version-unparsable",
    "version-huge-release",
    "version-nul",
    "version-hostile-str",
    "version-getattr-raises",
    "sys-modules-None",
)


def _hostile(name: str) -> Any:
    return next(hostile for hostile in HOSTILE_PACKAGES if hostile.id == name)


@pytest.mark.parametrize("name", INSTALLED_CASES)
def test_to_installed_against_a_hostile_flashinfer(
    name: str, fake_package: FakePackage, tmp_path: Path
) -> None:
    """Exit 0 or 1 with parsable JSON judged against the release the package reports, or 2
    with one line saying why there is none; never a traceback, never its noise on stdout."""
    package = fake_package(_hostile(name).files)
    tree = tmp_path / "tree"
    tree.mkdir()
    _tree(tree)
    argv = ["scan", str(tree), "--from", "0.6.5", "--to", "installed", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "fi_compat", *argv],
        capture_output=True,
        env=process_env(package),
        cwd=tmp_path,
        timeout=180,
        check=False,
    )
    stderr = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr, stderr
    assert done.returncode in (0, 1, 2), stderr
    if done.returncode == 2:
        assert done.stdout == b""
        assert "fi-compat scan: " in stderr
        return
    document = json.loads(done.stdout)
    # The package's __version__ (0.7.2); where it gives none the probe reads the installed
    # distribution's, the pinned flashinfer-python of this environment.
    assert document["new"] in ("0.7.2", "0.7.2.post1")
    assert os.fspath(tree) == document["root"]
