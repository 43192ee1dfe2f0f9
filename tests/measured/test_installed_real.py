"""The day-one path is honest: the installed flashinfer-python, set aside with
``FI_COMPAT_UNRECORDED`` and measured on this machine by the package's own probes, gives
exactly the shipped ``reach``, ``layers`` and ``sizes`` entries (issue 49).

Each answer is taken in a fresh interpreter sharing one cache: the first measures on first
use (the three probes, side by side), the second reads the cache and starts no subprocess,
and ``fi-compat measure`` then finds everything cached.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fi_compat._local import CACHE_ENV, UNRECORDED_ENV
from fi_compat._measured import load
from fi_compat._measured.installed import AUTO_ENV, MEASUREMENTS

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]

#: Every reader's view of the installed release, as JSON; with ``no-subprocess``, starting
#: any subprocess fails the run.
READ = """
import json, subprocess, sys
if sys.argv[2] == "no-subprocess":
    def refuse(*args, **kwargs):
        raise AssertionError(f"a subprocess was started: {args!r}")
    subprocess.run = subprocess.Popen = refuse
from fi_compat._measured import releases
print(json.dumps({m: releases(m).get(sys.argv[1]) for m in ("reach", "layers", "sizes")}))
"""
TIMEOUT = 600


def _release() -> str:
    release = importlib.metadata.version("flashinfer-python")
    for measurement in MEASUREMENTS:
        assert release in load(measurement)["releases"], (
            f"fi-compat ships no {measurement} for {release}"
        )
    return release


def _run(argv: list[str], cache: Path, release: str) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in (CACHE_ENV, UNRECORDED_ENV, AUTO_ENV)
    }
    env.update({CACHE_ENV: str(cache), UNRECORDED_ENV: release})
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, Any]]:
    """The cache after a first use measured the set-aside release, and what it answered."""
    cache = tmp_path_factory.mktemp("measured-cache")
    release = _release()
    done = _run(["-c", textwrap.dedent(READ), release, "measure"], cache, release)
    assert done.returncode == 0, done.stderr
    return cache, release, json.loads(done.stdout)


@pytest.mark.parametrize("measurement", MEASUREMENTS)
def test_first_use_measures_the_shipped_entry(
    measured: tuple[Path, str, dict[str, Any]], measurement: str
) -> None:
    _cache, release, answers = measured
    shipped = load(measurement)["releases"][release]  # type: ignore[arg-type]
    assert answers[measurement] == shipped
    if measurement == "layers":  # a legacy call's arguments are placed in their order
        assert list(answers[measurement]["arguments"]) == list(shipped["arguments"])


def test_a_later_process_reads_the_cache_and_starts_no_probe(
    measured: tuple[Path, str, dict[str, Any]],
) -> None:
    cache, release, answers = measured
    done = _run(["-c", textwrap.dedent(READ), release, "no-subprocess"], cache, release)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == answers
    kept = sorted(path.name for path in (cache / "measured").glob("*/*.json"))
    assert kept == ["layers.json", "reach.json", "sizes.json"]


def test_the_command_finds_it_measured(measured: tuple[Path, str, dict[str, Any]]) -> None:
    cache, release, _answers = measured
    done = _run(["-m", "fi_compat", "measure", "--json"], cache, release)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["flashinfer"]["version"] == release
    assert document["ok"] is True
    statuses = {name: facts["status"] for name, facts in document["measurements"].items()}
    assert statuses == dict.fromkeys(MEASUREMENTS, "cached")
    assert all(Path(facts["path"]).is_file() for facts in document["measurements"].values())


def test_without_the_switch_the_shipped_release_is_not_measured(tmp_path: Path) -> None:
    release = _release()
    env = {key: value for key, value in os.environ.items() if key != UNRECORDED_ENV}
    env[CACHE_ENV] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "fi_compat", "measure"],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"flashinfer {release} at " in done.stdout
    assert "fi-compat ships its measurements: nothing to measure here" in done.stdout
    assert not (tmp_path / "measured").exists()
