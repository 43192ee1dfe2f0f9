"""The documentation's charts, generated from the data fi-compat ships.

Each chart is a matplotlib figure written as SVG with its text kept as text, in two
variants (``-light.svg`` for a light page, ``-dark.svg`` for a dark one; the pages show the
one that matches the reader's theme with Material's ``#only-light`` / ``#only-dark``):

* ``releases-timeline``: every capability and hazard of the releases page (the rows of
  :data:`fi_compat.testing._table.CAPABILITIES`) across the 58 recorded releases;
* ``reach-map``: the measured split reach, one row per attention family and backend, a
  cell per measured release coloured by verdict (``fi_compat/_measured/reach.json``);
* ``bench-per-call`` and ``bench-targets``: the figures of ``bench/results.json``.

The output is deterministic (no date, a fixed hash salt), so ``docs/hooks.py`` regenerates
every chart in memory during ``mkdocs build`` and fails the build when the copy under
``docs/images/`` differs or is missing; ``python scripts/gen_charts.py --write`` rewrites
them (``make bench`` the benchmark ones, from its new figures).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
BENCH_RESULTS = ROOT / "bench" / "results.json"

__all__ = ["CHARTS", "Chart", "main", "render", "stale"]

#: Per page theme: (text and lines, a cell with nothing in it).
THEMES: Mapping[str, tuple[str, str]] = {
    "light": ("#1f2328", "#eaeef2"),
    "dark": ("#e6edf3", "#2d333b"),
}
#: Colours that read on both themes and for colour-blind readers (Okabe-Ito).
PRESENT, HAZARD = "#0072b2", "#d55e00"
VERDICTS: Mapping[str, str] = {
    "reaches": "#009e73",
    "dropped": "#e69f00",
    "refused": "#cc79a7",
    "unmeasured": "#999999",
}
MET, MISSED = "#009e73", "#d55e00"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("svg")
    matplotlib.rcParams.update(
        {
            "svg.fonttype": "none",  # text stays text: searchable, crisp, themable
            "svg.hashsalt": "fi-compat",  # stable element ids: the same data, the same file
            "font.family": "DejaVu Sans",
            "font.size": 8,
        }
    )
    import matplotlib.pyplot as plt

    return plt


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(
        buffer,
        format="svg",
        metadata={"Date": None, "Creator": None},
        transparent=True,
        bbox_inches="tight",
    )
    return buffer.getvalue()


def _style(axes: Any, ink: str) -> None:
    axes.tick_params(colors=ink, length=0)
    for spine in axes.spines.values():
        spine.set_visible(False)
    axes.title.set_color(ink)
    axes.xaxis.label.set_color(ink)
    axes.yaxis.label.set_color(ink)


def _plain(label: str) -> str:
    """A Markdown label as chart text (backticks and emphasis dropped)."""
    return re.sub(r"[`*]", "", label)


def _grid(
    plt: Any,
    theme: str,
    rows: Sequence[str],
    columns: Sequence[str],
    colours: Sequence[Sequence[str | None]],
    title: str,
    legend: Mapping[str, str],
    cell: tuple[float, float] = (7.5, 10.0),
    runs_along_rows: bool = True,
) -> str:
    """A rows x columns grid of coloured cells (None: empty), labelled, as SVG; ``cell`` is
    a cell's width and height in points."""
    from matplotlib.patches import Patch, Rectangle

    ink, empty = THEMES[theme]
    # Sized by its cells (pt), so that with its labels it fits the page's content width
    # (about 7.5 in) and every label shows at its own size without overlapping.
    figure, axes = plt.subplots(figsize=(len(columns) * cell[0] / 72, len(rows) * cell[1] / 72))
    # One bar per run of equal cells along the releases (a span of releases with the same
    # answer), drawn down the columns when the releases are the rows.
    lines = colours if runs_along_rows else [list(column) for column in zip(*colours, strict=True)]
    for index, line in enumerate(lines):
        start = 0
        for end in range(1, len(line) + 1):
            if end < len(line) and line[end] == line[start]:
                continue
            colour = line[start] or empty
            if runs_along_rows:
                box = Rectangle((start, index), end - start - 0.1, 0.8, facecolor=colour)
            else:
                box = Rectangle((index, start), 0.8, end - start - 0.1, facecolor=colour)
            box.set_edgecolor("none")
            axes.add_patch(box)
            start = end
    axes.set_xlim(0, len(columns))
    axes.set_ylim(len(rows), -0.2)
    axes.set_xticks([x + 0.45 for x in range(len(columns))])
    axes.set_xticklabels(columns, rotation=90, fontsize=min(7.0, cell[0] - 0.5))
    axes.set_yticks([y + 0.4 for y in range(len(rows))])
    axes.set_yticklabels(rows, fontsize=min(7.0, cell[1] - 1.5))
    axes.xaxis.tick_top()
    _style(axes, ink)
    # The title goes under the legend: above the grid stand the column labels.
    axes.set_xlabel(title, fontsize=8, labelpad=4)
    axes.xaxis.set_label_position("bottom")
    handles = [Patch(facecolor=colour, label=label) for label, colour in legend.items()]
    handles.append(Patch(facecolor=empty, label="absent"))
    axes.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(0, 0.0 - 24 / (len(rows) * cell[1])),
        ncol=len(handles),
        frameon=False,
        labelcolor=ink,
    )
    text = _svg(figure)
    plt.close(figure)
    return text


def releases_timeline(plt: Any, theme: str) -> str:
    """Every capability and hazard of the releases page across the recorded releases."""
    from fi_compat.testing import available_releases, load_release
    from fi_compat.testing._table import CAPABILITIES

    releases = available_releases()
    records = [load_release(release) for release in releases]
    columns = [_plain(capability.label) for capability in CAPABILITIES]
    colours = [
        [
            (HAZARD if capability.label.startswith("Hazard") else PRESENT)
            if capability.present(record)
            else None
            for capability in CAPABILITIES
        ]
        for record in records
    ]
    # A release a row (oldest first), a capability or hazard a column.
    return _grid(
        plt,
        theme,
        releases,
        columns,
        colours,
        f"What each of the {len(releases)} recorded flashinfer-python releases has",
        {"has it": PRESENT, "hazard present": HAZARD},
        cell=(13.0, 9.0),
        runs_along_rows=False,
    )


def reach_map(plt: Any, theme: str) -> str:
    """The measured split reach: a row per attention family and backend, a cell per release."""
    from fi_compat._surface import ATTENTION_FAMILIES
    from fi_compat.attention import _reach

    releases = _reach.measured_releases()
    rows, colours = [], []
    for family in (*ATTENTION_FAMILIES, _reach.FAST_DECODE_PLAN):
        facts = [_reach.family_reach(release, family) for release in releases]
        backends = sorted(
            {backend for fact in facts if fact is not None for backend in fact.backends},
            key=lambda name: (name != "fa2", name == "auto", name),
        )
        for backend in backends:
            short = family.removeprefix("Batch").removesuffix("Wrapper")
            rows.append(f"{short}  {backend}")
            colours.append(
                [
                    None
                    if fact is None or backend not in fact.backends
                    else VERDICTS.get(str(fact.backends[backend].verdict))
                    for fact in facts
                ]
            )
    return _grid(
        plt,
        theme,
        rows,
        releases,
        colours,
        "Do fixed_split_size and disable_split_kv reach the kernel? (make measure-reach)",
        dict(VERDICTS),
        cell=(8.5, 9.0),
    )


def _bench_figures() -> list[dict[str, Any]]:
    data = json.loads(BENCH_RESULTS.read_text(encoding="utf-8"))
    return [
        {**figure, "script": result["script"]}
        for result in data["results"]
        for figure in result["figures"]
    ]


def _short(name: str) -> str:
    """A benchmark figure's name as a chart label: the long prefixes of bench_comm_facade.py's
    two parts said in two words."""
    name = re.sub(r"^part 1 \(no-op, signature of [^)]*\): ", "no-op: ", name)
    return re.sub(r"^part 2 \(flashinfer [^)]*own path\): ", "FlashInfer's path: ", name)


def bench_per_call(plt: Any, theme: str) -> str:
    """The per-call cost of each way to call the fused all-reduce, in nanoseconds."""
    ink, _ = THEMES[theme]
    figures = [
        figure
        for figure in _bench_figures()
        if figure["script"] == "bench_comm_facade.py"
        and figure["unit"] == "ns"
        and not figure["name"].startswith(" ")
    ]
    labels = [_short(figure["name"]) for figure in figures]
    values = [figure["value"] for figure in figures]
    figure, axes = plt.subplots(figsize=(4.0, 0.6 + 0.2 * len(labels)))
    bars = axes.barh(range(len(labels)), values, color=PRESENT)
    axes.set_yticks(range(len(labels)))
    axes.set_yticklabels(labels)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.set_xlabel("ns per call (log scale)")
    for bar, value in zip(bars, values, strict=True):
        axes.text(
            bar.get_width() * 1.05,
            bar.get_y() + bar.get_height() / 2,
            f"{value:,.0f} ns",
            va="center",
            color=ink,
        )
    _style(axes, ink)
    axes.set_title("Per-call cost (make bench, bench/results.json)", loc="left")
    text = _svg(figure)
    plt.close(figure)
    return text


def bench_targets(plt: Any, theme: str) -> str:
    """Each benchmark figure that has a target, as a share of that target (1 = the target)."""
    ink, _ = THEMES[theme]
    labels, shares, colours = [], [], []
    previous = ""
    for figure in _bench_figures():
        name = _short(figure["name"])
        if figure["name"].startswith(" "):  # a ratio under the figure it divides
            name = f"{previous} {name.strip()}"
        else:
            previous = name
        if figure.get("below") is None:
            continue
        share = figure["value"] / figure["below"]
        met = share <= 1 if figure.get("inclusive") else share < 1
        labels.append(f"{name}: {figure['value']:.3g} {figure['unit']} (target {figure['below']})")
        shares.append(share)
        colours.append(MET if met else MISSED)
    figure, axes = plt.subplots(figsize=(3.6, 0.6 + 0.2 * len(labels)))
    axes.barh(range(len(labels)), shares, color=colours)
    axes.axvline(1.0, color=ink, linewidth=1)
    axes.set_yticks(range(len(labels)))
    axes.set_yticklabels(labels)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.set_xlabel("share of the target (log scale; left of the line: met)")
    _style(axes, ink)
    axes.set_title("Figures against their targets (make bench)", loc="left")
    text = _svg(figure)
    plt.close(figure)
    return text


@dataclass(frozen=True)
class Chart:
    """One chart of the docs: its file stem, its alt text and how it is drawn."""

    stem: str
    alt: str
    draw: Callable[[Any, str], str]

    def path(self, theme: str, root: Path = ROOT) -> Path:
        return root / "docs" / "images" / f"{self.stem}-{theme}.svg"


CHARTS: tuple[Chart, ...] = (
    Chart(
        "releases-timeline",
        "Timeline of the recorded flashinfer-python releases: one row per capability and "
        "hazard, a filled cell for each release that has it",
        releases_timeline,
    ),
    Chart(
        "reach-map",
        "Measured split reach: one row per attention family and backend, one cell per "
        "release, coloured by whether the split settings reach the kernel",
        reach_map,
    ),
    Chart(
        "bench-per-call",
        "Per-call cost in nanoseconds of the direct, checked and prepared fused all-reduce "
        "calls against FlashInfer's own path",
        bench_per_call,
    ),
    Chart(
        "bench-targets",
        "Every benchmark figure that has a target, as a share of it: bars left of the line "
        "meet their target",
        bench_targets,
    ),
)


def render(chart: Chart, theme: str) -> str:
    """The SVG text of ``chart`` for ``theme`` ("light" or "dark"), from the current data."""
    return chart.draw(_pyplot(), theme)


def stale(
    root: Path = ROOT,
    charts: Sequence[Chart] = CHARTS,
    drawn: Mapping[tuple[str, str], str] | None = None,
) -> list[str]:
    """The chart files under ``root`` that are missing or differ from their data (``drawn``:
    the charts already drawn, by stem and theme, else they are drawn now)."""
    found = []
    for chart in charts:
        for theme in THEMES:
            path = chart.path(theme, root)
            if drawn is not None and (chart.stem, theme) in drawn:
                expected = drawn[chart.stem, theme]
            else:
                expected = render(chart, theme)
            if not path.is_file() or path.read_text(encoding="utf-8") != expected:
                found.append(str(path.relative_to(root)).replace("\\", "/"))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tools.charts --write`` (re)draws every chart; ``--check`` exits 1 naming
    the stale ones; ``--only bench`` limits either to the benchmark charts."""
    parser = argparse.ArgumentParser(prog="python -m tools.charts", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="draw every chart into docs/images")
    mode.add_argument("--check", action="store_true", help="exit 1 when a chart is stale")
    parser.add_argument("--only", choices=("bench",), help="only the benchmark charts")
    args = parser.parse_args(argv)
    charts = [c for c in CHARTS if args.only is None or c.stem.startswith("bench-")]
    if args.check:
        drifted = stale(ROOT, charts)
        for name in drifted:
            print(f"{name}: stale or missing; run python -m tools.charts --write", file=sys.stderr)
        return 1 if drifted else 0
    IMAGES.mkdir(parents=True, exist_ok=True)
    for chart in charts:
        for theme in THEMES:
            chart.path(theme).write_text(render(chart, theme), encoding="utf-8")
            print(chart.path(theme).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
