"""``make bench``'s plumbing: figures a script writes, the driver, the results page.

The benchmark scripts themselves take minutes and are not run here; tiny scripts in a
temporary folder stand for them. The committed ``bench/results.json`` must be what a run
wrote (every script present, its figures well formed, taken at a commit of this history),
and ``bench/results.md``, which the docs include, exactly what that data renders to.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tools import bench
from tools.bench import BenchError, check_script_output, render

ROOT = Path(__file__).resolve().parents[2]


def _figures_module() -> ModuleType:
    """bench/_figures.py, which the scripts import by its bare name."""
    spec = importlib.util.spec_from_file_location("_figures", ROOT / "bench" / "_figures.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("_figures", module)
    spec.loader.exec_module(module)
    return module


figures = _figures_module()


# --- bench/_figures.py ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "below", "inclusive", "met"),
    [
        (4.0, 5.0, False, True),
        (5.0, 5.0, False, False),
        (5.0, 5.0, True, True),
        (5.1, 5.0, True, False),
        (5.0, None, False, None),
    ],
)
def test_a_figure_meets_its_target_as_the_sign_says(
    value: float, below: float | None, inclusive: bool, met: bool | None
) -> None:
    assert figures.Figure("f", value, "ms", below, inclusive).met is met


@pytest.mark.parametrize(
    "arguments",
    [("", 1.0, "ms"), ("f", float("nan"), "ms"), ("f", float("inf"), "ns"), ("f", 1.0, "s")],
)
def test_a_figure_without_a_name_a_finite_value_or_a_known_unit_is_refused(
    arguments: tuple[str, float, str],
) -> None:
    with pytest.raises(ValueError, match="not a figure"):
        figures.Figure(*arguments)


def test_report_prints_and_writes_what_the_driver_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["bench_x.py", "--json", str(path)])
    rows = [figures.Figure("probe", 1.25, "ms", 5), figures.Figure("ratio", 0.7, "x", 0.5, True)]
    figures.report("bench_x.py", rows, ["ran on the fake"])
    printed = capsys.readouterr().out
    assert "probe" in printed
    assert "(target < 5 ms: met)" in printed
    assert "(target <= 0.5 x: MISSED)" in printed
    assert "note: ran on the fake" in printed
    written = check_script_output(json.loads(path.read_text(encoding="utf-8")), "bench_x.py")
    assert [figure["name"] for figure in written["figures"]] == ["probe", "ratio"]
    assert written["figures"][1] == {
        "name": "ratio",
        "value": 0.7,
        "unit": "x",
        "below": 0.5,
        "inclusive": True,
    }


def test_report_writes_nothing_without_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench_x.py"])
    figures.report("bench_x.py", [figures.Figure("probe", 1.0, "ms")])
    assert list(tmp_path.iterdir()) == []


# --- what the driver accepts ---------------------------------------------------------------

GOOD: dict[str, Any] = {
    "script": "bench_x.py",
    "figures": [{"name": "a", "value": 1.5, "unit": "ns", "below": 2, "inclusive": False}],
    "notes": ["n"],
}


def _with(path: tuple[Any, ...], value: Any) -> Any:
    document = json.loads(json.dumps(GOOD))
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return document


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        {"script": "bench_x.py", "figures": []},
        _with(("script",), "bench_y.py"),
        _with(("figures",), []),
        _with(("figures",), "a"),
        _with(("notes",), [1]),
        _with(("notes",), "n"),
        _with(("figures", 0, "value"), "1.5"),
        _with(("figures", 0, "value"), float("nan")),
        _with(("figures", 0, "value"), None),
        _with(("figures", 0, "unit"), "s"),
        _with(("figures", 0, "name"), ""),
        _with(("figures", 0, "below"), "2"),
        _with(("figures", 0, "below"), float("inf")),
        _with(("figures", 0, "inclusive"), 1),
        _with(("figures", 0, "extra"), 1),
        _with(("figures", 0), 7),
    ],
)
def test_a_malformed_script_document_is_refused(document: Any) -> None:
    with pytest.raises(BenchError):
        check_script_output(document, "bench_x.py")


def test_a_well_formed_script_document_is_kept() -> None:
    assert check_script_output(GOOD, "bench_x.py") == GOOD


# --- rendering -----------------------------------------------------------------------------

ENVIRONMENT = {
    "date": "2026-11-23",
    "commit": "0123456789ab",
    "machine": "Linux x86_64, 2 CPUs",
    "python": "3.11.9",
    "torch": "2.13.0+cpu",
    "flashinfer": "0.7.2.post1",
}


def _figure(name: str, value: float, unit: str, below: float | None, inclusive: bool) -> Any:
    return {"name": name, "value": value, "unit": unit, "below": below, "inclusive": inclusive}


def test_the_page_shows_each_figure_with_its_target_and_verdict() -> None:
    document = {
        "environment": ENVIRONMENT,
        "results": [
            {
                "script": "bench_x.py",
                "figures": [
                    _figure("import", 4.5, "ms", 10, False),
                    _figure("call", 1234.5, "ns", None, False),
                    _figure("  / direct", 0.61, "x", 0.5, True),
                ],
                "notes": ["part 2 skipped"],
            }
        ],
    }
    assert render(document) == textwrap.dedent(
        f"""\
        {bench.HEADER}

        Taken on 2026-11-23 at commit `0123456789ab`, on Linux x86_64, 2 CPUs, Python 3.11.9, \
torch 2.13.0+cpu, flashinfer-python 0.7.2.post1.

        #### `bench_x.py`

        | measure | figure | target | met |
        | --- | ---: | --- | --- |
        | import | 4.50 ms | < 10 ms | yes |
        | call | 1,234.5 ns |  |  |
        | &nbsp;&nbsp;/ direct | 0.61x | ≤ 0.5x | **no** |

        - part 2 skipped
        """
    )


# --- the driver ----------------------------------------------------------------------------


def _script(folder: Path, name: str, body: str) -> None:
    (folder / name).write_text(textwrap.dedent(body), encoding="utf-8")


WRITES = """\
    import json, sys
    path = sys.argv[sys.argv.index("--json") + 1]
    figure = {"name": "x", "value": 3.0, "unit": "ms", "below": 5, "inclusive": False}
    document = {"script": __file__.rsplit("/", 1)[-1], "figures": [figure], "notes": []}
    open(path, "w").write(json.dumps(document))
"""


def test_write_runs_every_script_and_renders_the_page(tmp_path: Path) -> None:
    _script(tmp_path, "bench_a.py", WRITES)
    _script(tmp_path, "bench_b.py", WRITES)
    _script(tmp_path, "_helper.py", "raise SystemExit(3)\n")  # not a bench_*.py: not run
    assert bench.main(["--write"], folder=tmp_path) == 0
    document = bench.load(tmp_path / "results.json")
    assert [result["script"] for result in document["results"]] == ["bench_a.py", "bench_b.py"]
    assert document["environment"]["commit"] == "unknown (not a git checkout)"
    assert (tmp_path / "results.md").read_text(encoding="utf-8") == render(document)
    assert bench.main(["--check"], folder=tmp_path) == 0


@pytest.mark.parametrize(
    "body",
    [
        "raise SystemExit(2)\n",  # fails
        "pass\n",  # writes nothing
        WRITES.replace("json.dumps(document)", "'not json'"),
        WRITES.replace('"ms"', '"seconds"'),
    ],
)
def test_a_failing_script_writes_nothing(tmp_path: Path, body: str) -> None:
    _script(tmp_path, "bench_a.py", WRITES)
    _script(tmp_path, "bench_b.py", body)
    assert bench.main(["--write"], folder=tmp_path) == 1
    assert not (tmp_path / "results.json").exists()
    assert not (tmp_path / "results.md").exists()


def test_check_fails_on_a_page_edited_by_hand(tmp_path: Path) -> None:
    _script(tmp_path, "bench_a.py", WRITES)
    assert bench.main(["--write"], folder=tmp_path) == 0
    page = tmp_path / "results.md"
    page.write_text(page.read_text(encoding="utf-8").replace("3.00 ms", "2.00 ms"), "utf-8")
    assert bench.main(["--check"], folder=tmp_path) == 1


def test_an_argument_is_required() -> None:
    with pytest.raises(SystemExit):
        bench.main([])


# --- one script run alone (--only) ----------------------------------------------------------


def test_only_runs_that_script_and_merges_its_figures_into_the_results(tmp_path: Path) -> None:
    _script(tmp_path, "bench_a.py", WRITES)
    _script(tmp_path, "bench_c.py", WRITES)
    assert bench.main(["--write"], folder=tmp_path) == 0
    before = bench.load(tmp_path / "results.json")
    _script(tmp_path, "bench_a.py", "raise SystemExit(3)\n")  # not run: it would fail
    _script(tmp_path, "bench_b.py", WRITES.replace("3.0", "4.0"))  # a new script
    _script(tmp_path, "bench_c.py", WRITES.replace("3.0", "2.0"))
    only = ["--only", "bench_b.py", "--only", "bench_c.py"]
    assert bench.main(["--write", *only], folder=tmp_path) == 0
    after = bench.load(tmp_path / "results.json")
    assert after["environment"] == before["environment"]
    assert [result["script"] for result in after["results"]] == [
        "bench_a.py",
        "bench_b.py",
        "bench_c.py",
    ]
    assert after["results"][0] == before["results"][0]
    assert [result["figures"][0]["value"] for result in after["results"]] == [3.0, 4.0, 2.0]
    for result in after["results"][1:]:
        (note,) = result["notes"]
        assert note.startswith("taken alone on ")
        assert f"--only {result['script']}" in note
    assert bench.main(["--check"], folder=tmp_path) == 0


@pytest.mark.parametrize(
    ("only", "written", "environment"),
    [
        ("bench_z.py", True, {}),  # no such script
        ("bench_a.py", False, {}),  # no results to merge into
        ("bench_a.py", True, {"python": "3.99.0"}),  # taken with another Python
        ("bench_a.py", True, {"machine": "elsewhere"}),
    ],
)
def test_only_refuses_what_it_cannot_merge(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    only: str,
    written: bool,
    environment: dict[str, str],
) -> None:
    _script(tmp_path, "bench_a.py", WRITES)
    if written:
        assert bench.main(["--write"], folder=tmp_path) == 0
    before = [(path.name, path.read_bytes()) for path in sorted(tmp_path.iterdir())]
    now = bench.environment(tmp_path)
    monkeypatch.setattr(bench, "environment", lambda root: {**now, **environment})
    assert bench.main(["--write", "--only", only], folder=tmp_path) == 1
    assert [(path.name, path.read_bytes()) for path in sorted(tmp_path.iterdir())] == before


def test_only_goes_with_write() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--check", "--only", "bench_a.py"])


# --- the committed results ------------------------------------------------------------------


def test_the_committed_page_is_what_the_committed_data_renders_to() -> None:
    assert bench.main(["--check"]) == 0


def test_the_committed_results_cover_every_benchmark_script() -> None:
    document = bench.load()
    assert [result["script"] for result in document["results"]] == [
        script.name for script in bench.scripts()
    ]
    assert set(document["environment"]) == set(bench.ENVIRONMENT)


def test_the_committed_results_were_taken_at_a_commit_of_this_history() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist)")
    commit = bench.load()["environment"]["commit"].removesuffix("+changes")
    done = subprocess.run(
        ["git", "-C", str(ROOT), "merge-base", "--is-ancestor", commit, "HEAD"], check=False
    )
    assert done.returncode == 0, commit


def test_the_docs_include_the_results_page() -> None:
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert '--8<-- "bench/results.md"' in text
