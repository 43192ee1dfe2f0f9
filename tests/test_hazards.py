"""The release-range hazards agree with the recorded source of every release."""

from __future__ import annotations

import pytest
from packaging.version import Version

from fi_compat.hazards import RELEASE_HAZARDS
from fi_compat.testing import available_releases, load_release

# Each release-range hazard and the recorded import flag it stands for.
FLAG_OF = {"import-queries-gpu": "import_queries_gpu", "comm-needs-triton": "comm_requires_triton"}


def test_every_release_hazard_has_a_recorded_flag() -> None:
    assert {entry.id for entry in RELEASE_HAZARDS} == set(FLAG_OF)


@pytest.mark.parametrize("version", available_releases())
def test_release_hazard_ranges_match_the_records(version: str) -> None:
    record = load_release(version)
    for entry in RELEASE_HAZARDS:
        assert entry.flag == FLAG_OF[entry.id]
        recorded = getattr(record, FLAG_OF[entry.id]).value
        assert entry.applies_to(Version(version)) is recorded, (entry.id, version)
        assert entry.applies_to(Version("99.0")) is None  # unrecorded: not known


def test_every_import_hazard_the_records_hold_is_described_once() -> None:
    """The records' hazard fields and fi_compat._surface.IMPORT_HAZARDS name the same
    hazards: the report, the diff and the scan read what each one raises, when and what to
    do from that one table, and which releases have it from the records only."""
    import dataclasses

    from fi_compat._surface import IMPORT_HAZARDS
    from fi_compat.testing import HazardRecord

    record = load_release("0.7.2.post1")
    fields = {
        field.name
        for field in dataclasses.fields(record)
        if isinstance(getattr(record, field.name), HazardRecord)
    }
    assert fields == set(IMPORT_HAZARDS)
    assert len({hazard.id for hazard in IMPORT_HAZARDS.values()}) == len(IMPORT_HAZARDS)
    for flag, hazard in IMPORT_HAZARDS.items():
        assert hazard.flag == flag
        assert hazard.exceptions
        assert all(name.endswith("Error") for name in hazard.exceptions)


@pytest.mark.parametrize(
    ("flag", "release", "upgrade"),
    [
        ("import_queries_gpu", "0.6.8", "0.6.12"),
        ("import_queries_gpu", "0.6.14", "0.7.1"),
        ("comm_requires_triton", "0.6.10", "0.6.14"),
    ],
)
def test_a_release_hazard_names_the_next_release_without_it(
    flag: str, release: str, upgrade: str
) -> None:
    """Read from the records, not written by hand: the evidence and the next final release
    whose record lacks the hazard."""
    entry = next(entry for entry in RELEASE_HAZARDS if entry.flag == flag)
    record = load_release(release)
    message = entry.message(record)
    evidence = getattr(record, flag).evidence
    assert evidence
    assert evidence in message
    assert f"{upgrade} is the next release without it" in message
    assert not getattr(load_release(upgrade), flag).value
