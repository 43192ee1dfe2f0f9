"""``fi_compat._surface``: the one description of FlashInfer, checked against every release.

Two kinds of test. The table must be true: every gate holds from its release on and never
before it, and every home of every symbol appears in the release its ``since`` names, as
recorded from the real wheels. And the table must be the only one: no other module of the
package spells a FlashInfer function, class or submodule name in its code, so a rename or
a new keyword upstream is a change to ``_surface.py`` alone.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from packaging.version import Version

from fi_compat import _surface
from fi_compat._surface import (
    ALL_SYMBOLS,
    ATTENTION_WRAPPERS,
    GATES,
    TORCH_DIST_BACKEND,
    Symbol,
    symbol_named,
)
from fi_compat.errors import InvalidArgumentError
from fi_compat.testing import available_releases, load_release
from fi_compat.testing._releases import ReleaseRecord

RELEASES = available_releases()


def _records() -> Iterator[ReleaseRecord]:
    for release in RELEASES:
        yield load_release(release)


@pytest.mark.parametrize("gate", list(GATES), ids=str)
def test_each_gate_holds_from_its_release_on_and_never_before(gate: str) -> None:
    introduced = Version(GATES[gate].introduced_in)
    wrong = [
        f"{record.release}: has={record.has(gate)}"
        for record in _records()
        if record.has(gate) != (record.version >= introduced)
    ]
    assert not wrong, f"gate {gate} ({GATES[gate].introduced_in}) disagrees with {wrong}"


def test_every_gate_release_is_a_recorded_release() -> None:
    assert {gate.introduced_in for gate in GATES.values()} <= set(RELEASES)


def _has_home(record: ReleaseRecord, symbol: Symbol, home: _surface.Home) -> bool:
    if symbol is TORCH_DIST_BACKEND:
        backend = record.torch_dist_backend
        return backend is not None and backend.module == home.module
    if symbol in ATTENTION_WRAPPERS:
        return record.attention.get(home.name) is not None
    if symbol.kind == "function":
        return record.comm_functions.get(home.name) is not None
    if symbol.kind == "enum":
        return record.comm_enums.get(home.name) is not None
    return record.comm_classes.get(home.name) is not None


@pytest.mark.parametrize("symbol", ALL_SYMBOLS, ids=lambda symbol: symbol.key)
def test_each_home_first_appears_in_the_release_its_since_names(symbol: Symbol) -> None:
    for home in symbol.homes:
        first = next((r.release for r in _records() if _has_home(r, symbol, home)), None)
        assert first == home.since, f"{home.dotted}: first recorded in {first}"


@pytest.mark.parametrize("symbol", ALL_SYMBOLS, ids=lambda symbol: symbol.key)
def test_every_name_of_a_symbol_finds_it(symbol: Symbol) -> None:
    assert symbol_named(symbol.key) is symbol
    assert all(symbol_named(name) is symbol for name in symbol.names)
    assert symbol.homes[-1].since == symbol.since
    assert [Version(home.since) for home in symbol.homes] == sorted(
        (Version(home.since) for home in symbol.homes), reverse=True
    ), "homes must be listed newest first"


def test_an_unknown_gate_is_refused_by_the_loader() -> None:
    record = load_release(RELEASES[-1])
    with pytest.raises(InvalidArgumentError, match="gate"):
        record.has("no_such_gate")
