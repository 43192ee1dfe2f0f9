"""The generated fake packages a process leaves in the temporary directory when it ends
without running exit handlers (``fi_compat/testing/_install.py``): each is named for the
process that owns it, and the first build of a later process removes those whose owner no
longer runs, and nothing else."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from fi_compat.testing._install import remove_leftovers

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "0.7.2.post1"


def _dead_pid() -> int:
    """The pid of a process that has ended (and been waited for)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _leftover(root: Path, pid: int, release: str = RELEASE) -> Path:
    """A directory named as a build of process ``pid`` is, with a package inside."""
    directory = Path(tempfile.mkdtemp(prefix=f"fake-flashinfer-{pid}-{release}-", dir=root))
    package = directory / "flashinfer" / "comm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n", encoding="utf-8")
    return directory


def _fakes(root: Path) -> list[str]:
    """The names in ``root`` a fake's build could have."""
    return sorted(path.name for path in root.glob("fake-flashinfer-*"))


def test_a_dead_process_leftover_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default the sweep reads the temporary directory and removes a dead owner's build,
    package and all."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = _leftover(tmp_path, _dead_pid())
    assert remove_leftovers() == [dead]
    assert not dead.exists()
    assert _fakes(tmp_path) == []


def test_a_live_process_leftover_is_kept(tmp_path: Path) -> None:
    """This process's build and a running child's are kept; a dead one's beside them goes."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        mine = _leftover(tmp_path, os.getpid())
        childs = _leftover(tmp_path, child.pid)
        dead = _leftover(tmp_path, _dead_pid())
        assert remove_leftovers(tmp_path) == [dead]
        assert mine.is_dir()
        assert childs.is_dir()
        assert (childs / "flashinfer" / "comm" / "__init__.py").is_file()
    finally:
        child.communicate(b"")
    # The child has ended now: its build is a leftover.
    assert remove_leftovers(tmp_path) == [childs]
    assert _fakes(tmp_path) == [mine.name]


def test_a_process_of_another_user_counts_as_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where probing the owner is not permitted (a process of another user holds the pid), it
    runs, and its build is kept."""
    pid = _dead_pid()
    kept = _leftover(tmp_path, pid)
    probed: list[tuple[int, int]] = []

    def kill(target: int, signal: int) -> None:
        probed.append((target, signal))
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", kill)
    assert remove_leftovers(tmp_path) == []
    assert probed == [(pid, 0)]
    assert kept.is_dir()


def test_nothing_is_swept_off_posix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ``os.kill(pid, 0)`` does not probe (Windows sends ``CTRL_C_EVENT``), nothing is
    probed and nothing removed."""
    dead = _leftover(tmp_path, _dead_pid())
    probed: list[int] = []
    monkeypatch.setattr(os, "kill", lambda target, signal: probed.append(target))
    monkeypatch.setattr(os, "name", "nt")
    assert remove_leftovers(tmp_path) == []
    monkeypatch.undo()
    assert probed == []
    assert dead.is_dir()


def test_other_names_are_kept(tmp_path: Path) -> None:
    """Only a directory named exactly as a build with its owner's pid is a leftover: the
    earlier names without a pid, other names, files and symbolic links stay."""
    pid = _dead_pid()
    others = [
        "fake-flashinfer-0.7.2.post1-abcd_123",  # the earlier form, without a pid
        f"fake-flashinfer-{pid}-0.7.2.post1",  # no random suffix
        f"fake-flashinfer-{pid}-0.7.2.post1-abcd_123-more",
        f"fake-flashinfer-{pid}-0.7.2.post1-ABCD1234",
        f"fake-flashinfer-0-{RELEASE}-abcd1234",  # no process has pid 0
        f"fake-flashinfer-0{pid}-{RELEASE}-abcd1234",
        f"fake-flashinfer--{pid}-{RELEASE}-abcd1234",
        f"fake-flashinfer-x{pid}-{RELEASE}-abcd1234",
        f"other-{pid}-{RELEASE}-abcd1234",
        f"fake-flashinfer-{pid}-{RELEASE}-abcd1234.tmp",
    ]
    for name in others:
        (tmp_path / name / "flashinfer").mkdir(parents=True)
    file = tmp_path / f"fake-flashinfer-{pid}-{RELEASE}-file0000"
    file.write_text("not a build\n", encoding="utf-8")
    target = tmp_path / "target"
    (target / "flashinfer").mkdir(parents=True)
    link = tmp_path / f"fake-flashinfer-{pid}-{RELEASE}-link0000"
    link.symlink_to(target, target_is_directory=True)
    dead = _leftover(tmp_path, pid)

    assert remove_leftovers(tmp_path) == [dead]
    assert all((tmp_path / name / "flashinfer").is_dir() for name in others)
    assert file.read_text(encoding="utf-8") == "not a build\n"
    assert link.is_symlink()
    assert (target / "flashinfer").is_dir()


def test_the_sweep_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A temporary directory that is missing or not a directory, a leftover that vanishes
    mid-sweep (another process sweeping) and one that cannot be removed: nothing is raised,
    and what is gone, only that, is reported."""
    assert remove_leftovers(tmp_path / "missing") == []
    (tmp_path / "file").write_text("", encoding="utf-8")
    assert remove_leftovers(tmp_path / "file") == []

    vanishing = _leftover(tmp_path, _dead_pid())

    def kill(target: int, signal: int) -> None:
        shutil.rmtree(vanishing)
        raise ProcessLookupError(3, "No such process")

    with monkeypatch.context() as patch:
        patch.setattr(os, "kill", kill)
        assert remove_leftovers(tmp_path) == [vanishing]
    assert not vanishing.exists()

    stuck = _leftover(tmp_path, _dead_pid())
    failed: list[str] = []

    def rmtree(path: str, ignore_errors: bool = False) -> None:
        # What shutil.rmtree(..., ignore_errors=True) does where every removal is refused.
        assert ignore_errors
        failed.append(path)

    with monkeypatch.context() as patch:
        patch.setattr(shutil, "rmtree", rmtree)
        assert remove_leftovers(tmp_path) == []
    assert failed == [str(stuck)]
    assert stuck.is_dir()


def _run(code: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter whose temporary directory is ``tmp``."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_a_process_ended_without_exit_handlers_is_swept_by_the_next(tmp_path: Path) -> None:
    """A process that enters a fake and ends with ``os._exit`` leaves its build, named for its
    pid; the first fake of the next process removes it (and keeps this live process's), and
    that process removes its own at exit."""
    killed = _run(
        f"""
        import os
        from fi_compat.testing import fake_flashinfer
        with fake_flashinfer({RELEASE!r}):
            import flashinfer.comm
            print(os.getpid(), flush=True)
            os._exit(0)
        """,
        tmp_path,
    )
    assert (killed.returncode, killed.stderr) == (0, "")
    pid = int(killed.stdout)
    left = list(tmp_path.glob(f"fake-flashinfer-{pid}-{RELEASE}-*"))
    assert len(left) == 1
    assert (left[0] / "flashinfer" / "__init__.py").is_file()
    mine = _leftover(tmp_path, os.getpid())

    nxt = _run(
        f"""
        from fi_compat.testing import fake_flashinfer
        with fake_flashinfer({RELEASE!r}):
            import flashinfer.comm
        """,
        tmp_path,
    )
    assert (nxt.returncode, nxt.stderr) == (0, "")
    assert not left[0].exists()
    assert _fakes(tmp_path) == [mine.name]
