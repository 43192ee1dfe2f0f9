"""The release: what ``python -m build`` makes, and that it installs cleanly.

``python -m build`` (isolated, as a release is built) makes the sdist and, from the sdist,
the wheel; ``twine check --strict`` and ``check-wheel-contents`` (configured in
pyproject.toml) must pass on them. The wheel must hold the whole package with its recorded
data and nothing else (no tests or maintainer tooling); the sdist the whole source the test
suite needs. The wheel is then installed by pip into a fresh virtual environment (``python
-m venv``, with pytest and torch pinned by constraints/dev.txt and put there by uv, no
FlashInfer), where ``fi-compat report --json`` and the ``fake_flashinfer`` pytest plugin
(``installed_checks.py``) run against it, away from the repository.

Marker ``release``; ``make release-check`` runs this module alone, ``make test`` with the
rest. It needs the ``release`` extra (build, twine, check-wheel-contents, uv) and skips
without it (the Python 3.10 venv), and the package registry for the build's isolated
environment and the fresh venv (seconds from uv's cache, about a minute with it empty).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from fi_compat._version import __version__

# build.util, not build: a stray ./build directory on sys.path imports as a namespace package.
for _tool in ("build.util", "twine", "check_wheel_contents", "uv"):
    pytest.importorskip(
        _tool, reason="needs the release extra: build, twine, check-wheel-contents, uv"
    )

pytestmark = pytest.mark.release

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fi_compat"
CONSTRAINTS = ROOT / "constraints" / "dev.txt"

#: The recorded data the package reads at run time, as paths in the wheel.
DATA = (
    "fi_compat/py.typed",
    "fi_compat/_measured/reach.json",
    "fi_compat/_measured/layers.json",
    "fi_compat/_measured/sizes.json",
    "fi_compat/_records/releases.txt",
    "fi_compat/_records/README.md",
)

#: Top-level directories of the repository that must never be in the wheel.
NOT_SHIPPED = ("tests", "tools", "bench", "scripts", "constraints", "docs")

#: Files of the repository the sdist must carry to build the wheel and run the test suite.
SDIST_NEEDS = (
    "pyproject.toml",
    "MANIFEST.in",
    "LICENSE",
    "README.md",
    "CHANGELOG.md",
    "Makefile",
    "constraints/dev.txt",
    "tests/conftest.py",
    "tests/release/installed_checks.py",
    "scripts/gen_compat_table.py",
    "tools/__init__.py",
)

#: What a fresh clone does not have: the build copies the repository without these, so that
#: a stale ``fi_compat.egg-info`` (its SOURCES.txt feeds the sdist) cannot hide a file that
#: the packaging configuration misses.
_NOT_SOURCE = (
    ".git",
    ".venv",
    ".venv310",
    "*.egg-info",
    "build",
    "dist",
    "__pycache__",
    "*.py[cod]",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".cache",
    ".coverage",
    ".coverage.*",
    ".stages",
    ".stages.*",
    ".py310.log",
    ".docs.log",
)

#: The interpreter settings a subprocess must not inherit from the test run.
_LEAKY = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTEST_ADDOPTS")

#: torch 2.13.0 CPU warns at import when numpy is missing; not fi-compat's to fix.
_TORCH_NUMPY = "ignore:Failed to initialize NumPy:UserWarning"


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


def _env(**extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _LEAKY and not key.startswith(("COVERAGE_", "PYTEST_"))
    }
    env.update(extra)
    return env


def _run(
    command: Sequence[str | Path], *, cwd: Path, timeout: float, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """Run ``command``; fail the test with its output unless it exits 0."""
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=_env(**extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, command))} exited {result.returncode}\n"
            f"--- stdout\n{result.stdout[-6000:]}\n--- stderr\n{result.stderr[-6000:]}"
        )
    return result


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and the wheel, built as a release is: ``python -m build`` (isolated), from
    a copy of the repository as a fresh clone has it."""
    source = tmp_path_factory.mktemp("source") / "fi-compat"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", out, source], cwd=source, timeout=600)
    sdists = sorted(out.glob("*.tar.gz"))
    wheels = sorted(out.glob("*.whl"))
    assert len(sdists) == 1, sdists
    assert len(wheels) == 1, wheels
    return Dist(sdist=sdists[0], wheel=wheels[0])


@pytest.fixture(scope="module")
def wheel_names(dist: Dist) -> set[str]:
    with zipfile.ZipFile(dist.wheel) as wheel:
        return set(wheel.namelist())


@pytest.fixture(scope="module")
def sdist_names(dist: Dist) -> set[str]:
    with tarfile.open(dist.sdist) as sdist:
        return {member.name for member in sdist.getmembers() if member.isfile()}


def _tools_into(venv: Path, *requirements: str) -> None:
    """Install ``requirements`` (as pinned by constraints/dev.txt) into ``venv`` with uv, as
    ``make`` fills its own venvs: the same pins and files as pip, torch's CPU build from the
    machine's find-links directory (``UV_FIND_LINKS``, which the Makefile sets, or pip's
    ``PIP_FIND_LINKS``), from uv's cache in seconds. The tools only: the wheel under test is
    installed by pip, as a user installs it."""
    from uv import find_uv_bin

    links = os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS")
    _run(
        [
            find_uv_bin(),
            *("pip", "install", "--quiet", "--python", venv / "bin" / "python"),
            *("-c", CONSTRAINTS),
            *(("--find-links", links) if links else ()),
            *requirements,
        ],
        cwd=venv,
        timeout=900,
    )


@pytest.fixture(scope="module")
def fresh_venv(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with the wheel, pytest and torch (pinned), no FlashInfer."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", venv], cwd=venv, timeout=300)
    # torch only as pinned: an unpinned torch would pull a multi-GB CUDA build.
    _tools_into(venv, "pytest", "torch")
    pip: list[str | Path] = [venv / "bin" / "python", "-m", "pip", "install", "--quiet"]
    pip += ["--disable-pip-version-check", "-c", CONSTRAINTS, dist.wheel]
    _run(pip, cwd=venv, timeout=900)
    return venv


def test_names_and_versions(dist: Dist) -> None:
    assert dist.wheel.name == f"fi_compat-{__version__}-py3-none-any.whl"
    assert dist.sdist.name == f"fi_compat-{__version__}.tar.gz"


def test_twine_check_strict(dist: Dist) -> None:
    result = _run(
        [sys.executable, "-m", "twine", "check", "--strict", dist.sdist, dist.wheel],
        cwd=ROOT,
        timeout=120,
    )
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_check_wheel_contents(dist: Dist) -> None:
    # Run from the repository: its [tool.check-wheel-contents] applies.
    result = _run([sys.executable, "-m", "check_wheel_contents", dist.wheel], cwd=ROOT, timeout=120)
    assert result.stdout.strip().endswith(": OK"), result.stdout


def test_the_wheel_holds_the_recorded_data(dist: Dist, wheel_names: set[str]) -> None:
    # One store holds every release's record and every module's names.
    expected = [*DATA, "fi_compat/_records/surface.zip"]
    missing = [name for name in expected if name not in wheel_names]
    assert missing == []
    assert not [name for name in wheel_names if name.endswith(".json.gz")]
    with zipfile.ZipFile(dist.wheel) as wheel:
        store = zipfile.ZipFile(io.BytesIO(wheel.read("fi_compat/_records/surface.zip")))
    releases = json.loads(store.read("index.json"))["releases"]
    assert len(releases) > 100
    assert {f"records/{release}.json" for release in releases} <= set(store.namelist())
    with zipfile.ZipFile(dist.wheel) as wheel:
        changed = [
            name
            for name in expected
            if _sha256(wheel.read(name)) != _sha256((ROOT / name).read_bytes())
        ]
    assert changed == []


def test_the_wheel_holds_every_module_and_nothing_else(wheel_names: set[str]) -> None:
    sources = {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert sources - wheel_names == set()
    dist_info = f"fi_compat-{__version__}.dist-info"
    tops = {name.split("/", 1)[0] for name in wheel_names}
    assert tops == {"fi_compat", dist_info}
    unexpected = [
        name
        for name in wheel_names
        if name.split("/")[0] in NOT_SHIPPED or "__pycache__" in name or name.endswith(".pyc")
    ]
    assert unexpected == []
    assert f"{dist_info}/licenses/LICENSE" in wheel_names


def test_the_wheel_metadata(dist: Dist) -> None:
    dist_info = f"fi_compat-{__version__}.dist-info"
    with zipfile.ZipFile(dist.wheel) as wheel:
        metadata = wheel.read(f"{dist_info}/METADATA").decode("utf-8")
        entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode("utf-8")
    headers = metadata.split("\n\n", 1)[0].splitlines()
    assert "Name: fi-compat" in headers
    assert f"Version: {__version__}" in headers
    assert "License-Expression: Apache-2.0" in headers
    assert "License-File: LICENSE" in headers
    assert "Requires-Python: >=3.10" in headers
    assert "Description-Content-Type: text/markdown" in headers
    # The one dependency; FlashInfer and torch only through the `flashinfer` extra.
    requires = [line for line in headers if line.startswith("Requires-Dist:")]
    assert [line for line in requires if "extra ==" not in line] == ["Requires-Dist: packaging>=21"]
    assert "fi-compat = fi_compat.cli:console" in entry_points
    assert "fi_compat = fi_compat.testing.pytest_plugin" in entry_points


def test_the_sdist_holds_the_source(sdist_names: set[str]) -> None:
    prefix = f"fi_compat-{__version__}/"
    assert all(name.startswith(prefix) for name in sdist_names)
    names = {name[len(prefix) :] for name in sdist_names}
    assert [name for name in SDIST_NEEDS if name not in names] == []
    assert [name for name in DATA if name not in names] == []
    tracked_tests = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert tracked_tests - names == set()
    junk = [
        name
        for name in names
        if name.endswith((".pyc", ".pyo"))
        or "__pycache__" in name
        or name.split("/")[0] in {".venv", ".venv310", ".git", ".ci", "dist", "build"}
        or name.startswith((".coverage", ".hypothesis", ".mypy_cache", ".pytest_cache"))
    ]
    assert junk == []


def test_fi_compat_report_in_a_fresh_venv(fresh_venv: Path, tmp_path: Path) -> None:
    executable = fresh_venv / "bin" / "fi-compat"
    result = _run([executable, "report", "--json"], cwd=tmp_path, timeout=300)
    report = json.loads(result.stdout)
    assert report["fi_compat"] == {"version": __version__}
    flashinfer = report["flashinfer"]
    assert flashinfer["installed"] is False
    assert flashinfer["version"] is None
    assert report["torch"]["version"].startswith("2.13.0")
    assert report["comm"]["available"] is False
    assert "not installed" in report["comm"]["error"]
    assert report["split_reach"]["measured"] is False
    version = _run([executable, "--version"], cwd=tmp_path, timeout=60)
    assert version.stdout.strip() == f"fi-compat {__version__}"


def test_the_pytest_plugin_in_a_fresh_venv(fresh_venv: Path, tmp_path: Path) -> None:
    shutil.copyfile(Path(__file__).with_name("installed_checks.py"), tmp_path / "test_installed.py")
    options = ["-p", "no:cacheprovider", "-q", "-ra", "-W", "error", "-W", _TORCH_NUMPY]
    result = _run(
        [fresh_venv / "bin" / "python", "-m", "pytest", *options, "test_installed.py"],
        cwd=tmp_path,
        timeout=600,
        FI_COMPAT_REPOSITORY=str(ROOT),
        FI_COMPAT_EXPECTED_VERSION=__version__,
    )
    assert " passed" in result.stdout, result.stdout
    assert " skipped" not in result.stdout, result.stdout


#: Test modules whose tests need FlashInfer, pynvml or the release matrix, and some that do
#: not: in a venv without FlashInfer each of them must pass or skip saying why.
_WITHOUT_FLASHINFER = (
    "tests/test_capabilities_real.py",
    "tests/test_capabilities_wheels.py",
    "tests/comm/test_real.py",
    "tests/attention/test_planner.py",
    "tests/testing/test_fake_engine_surface.py",
    "tests/recorder/test_recorder_vs_inspect.py",
)


def test_the_suite_skips_what_a_venv_without_flashinfer_lacks(fresh_venv: Path) -> None:
    """The fresh venv (torch, no FlashInfer, so no pynvml) gets the ``test`` extra's
    requirements as pyproject.toml declares them; a subset of the suite run there from the
    repository must fail nothing and name a reason for every skip."""
    tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml (Python 3.11+)")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    requirements: list[str] = declared["project"]["optional-dependencies"]["test"]
    python = fresh_venv / "bin" / "python"
    _tools_into(fresh_venv, *requirements)
    missing = subprocess.run(
        [python, "-c", "import flashinfer"], capture_output=True, text=True, check=False
    )
    assert "No module named 'flashinfer'" in missing.stderr, missing.stderr
    options = ["-p", "no:cacheprovider", "-q", "-rs", "-W", _TORCH_NUMPY]
    result = _run([python, "-m", "pytest", *options, *_WITHOUT_FLASHINFER], cwd=ROOT, timeout=600)
    summary = result.stdout.strip().splitlines()[-1]
    assert " passed" in summary, result.stdout
    assert " skipped" in summary, result.stdout
    assert "failed" not in summary, result.stdout
    assert "error" not in summary, result.stdout
    skips = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips, result.stdout
    for line in skips:
        reason = line.partition(": ")[2].partition(": ")[2] or line.partition(": ")[2]
        assert reason.strip(), line
