"""``fi-compat measure``: its exit status, its text and JSON, and what it does with bad input.

The installed release is a made-up one (``InstalledPackage`` of a throw-away package) whose
measurements are either cached by the test or cannot be made; the real measurement is
``tests/measured/test_installed_real.py``'s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fi_compat import _local
from fi_compat._measured import installed
from fi_compat._measured.installed import MEASUREMENTS, InstalledPackage, cache_path
from fi_compat._version import __version__
from fi_compat.cli import main

VERSION = "9.9.9"
ENTRIES = {
    "reach": {
        "BatchDecodeWithPagedKVCacheWrapper": {
            "plan_takes": True,
            "backend_attribute": "_backend",
            "default_backend": "auto",
            "backends": {
                "fa2": {"verdict": "reaches", "detail": "plan receives both"},
                "trtllm-gen": {"verdict": "dropped", "detail": "plan drops both"},
            },
        }
    },
    "layers": {"layer": "public", "detail": "not measured: no comm"},
    "sizes": {"trtllm": {"check": "product", "reaches": "call", "detail": "measured"}},
}


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> InstalledPackage:
    package = tmp_path / "site" / "flashinfer"
    package.mkdir(parents=True)
    monkeypatch.setenv(_local.CACHE_ENV, str(tmp_path / "cache"))
    found = InstalledPackage(VERSION, package, "files-under-test")
    monkeypatch.setattr(installed, "find_installed", lambda: found)
    return found


def _seed(release: InstalledPackage) -> None:
    release.directory.mkdir(parents=True, exist_ok=True)
    for measurement in MEASUREMENTS:
        document = {
            "schema": installed.SCHEMA,
            "measurement": measurement,
            "release": release.version,
            "fingerprint": release.fingerprint,
            "fi_compat": __version__,
            "entry": ENTRIES[measurement],
        }
        cache_path(release, measurement).write_text(json.dumps(document), encoding="utf-8")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["measure", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_cached_release_is_reported_with_what_was_measured_and_where(
    release: InstalledPackage, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(release)
    code, out, err = _run([], capsys)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"flashinfer 9.9.9 at {release.package} (files files-under-test)"
    assert lines[1] == (
        "  reach   cached: 1 of 2 family/backend pairs carry the split settings to the kernel "
        "across 1 families"
    )
    assert lines[2].strip() == str(cache_path(release, "reach"))
    assert (
        lines[3]
        == "  layers  cached: the checked fused call uses the public layer: not measured: no comm"
    )
    assert lines[5] == "  sizes   cached: trtllm: product, reaches the call's sizes"
    assert lines[-1].startswith(f"cache: {release.directory} (")


def test_json_says_the_same(release: InstalledPackage, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(release)
    code, out, _ = _run(["--json"], capsys)
    assert code == 0
    document = json.loads(out)
    assert document["ok"] is True
    assert document["shipped"] is False
    assert document["cache"] == str(release.directory)
    assert document["flashinfer"] == {
        "version": VERSION,
        "location": str(release.package),
        "fingerprint": "files-under-test",
    }
    assert set(document["measurements"]) == set(MEASUREMENTS)
    for name, facts in document["measurements"].items():
        assert facts["status"] == "cached"
        assert facts["path"] == str(cache_path(release, name))
        assert facts["error"] is None


def test_no_installed_flashinfer_exits_1_and_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(installed, "find_installed", lambda: None)
    code, out, err = _run([], capsys)
    assert code == 1
    assert out == "no installed flashinfer-python found: nothing measured\n"
    assert "install flashinfer-python into this environment" in err
    code, out, _ = _run(["--json"], capsys)
    assert code == 1
    assert json.loads(out)["ok"] is False


def test_a_cache_that_cannot_be_made_exits_1_naming_the_variable(
    release: InstalledPackage,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv(_local.CACHE_ENV, str(blocker / "below"))
    code, _out, err = _run([], capsys)
    assert code == 1
    assert err.startswith("fi-compat measure: the cache directory ")
    assert f"set {_local.CACHE_ENV} to a writable directory" in err


def test_a_failed_measurement_exits_1_with_the_finding(
    release: InstalledPackage, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The probes cannot even start (no interpreter there): each is a finding, not a crash."""
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    code, out, err = _run(["--timeout", "30"], capsys)
    assert code == 1
    assert "  reach   failed after " in out
    assert "the probe could not start" in err
    assert not any(cache_path(release, m).exists() for m in MEASUREMENTS)


@pytest.mark.parametrize(
    "argv",
    [
        ["--timeout", "0"],
        ["--timeout", "-5"],
        ["--timeout", "nan"],
        ["--timeout", "inf"],
        ["--timeout", "soon"],
        ["--timeout", ""],
        ["--timeout", "1e999"],
        ["--timeout"],
        ["0.7.4"],
        ["--path", "x.whl"],
        ["--force=yes"],
    ],
)
def test_a_bad_command_line_exits_2_and_measures_nothing(
    release: InstalledPackage, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["measure", *argv])
    assert exited.value.code == 2
    assert "usage: fi-compat" in capsys.readouterr().err
    assert not release.directory.exists()
