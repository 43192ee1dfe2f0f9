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
