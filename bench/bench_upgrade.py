"""Wall time of the upgrade preview as a user runs it: ``fi-compat diff`` and ``fi-compat scan``.

Each command runs as the ``fi-compat`` console script (beside this interpreter; else
``python -m fi_compat``) in a fresh process, its output to a pipe, once untimed (bytecode
and file cache warm) and then ``RUNS`` times; the figure is the median wall time:

* ``fi-compat diff 0.6.8 0.7.2.post1``, read from the records shipped in the package;
* ``fi-compat scan vllm/ --from 0.6.5 --to 0.7.2.post1`` over vLLM 0.33.0's whole Python
  tree: the ``*.py`` files of its ``vllm/`` package, unpacked from its wheel into a
  temporary directory. The wheel is fetched and unpacked as the engine tests do
  (``tests/support/engine_wheels.py``: ``pip download --no-deps`` into the release cache,
  once); without it the scan is skipped, with the reason.

Targets (the upgrade preview's issue): ``diff`` at most 1 s, the scan of vLLM's whole tree
at most 10 s, on a 2-core machine.

Run: ``.venv/bin/python bench/bench_upgrade.py`` (``make bench`` runs every script and
writes their figures to ``bench/results.md``)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from _figures import Figure, report

if TYPE_CHECKING:
    from tests.support.engine_wheels import Engine

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5
DIFF = ("0.6.8", "0.7.2.post1")
#: Every recorded module is judged: the widest diffs (the oldest recorded release, and the
#: downgrade MoE engines meet) are timed too; the target holds for any two releases.
WIDE_DIFFS = (("0.6.5", "0.7.2.post1"), ("0.2.0.post1", "0.7.2.post1"), ("0.7.1rc2", "0.7.2"))
SCAN = ("0.6.5", "0.7.2.post1")
#: The first read of one release's one module, in a fresh interpreter.
FIRST_READ = (
    "import time; t = time.perf_counter(); "
    "from fi_compat._records import load_release; "
    "moe = load_release('0.7.2.post1').public_names('flashinfer.fused_moe'); "
    "moe['trtllm_fp4_block_scale_moe'].function; "
    "print((time.perf_counter() - t) * 1000)"
)


def fi_compat() -> list[str]:
    """The command a user types: the console script installed beside this interpreter."""
    script = Path(sys.executable).with_name("fi-compat")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "fi_compat"]


def wall_ms(arguments: list[str], ok: tuple[int, ...] = (0,)) -> float:
    """The median wall time (ms) of ``fi-compat ARGUMENTS`` over ``RUNS`` fresh processes,
    after one untimed run."""
    command = [*fi_compat(), *arguments]
    samples = []
    for run in range(RUNS + 1):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, check=False)
        elapsed = (time.perf_counter() - start) * 1000
        if done.returncode not in ok:
            error = done.stderr.decode(errors="replace").strip()
            raise SystemExit(f"{' '.join(command)} exited with {done.returncode}: {error}")
        if run:
            samples.append(elapsed)
    return statistics.median(samples)


def vllm_engine() -> tuple[Engine, Path]:
    """vLLM as the engine tests pin it, and its wheel, found or downloaded as they do."""
    # The tests' helpers (and the tools they use) live at the repository root, which a
    # script run as ``python bench/x.py`` does not have on its path.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.support.engine_wheels import ENGINES, engine_wheel

    engine = ENGINES["vllm"]
    return engine, engine_wheel(engine)


def scan_figure() -> tuple[Figure | None, list[str]]:
    """The scan's figure and notes; no figure, and a note saying why, without the wheel."""
    try:
        engine, wheel = vllm_engine()
    except Exception as error:  # no wheel here and no registry, or the helpers broke: skipped
        return None, [f"scan skipped: no vLLM wheel ({type(error).__name__}: {error})"]
    from tests.support.engine_wheels import unpack

    version = engine.requirement.partition("==")[2]
    with tempfile.TemporaryDirectory(prefix="fi-compat-bench-") as folder:
        tree = unpack(engine, Path(folder))
        arguments = ["scan", str(tree), "--from", SCAN[0], "--to", SCAN[1]]
        # 1: something breaks on the new release, which is an answer, not a failure.
        median = wall_ms(arguments, ok=(0, 1))
        # Once more, untimed, for what the scan read and found.
        done = subprocess.run(
            [*fi_compat(), *arguments, "--json"], capture_output=True, check=False
        )
        if done.returncode not in (0, 1):
            raise SystemExit(f"fi-compat scan --json exited with {done.returncode}")
        document = json.loads(done.stdout)
    summary = ", ".join(f"{count} {name}" for name, count in document["summary"].items())
    figure = Figure(
        f"fi-compat scan vllm/ --from {SCAN[0]} --to {SCAN[1]}: median of {RUNS} runs",
        median,
        "ms",
        10_000,
        True,
    )
    notes = [
        f"the scan's tree: vLLM {version}'s whole vllm/ package, its .py files unpacked "
        f"from {wheel.name}; it read {document['files']} Python files "
        f"({len(document['diagnostics'])} not scanned) and found {summary}"
    ]
    return figure, notes


def first_read_ms() -> float:
    """The median, over ``RUNS`` fresh interpreters, of reading one name of one module of
    one release (the records' index, the module's shard, the name's record)."""
    samples = []
    for _ in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-c", FIRST_READ], capture_output=True, text=True, check=True
        )
        samples.append(float(done.stdout))
    return statistics.median(samples)


def data_bytes() -> int:
    """The bytes of data fi-compat installs: the store (records and surfaces), the
    measurements."""
    package = ROOT / "fi_compat"
    data = [package / "_records" / "surface.zip", *package.glob("_measured/*.json")]
    return sum(path.stat().st_size for path in data)


def main() -> None:
    diff = wall_ms(["diff", *DIFF])
    figures = [
        Figure(
            f"fi-compat diff {DIFF[0]} {DIFF[1]}: median of {RUNS} runs",
            diff,
            "ms",
            1000,
            True,
        )
    ]
    for old, new in WIDE_DIFFS:
        figures.append(
            Figure(
                f"fi-compat diff {old} {new}: median of {RUNS} runs",
                wall_ms(["diff", old, new]),
                "ms",
                1000,
                True,
            )
        )
    figures.append(
        Figure(
            f"first read of one module's name of one release, fresh interpreter, median of {RUNS}",
            first_read_ms(),
            "ms",
            None,
            False,
        )
    )
    scan, notes = scan_figure()
    if scan is not None:
        figures.append(scan)
    notes.append(
        f"installed data (records, store, measurements): {data_bytes() / 1e6:.2f} MB "
        "(target at most 8 MB; tests/recorder/test_surface.py holds it)"
    )
    command = "fi-compat" if len(fi_compat()) == 1 else "python -m fi_compat"
    notes.append(
        f"each command run as `{command}` in a fresh process, output to a pipe: "
        f"one untimed run, then the median wall time of {RUNS}"
    )
    report("bench_upgrade.py", figures, notes)


if __name__ == "__main__":
    main()
