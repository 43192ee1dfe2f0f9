"""Benchmark: a FlashInfer release fi-compat shipped no data for, on its first day (issue 49).

The installed release is set aside with ``FI_COMPAT_UNRECORDED`` in an empty cache of its
own, so fi-compat meets it as it meets a release published after it: it models the release
from its installed files (``fi-compat record``), measures it on this machine
(``fi-compat measure``), and from then on answers from the cache. Measured, each in fresh
interpreters:

* the first use: modelling, measuring and the first report (which packs the store the
  loader reads with the new model), once per release and machine;
* a later start: ``fi-compat report --json`` from the cache, against the same command on
  the shipped data (median of five);
* the checked fused call on the release's own ``allreduce_fusion`` path (part 2 of
  ``bench_comm_facade.py``), against FlashInfer's own call, with the launch layer measured
  on the day-one path.

Targets (issue 49): the checked call at most 0.5x FlashInfer's own once measured; the first
use in all (modelling, measuring and the first report) at most 30 s; a later start within
1.2x of the shipped data's.

Run: ``.venv/bin/python bench/bench_day_one.py`` (``make bench`` runs every script).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _figures import Figure, report

HERE = Path(__file__).resolve().parent
RUNS = 5

CHECKED_CALL = """
import json, sys
sys.path.insert(0, {here!r})
import bench_comm_facade
found = bench_comm_facade.against_real_python_path()
print(json.dumps(found if isinstance(found, str) else list(found)))
"""


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds and standard output of one fresh interpreter; raises on failure."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env, timeout=3600
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return seconds, done.stdout


def _median_ms(argv: list[str], env: dict[str, str]) -> float:
    return statistics.median(_run(argv, env)[0] for _ in range(RUNS)) * 1000


def main() -> None:
    import importlib.metadata

    release = importlib.metadata.version("flashinfer-python")
    with tempfile.TemporaryDirectory(prefix="fi-compat-day-one-") as cache:
        shipped = {**os.environ, "FI_COMPAT_CACHE_DIR": cache}
        shipped.pop("FI_COMPAT_UNRECORDED", None)
        day_one = {**shipped, "FI_COMPAT_UNRECORDED": release}
        modelled, _ = _run(["-m", "fi_compat", "record"], day_one)
        measured, out = _run(["-m", "fi_compat", "measure", "--json"], day_one)
        report_argv = ["-m", "fi_compat", "report", "--json"]
        first, _ = _run(report_argv, day_one)  # packs the store with the model, once
        later, ours = _median_ms(report_argv, day_one), _median_ms(report_argv, shipped)
        _, out = _run(["-c", CHECKED_CALL.format(here=str(HERE))], day_one)
        found: Any = json.loads(out)
    rows = [
        Figure(f"first use, {release} set aside: modelled from its files", modelled * 1000, "ms"),
        Figure(f"first use, {release} set aside: measured", measured * 1000, "ms"),
        Figure("first use: the first report (packs the store with the model)", first * 1000, "ms"),
        Figure(
            "first use in all: modelled, measured, first report",
            (modelled + measured + first) * 1000,
            "ms",
            30_000,
            True,
        ),
        Figure("a later start: fi-compat report --json, shipped data", ours, "ms"),
        Figure("a later start: fi-compat report --json, modelled here", later, "ms"),
        Figure("  / shipped data", later / ours, "x", 1.2, True),
    ]
    notes = [
        "each figure from fresh interpreters in an empty cache of the run's own; modelling "
        "and measuring happen once per release and machine"
    ]
    if isinstance(found, str):
        notes.append(f"checked call skipped: {found}")
    else:
        _, decision, figures = found
        base = figures["direct"]
        rows += [
            Figure("day-one path: FlashInfer's own allreduce_fusion call", base, "ns"),
            Figure("day-one path: allreduce_residual_rmsnorm (checked)", figures["checked"], "ns"),
            Figure("  / direct", figures["checked"] / base, "x", 0.5, True),
            Figure("day-one path: prepared call (checked once)", figures["prepared"], "ns"),
            Figure("  / direct", figures["prepared"] / base, "x", 0.3, True),
        ]
        notes.append(f"day-one workspace: {decision}")
    report("bench_day_one.py", rows, notes)


if __name__ == "__main__":
    main()
