"""The release cache (tools/releases.py): one way to fetch a published wheel, said when it is
fetched, and the suite's plugin that prints it (tests/support/downloads.py)."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from packaging.tags import sys_tags

from tools import releases
from tools.releases import LOGGER, ReleaseCache, describe_size

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
WHEEL = "demo-1.0-py3-none-any.whl"


class Pip:
    """Stands in for ``pip download``: records each command, writes the wheel it names."""

    def __init__(self, size: int = 1500, returncode: int = 0, output: str = "") -> None:
        self.commands: list[list[str]] = []
        self.size = size
        self.returncode = returncode
        self.output = output

    def __call__(self, command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.commands.append(command)
        if self.returncode == 0:
            destination = Path(command[command.index("--dest") + 1])
            (destination / WHEEL).write_bytes(b"x" * self.size)
        return subprocess.CompletedProcess(command, self.returncode, "", self.output)


def _offline(request: Any, timeout: float = 0) -> Any:
    raise OSError("no registry in this test")


@pytest.fixture(autouse=True)
def no_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here reaches the real registry: the direct wheel fetch fails, so pip's
    stand-in answers, unless a test puts a stand-in registry in its place."""
    monkeypatch.setattr("tools.releases.urllib.request.urlopen", _offline)


@pytest.fixture
def pip(monkeypatch: pytest.MonkeyPatch) -> Pip:
    fake = Pip()
    monkeypatch.setattr("tools.releases.subprocess.run", fake)
    # These downloads are pretend: not this run's, so the suite's own line leaves them out.
    monkeypatch.setattr(LOGGER, "handlers", [])
    return fake


def test_a_download_is_announced_once_with_its_size(
    pip: Pip, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = ReleaseCache(tmp_path)
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        first = cache.download("demo==1.0", wheel_only=True)
        again = cache.download("demo==1.0", wheel_only=True)
    assert first == again == tmp_path / "downloads" / WHEEL
    assert len(pip.commands) == 1  # the second call is the cache's
    [record] = [r for r in caplog.records if r.name == LOGGER.name]
    assert record.getMessage().startswith(f"downloaded {WHEEL} (1.5 kB) in ")
    assert record.download[:2] == (WHEEL, 1500)  # type: ignore[attr-defined]


def test_threads_asking_for_one_file_download_it_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started = threading.Event()
    slow = Pip()

    def pip_that_waits(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        started.set()
        time.sleep(0.3)  # long enough for the second thread to arrive while this one runs
        return slow(command, **kwargs)

    monkeypatch.setattr("tools.releases.subprocess.run", pip_that_waits)
    monkeypatch.setattr(LOGGER, "handlers", [])
    cache = ReleaseCache(tmp_path)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(cache.download, "demo==1.0", wheel_only=True)
        started.wait(5)
        second = pool.submit(cache.download, "demo==1.0", wheel_only=True)
        assert first.result() == second.result()
    assert len(slow.commands) == 1


def test_a_wheel_for_another_python_is_asked_for_by_its_version(pip: Pip, tmp_path: Path) -> None:
    ReleaseCache(tmp_path).download("demo==1.0", wheel_only=False, python="3.11")
    [command] = pip.commands
    assert command[command.index("--python-version") + 1] == "3.11"
    # pip takes --python-version only for binary-only downloads; python= implies a wheel
    assert command[command.index("--only-binary") + 1] == ":all:"
    assert "--no-binary" not in command


def test_the_running_python_is_not_named(pip: Pip, tmp_path: Path) -> None:
    ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True)
    assert "--python-version" not in pip.commands[0]


def test_a_cached_wheel_serves_every_python(pip: Pip, tmp_path: Path) -> None:
    ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True)
    ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True, python="3.12")
    assert len(pip.commands) == 1


@pytest.mark.parametrize(
    ("output", "error", "match"),
    [
        # the registry answered: a real failure
        (
            "ERROR: No matching distribution found for demo==1.0",
            releases.DownloadError,
            "No matching distribution",
        ),
        # it did not: the caller may skip, saying so
        ("Temporary failure in name resolution", releases.RegistryUnreachableError, "reach"),
    ],
    ids=["refused", "unreachable"],
)
def test_a_failed_download_says_which_failure_it_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, output: str, error: type, match: str
) -> None:
    monkeypatch.setattr("tools.releases.subprocess.run", Pip(returncode=1, output=output))
    monkeypatch.setattr(LOGGER, "handlers", [])
    with pytest.raises(error, match=match):
        ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True)


@pytest.mark.parametrize(
    ("size", "said"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (1500, "1.5 kB"),
        (999_949, "999.9 kB"),
        (999_950, "1.0 MB"),
        (39_063_923, "39.1 MB"),
        (336_361_138, "336.4 MB"),
        (999_949_999, "999.9 MB"),
        (999_950_000, "1.0 GB"),
        (12_400_000_000, "12.4 GB"),
    ],
)
def test_sizes_read_as_people_read_them(size: int, said: str) -> None:
    assert describe_size(size) == said


# ------------------------------------------------------------------ the suite's download lines

DOWNLOADING = """
import subprocess
from pathlib import Path

import pytest

from tools.releases import ReleaseCache


def _pip(command, **_):
    destination = Path(command[command.index("--dest") + 1])
    name = command[-1].replace("==", "-") + "-py3-none-any.whl"
    (destination / name).write_bytes(b"x" * 2_500_000)
    return subprocess.CompletedProcess(command, 0, "", "")


def _offline(request, timeout=0):
    raise OSError("no registry in this test")


@pytest.mark.parametrize("name", ["alpha", "beta"])
def test_fetches(name, tmp_path, monkeypatch):
    monkeypatch.setattr("tools.releases.urllib.request.urlopen", _offline)
    monkeypatch.setattr("tools.releases.subprocess.run", _pip)
    ReleaseCache(tmp_path).download(f"{name}==1.0", wheel_only=True)


def test_warm(tmp_path):
    pass
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_each_download_is_said_as_it_happens_and_added_up(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_engine=textwrap.dedent(DOWNLOADING))
    result = pytester.runpytest_subprocess(
        "-p", "tests.support.downloads", "-p", "no:cacheprovider", "-q", *workers
    )
    assert result.ret == 0
    said = sorted(line for line in result.errlines if line.startswith("[download]"))
    assert [line.split(" in ")[0] for line in said] == [
        "[download] downloaded alpha-1.0-py3-none-any.whl (2.5 MB)",
        "[download] downloaded beta-1.0-py3-none-any.whl (2.5 MB)",
    ]
    result.stdout.fnmatch_lines(["*- downloads -*", "2 files downloaded during this run (5.0 MB*"])


def test_a_run_that_downloads_nothing_says_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_engine="def test_warm():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "tests.support.downloads", "-q")
    assert result.ret == 0
    assert "download" not in result.stdout.str() + result.stderr.str()


def test_the_suite_runs_with_both_plugins(request: pytest.FixtureRequest) -> None:
    manager = request.config.pluginmanager
    assert manager.has_plugin("tests.support.downloads")
    assert manager.has_plugin("tests.support.skips")
    assert sys.modules["tests.support.downloads"].LOGGER is LOGGER


class _Registry:
    """Stands in for the registry's simple index (JSON) and its file host."""

    def __init__(
        self,
        files: dict[str, bytes],
        digest: dict[str, str] | None = None,
        extra: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        import hashlib

        self.files = files
        self.digest = {name: hashlib.sha256(d).hexdigest() for name, d in files.items()}
        self.digest.update(digest or {})
        self.extra = extra or {}  # more keys of a file's entry: yanked, requires-python
        self.asked: list[str] = []

    def __call__(self, request: Any, timeout: float = 0) -> Any:
        import io
        import json

        url = request if isinstance(request, str) else request.full_url
        self.asked.append(url)
        if url.startswith("https://pypi.org/simple/"):
            listing = [
                {
                    "filename": name,
                    "url": f"https://files/{name}",
                    "hashes": {"sha256": digest},
                    **self.extra.get(name, {}),
                }
                for name, digest in self.digest.items()
            ]
            return io.BytesIO(json.dumps({"files": listing}).encode())
        return io.BytesIO(self.files[url.removeprefix("https://files/")])


def test_a_release_without_a_wheel_is_fetched_without_building_its_metadata(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # pip finds no wheel; building the sdist's metadata (pip's own way to keep an sdist)
    # would install its build requirements, and only the file is wanted.
    pip = Pip(returncode=1, output="ERROR: No matching distribution found for demo==1.0")
    monkeypatch.setattr("tools.releases.subprocess.run", pip)
    registry = _Registry({"demo-1.0.tar.gz": b"the sdist", "demo-1.1.tar.gz": b"another"})
    monkeypatch.setattr("tools.releases.urllib.request.urlopen", registry)
    monkeypatch.setattr(LOGGER, "handlers", [])
    found = ReleaseCache(tmp_path).download("demo==1.0", wheel_only=False)
    assert found == tmp_path / "downloads" / "demo-1.0.tar.gz"
    assert found.read_bytes() == b"the sdist"
    [command] = pip.commands  # the wheel only: no metadata build
    assert command[command.index("--only-binary") + 1] == ":all:"
    assert registry.asked[-1] == "https://files/demo-1.0.tar.gz"


def test_an_sdist_that_does_not_match_its_digest_is_not_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pip = Pip(returncode=1, output="ERROR: No matching distribution found for demo==1.0")
    monkeypatch.setattr("tools.releases.subprocess.run", pip)
    registry = _Registry({"demo-1.0.tar.gz": b"tampered"}, {"demo-1.0.tar.gz": "0" * 64})
    monkeypatch.setattr("tools.releases.urllib.request.urlopen", registry)
    monkeypatch.setattr(LOGGER, "handlers", [])
    with pytest.raises(releases.DownloadError, match="No matching distribution") as raised:
        ReleaseCache(tmp_path).download("demo==1.0", wheel_only=False)
    assert "does not match its published sha256" in str(raised.value)  # the listing's reason
    assert not (tmp_path / "downloads" / "demo-1.0.tar.gz").exists()
    # after the digest failed, pip was asked for the sdist too, as before
    assert any(":none:" in command for command in pip.commands)


# ------------------------------------------------------------------ wheels from the listing

#: This interpreter's best tag and its platform: the names below fit whichever Python runs.
BEST = next(iter(sys_tags()))


def _wheels(*names: str, **extra: dict[str, Any]) -> _Registry:
    return _Registry({name: name.encode() for name in names}, extra=extra)


def test_a_wheel_comes_from_the_listing_checked_and_said_without_pip(
    pip: Pip, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = _wheels("demo-1.0-py3-none-any.whl", "demo-1.1-py3-none-any.whl", "demo-1.0.tar.gz")
    monkeypatch.setattr("tools.releases.urllib.request.urlopen", registry)
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        found = ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True)
    assert found == tmp_path / "downloads" / "demo-1.0-py3-none-any.whl"
    assert found.read_bytes() == b"demo-1.0-py3-none-any.whl"
    assert pip.commands == []
    assert registry.asked == ["https://pypi.org/simple/demo/", f"https://files/{found.name}"]
    [record] = [r for r in caplog.records if r.name == LOGGER.name]
    assert record.download[:2] == (found.name, len(found.name))  # type: ignore[attr-defined]


def test_the_wheel_is_the_one_pip_would_choose(
    pip: Pip, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    best = f"demo-1.0-{BEST.interpreter}-{BEST.abi}-{BEST.platform}.whl"
    names = ["demo-1.0-py3-none-any.whl", best, "demo-1.0-cp27-cp27m-win32.whl"]
    monkeypatch.setattr("tools.releases.urllib.request.urlopen", _wheels(*names))
    assert ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True).name == best
    assert pip.commands == []


def test_a_wheel_for_another_python_is_chosen_for_that_python(
    pip: Pip, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other = {"3.10": "3.12", "3.11": "3.12"}.get(f"{sys.version_info[0]}.{sys.version_info[1]}")
    other = other or "3.10"
    tag = "cp" + other.replace(".", "")
    theirs = f"demo-1.0-{tag}-{tag}-{BEST.platform}.whl"
    ours = f"demo-1.0-{BEST.interpreter}-{BEST.abi}-{BEST.platform}.whl"
    monkeypatch.setattr("tools.releases.urllib.request.urlopen", _wheels(ours, theirs))
    found = ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True, python=other)
    assert found.name == theirs
    assert pip.commands == []


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        # a higher build tag first, as pip ranks builds
        ({}, "demo-1.0-2-py3-none-any.whl"),
        # not yanked before yanked (true, or a reason, PEP 691), whatever the build
        ({"demo-1.0-2-py3-none-any.whl": {"yanked": "broken"}}, "demo-1.0-1-py3-none-any.whl"),
        ({"demo-1.0-2-py3-none-any.whl": {"yanked": ""}}, "demo-1.0-1-py3-none-any.whl"),
        ({"demo-1.0-2-py3-none-any.whl": {"yanked": True}}, "demo-1.0-1-py3-none-any.whl"),
        ({"demo-1.0-2-py3-none-any.whl": {"yanked": False}}, "demo-1.0-2-py3-none-any.whl"),
        # a Requires-Python that leaves this Python out is not for it
        ({"demo-1.0-2-py3-none-any.whl": {"requires-python": "<3"}}, "demo-1.0-1-py3-none-any.whl"),
    ],
    ids=["build", "yanked", "yanked-no-reason", "yanked-true", "not-yanked", "requires-python"],
)
def test_builds_yanked_files_and_requires_python_rank_as_pip_ranks_them(
    pip: Pip,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    extra: dict[str, dict[str, Any]],
    expected: str,
) -> None:
    names = ("demo-1.0-1-py3-none-any.whl", "demo-1.0-2-py3-none-any.whl")
    registry = _Registry({name: name.encode() for name in names}, extra=extra)
    monkeypatch.setattr("tools.releases.urllib.request.urlopen", registry)
    assert ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True).name == expected
    assert pip.commands == []


@pytest.mark.parametrize(
    "registry",
    [
        # no wheel this interpreter takes: pip says why
        _wheels("demo-1.0-cp27-cp27m-win32.whl", "demo-1.0.tar.gz"),
        # a file that does not match its published digest is never kept
        _Registry(
            {"demo-1.0-1-py3-none-any.whl": b"tampered"}, {"demo-1.0-1-py3-none-any.whl": "0"}
        ),
        # a listing that is not what PEP 691 says
        _Registry(
            {"demo-1.0-py3-none-any.whl": b"x"},
            extra={"demo-1.0-py3-none-any.whl": {"hashes": None}},
        ),
        _Registry({"demo-1.0-garbage.whl": b"x", "demo-1.0-py3-none-any.whl-": b"y"}),
        _wheels(
            "demo-1.0-py3-none-any.whl",
            **{"demo-1.0-py3-none-any.whl": {"requires-python": ">=3.x!"}},
        ),
    ],
    ids=["no-wheel-fits", "digest", "no-hashes", "bad-names", "bad-requires-python"],
)
def test_pip_answers_whatever_the_listing_cannot(
    pip: Pip, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, registry: _Registry
) -> None:
    monkeypatch.setattr("tools.releases.urllib.request.urlopen", registry)
    found = ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True)
    assert found == tmp_path / "downloads" / WHEEL  # pip's stand-in wrote it
    assert len(pip.commands) == 1
    assert sorted(p.name for p in (tmp_path / "downloads").iterdir()) == [WHEEL]


class _Broken(io.BytesIO):
    """A download that breaks after its first megabyte."""

    def read(self, size: int | None = -1) -> bytes:
        if self.tell():
            raise ConnectionResetError("the connection broke")
        return super().read(size)


def test_a_download_that_breaks_leaves_nothing_and_pip_tries(
    pip: Pip, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    registry = _wheels("demo-1.0-1-py3-none-any.whl")  # not pip's stand-in's name

    def broken(request: Any, timeout: float = 0) -> Any:
        answer = registry(request, timeout)
        url = request if isinstance(request, str) else request.full_url
        return answer if "simple" in url else _Broken(b"x" * (3 << 20))

    monkeypatch.setattr("tools.releases.urllib.request.urlopen", broken)
    assert ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True).name == WHEEL
    assert len(pip.commands) == 1
    assert sorted(p.name for p in (tmp_path / "downloads").iterdir()) == [WHEEL]


@pytest.mark.parametrize("python", ["3.x", "three", "3..12"])
def test_a_python_that_is_no_version_is_left_to_pip(
    pip: Pip, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, python: str
) -> None:
    monkeypatch.setattr(
        "tools.releases.urllib.request.urlopen", _wheels("demo-1.0-py3-none-any.whl")
    )
    ReleaseCache(tmp_path).download("demo==1.0", wheel_only=True, python=python)
    [command] = pip.commands  # pip was asked, with that Python, and says what it makes of it
    assert command[command.index("--python-version") + 1] == python
