"""``fi-compat scan`` on the engines' published sources: SGLang 0.5.23 and vLLM 0.33.0.

The sources are test data fetched at test time (the wheels, as the attention tests get
them: ``tests/support/engine_wheels.py``; cached, never committed); where no wheel is here
and no package index answers, the tests skip with the reason. Each guide's call-site table
names the engine's FlashInfer call sites; the scan must find a use in each of them, and the
guide's scan-sites table (file:line and verdict for two bumps) must be what a scan of the
published source says. The JSON output validates against the shipped schema and the SARIF
output against the SARIF 2.1.0 schema.

The unpacking and the scans run in a fresh interpreter made once per input
(:mod:`tests.support.engine_scans`); the tests hold what it prints, read back, against the
guides.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from fi_compat.upgrade import Category, ScanResult, to_sarif
from tests.support.engine_scans import sources
from tests.support.scan_sites import (
    DOWNGRADE,
    GUIDES,
    PAIRS,
    found_at,
    listed_sites,
    render,
    table_in,
)
from tools.releases import RegistryUnreachableError

SARIF_SCHEMA = Path(__file__).resolve().parent / "data" / "sarif-schema-2.1.0.json"

Scanned = tuple[str, dict[tuple[str, str], ScanResult]]


#: Each engine's scans, read once per process: pytest may set the module fixture up again
#: for a parameter when the tests of the two engines interleave.
_SCANNED: dict[str, Scanned] = {}


@pytest.fixture(scope="module", params=sorted(GUIDES))
def engine(request: pytest.FixtureRequest) -> Scanned:
    name = str(request.param)
    if name not in _SCANNED:
        try:
            results = sources(name)
        except RegistryUnreachableError as error:  # pragma: no cover - depends on the network
            pytest.skip(f"the {name} wheel is not cached and the registry is unreachable: {error}")
        assert [*results] == [*PAIRS, DOWNGRADE]
        _SCANNED[name] = (name, results)
    return _SCANNED[name]


def test_every_listed_call_site_is_found(engine: Scanned) -> None:
    name, results = engine
    guide = GUIDES[name]
    sites = listed_sites(guide)
    assert len(sites) >= 7  # the tables' rows that call FlashInfer directly
    for pair in PAIRS:
        for site in sites:
            found = found_at(site, results[pair])
            assert found, f"{name} {pair}: nothing found at {site.file}: {site.functions}"
            assert all(f.line > 0 and f.column > 0 for f in found)


def test_the_guide_table_is_what_the_scan_says(engine: Scanned) -> None:
    name, results = engine
    guide = GUIDES[name]
    assert table_in(guide) == render(guide, results), (
        f"{guide.path.name} is stale: run python -m tests.support.scan_sites --write"
    )


def test_the_bumps_say_what_the_guides_say(engine: Scanned) -> None:
    _, results = engine
    first = results[PAIRS[0]]
    # Both engines import flashinfer.comm, whose CUDA-runtime assertion ends in 0.6.14,
    # and both import TorchDistBackend from flashinfer.comm.mnnvl, where 0.6.16 moved it;
    # both ask for group= (a call's keyword, or a signature probe for it).
    hazard = [f for f in first.findings if f.rule == "import-hazard"]
    assert hazard
    assert {f.release for f in hazard if "AssertionError" in f.message} == {"0.6.14"}
    moved = [f for f in first.findings if f.rule == "name-moved" and "TorchDist" in f.target]
    assert {f.release for f in moved} == {"0.6.16"}
    group = [f for f in first.findings if "(group=" in f.message or "'group'" in f.message]
    assert {f.release for f in group} == {"0.6.10.post1"}
    older = results[PAIRS[1]]
    arrived = {f.target for f in older.findings if f.rule in ("name-added", "guard-flips")}
    assert "flashinfer.comm.allreduce_fusion" in arrived


def test_a_downgrade_after_the_swap_is_judged_as_fi_compat_serves_it(engine: Scanned) -> None:
    _, results = engine
    down = results[DOWNGRADE]
    assert down.fi_compat
    rules = {f.rule for f in down.findings}
    assert "fi-compat-maps" in rules
    hazards = [f for f in down.findings if f.rule == "import-hazard"]
    assert not [f for f in hazards if f.target.startswith("flashinfer.comm")]


def test_json_validates_against_the_shipped_schema(engine: Scanned) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    _, results = engine
    schema: Any = json.loads(
        resources.files("fi_compat.upgrade").joinpath("scan.schema.json").read_text("utf-8")
    )
    jsonschema.Draft202012Validator.check_schema(schema)
    for result in results.values():
        jsonschema.validate(result.to_dict(), schema, cls=jsonschema.Draft202012Validator)


def test_sarif_validates_against_the_sarif_schema(engine: Scanned) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    _, results = engine
    schema = json.loads(SARIF_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    validator = jsonschema.Draft4Validator(schema)
    for result in results.values():
        for show_unchanged in (False, True):
            log = to_sarif(result, show_unchanged=show_unchanged)
            validator.validate(log)
            run = log["runs"][0]
            rules = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
            assert all(rules[r["ruleIndex"]] == r["ruleId"] for r in run["results"])
            levels = [r["level"] for r in run["results"]]
            assert levels.count("none") == (
                result.count(Category.UNCHANGED) if show_unchanged else 0
            )
    down = to_sarif(results[DOWNGRADE])["runs"][0]["results"]
    assert "error" in {r["level"] for r in down}
