"""Hostile input to :mod:`fi_compat.determinism`: the switch takes ``True`` or ``False`` only.

Before, ``set_deterministic("false")`` turned determinism on: ``bool("false")`` is True. Every
bad value below is refused with a typed error and leaves the switch as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

pytest.importorskip("torch", reason="needs torch")

from fi_compat import determinism
from fi_compat.errors import FiCompatError, InvalidArgumentError
from tests.support.values import NOT_BOOLS, NOT_STRS

Case = tuple[str, Callable[[], object]]


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before = determinism.is_deterministic()
    yield
    determinism.set_deterministic(before)


#: fi_compat.determinism: (id, call) -> InvalidArgumentError.
DETERMINISM_BAD: list[Case] = [
    *(
        (f"set_deterministic({v!r})", lambda v=v: determinism.set_deterministic(v))
        for v in NOT_BOOLS
    ),
    *((f"deterministic({v!r})", lambda v=v: determinism.deterministic(v)) for v in NOT_BOOLS),
    *(
        (f"ensure_fusion_allowed({v!r})", lambda v=v: determinism.ensure_fusion_allowed(v))
        for v in NOT_STRS
    ),
]


def test_the_table_counts() -> None:
    assert len(DETERMINISM_BAD) == 2 * len(NOT_BOOLS) + len(NOT_STRS) == 36


@pytest.mark.parametrize("before", [False, True])
@pytest.mark.parametrize(("case", "call"), DETERMINISM_BAD, ids=[c for c, _ in DETERMINISM_BAD])
def test_determinism_refuses_non_bools(case: str, call: Callable[[], object], before: bool) -> None:
    determinism.set_deterministic(before)
    with pytest.raises(InvalidArgumentError) as info:
        call()  # deterministic(...) refuses when called, before any ``with``
    assert type(info.value) is InvalidArgumentError
    assert isinstance(info.value, FiCompatError | TypeError)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("expected ")
    assert determinism.is_deterministic() is before  # the switch is untouched


def test_real_bools_still_work() -> None:
    for value in (True, False):
        determinism.set_deterministic(value)
        assert determinism.is_deterministic() is value
        with determinism.deterministic(not value):
            assert determinism.is_deterministic() is (not value)
        assert determinism.is_deterministic() is value
    determinism.set_deterministic(False)
    determinism.ensure_fusion_allowed("a fused allreduce")


def test_the_string_false_no_longer_turns_determinism_on() -> None:
    determinism.set_deterministic(False)
    with pytest.raises(InvalidArgumentError, match="enabled to be a bool"):
        determinism.set_deterministic("false")
    assert determinism.is_deterministic() is False
