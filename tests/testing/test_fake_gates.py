"""The fake's release gates against what the recorded and measured data shows.

Each gate of :data:`fi_compat.testing._gates.GATES` is a fact read in FlashInfer's source
that the fake's workspace model or decode wrapper turns on at a release. Where the recorded
signatures (``fi_compat/_records``) or the measured reach data
(``fi_compat/_measured/reach.json``) show the same change, the first release they show it
in must be the gate's release. Five gates are arithmetic or checks inside a function body,
which neither the records nor the measurements carry: :data:`UNRECORDED` names them and
says why, and the test only checks that their releases are recorded ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from packaging.version import Version

from fi_compat._records import ReleaseRecord, available_releases, load_release
from fi_compat._surface import DECODE
from fi_compat.attention import _reach
from fi_compat.testing._gates import (
    AUTO_ASKS_MULTICAST,
    CUTE_DSL_TENSOR_CORES,
    GATES,
    PRIMS_TS_REMOVED,
    PRIMS_TS_TENSOR_CORES,
    SYMM_DEVICE_MEMORY,
    TORCH_SYMMETRIC_MEMORY,
    FakeGate,
)
from fi_compat.testing._runtime import _tensor_core_backends


def _finals() -> list[str]:
    """The recorded final releases: the fake's gates and shapes are stated for those (a
    pre-release is recorded and faked, but has no measured sizes or layers)."""
    return [r for r in available_releases() if not Version(r).is_prerelease]


COMM, MNNVL = "flashinfer.comm", "flashinfer.comm.mnnvl"
TRTLLM_WORKSPACE = "TRTLLMAllReduceFusionWorkspace"
MNNVL_WORKSPACE = "MNNVLAllReduceFusionWorkspace"
GUIDE = Path(__file__).parents[2] / "docs" / "guide" / "testing.md"

#: The gates the data cannot show, and why.
UNRECORDED = {
    "cache-buf-grows": "a condition inside flashinfer.utils._get_cache_buf",
    "multicast-only-when-asked": "a check inside SymmDeviceMemory.__init__",
    "confidential-compute": (
        "a call of flashinfer.utils.is_confidential_compute inside the factory and the "
        "TRT-LLM workspace; flashinfer.utils is not recorded"
    ),
    "mnnvl-alignment": "arithmetic inside MNNVLAllReduceFusionWorkspace.__init__",
    "tight-moe-tile-bound": "arithmetic inside the CuTe DSL MoE's get_max_num_tiles",
    "two-shot-element-size": "arithmetic inside the TRT-LLM IPC workspace allocation",
}


def _first(
    releases: Iterable[str], has: Callable[[str], bool], after: FakeGate | None = None
) -> str:
    """The first of ``releases`` (from ``after``'s release on) for which ``has`` is true."""
    start = Version("0") if after is None else after.version
    found = [release for release in releases if Version(release) >= start and has(release)]
    assert found, "no release has it"
    return found[0]


def _record(release: str) -> ReleaseRecord:
    return load_release(release)


def _attributes(release: str, name: str) -> tuple[str, ...]:
    cls = _record(release).comm_class(name)
    return () if cls is None else cls.attributes


def _methods(release: str, name: str) -> set[str]:
    found = _record(release).public_names(COMM).get(name)
    if found is None or found.cls is None:
        return set()
    return {method for method, record in found.cls.methods.items() if record is not None}


def _decode_backends(release: str) -> set[str]:
    family = _reach.family_reach(release, DECODE.key)
    return set() if family is None else set(family.backends)


def _torch_symmetric_memory() -> str:
    return _first(_finals(), lambda r: "tensor" in _attributes(r, MNNVL_WORKSPACE))


def _symm_device_memory() -> str:
    checkpoints = _first(
        _finals(),
        lambda r: all(
            "checkpoint_prepare" in _methods(r, n) for n in (TRTLLM_WORKSPACE, MNNVL_WORKSPACE)
        ),
    )
    no_tensor = _first(
        _finals(),
        lambda r: "tensor" not in _attributes(r, MNNVL_WORKSPACE),
        after=TORCH_SYMMETRIC_MEMORY,
    )
    assert checkpoints == no_tensor
    return checkpoints


def _auto_asks_multicast() -> str:
    asks = ("is_multicast_supported", "all_ranks_support_mnnvl")
    return _first(
        _finals(),
        lambda r: all(name in _record(r).public_names(MNNVL) for name in asks),
    )


def _cute_dsl() -> str:
    return _first(_reach.measured_releases(), lambda r: "cute-dsl" in _decode_backends(r))


def _prims_ts() -> str:
    return _first(_reach.measured_releases(), lambda r: "prims-ts" in _decode_backends(r))


def _prims_ts_removed() -> str:
    return _first(
        _reach.measured_releases(),
        lambda r: "prims-ts" not in _decode_backends(r),
        after=PRIMS_TS_TENSOR_CORES,
    )


#: FakeGate name -> the first release the data shows it in.
SHOWN: dict[str, Callable[[], str]] = {
    TORCH_SYMMETRIC_MEMORY.name: _torch_symmetric_memory,
    CUTE_DSL_TENSOR_CORES.name: _cute_dsl,
    SYMM_DEVICE_MEMORY.name: _symm_device_memory,
    AUTO_ASKS_MULTICAST.name: _auto_asks_multicast,
    PRIMS_TS_TENSOR_CORES.name: _prims_ts,
    PRIMS_TS_REMOVED.name: _prims_ts_removed,
}


def test_every_gate_is_checked_or_said_to_be_unrecorded() -> None:
    names = [gate.name for gate in GATES]
    assert len(set(names)) == len(names)
    assert set(SHOWN).isdisjoint(UNRECORDED)
    assert set(SHOWN) | set(UNRECORDED) == set(names)
    assert {gate.name for gate in GATES if gate.evidence is None} == set(UNRECORDED)


def test_the_gates_are_recorded_releases_in_order() -> None:
    assert [gate.version for gate in GATES] == sorted(gate.version for gate in GATES)
    for gate in GATES:
        assert gate.introduced_in in available_releases(), gate
        assert gate.what, gate
        assert gate.evidence is None or gate.evidence, gate


@pytest.mark.parametrize("gate", [g for g in GATES if g.name in SHOWN], ids=lambda g: g.name)
def test_the_data_shows_the_gate_at_its_release(gate: FakeGate) -> None:
    assert SHOWN[gate.name]() == gate.introduced_in


def test_the_mnnvl_workspace_before_torch_symmetric_memory_keeps_its_multicast_handle() -> None:
    before = [r for r in _finals() if Version(r) < TORCH_SYMMETRIC_MEMORY.version]
    recorded = [r for r in before if _record(r).comm_class(MNNVL_WORKSPACE) is not None]
    assert recorded
    for release in recorded:
        assert "mcast_buffer_handle" in _attributes(release, MNNVL_WORKSPACE), release


def test_tensor_cores_are_forced_only_for_measured_decode_backends() -> None:
    """Each backend the fake's decode wrapper forces tensor cores on for is a backend the
    release's decode wrapper was measured with (cute-dsl from 0.6.13, prims-ts in 0.7.0 and
    0.7.0.post1)."""
    for release in _reach.measured_releases():
        forced = set(_tensor_core_backends(Version(release)))
        assert forced <= _decode_backends(release), release


def test_the_testing_guide_lists_every_gate() -> None:
    rows = re.findall(r"^\| `([\w-]+)` \| ([\w.]+) \| .* \| (.+) \|$", GUIDE.read_text(), re.M)
    listed = {name: (release, shown != "not in the data") for name, release, shown in rows}
    assert listed == {gate.name: (gate.introduced_in, gate.evidence is not None) for gate in GATES}
