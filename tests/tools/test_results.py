"""``tools.results``: a subprocess run is made once per input, and answered as it ran.

Every test here runs a small script of its own in a directory the run owns (so its path is
keyed as a placeholder, not as a temporary path) against a result store of the test's own.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from coverage import Coverage, CoverageData

from tools import results
from tools.results import CACHE_SWITCH, ResultCache, coverage_data_file

#: Prints something no second run could print, and what its directory holds.
SCRIPT = """\
import pathlib, sys, uuid
here = pathlib.Path.cwd()
print(uuid.uuid4().hex, here, sorted(p.name for p in here.iterdir()))
if "write" in sys.argv:
    (here / "out").mkdir(exist_ok=True)
    (here / "out" / "made.txt").write_text(f"made by {sys.argv[-1]}")
if "name" in sys.argv:
    (here / "named.txt").write_text(f"made in {here}")
sys.exit(int(sys.argv[1]) if sys.argv[1:2] and sys.argv[1].isdigit() else 0)
"""


def _work(tmp_path: Path, name: str, script: str = SCRIPT) -> Path:
    work = tmp_path / name
    work.mkdir()
    (work / "script.py").write_text(script)
    return work


def _run(
    store: ResultCache, work: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return store.run(
        [sys.executable, str(work / "script.py"), *args],
        env=env if env is not None else {"PATH": "/usr/bin:/bin"},
        cwd=work,
        timeout=60,
    )


@pytest.fixture
def store(tmp_path: Path) -> ResultCache:
    return ResultCache(tmp_path / "results")


def test_the_same_inputs_give_the_kept_result_without_running(
    store: ResultCache, tmp_path: Path
) -> None:
    first = _run(store, _work(tmp_path, "a"))
    again = _run(store, tmp_path / "a")
    assert first.returncode == again.returncode == 0
    assert again.stdout == first.stdout  # the uuid of the first run: not run again


def test_a_run_in_another_directory_with_the_same_files_is_the_same_run(
    store: ResultCache, tmp_path: Path
) -> None:
    first = _run(store, _work(tmp_path, "a"), "write", "me")
    moved = _work(tmp_path, "b")
    again = _run(store, moved, "write", "me")
    token, where, _ = again.stdout.split(" ", 2)
    assert token == first.stdout.split(" ", 1)[0]
    # The paths the run printed are the directory it was asked about, and the files it left
    # are there.
    assert where == str(moved)
    assert (moved / "out" / "made.txt").read_text() == "made by me"


def test_a_run_that_writes_its_directory_s_path_into_a_file_is_not_kept(
    store: ResultCache, tmp_path: Path
) -> None:
    first = _run(store, _work(tmp_path, "a"), "name")
    again = _run(store, _work(tmp_path, "b"), "name")
    assert first.stdout.split(" ", 1)[0] != again.stdout.split(" ", 1)[0]
    assert (tmp_path / "b" / "named.txt").read_text() == f"made in {tmp_path / 'b'}"


def test_each_input_is_part_of_the_key(store: ResultCache, tmp_path: Path) -> None:
    work = _work(tmp_path, "a")
    tokens = {_run(store, work).stdout.split(" ", 1)[0]}
    tokens.add(_run(store, work, "0").stdout.split(" ", 1)[0])  # another argument
    tokens.add(_run(store, work, env={"PATH": "/bin"}).stdout.split(" ", 1)[0])  # environment
    (work / "extra.txt").write_text("x")  # what the run's directory holds
    tokens.add(_run(store, work).stdout.split(" ", 1)[0])
    assert len(tokens) == 4


def test_a_failed_run_is_kept_as_it_failed(store: ResultCache, tmp_path: Path) -> None:
    first = _run(store, _work(tmp_path, "a"), "3")
    again = _run(store, _work(tmp_path, "b"), "3")
    assert first.returncode == again.returncode == 3
    assert again.stdout.split(" ", 1)[0] == first.stdout.split(" ", 1)[0]


def test_a_run_that_names_a_temporary_path_of_its_own_is_made_each_time(
    store: ResultCache, tmp_path: Path
) -> None:
    work = _work(tmp_path, "a")
    env = {"PATH": "/usr/bin:/bin", "SOMEWHERE": str(tmp_path / "elsewhere")}
    first = _run(store, work, env=env)
    again = _run(store, work, env=env)
    assert first.stdout.split(" ", 1)[0] != again.stdout.split(" ", 1)[0]
    assert not store.root.exists()


def test_the_switch_turns_the_store_off(
    store: ResultCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_SWITCH, "off")
    work = _work(tmp_path, "a")
    first = _run(store, work)
    again = _run(store, work)
    assert first.stdout != again.stdout
    assert not store.root.exists()


def test_a_run_that_times_out_is_not_kept(store: ResultCache, tmp_path: Path) -> None:
    work = _work(tmp_path, "a", "import time\ntime.sleep(30)\n")
    with pytest.raises(subprocess.TimeoutExpired):
        store.run([sys.executable, str(work / "script.py")], env={}, cwd=work, timeout=0.5)
    assert not store.root.exists()


def test_a_damaged_entry_is_made_again(store: ResultCache, tmp_path: Path) -> None:
    first = _run(store, _work(tmp_path, "a"))
    (entry,) = store.root.rglob("*.json.gz")
    entry.write_bytes(entry.read_bytes()[:10])
    again = _run(store, _work(tmp_path, "b"))
    assert again.stdout.split(" ", 1)[0] != first.stdout.split(" ", 1)[0]


# ------------------------------------------------------------------------------ coverage

MODULE = """\
def pick(flag):
    if flag:
        return "yes"
    return "no"
"""


def _coverage_env(work: Path, data_dir: Path) -> dict[str, str]:
    config = Coverage(data_file=str(data_dir / ".coverage"), branch=True).config
    config.source = [str(work)]
    config.parallel = True
    return {
        "PATH": "/usr/bin:/bin",
        results.COVERAGE_CONFIG: config.serialize(),
    }


def _measured(data_dir: Path) -> dict[str, set[tuple[int, int]]]:
    found: dict[str, set[tuple[int, int]]] = {}
    for path in data_dir.glob(".coverage.*"):
        data = CoverageData(basename=str(path))
        data.read()
        for name in data.measured_files():
            found.setdefault(Path(name).name, set()).update(data.arcs(name) or ())
    return found


def test_a_kept_run_s_coverage_is_saved_again_where_the_asking_run_measures(
    store: ResultCache, tmp_path: Path
) -> None:
    work = _work(tmp_path, "a", "import mod\nprint(mod.pick(True))\n")
    (work / "mod.py").write_text(MODULE)
    first_data, second_data = tmp_path / "first", tmp_path / "second"
    first_data.mkdir()
    second_data.mkdir()
    first = _run(store, work, env=_coverage_env(work, first_data))
    again = _run(store, work, env=_coverage_env(work, second_data))
    assert first.stdout == again.stdout == "yes\n"
    measured = _measured(first_data)
    assert measured["mod.py"]  # the run measured its module, into the asking run's data
    assert _measured(second_data) == measured  # and the kept run gave the same again


def test_a_result_kept_unmeasured_is_made_again_for_a_measured_run(
    store: ResultCache, tmp_path: Path
) -> None:
    work = _work(tmp_path, "a", "import mod, uuid\nprint(mod.pick(False), uuid.uuid4())\n")
    (work / "mod.py").write_text(MODULE)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    plain = _run(store, work)
    measured = _run(store, work, env={"PATH": "/usr/bin:/bin", **_coverage_env(work, data_dir)})
    assert plain.stdout != measured.stdout
    assert _measured(data_dir)["mod.py"]


def test_the_coverage_channel_is_read_as_coverage_writes_it(tmp_path: Path) -> None:
    env = _coverage_env(tmp_path, tmp_path / "data")
    found = coverage_data_file(env)
    assert found is not None
    assert found[1] == tmp_path / "data" / ".coverage"
    assert coverage_data_file({}) is None
    assert json.loads(base64.b64decode(env[results.COVERAGE_CONFIG]))["branch"] is True


# ------------------------------------------------------------------- the run's summary

pytest_plugins = ["pytester"]

#: Two test files, each making the same run twice with a store of the project's own: the
#: first run of each is made and kept (or answered, if the other file kept it first).
TWICE = """\
import sys
from pathlib import Path
from tools.results import ResultCache

def test_twice(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.py").write_text("print('hello')")
    store = ResultCache(Path(__file__).parent / "store")
    for _ in range(2):
        done = store.run([sys.executable, str(work / "script.py")], env={}, cwd=work, timeout=60)
        assert done.stdout == "hello\\n"
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_run_ends_with_how_many_runs_were_answered(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(results.ROOT))
    monkeypatch.delenv(CACHE_SWITCH, raising=False)
    pytester.makepyfile(test_one=TWICE, test_two=TWICE)
    result = pytester.runpytest_subprocess(
        "-p", "tests.support.kept_runs", "-p", "no:cacheprovider", *workers
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*runs made once per input*", "tools/results.py: *"])
    line = result.stdout.str().split("tools/results.py: ", 1)[1].splitlines()[0]
    counts = {
        outcome: int(count)
        for count, outcome in re.findall(r"(\d+) (answered|made and kept|made, not)", line)
    }
    # Every worker's runs are counted: four runs, the first of each file's pair made (the
    # two files' first runs may race on two workers), the rest answered.
    assert sum(counts.values()) == 4, line
    assert counts["made and kept"] in ({1, 2} if workers else {1}), line
    assert counts["answered"] == 4 - counts["made and kept"]


def test_the_store_keeps_to_its_budget_the_least_recently_used_going_first(
    tmp_path: Path,
) -> None:
    store = ResultCache(tmp_path / "results", budget=10**9)
    works = [_work(tmp_path, name, SCRIPT + f"# {name}\n") for name in "abcd"]
    tokens = []
    for when, work in enumerate(works):
        tokens.append(_run(store, work).stdout.split(" ", 1)[0])
        (entry,) = sorted(store.root.rglob("*.json.gz"), key=lambda p: p.stat().st_mtime_ns)[-1:]
        os.utime(entry, (1000 + when, 1000 + when))  # written in this order, a second apart
    assert _run(store, works[0]).stdout.split(" ", 1)[0] == tokens[0]  # used: now the newest
    # A budget of three entries: the next entry takes the store over it, and it is pruned to
    # three quarters of it, the least recently used going first (b, c and d, unused since).
    sizes = [path.stat().st_size for path in store.root.rglob("*.json.gz")]
    store.budget = 3 * max(sizes) + 1
    _run(store, _work(tmp_path, "e"))
    assert len(list(store.root.rglob("*.json.gz"))) == 2
    assert _run(store, works[0]).stdout.split(" ", 1)[0] == tokens[0]  # kept
    assert _run(store, works[1]).stdout.split(" ", 1)[0] != tokens[1]  # gone: made again
