"""Cost of the pytest plugin's release matrix: entering a fake, and a marked test per release.

* entering ``fake_flashinfer(release)`` the first time in a process (the fake package of
  the release is generated, written and imported) and after that (the build is reused);
* a marked test under pytest: the wall time of a run of N trivial tests marked
  ``@pytest.mark.flashinfer([release])`` less that of the same N tests unmarked, per test.

Target (issue 27): entering a fake after the first time takes at most 5 ms.

Run: ``.venv/bin/python bench/bench_release_matrix.py`` (``make bench`` runs every script and
writes their figures to ``bench/results.md``)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _figures import Figure, report

from fi_compat.testing import fake_flashinfer

RELEASES = ("0.6.5", "0.7.2.post1")
RUNS = 30
TESTS = 200


def enter_ms(release: str) -> tuple[float, float]:
    """The first entry into ``release``'s fake, and the median of ``RUNS`` later ones (ms)."""
    start = time.perf_counter()
    with fake_flashinfer(release):
        first = (time.perf_counter() - start) * 1000
    later = []
    for _ in range(RUNS):
        start = time.perf_counter()
        with fake_flashinfer(release):
            later.append((time.perf_counter() - start) * 1000)
    return first, statistics.median(later)


def _session_s(folder: Path, marked: bool) -> float:
    mark = '@pytest.mark.flashinfer(["0.7.2.post1"])\n' if marked else ""
    body = "".join(f"{mark}def test_{i}():\n    pass\n\n" for i in range(TESTS))
    (folder / "test_bench.py").write_text(f"import pytest\n\n{body}")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)]
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run(command, cwd=folder, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return min(samples)


def per_test_ms() -> float:
    """What the marker adds per test and release, in a pytest run of ``TESTS`` tests."""
    with tempfile.TemporaryDirectory(prefix="fi-compat-bench-") as folder:
        plain = _session_s(Path(folder), marked=False)
        marked = _session_s(Path(folder), marked=True)
    return (marked - plain) / TESTS * 1000


def main() -> None:
    figures = []
    for release in RELEASES:
        first, later = enter_ms(release)
        figures.append(
            Figure(f"enter fake_flashinfer({release!r}), first in the process", first, "ms")
        )
        figures.append(
            Figure(
                f"enter fake_flashinfer({release!r}), median of {RUNS} after", later, "ms", 5, True
            )
        )
    figures.append(
        Figure(
            f"marked test, added per test and release ({TESTS} tests, best of 3)",
            per_test_ms(),
            "ms",
        )
    )
    report("bench_release_matrix.py", figures, ["the fake is built once per release per process"])


if __name__ == "__main__":
    main()
