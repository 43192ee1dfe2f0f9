"""What a benchmark script measured: printed for the reader, written for ``make bench``.

Each script in ``bench/`` ends with ``report(script, figures, notes)``. Run alone, the script
prints its figures; run by ``make bench`` (``python -m tools.bench --write``) it is also given
``--json PATH`` and writes them there, and ``tools.bench`` gathers every script's file into
``bench/results.json`` and ``bench/results.md``, which the documentation includes. So no
figure is typed by hand anywhere: data flows script -> JSON -> results page.
"""

from __future__ import annotations

import json
import math
import sys
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

#: The units a figure may carry: milliseconds, nanoseconds, or a ratio to a named baseline.
UNITS = ("ms", "ns", "x")


def best_ns(
    statements: dict[str, Callable[[], object]], number: int, repeat: int = 7
) -> dict[str, float]:
    """Nanoseconds per call of each statement: the best of ``repeat`` rounds of ``number``
    calls, the statements interleaved in every round so that load from other processes on
    the machine falls on all of them alike."""
    best = dict.fromkeys(statements, float("inf"))
    for _ in range(repeat):
        for name, statement in statements.items():
            seconds = timeit.timeit(statement, number=number)
            best[name] = min(best[name], seconds / number * 1e9)
    return best


@dataclass(frozen=True)
class Figure:
    """One measured value and, where it has one, its target (``value < below``).

    ``inclusive`` makes the target ``value <= below``. A figure without ``below`` is context
    (a baseline, a floor) and is neither met nor missed.
    """

    name: str
    value: float
    unit: str
    below: float | None = None
    inclusive: bool = False

    def __post_init__(self) -> None:
        if not self.name or self.unit not in UNITS or not math.isfinite(self.value):
            raise ValueError(f"not a figure: {self!r} (a name, a finite value, a unit of {UNITS})")

    @property
    def met(self) -> bool | None:
        """Whether the target holds; None for a figure without one."""
        if self.below is None:
            return None
        return self.value <= self.below if self.inclusive else self.value < self.below

    def line(self) -> str:
        """The figure as the script prints it."""
        target = ""
        if self.below is not None:
            sign = "<=" if self.inclusive else "<"
            verdict = "met" if self.met else "MISSED"
            target = f"  (target {sign} {self.below:g} {self.unit}: {verdict})"
        return f"{self.name:58s} {self.value:10.2f} {self.unit}{target}"


def report(script: str, figures: list[Figure], notes: list[str] | None = None) -> None:
    """Print ``figures`` and, when the command line has ``--json PATH``, write them there."""
    print(f"{script}:")
    for figure in figures:
        print(f"  {figure.line()}")
    for note in notes or []:
        print(f"  note: {note}")
    arguments = sys.argv[1:]
    if "--json" in arguments:
        path = Path(arguments[arguments.index("--json") + 1])
        document = {
            "script": script,
            "figures": [asdict(figure) for figure in figures],
            "notes": list(notes or []),
        }
        path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
