"""The shipped ``reach.json`` against a fresh measurement of the real-release matrix's wheels.

Each release of :data:`tests.support.release_harness.RELEASES` is measured again by the
reach tool (``tools/reach.py``: one subprocess per release, its compiled-module loaders
replaced by recorders) and must give exactly the shipped entry. Then a few facts the
runtime relies on are checked by name, so that a regression in the tool or the data shows
as a readable failure. Without access to the package registry the group is skipped,
saying so.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

from tests.support.release_harness import RELEASES
from tools.reach import OUTPUT, ProbeError, measure_all
from tools.releases import RegistryUnreachableError

pytestmark = pytest.mark.release_matrix

PAGED = "BatchPrefillWithPagedKVCacheWrapper"
RAGGED = "BatchPrefillWithRaggedKVCacheWrapper"
DECODE = "BatchDecodeWithPagedKVCacheWrapper"
MLA = "BatchMLAPagedAttentionWrapper"
POD = "PODWithPagedKVCacheWrapper"
NO_KEYWORDS = "plan takes no fixed_split_size/disable_split_kv"


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    """Every matrix release measured once (two subprocesses at a time)."""
    entries, errors = measure_all(list(RELEASES), workers=2)
    unreachable = [e for e in errors.values() if RegistryUnreachableError.__name__ in e]
    if unreachable:
        pytest.skip(f"package registry unreachable, real releases not measured: {unreachable[0]}")
    if errors:
        raise ProbeError("\n".join(f"{v}: {e}" for v, e in sorted(errors.items())))
    return entries


@pytest.fixture(scope="module")
def shipped() -> dict[str, Any]:
    releases: dict[str, Any] = json.loads(OUTPUT.read_text(encoding="utf-8"))["releases"]
    return releases


@pytest.mark.parametrize("version", list(RELEASES))
def test_measurement_equals_the_shipped_entry(
    measured: dict[str, Any], shipped: dict[str, Any], version: str
) -> None:
    assert measured[version] == shipped[version]


def _verdict(entry: dict[str, Any], family: str, backend: str) -> str:
    verdict: str = entry[family]["backends"][backend]["verdict"]
    return verdict


@pytest.mark.parametrize("version", list(RELEASES))
def test_fa2_reaches_on_prefill_and_tensor_core_decode(
    measured: dict[str, Any], version: str
) -> None:
    entry = measured[version]
    for family in (PAGED, RAGGED, DECODE):
        assert entry[family]["plan_takes"] is True
        assert _verdict(entry, family, "fa2") == "reaches", (family, entry[family])
    assert _verdict(entry, "fast_decode_plan", "fa2") == "reaches"


@pytest.mark.parametrize("version", list(RELEASES))
def test_fa3_drops_them(measured: dict[str, Any], version: str) -> None:
    entry = measured[version]
    assert _verdict(entry, PAGED, "fa3") == "dropped"
    assert entry[PAGED]["backends"]["fa3"]["detail"].endswith(
        "called without either setting in every run"
    )
    # auto resolves to fa3 on Hopper, so auto cannot promise the settings on prefill.
    assert _verdict(entry, PAGED, "auto") == "dropped"
    assert "determine_attention_backend='fa3'" in entry[PAGED]["backends"]["auto"]["detail"]


@pytest.mark.parametrize("version", list(RELEASES))
def test_mla_and_pod_take_no_split_keywords(measured: dict[str, Any], version: str) -> None:
    entry = measured[version]
    for family in (MLA, POD):
        assert entry[family]["plan_takes"] is False
        assert {b["detail"] for b in entry[family]["backends"].values()} == {NO_KEYWORDS}


def test_latest_release_facts(measured: dict[str, Any]) -> None:
    entry = measured["0.7.2.post1"]
    assert entry[PAGED]["default_backend"] == "auto"
    assert entry[PAGED]["backend_attribute"] == "_backend"
    assert entry[RAGGED]["backend_attribute"] == "_requested_backend"
    assert _verdict(entry, PAGED, "cudnn") == "dropped"
    assert _verdict(entry, RAGGED, "cutlass") == "dropped"
    assert _verdict(entry, DECODE, "trtllm-gen") == "dropped"
    # Decode's auto keeps fa2 whenever the split is pinned, whatever the device says.
    assert _verdict(entry, DECODE, "auto") == "reaches"
    # Ragged auto upgrades fa2 to cuDNN on Blackwell, and cuDNN's plan takes neither.
    assert _verdict(entry, RAGGED, "auto") == "dropped"
    assert "_blackwell_ragged_auto_upgrade='cudnn'" in entry[RAGGED]["backends"]["auto"]["detail"]
