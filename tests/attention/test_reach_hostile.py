"""Hostile arguments to ``split_reach`` and ``family_reach``: refused, typed, before any read.

``release`` is None or a str, ``family`` a non-empty str, ``backend`` a str. Anything else
raises exactly :class:`InvalidArgumentError` (a ``TypeError`` and a ``ValueError``) whose
message names the argument and shows what was found, and the measured data is not read.
A str that names nothing measured (an unmeasured or unparsable release, ``""`` as a
release or a backend, an unknown family or backend) keeps answering "nothing measured":
the installed FlashInfer's ``__version__`` and a wrapper's backend attribute arrive there
as they are. The answers for good arguments are those of the shipped ``reach.json``.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from fi_compat.attention import (
    FamilyReach,
    Reach,
    Verdict,
    _reach,
    family_reach,
    measured_releases,
    split_reach,
)
from fi_compat.errors import FiCompatError, InvalidArgumentError

RELEASE = "0.7.2.post1"
UNMEASURED = "0.3.1"
PAGED = "BatchPrefillWithPagedKVCacheWrapper"
GOOD: dict[str, Any] = {"release": RELEASE, "family": PAGED, "backend": "fa2"}


class Text(str):
    """A harmless str subclass."""


class HostileText(str):
    """A str subclass every method of which fails the test."""

    def _boom(self, *args: object, **kwargs: object) -> Any:
        raise AssertionError("a method of the str subclass ran")

    __hash__ = _boom
    __eq__ = _boom
    __ne__ = _boom
    __len__ = _boom
    __bool__ = _boom
    __str__ = _boom
    __format__ = _boom
    __iter__ = _boom
    __getitem__ = _boom
    __add__ = _boom
    __radd__ = _boom
    __contains__ = _boom
    __lt__ = _boom


#: Wrong for every argument.
WRONG_TYPES: list[Any] = [
    0,
    7,
    True,
    False,
    0.72,
    float("nan"),
    b"0.7.2",
    bytearray(b"fa2"),
    ["0.7.2"],
    ("0.7.2",),
    {"0.7.2": "fa2"},
    {"fa2"},
    object(),
    Version("0.7.2"),
    1j,
]
#: Per argument: what it refuses on top of :data:`WRONG_TYPES`.
EXTRA: dict[str, list[Any]] = {"release": [], "family": [None, ""], "backend": [None]}


def _hostile(*names: str) -> list[Any]:
    return [
        pytest.param(name, value, id=f"{name}-{type(value).__name__}-{index}")
        for name in names
        for index, value in enumerate([*WRONG_TYPES, *EXTRA[name]])
    ]


Call = Callable[..., object]


def _split_reach(release: Any, family: Any, backend: Any) -> object:
    return split_reach(release, family, backend)


def _family_reach(release: Any, family: Any, backend: Any) -> object:
    del backend  # family_reach takes none
    return family_reach(release, family)


CALLS = [
    pytest.param(_split_reach, id="split_reach"),
    pytest.param(_family_reach, id="family_reach"),
]


@pytest.fixture
def no_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the measured data is looked up at all."""

    def read(*args: object) -> Any:
        raise AssertionError(f"the measured data was read for {args!r}")

    monkeypatch.setattr(_reach, "_release", read)


def _refused(call: Call, name: str, value: object) -> InvalidArgumentError:
    arguments = {**GOOD, name: value}
    with pytest.raises(InvalidArgumentError) as info:
        call(**arguments)
    error = info.value
    assert type(error) is InvalidArgumentError
    assert isinstance(error, TypeError)
    assert isinstance(error, ValueError)
    assert isinstance(error, FiCompatError)
    message = str(error)
    assert message.startswith(f"expected {name} to be "), message
    assert f"found {reprlib.repr(value)}" in message, message
    assert "Fix: " in message, message
    return error


# ---------------------------------------------------------------------------- refused


@pytest.mark.parametrize(("name", "value"), _hostile("release", "family", "backend"))
def test_split_reach_refuses_before_the_data_is_read(
    name: str, value: object, no_read: None
) -> None:
    _refused(_split_reach, name, value)


@pytest.mark.parametrize(("name", "value"), _hostile("release", "family"))
def test_family_reach_refuses_before_the_data_is_read(
    name: str, value: object, no_read: None
) -> None:
    _refused(_family_reach, name, value)


@pytest.mark.parametrize(("name", "value"), _hostile("family", "backend"))
def test_a_wrong_argument_is_refused_whatever_the_release(
    name: str, value: object, no_read: None
) -> None:
    """With release None nothing is looked up; the other arguments are checked all the same."""
    arguments = {**GOOD, "release": None, name: value}
    with pytest.raises(InvalidArgumentError, match=rf"^expected {name} to be "):
        split_reach(**arguments)
    if name == "family":
        with pytest.raises(InvalidArgumentError, match=r"^expected family to be "):
            family_reach(None, value)  # type: ignore[arg-type]


def test_the_reported_case_is_refused_with_the_fix() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        split_reach(["0.7.2"], PAGED, "fa2")  # type: ignore[arg-type]
    message = str(info.value)
    assert "expected release to be None or a str" in message
    assert "found ['0.7.2'] of type list" in message
    assert "Fix: pass the version string FlashInfer reports" in message


def test_the_first_wrong_argument_is_named() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^expected release to be "):
        split_reach(1, 2, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"^expected family to be "):
        split_reach(RELEASE, 2, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"^expected backend to be "):
        split_reach(RELEASE, PAGED, 3)  # type: ignore[arg-type]


def test_an_unprintable_argument_is_still_described() -> None:
    class Unprintable:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    with pytest.raises(InvalidArgumentError, match=r"^expected backend to be .* of type "):
        split_reach(RELEASE, PAGED, Unprintable())  # type: ignore[arg-type]


_NOT_STR = st.one_of(
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.binary(),
    st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    st.tuples(st.text(max_size=3)),
    st.builds(object),
)


@given(
    st.sampled_from(["release", "family", "backend"]),
    _NOT_STR,
)
def test_no_object_but_a_str_passes(name: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"^expected {name} to be "):
        split_reach(**{**GOOD, name: value})


# ---------------------------------------------------------------------------- accepted


@given(st.text(max_size=40))
def test_any_str_release_answers(release: str) -> None:
    answer = split_reach(release, PAGED, "fa2")
    assert isinstance(answer, Reach)
    facts = family_reach(release, PAGED)
    if release not in measured_releases():
        assert answer.verdict is Verdict.UNKNOWN
        assert facts is None
    else:
        assert facts is not None


@given(st.text(min_size=1, max_size=40), st.text(max_size=20))
def test_any_nonempty_family_and_any_backend_answer(family: str, backend: str) -> None:
    answer = split_reach(RELEASE, family, backend)
    assert isinstance(answer, Reach)
    assert (answer.family, answer.backend) == (family, backend)


def test_the_measured_answers_are_unchanged() -> None:
    fa2 = split_reach(RELEASE, PAGED, "fa2")
    assert fa2.verdict is Verdict.REACHES
    assert fa2.reaches
    assert (fa2.release, fa2.family, fa2.backend) == (RELEASE, PAGED, "fa2")
    assert split_reach(RELEASE, PAGED, "fa3").verdict is Verdict.DROPPED
    facts = family_reach(RELEASE, PAGED)
    assert isinstance(facts, FamilyReach)
    assert facts.backends["fa2"] == fa2
    assert split_reach(release=RELEASE, family=PAGED, backend="fa2") == fa2


def test_nothing_measured_answers_as_before() -> None:
    unknown = split_reach(None, PAGED, "fa2")
    assert (unknown.release, unknown.verdict) == ("unknown", Verdict.UNKNOWN)
    assert unknown.detail == "flashinfer's version could not be read"
    assert family_reach(None, PAGED) is None

    unmeasured = split_reach(UNMEASURED, PAGED, "fa2")
    assert (unmeasured.release, unmeasured.verdict) == (UNMEASURED, Verdict.UNKNOWN)
    assert unmeasured.detail == f"fi-compat has no measurement of {PAGED} in flashinfer 0.3.1"
    assert family_reach(UNMEASURED, PAGED) is None

    family = split_reach(RELEASE, "BatchAttentionNobodyMeasured", "fa2")
    assert family.verdict is Verdict.UNKNOWN
    assert family_reach(RELEASE, "BatchAttentionNobodyMeasured") is None

    backend = split_reach(RELEASE, PAGED, "no-such-backend")
    assert backend.verdict is Verdict.UNKNOWN
    assert backend.detail.startswith(f"backend 'no-such-backend' was not measured for {PAGED}")


@pytest.mark.parametrize("release", ["", "not a version at all", "0.7.2\x00", "1" * 5000])
def test_a_release_flashinfer_may_report_is_no_error(release: str) -> None:
    """The installed FlashInfer's ``__version__`` reaches these functions as it is."""
    assert split_reach(release, PAGED, "fa2").verdict is Verdict.UNKNOWN
    assert family_reach(release, PAGED) is None


def test_an_empty_backend_is_not_measured() -> None:
    """A wrapper's backend attribute reaches ``split_reach`` as it is, ``""`` included."""
    answer = split_reach(RELEASE, PAGED, "")
    assert answer.verdict is Verdict.UNKNOWN
    assert answer.detail.startswith("backend '' was not measured")


def test_a_str_subclass_is_read_as_its_characters() -> None:
    answer = split_reach(Text(RELEASE), Text(PAGED), Text("fa2"))
    assert answer == split_reach(RELEASE, PAGED, "fa2")
    assert family_reach(Text(RELEASE), Text(PAGED)) == family_reach(RELEASE, PAGED)
    unknown = split_reach(Text(UNMEASURED), Text(PAGED), Text("fa2"))
    assert all(type(part) is str for part in (unknown.release, unknown.family, unknown.backend))


def test_no_method_of_a_str_subclass_runs() -> None:
    answer = split_reach(HostileText(RELEASE), HostileText(PAGED), HostileText("fa2"))
    assert answer.reaches
    assert family_reach(HostileText(RELEASE), HostileText(PAGED)) is not None
    unknown = split_reach(HostileText(UNMEASURED), HostileText(PAGED), HostileText("x"))
    assert unknown.verdict is Verdict.UNKNOWN
    assert all(type(part) is str for part in (unknown.release, unknown.family, unknown.backend))
    with pytest.raises(InvalidArgumentError, match=r"^expected family to be a non-empty str"):
        split_reach(RELEASE, HostileText(""), "fa2")
