"""Modelling a release in parts, on several processes: the same bytes as in one."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fi_compat._recorder import model
from fi_compat._recorder.archive import read_release
from fi_compat._recorder.model import model_release, parts
from fi_compat._recorder.resolve import Package
from fi_compat._recorder.surface import recorded_modules


def _release(root: Path) -> Path:
    """A release of 40 modules in four subpackages, whose top level re-exports a name of
    the last one, so that a re-export and its definition land in different parts."""
    files = {
        "flashinfer/__init__.py": """
            from .zeta.kernels_9 import launch_9 as launch_9
            from .alpha import kernels_0
            __version__ = "9.9.9"
        """,
        "flashinfer/comm/__init__.py": "from .allreduce import allreduce_fusion\n",
        "flashinfer/comm/allreduce.py": """
            def allreduce_fusion(input, workspace, *, pattern, launch_with_pdl=False):
                pass
        """,
    }
    for package in ("alpha", "beta", "gamma", "zeta"):
        files[f"flashinfer/{package}/__init__.py"] = ""
        for index in range(10):
            files[f"flashinfer/{package}/kernels_{index}.py"] = f"""
                import torch

                class Runner_{index}:
                    def __init__(self, workspace, *, stages={index}):
                        self._workspace = workspace
                        self._prepare()

                    def _prepare(self):
                        self._ready = True

                    def run(self, x, **kwargs):
                        return self._launch(x, **kwargs)

                    def _launch(self, x, *, stream=None):
                        pass

                def launch_{index}(x, y=None, *, scale: float = 1.0) -> torch.Tensor:
                    return Runner_{index}(x).run(y)
                PADDING_{index} = "{"x" * 400 * index}"
            """
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def _model(tree: Path, out: Path, *extra: str) -> tuple[bytes, bytes]:
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "fi_compat._recorder", "model", str(tree), str(out), *extra],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "9.9.9"
    return (
        gzip.decompress((out / "record.json.gz").read_bytes()),
        gzip.decompress((out / "surface.json.gz").read_bytes()),
    )


def test_parts_cut_the_recorded_modules_in_order_into_runs_of_about_equal_size(
    tmp_path: Path,
) -> None:
    package = Package(read_release(_release(tmp_path / "release")))
    modules = recorded_modules(package)
    for count in (1, 2, 5, 12, 500):
        cut = parts(package, count)
        assert [name for part in cut for name in part] == modules
        assert all(cut)
        assert len(cut) <= count
    cut = parts(package, 4)
    assert len(cut) == 4
    sizes = [sum(len(package.source.files[name][1]) for name in part) for part in cut]
    assert max(sizes) < 2 * min(sizes)


@pytest.mark.parametrize("jobs", ["2", "5"])
def test_a_model_made_by_several_processes_is_the_one_made_by_one(
    tmp_path: Path, jobs: str
) -> None:
    tree = _release(tmp_path / "release")
    alone = _model(tree, tmp_path / "one", "--release=9.9.9", "--jobs=1")
    shared = _model(tree, tmp_path / "many", "--release=9.9.9", f"--jobs={jobs}")
    assert shared == alone
    # the re-export reached the definition made in another part
    assert (
        b'"launch_9":{"defined_in":"flashinfer.zeta.kernels_9","kind":"function","same"'
        in (alone[1])
    )


def test_a_part_that_fails_fails_the_model_with_its_reason(tmp_path: Path) -> None:
    tree = _release(tmp_path / "release")  # a folder: no release in its name
    command = [sys.executable, "-m", "fi_compat._recorder", "model", str(tree), str(tmp_path)]
    done = subprocess.run(
        [*command, "--jobs=2"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("RecordingError: cannot tell the release version of")
    assert not (tmp_path / "surface.json.gz").exists()


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_a_job_count_below_one_models_in_one_process(tmp_path: Path, jobs: str) -> None:
    tree = _release(tmp_path / "release")
    alone = _model(tree, tmp_path / "one", "--release=9.9.9", "--jobs=1")
    assert _model(tree, tmp_path / "other", "--release=9.9.9", f"--jobs={jobs}") == alone


def test_a_job_count_that_is_not_a_number_is_refused_before_anything_is_read(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-m", "fi_compat._recorder", "model", str(tmp_path / "none")]
    done = subprocess.run(
        [*command, str(tmp_path), "--jobs=two"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "argument --jobs: invalid int value: 'two'" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_huge_job_count_is_served_with_no_more_workers_than_parts(tmp_path: Path) -> None:
    tree = _release(tmp_path / "release")
    alone = _model(tree, tmp_path / "one", "--release=9.9.9", "--jobs=1")
    assert _model(tree, tmp_path / "many", "--release=9.9.9", "--jobs=100000") == alone


_KILLING = """
import os, signal, sys
from pathlib import Path
from fi_compat._recorder import __main__ as builder
from fi_compat._recorder import model

parent = os.getpid()
make = model._Parts.make

def make_or_die(self, number):
    if os.getpid() != parent and number == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    return make(self, number)

model._Parts.make = make_or_die
print(builder.model(Path(sys.argv[1]), Path(sys.argv[2]), "9.9.9", jobs=2))
"""


@pytest.mark.parametrize("part", ["0", "4", "5"])
def test_a_worker_that_dies_costs_time_never_the_model_nor_a_hang(
    tmp_path: Path, part: str
) -> None:
    """A worker killed in the middle of a part (a run of modules; the record is made before
    any fork): the builder ends, says so, and its model is the one made in one process."""
    tree = _release(tmp_path / "release")
    alone = _model(tree, tmp_path / "one", "--release=9.9.9", "--jobs=1")
    out = tmp_path / "killed"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _KILLING, str(tree), str(out), part],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "a modelling worker was ended by signal 9" in done.stderr
    killed = (
        gzip.decompress((out / "record.json.gz").read_bytes()),
        gzip.decompress((out / "surface.json.gz").read_bytes()),
    )
    assert killed == alone


def test_by_default_a_release_the_record_left_little_of_is_finished_without_a_fork(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record parses what ``import flashinfer`` runs; where the recorded modules left
    unparsed are under ``_LEAST_FORKED``, the default number of jobs (however many cores)
    makes the surface in this process: forking would cost more than it saves."""
    tree = _release(tmp_path / "release")
    package = Package(read_release(tree))
    assert not package.parsed("flashinfer")
    package.get("flashinfer")
    assert package.parsed("flashinfer")

    def no_fork() -> int:
        raise AssertionError("forked")

    monkeypatch.setattr(model, "default_jobs", lambda: 64)
    monkeypatch.setattr(os, "fork", no_fork)
    assert model_release(tree, "9.9.9") == model_release(tree, "9.9.9", jobs=1)
