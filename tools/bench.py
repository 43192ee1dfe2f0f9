"""``make bench``: run every ``bench/bench_*.py``, keep their figures, render the results page.

Each script prints its figures and, given ``--json PATH``, writes them there
(``bench/_figures.py``). This tool runs the scripts one after the other in fresh
interpreters, gathers their files into ``bench/results.json`` with where they were taken
(date, commit, machine, Python, torch, FlashInfer), and renders ``bench/results.md`` from
that data alone. ``docs/benchmarks.md`` includes the rendered page, so the documentation
shows the figures of the last ``make bench`` and no figure is typed by hand.

``python -m tools.bench --write`` runs and writes; ``--write --only bench_x.py`` runs only
that script (repeatable) and merges its figures into the existing results, which keep the
environment of the run that took them, the merged script noting when and at which commit
it ran alone (refused when the machine, Python, torch or FlashInfer differ); ``--check``
only compares ``bench/results.md`` with what ``bench/results.json`` renders to (also a test).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
DATA = BENCH / "results.json"
PAGE = BENCH / "results.md"
UNITS = ("ms", "ns", "x")
#: The results themselves do not make the work tree differ from the commit they describe.
RESULTS = ":!bench/results.*"
ENVIRONMENT = ("date", "commit", "machine", "python", "torch", "flashinfer")
#: What must not differ between the results and a script run alone to be merged into them.
COMPARABLE = ("machine", "python", "torch", "flashinfer")
HEADER = (
    "<!-- Written by `make bench` (python -m tools.bench --write) from bench/results.json. "
    "Do not edit: run make bench. -->"
)


class BenchError(RuntimeError):
    """A benchmark script failed, or wrote something that is not a results document."""


def scripts(folder: Path = BENCH) -> list[Path]:
    """The benchmark scripts, in name order."""
    return sorted(folder.glob("bench_*.py"))


def _figure(raw: Any, where: str) -> dict[str, Any]:
    """One figure of a script's file, checked field by field."""
    if not isinstance(raw, dict) or set(raw) != {"name", "value", "unit", "below", "inclusive"}:
        raise BenchError(f"{where}: expected a figure with name, value, unit, below, inclusive")
    name, value, unit, below = raw["name"], raw["value"], raw["unit"], raw["below"]
    numbers_ok = isinstance(value, int | float) and math.isfinite(value)
    below_ok = below is None or (isinstance(below, int | float) and math.isfinite(below))
    if not (isinstance(name, str) and name and numbers_ok and below_ok and unit in UNITS):
        raise BenchError(f"{where}: not a figure: {raw!r}")
    if not isinstance(raw["inclusive"], bool):
        raise BenchError(f"{where}: inclusive must be a bool, found {raw['inclusive']!r}")
    return dict(raw)


def check_script_output(raw: Any, script: str) -> dict[str, Any]:
    """A script's ``--json`` document, checked; BenchError says what is wrong."""
    if not isinstance(raw, dict) or set(raw) != {"script", "figures", "notes"}:
        raise BenchError(f"{script}: expected keys script, figures, notes; found {raw!r}")
    if raw["script"] != script:
        raise BenchError(f"{script}: the file names another script, {raw['script']!r}")
    figures, notes = raw["figures"], raw["notes"]
    if not isinstance(figures, list) or not figures:
        raise BenchError(f"{script}: expected a non-empty list of figures, found {figures!r}")
    if not isinstance(notes, list) or not all(isinstance(note, str) for note in notes):
        raise BenchError(f"{script}: notes must be a list of str, found {notes!r}")
    return {
        "script": script,
        "figures": [_figure(figure, f"{script} figure {i}") for i, figure in enumerate(figures)],
        "notes": list(notes),
    }


def run_script(script: Path, python: str = sys.executable) -> dict[str, Any]:
    """Run one script in a fresh interpreter (its output shown as it goes); its figures."""
    with tempfile.TemporaryDirectory(prefix="fi-compat-bench-") as folder:
        path = Path(folder) / "figures.json"
        done = subprocess.run([python, str(script), "--json", str(path)], check=False)
        if done.returncode != 0:
            raise BenchError(f"{script.name} exited with {done.returncode}")
        if not path.is_file():
            raise BenchError(f"{script.name} wrote no figures (does it end with report()?)")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:
            raise BenchError(f"{script.name} wrote a file that is not JSON: {error}") from error
    return check_script_output(raw, script.name)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _commit(root: Path) -> str:
    """HEAD's short hash, with ``+changes`` when the work tree differs from it."""

    def git(*arguments: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *arguments], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", RESULTS)
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return commit + ("+changes" if changed else "")


def environment(root: Path = ROOT) -> dict[str, str]:
    """Where the figures are taken: date, commit, machine, interpreter and libraries."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        "commit": _commit(root),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "torch": _version("torch"),
        "flashinfer": _version("flashinfer-python"),
    }


def _value(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.1f} {unit}" if unit == "ns" else f"{value:.2f} {unit}"


def _target(figure: dict[str, Any]) -> tuple[str, str]:
    below = figure["below"]
    if below is None:
        return "", ""
    sign = "≤" if figure["inclusive"] else "<"
    value = figure["value"]
    met = value <= below if figure["inclusive"] else value < below
    limit = f"{below:g}x" if figure["unit"] == "x" else f"{below:g} {figure['unit']}"
    return f"{sign} {limit}", "yes" if met else "**no**"


def render(document: dict[str, Any]) -> str:
    """The results page, from the results document alone."""
    env = document["environment"]
    lines = [
        HEADER,
        "",
        f"Taken on {env['date']} at commit `{env['commit']}`, on {env['machine']}, "
        f"Python {env['python']}, torch {env['torch']}, flashinfer-python {env['flashinfer']}.",
    ]
    for result in document["results"]:
        lines += ["", f"#### `{result['script']}`", "", "| measure | figure | target | met |"]
        lines.append("| --- | ---: | --- | --- |")
        for figure in result["figures"]:
            target, met = _target(figure)
            name = figure["name"].strip()
            if figure["name"].startswith(" "):
                name = f"&nbsp;&nbsp;{name}"
            lines.append(
                f"| {name} | {_value(figure['value'], figure['unit'])} | {target} | {met} |"
            )
        if result["notes"]:
            lines.append("")
            lines += [f"- {note}" for note in result["notes"]]
    return "\n".join(lines) + "\n"


def load(path: Path = DATA) -> dict[str, Any]:
    """The results document, its figures checked."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or set(raw) != {"environment", "results"}:
        raise BenchError(f"{path}: expected keys environment and results")
    environment, results = raw["environment"], raw["results"]
    if not isinstance(environment, dict) or set(environment) != set(ENVIRONMENT):
        raise BenchError(f"{path}: expected an environment with {ENVIRONMENT}")
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise BenchError(f"{path}: expected a list of script results")
    checked = [check_script_output(result, str(result.get("script"))) for result in results]
    return {"environment": environment, "results": checked}


def merge(
    previous: dict[str, Any],
    results: list[dict[str, Any]],
    env: dict[str, str],
    order: Sequence[str],
) -> dict[str, Any]:
    """``previous`` with ``results`` (scripts run alone, in ``env``) in place of their earlier
    figures or added, in the scripts' ``order``; each merged result notes where it was taken."""
    kept = {result["script"]: result for result in previous["results"]}
    for result in results:
        note = (
            f"taken alone on {env['date']} at commit `{env['commit']}` "
            f"(python -m tools.bench --write --only {result['script']})"
        )
        kept[result["script"]] = {**result, "notes": [*result["notes"], note]}
    rank = {name: index for index, name in enumerate(order)}
    ordered = sorted(kept.values(), key=lambda result: rank.get(result["script"], len(rank)))
    return {"environment": previous["environment"], "results": ordered}


def main(
    argv: Sequence[str] | None = None,
    *,
    folder: Path = BENCH,
    run: Callable[[Path], dict[str, Any]] = run_script,
) -> int:
    """Run the scripts and write the results (``--write``), or compare the page (``--check``)."""
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="run every script, write results")
    action.add_argument("--check", action="store_true", help="the page renders the data")
    parser.add_argument(
        "--only",
        action="append",
        metavar="SCRIPT",
        help="with --write: run only this bench_*.py and merge its figures into the results",
    )
    args = parser.parse_args(argv)
    if args.only and not args.write:
        parser.error("--only goes with --write")
    data, page = folder / "results.json", folder / "results.md"
    if args.check:
        if render(load(data)) != page.read_text(encoding="utf-8"):
            print(f"{page} differs from what {data} renders to: run make bench", file=sys.stderr)
            return 1
        return 0
    chosen, env = scripts(folder), environment(folder.parent)
    previous: dict[str, Any] | None = None
    try:
        if args.only:
            unknown = sorted(set(args.only) - {script.name for script in chosen})
            if unknown:
                raise BenchError(f"no such script in {folder}: {', '.join(unknown)}")
            if not data.is_file():
                raise BenchError(f"--only merges into {data}, which is missing: run every script")
            try:
                previous = load(data)
            except ValueError as error:  # not JSON
                raise BenchError(f"{data}: {error}") from error
            differ = [key for key in COMPARABLE if previous["environment"][key] != env[key]]
            if differ:
                raise BenchError(
                    f"the results were taken with another {', '.join(differ)}: run every script"
                )
            chosen = [script for script in chosen if script.name in args.only]
        results = [run(script) for script in chosen]
    except BenchError as error:
        print(f"error: {error}; nothing written", file=sys.stderr)
        return 1
    if previous is not None:
        document = merge(previous, results, env, [script.name for script in scripts(folder)])
    else:
        document = {"environment": env, "results": results}
    data.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    page.write_text(render(document), encoding="utf-8")
    print(f"wrote {data.name} and {page.name} in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
