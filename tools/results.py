"""Subprocess results kept by what they were computed from: a run is made once per input.

Measuring a published release (``tools.reach``, ``tools.layers``, ``tools.sizes``), importing
one for the real-release matrix (``tests/support/release_harness.py``) or modelling one from
its files (``tests/support/day_one.py``) starts a fresh interpreter whose output is a pure
function of what it reads: the release's published files, this checkout's sources, the
interpreter and the packages installed beside it, its arguments and environment, and the
files already in the directories it works in. :class:`ResultCache` keys each such run by a
digest of all of them, and keeps what it gave: exit status, both streams, the files it left
in its working directories, and, when the suite measures coverage, the lines and branches the
run executed. A run whose inputs are unchanged is answered from there, exactly as it ran, its
coverage counted as if it had run again; a change to any input is a new key, so a run is
never answered for inputs it was not made from.

What the key holds:

* the interpreter (its version and cache tag) and every installed distribution with its
  version, fi-compat's own excepted (its sources are hashed instead);
* the content of every file under ``fi_compat/``, ``tools/`` and ``tests/support/`` (what a
  run of this checkout can execute), whatever the checkout's path;
* the arguments and every environment variable the caller sets or that can change what a
  release or fi-compat does (``FI_COMPAT_*``, ``FLASHINFER_*``, ``PYTHON*``, ``CUDA*``,
  ``TORCH*``, ``TRITON*``, ``LD_*``, the locale), paths written relative to the checkout,
  the release cache (whose files are published files, named as published and never changed)
  and the run's own directories;
* the files in the run's own directories before it starts.

The streams are kept with those paths as placeholders and given back with the asking run's;
the files a run leaves are kept byte for byte, so a run that writes one of its directories'
paths into a file is not kept. Nor is a run that names any other temporary path (its input
could not be told from another's), or one that timed out or was killed.
``FI_COMPAT_RESULT_CACHE=off`` makes every run afresh (nothing read, nothing written).

The results live under the release cache (``<release cache>/results``), so an empty release
cache is an empty result cache too; they keep to a budget (:data:`BUDGET`), the least
recently used going first.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.releases import cache_root

__all__ = ["BUDGET", "CACHE_SWITCH", "LOGGER", "ResultCache", "coverage_data_file"]

#: Says each run's outcome at INFO, with ``extra={"kept_run": (outcome, seconds)}``: outcome
#: ``answered`` (from a kept result; seconds: what its run took), ``kept`` (made and kept)
#: or ``made`` (made, not keepable); the suite adds them up (tests/support/kept_runs.py).
LOGGER = logging.getLogger("tools.results")

ROOT = Path(__file__).resolve().parent.parent
#: Set to ``off`` to make every run afresh.
CACHE_SWITCH = "FI_COMPAT_RESULT_CACHE"
#: Bumped when what an entry holds, or what its key means, changes.
SCHEMA = 1
#: The trees whose every file a run of this checkout may execute or read.
SOURCE_TREES = ("fi_compat", "tools", "tests/support")
#: Environment variables that are part of a run's input wherever they come from.
KEYED_PREFIXES = ("FI_COMPAT_", "FLASHINFER_", "PYTHON", "CUDA", "TORCH", "TRITON", "LD_")
KEYED_NAMES = frozenset({"LANG", "LC_ALL", "LC_CTYPE", "TZ"})
#: Coverage's channel to subprocesses (coverage 7.10+ ``patch = ["subprocess"]``): where
#: the run saves what it executed. Not an input: a run measured or not does the same.
COVERAGE_CONFIG = "COVERAGE_PROCESS_CONFIG"


@dataclass(frozen=True)
class _Places:
    """The paths a run's text may name, each with the placeholder it is keyed and kept under."""

    pairs: tuple[tuple[str, str], ...]  # (path, placeholder), the longest path first

    @classmethod
    def of(cls, own: Sequence[Path]) -> _Places:
        named = [(str(path), f"<dir{index}>") for index, path in enumerate(own)]
        named += [(str(ROOT), "<checkout>"), (str(cache_root()), "<releases>")]
        named += [(sys.prefix, "<venv>"), (sys.base_prefix, "<python>")]
        return cls(tuple(sorted(named, key=lambda pair: -len(pair[0]))))

    def relative(self, text: str) -> str:
        for path, placeholder in self.pairs:
            text = text.replace(path, placeholder)
        return text

    def absolute(self, text: str) -> str:
        for path, placeholder in self.pairs:
            text = text.replace(placeholder, path)
        return text


def coverage_data_file(env: Mapping[str, str]) -> tuple[dict[str, Any], Path] | None:
    """The coverage configuration a subprocess started with ``env`` would measure under,
    and the data file it would save into; None when it would not be measured."""
    serialized = env.get(COVERAGE_CONFIG)
    if not serialized:
        return None
    config: dict[str, Any] = json.loads(base64.b64decode(serialized.encode()).decode())
    data_file = config.get("data_file")
    return (config, Path(data_file)) if isinstance(data_file, str) else None


#: What the kept results may take on disk before the least recently used go.
BUDGET = 2 * 1024**3


class ResultCache:
    """Subprocess runs answered from their inputs' digest (see the module docstring).

    The store keeps to ``budget`` bytes: after each new entry, the entries least recently
    written or answered from go until it takes at most three quarters of it.
    """

    def __init__(self, root: Path | None = None, *, budget: int = BUDGET) -> None:
        self.root = root if root is not None else cache_root() / "results"
        self.budget = budget

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        timeout: float,
        own: Sequence[Path] = (),
    ) -> subprocess.CompletedProcess[str]:
        """``subprocess.run(argv, cwd=cwd, env=env, timeout=timeout)`` with text output, or
        the kept result of the same run.

        ``own`` are the directories the run works in (``cwd`` always is one): their files
        before the run are part of its input, their files after it part of its result. Raises
        what :func:`subprocess.run` raises (``TimeoutExpired``, ``OSError``).
        """
        dirs = [cwd, *own]
        places = _Places.of(dirs)
        key = self._key(argv, env, places, dirs) if _enabled() else None
        measured = coverage_data_file(env)
        if key is not None:
            kept = self._read(key)
            if kept is not None and (measured is None or kept.get("coverage") is not None):
                _say("answered", float(kept.get("seconds", 0.0)), argv)
                return self._replay(kept, argv, places, dirs, measured)
        started = time.monotonic()
        done, coverage = _run_measured(argv, env, cwd, timeout, measured)
        seconds = time.monotonic() - started
        outcome = "made"
        if key is not None and done.returncode >= 0:
            files = [_snapshot(path) for path in dirs]
            if not _names_a_directory(files, dirs):
                self._write(key, done, places, files, coverage, seconds)
                outcome = "kept"
        _say(outcome, seconds, argv)
        if measured is not None and coverage:
            _save_coverage(coverage, measured[1])
        return done

    # ------------------------------------------------------------------ the key

    def _key(
        self, argv: Sequence[str], env: Mapping[str, str], places: _Places, own: Sequence[Path]
    ) -> str | None:
        keyed_env = {
            name: places.relative(value)
            for name, value in sorted(env.items())
            if name != COVERAGE_CONFIG
            and (
                name.startswith(KEYED_PREFIXES)
                or name in KEYED_NAMES
                or os.environ.get(name) != value
            )
        }
        text = json.dumps(
            {
                "schema": SCHEMA,
                "world": _world(),
                "argv": [places.relative(arg) for arg in argv],
                "env": keyed_env,
                "own": [_tree_digest(path) for path in own],
            },
            sort_keys=True,
        )
        if tempfile.gettempdir() + os.sep in text:
            return None  # names a temporary path of its own: not told apart from another's
        return hashlib.sha256(text.encode()).hexdigest()

    # ------------------------------------------------------------------ the store

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json.gz"

    def _read(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        try:
            kept: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
            os.utime(path)  # recently used: the last to go
        except (OSError, ValueError, EOFError):
            return None  # absent, or half of a file from a run that was stopped: made again
        return kept if kept.get("schema") == SCHEMA else None

    def _prune(self) -> None:
        entries = []
        for path in self.root.glob("*/*.json.gz"):
            try:
                stat = path.stat()
            except OSError:  # gone meanwhile (another run pruned it)
                continue
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        if total <= self.budget:
            return
        for _, size, path in sorted(entries):
            if total <= self.budget * 3 // 4:
                break
            path.unlink(missing_ok=True)
            total -= size

    def _write(
        self,
        key: str,
        done: subprocess.CompletedProcess[str],
        places: _Places,
        files: list[dict[str, str]],
        coverage: dict[str, Any] | None,
        seconds: float,
    ) -> None:
        entry = {
            "schema": SCHEMA,
            "seconds": round(seconds, 3),
            "returncode": done.returncode,
            "stdout": places.relative(done.stdout),
            "stderr": places.relative(done.stderr),
            "files": files,
            "coverage": None if coverage is None else _relative_coverage(coverage),
        }
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as tmp:
            tmp.write(gzip.compress(json.dumps(entry).encode(), compresslevel=1))
        os.replace(tmp.name, path)  # whole entries only: concurrent runs may share the store
        self._prune()

    def _replay(
        self,
        kept: dict[str, Any],
        argv: Sequence[str],
        places: _Places,
        own: Sequence[Path],
        measured: tuple[dict[str, Any], Path] | None,
    ) -> subprocess.CompletedProcess[str]:
        for path, files in zip(own, kept["files"], strict=True):
            _restore(path, files)
        if measured is not None:
            _save_coverage(_absolute_coverage(kept["coverage"]), measured[1])
        return subprocess.CompletedProcess(
            list(argv),
            kept["returncode"],
            places.absolute(kept["stdout"]),
            places.absolute(kept["stderr"]),
        )


def _say(outcome: str, seconds: float, argv: Sequence[str]) -> None:
    LOGGER.info(
        "%s in %.1f s: %s",
        outcome,
        seconds,
        " ".join(argv[1:3]),
        extra={"kept_run": (outcome, seconds)},
    )


def _enabled() -> bool:
    return os.environ.get(CACHE_SWITCH, "").lower() not in {"off", "0", "no", "false"}


# ------------------------------------------------------------------------ the inputs


@functools.cache
def _world() -> dict[str, Any]:
    """The interpreter, the installed distributions and this checkout's sources."""
    distributions = sorted(
        {
            f"{dist.metadata['Name']}=={dist.version}"
            for dist in importlib.metadata.distributions()
            if dist.metadata["Name"] and dist.metadata["Name"].lower() != "fi-compat"
        }
    )
    return {
        "python": sys.version,
        "cache_tag": sys.implementation.cache_tag,
        "distributions": distributions,
        "sources": {tree: _tree_digest(ROOT / tree) for tree in SOURCE_TREES},
    }


def _files(root: Path) -> Iterable[Path]:
    if not root.is_dir():
        return []
    return sorted(
        path
        for path in root.rglob("*")
        if path.is_file() and "__pycache__" not in path.relative_to(root).parts
    )


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in _files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _snapshot(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): base64.b64encode(path.read_bytes()).decode()
        for path in _files(root)
    }


def _names_a_directory(files: Sequence[Mapping[str, str]], own: Sequence[Path]) -> bool:
    """Whether a file the run left names one of its directories: kept byte for byte, it
    would name the first run's directory to every later one, so such a run is not kept."""
    paths = [str(path).encode() for path in own]
    return any(
        path in base64.b64decode(data)
        for snapshot in files
        for data in snapshot.values()
        for path in paths
    )


def _restore(root: Path, files: Mapping[str, str]) -> None:
    for path in _files(root):
        if path.relative_to(root).as_posix() not in files:
            path.unlink()
    for name, data in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base64.b64decode(data))


# ------------------------------------------------------------------------ coverage


def _run_measured(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    timeout: float,
    measured: tuple[dict[str, Any], Path] | None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Run; when measured, into a data directory of the run's own, whose data is returned
    (every process the run started, merged) for the caller to keep and save."""
    if measured is None:
        return _run(argv, env, cwd, timeout), None
    config, _ = measured
    data_dir = Path(tempfile.mkdtemp(prefix="fi-compat-run-coverage-"))
    try:
        own_config = {**config, "data_file": str(data_dir / ".coverage")}
        serialized = base64.b64encode(json.dumps(own_config).encode()).decode()
        done = _run(argv, {**env, COVERAGE_CONFIG: serialized}, cwd, timeout)
        return done, _read_coverage(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _run(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=dict(env),
        timeout=timeout,
    )


def _read_coverage(data_dir: Path) -> dict[str, Any]:
    """Every data file the run's processes saved, merged: ``{"arcs"|"lines": {path: [...]}}``."""
    from coverage import CoverageData

    arcs: dict[str, set[tuple[int, int]]] = {}
    lines: dict[str, set[int]] = {}
    for path in sorted(data_dir.glob(".coverage*")):
        data = CoverageData(basename=str(path))
        data.read()
        for measured in data.measured_files():
            if data.has_arcs():
                arcs.setdefault(measured, set()).update(data.arcs(measured) or ())
            else:
                lines.setdefault(measured, set()).update(data.lines(measured) or ())
    return {
        "arcs": {path: sorted(pairs) for path, pairs in arcs.items()},
        "lines": {path: sorted(numbers) for path, numbers in lines.items()},
    }


def _relative_coverage(coverage: Mapping[str, Any]) -> dict[str, Any]:
    return _renamed(coverage, _Places.of([]).relative)


def _absolute_coverage(coverage: Mapping[str, Any]) -> dict[str, Any]:
    return _renamed(coverage, _Places.of([]).absolute)


def _renamed(coverage: Mapping[str, Any], rename: Callable[[str], str]) -> dict[str, Any]:
    """``coverage`` with each measured file's path renamed."""
    return {
        kind: {rename(path): data for path, data in table.items()}
        for kind, table in coverage.items()
    }


def _save_coverage(coverage: Mapping[str, Any], data_file: Path) -> None:
    """Data files beside ``data_file`` (combined with the others before the report): one for
    the branches, one for the lines of a run measured without branches."""
    from coverage import CoverageData

    arcs = {path: [(a, b) for a, b in pairs] for path, pairs in coverage["arcs"].items()}
    lines = {path: list(numbers) for path, numbers in coverage["lines"].items()}
    if arcs:
        data = CoverageData(basename=str(data_file), suffix=True)
        data.add_arcs(arcs)
        data.write()
    if lines:
        data = CoverageData(basename=str(data_file), suffix=True)
        data.add_lines(lines)
        data.write()
