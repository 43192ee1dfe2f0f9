"""fi-compat's answers travel to other processes: pickle and deepcopy give equal, read-only copies.

An engine probes once and hands ``Capabilities`` to its workers (``multiprocessing`` pickles
them); tests copy recorded releases. Every frozen answer round-trips equal, its mappings
still read-only; a fake, the log of what reached it, refuses to be deep-copied or pickled
with a typed error instead of becoming a log that no longer grows.
"""

from __future__ import annotations

import copy
import pickle
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fi_compat import get_capabilities
from fi_compat.attention import _reach
from fi_compat.errors import UnsupportedOperationError
from fi_compat.testing import available_releases, fake_flashinfer, load_release

RELEASES = available_releases()


def _round_trips(value: Any) -> list[Any]:
    return [copy.deepcopy(value), pickle.loads(pickle.dumps(value)), copy.copy(value)]


def _read_only(value: Any) -> None:
    """Every mapping field of a frozen answer is still a MappingProxyType."""
    for name, item in vars(value).items():
        if isinstance(item, dict):
            raise AssertionError(f"{type(value).__name__}.{name} came back writable")


@settings(max_examples=12, deadline=None)
@given(release=st.sampled_from(RELEASES))
def test_capabilities_of_any_release_round_trip(release: str) -> None:
    with fake_flashinfer(release):
        caps = get_capabilities()
        for copied in _round_trips(caps):
            assert copied == caps
            assert isinstance(copied.attention, MappingProxyType)
            assert isinstance(copied.comm.shapes, MappingProxyType)
            _read_only(copied)
            _read_only(copied.comm)


def test_the_installed_capabilities_round_trip() -> None:
    caps = get_capabilities()
    for copied in _round_trips(caps):
        assert copied == caps


@settings(max_examples=12, deadline=None)
@given(release=st.sampled_from(RELEASES))
def test_recorded_releases_round_trip(release: str) -> None:
    record = load_release(release)
    for copied in _round_trips(record):
        assert copied == record
        _read_only(copied)
        assert copied.accepts("allreduce_fusion", "pattern") == record.accepts(
            "allreduce_fusion", "pattern"
        )


def test_measured_reach_round_trips() -> None:
    release = _reach.measured_releases()[-1]
    for family in ("BatchPrefillWithPagedKVCacheWrapper", "BatchDecodeWithPagedKVCacheWrapper"):
        facts = _reach.family_reach(release, family)
        assert facts is not None
        for copied in _round_trips(facts):
            assert copied == facts


@pytest.mark.parametrize("operation", [copy.deepcopy, pickle.dumps], ids=["deepcopy", "pickle"])
def test_a_fake_refuses_to_become_a_log_that_no_longer_grows(operation: Any) -> None:
    with fake_flashinfer(RELEASES[-1]) as fake:
        with pytest.raises(UnsupportedOperationError, match=r"list\(fake\.calls\)"):
            operation(fake)
        shallow = copy.copy(fake)  # shares the log: still sees every call
        assert shallow.calls is fake.calls
        assert shallow.kernel_plans is fake.kernel_plans
        assert shallow.record is fake.record
