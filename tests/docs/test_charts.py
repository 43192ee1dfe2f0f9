"""The docs' charts: drawn from the data, deterministic, text as text, on their pages, and a
stale or missing one is caught (``tools/charts.py``, ``docs/hooks.py``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("matplotlib", reason="the charts need the docs extra (matplotlib)")

from tools import charts
from tools.charts import CHARTS, THEMES, render, stale

ROOT = Path(__file__).resolve().parents[2]
PAGES = {
    "releases-timeline": "docs/releases.md",
    "reach-map": "docs/guide/attention.md",
    "bench-per-call": "docs/benchmarks.md",
    "bench-targets": "docs/benchmarks.md",
}


def test_every_chart_has_a_page_with_both_themes_and_its_alt_text() -> None:
    assert {chart.stem for chart in CHARTS} == set(PAGES)
    for chart in CHARTS:
        page = (ROOT / PAGES[chart.stem]).read_text(encoding="utf-8")
        for theme in THEMES:
            image = re.search(
                rf"!\[([^\]]*)\]\((?:\.\./)?images/{chart.stem}-{theme}\.svg#only-{theme}\)", page
            )
            assert image, (chart.stem, theme)
            assert image[1] == chart.alt
            assert len(chart.alt) > 40


@pytest.fixture(scope="module")
def drawn() -> dict[tuple[str, str], str]:
    """Every chart drawn once from the shipped data."""
    return {(chart.stem, theme): render(chart, theme) for chart in CHARTS for theme in THEMES}


def test_the_shipped_charts_are_the_data_drawn_now(drawn: dict[tuple[str, str], str]) -> None:
    assert stale(ROOT, drawn=drawn) == []


@pytest.mark.parametrize("chart", CHARTS, ids=lambda chart: chart.stem)
def test_drawing_is_deterministic_and_keeps_text_as_text(
    chart: charts.Chart, drawn: dict[tuple[str, str], str]
) -> None:
    light, dark = drawn[chart.stem, "light"], drawn[chart.stem, "dark"]
    assert render(chart, "light") == light
    assert light != dark  # the text colour follows the theme
    for svg in (light, dark):
        assert "<dc:date>" not in svg
        texts = re.findall(r"<text[^>]*>([^<]+)</text>", svg)
        assert len(texts) > 5, "labels are <text>, not glyph paths"
    assert THEMES["light"][0] in light
    assert THEMES["dark"][0] in dark


def test_the_timeline_names_every_release_and_the_reach_map_every_verdict(
    drawn: dict[tuple[str, str], str],
) -> None:
    from fi_compat.attention import _reach
    from fi_compat.testing import available_releases

    timeline = drawn["releases-timeline", "light"]
    for release in available_releases():
        assert f">{release}</text>" in timeline
    reach = drawn["reach-map", "light"]
    for release in _reach.measured_releases():
        assert f">{release}</text>" in reach
    for colour in charts.VERDICTS.values():
        assert colour in reach


def test_a_stale_or_missing_chart_is_named(
    tmp_path: Path, drawn: dict[tuple[str, str], str]
) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copytree(ROOT / "docs" / "images", tmp_path / "docs" / "images")
    assert stale(tmp_path, drawn=drawn) == []
    timeline = CHARTS[0].path("dark", tmp_path)
    timeline.write_text(timeline.read_text(encoding="utf-8").replace("0.6.5", "0.6.6"))
    CHARTS[1].path("light", tmp_path).unlink()
    assert stale(tmp_path, drawn=drawn) == [
        "docs/images/releases-timeline-dark.svg",
        "docs/images/reach-map-light.svg",
    ]


def test_the_bench_charts_follow_the_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, drawn: dict[tuple[str, str], str]
) -> None:
    data = json.loads(charts.BENCH_RESULTS.read_text(encoding="utf-8"))
    figure = next(
        f for result in data["results"] for f in result["figures"] if f.get("below") is not None
    )
    before = drawn["bench-targets", "light"]
    figure["value"] = figure["below"] * 100  # a missed target
    moved = tmp_path / "results.json"
    moved.write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(charts, "BENCH_RESULTS", moved)
    after = render(CHARTS[3], "light")
    assert after != before
    assert charts.MISSED in after


def test_the_docs_build_refuses_a_stale_chart(
    monkeypatch: pytest.MonkeyPatch, drawn: dict[tuple[str, str], str]
) -> None:
    import importlib.util

    from mkdocs.exceptions import PluginError

    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None
    assert spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    monkeypatch.setattr(charts, "render", lambda chart, theme: drawn[chart.stem, theme])
    hooks.on_pre_build(config=None)  # the shipped charts are fresh
    monkeypatch.setattr(charts, "stale", lambda root: ["docs/images/reach-map-dark.svg"])
    with pytest.raises(PluginError, match=r"reach-map-dark\.svg"):
        hooks.on_pre_build(config=None)


def test_the_command_line_checks(
    monkeypatch: pytest.MonkeyPatch, drawn: dict[tuple[str, str], str]
) -> None:
    monkeypatch.setattr(charts, "render", lambda chart, theme: drawn[chart.stem, theme])
    assert charts.main(["--check"]) == 0
    assert charts.main(["--check", "--only", "bench"]) == 0
    with pytest.raises(SystemExit):
        charts.main([])
