"""Cost of fi-compat's probe: import time, probe time, cached look-up. Prints its figures.

Targets (issue 2): ``import fi_compat`` under 10 ms of its own, the probe under 5 ms once
FlashInfer is imported, the cached ``get_capabilities()`` under 1 us.

Run: ``.venv/bin/python bench/bench_capabilities.py`` (``make bench`` runs every script and
writes their figures to ``bench/results.md``)
"""

from __future__ import annotations

import importlib
import statistics
import subprocess
import sys
import time

from _figures import Figure, best_ns, report


def import_time_ms(runs: int = 15) -> float:
    """Median cumulative ``-X importtime`` of ``fi_compat`` in fresh interpreters."""
    samples = []
    for _ in range(runs):
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", "import fi_compat"],
            capture_output=True,
            text=True,
            check=True,
        )
        for line in result.stderr.splitlines():
            parts = [part.strip() for part in line.split("|")]
            if len(parts) == 3 and parts[2] == "fi_compat":
                samples.append(int(parts[1]) / 1000)
    return statistics.median(samples)


def probe_time_ms(runs: int = 30) -> tuple[float, str]:
    from fi_compat import capabilities

    try:
        importlib.import_module("flashinfer")
        importlib.import_module("flashinfer.comm")
        what = "real flashinfer " + str(capabilities.get_capabilities().flashinfer.version)
    except Exception as error:
        what = f"no importable flashinfer ({type(error).__name__})"
    capabilities.probe()  # warm linecache and the source of forwarded methods
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        capabilities.probe()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), what


def cached_call_ns(number: int = 1_000_000) -> float:
    from fi_compat import get_capabilities

    get_capabilities()
    return best_ns({"cached": get_capabilities}, number, repeat=5)["cached"]


def main() -> None:
    imported = import_time_ms()
    probe, what = probe_time_ms()
    cached = cached_call_ns()
    figures = [
        Figure("import fi_compat, cumulative, median of 15 interpreters", imported, "ms", 10),
        Figure("probe once flashinfer is imported", probe, "ms", 5),
        Figure("cached get_capabilities(), best of 5 x 1e6 calls", cached, "ns", 1000),
    ]
    report("bench_capabilities.py", figures, [f"the probe ran on: {what}"])


if __name__ == "__main__":
    main()
