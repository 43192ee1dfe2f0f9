"""The suite's collection order (tests/conftest.py): the costliest files first, nothing lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_every_costly_file_named_exists() -> None:
    assert len(set(FIRST)) == len(FIRST)
    for path in FIRST:
        assert (ROOT / path).is_file(), path


def test_the_costliest_files_are_collected_first(request: pytest.FixtureRequest) -> None:
    rank = {str(ROOT / path): place for place, path in enumerate(FIRST)}
    ranks = [rank.get(str(item.path), len(FIRST)) for item in request.session.items]
    assert ranks == sorted(ranks)
    assert any(item.path == Path(__file__) for item in request.session.items)
