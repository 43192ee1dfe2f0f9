"""A deterministic wrapper after copy, deepcopy, pickle, partial fast plans and odd first arguments.

The same doubles and made-up measurements as ``test_wrapper.py`` (imported from it, fixtures
included), tried the way engine code treats objects: copied, frozen into partials, handed
to the fast plan directly.
"""

from __future__ import annotations

import copy
import functools
import pickle
from typing import Any

import pytest

from fi_compat.attention import (
    PlannerConfigError,
    deterministic_wrapper,
    fast_decode_plan,
    is_deterministic_wrapper,
)
from fi_compat.capabilities import Capabilities
from fi_compat.errors import UnsupportedOperationError
from tests.attention.test_wrapper import (
    DISABLE,
    FAST_CALLS,
    FIXED,
    BatchDecodeWithPagedKVCacheWrapper,
    BatchPrefillWithPagedKVCacheWrapper,
    caps,
    measured,
    on,
    release_fast_decode_plan,
)

__all__ = ["caps", "measured", "on"]  # the fixtures, used by name below


# ------------------------------------------------------------ fast plans with frozen keywords


@pytest.mark.parametrize("name", ["plan", "begin_forward"])
def test_a_fast_plan_with_frozen_agreeing_settings_is_served(
    on: None, caps: Capabilities, name: str
) -> None:
    wrapper = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper(), capabilities=caps)
    frozen = functools.partial(
        release_fast_decode_plan, wrapper, fixed_split_size=2048, disable_split_kv=False
    )
    setattr(wrapper, name, frozen)
    installed = getattr(wrapper, name)
    assert installed.func is release_fast_decode_plan  # what SGLang checks
    installed(7)
    installed(8)
    assert [(c["indptr"], c[FIXED], c[DISABLE]) for c in FAST_CALLS] == [
        (7, 2048, False),
        (8, 2048, False),
    ]


@pytest.mark.parametrize(
    "frozen",
    [
        {FIXED: 4096},
        {DISABLE: True},
        {FIXED: -1, DISABLE: True},
        {FIXED: "2048"},
    ],
    ids=repr,
)
def test_a_fast_plan_with_frozen_other_settings_is_refused_when_assigned(
    on: None, caps: Capabilities, frozen: dict[str, Any]
) -> None:
    wrapper = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper(), capabilities=caps)
    with pytest.raises(PlannerConfigError, match="agree"):
        wrapper.begin_forward = functools.partial(  # type: ignore[method-assign]
            release_fast_decode_plan, wrapper, **frozen
        )
    wrapper.begin_forward(1, 2)  # still the settled plan
    assert wrapper.plans[-1][FIXED] == 2048
    assert FAST_CALLS == []


# ------------------------------------------------------------------------- copies, pickle


def test_a_copy_plans_itself_with_the_same_settings(on: None, caps: Capabilities) -> None:
    inner = BatchDecodeWithPagedKVCacheWrapper()
    wrapper = deterministic_wrapper(inner, capabilities=caps)
    twin = copy.copy(wrapper)
    assert is_deterministic_wrapper(twin)
    assert type(twin) is type(wrapper)
    twin.plan(1, 2)
    assert vars(twin).get("_planned") is True  # the copy was planned ...
    assert "_planned" not in vars(inner)  # ... not the original
    assert twin.plans[-1][FIXED] == 2048  # and with the settings
    for name in ("plan", "begin_forward"):
        assert getattr(twin, name).__self__ is twin


def test_a_deep_copy_plans_itself_with_its_own_state(on: None, caps: Capabilities) -> None:
    inner = BatchDecodeWithPagedKVCacheWrapper()
    wrapper = deterministic_wrapper(inner, capabilities=caps)
    twin = copy.deepcopy(wrapper)
    twin.plan(1, 2)
    assert inner.plans == []
    assert twin.plans[-1][FIXED] == 2048
    assert "_planned" not in vars(inner)


def test_a_copy_keeps_its_installed_fast_plan_bound_to_itself(on: None, caps: Capabilities) -> None:
    wrapper = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper(), capabilities=caps)
    wrapper.begin_forward = functools.partial(  # type: ignore[method-assign]
        release_fast_decode_plan, wrapper
    )
    for twin in (copy.copy(wrapper), copy.deepcopy(wrapper)):
        FAST_CALLS.clear()
        installed: Any = twin.begin_forward  # the settled fast plan, a functools.partial
        installed(5)
        assert [{"self": twin, "indptr": 5, FIXED: 2048, DISABLE: False}] == FAST_CALLS
        assert installed.func is release_fast_decode_plan


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickling_a_deterministic_wrapper_is_refused(
    on: None, caps: Capabilities, protocol: int
) -> None:
    wrapper = deterministic_wrapper(BatchDecodeWithPagedKVCacheWrapper(), capabilities=caps)
    with pytest.raises(UnsupportedOperationError, match="pickle"):
        pickle.dumps(wrapper, protocol=protocol)


# ------------------------------------------------------------- fast_decode_plan's first argument


@pytest.mark.parametrize(
    "first",
    [None, object(), "wrapper", 3, BatchDecodeWithPagedKVCacheWrapper, "prefill"],
    ids=["None", "object", "str", "int", "the class", "a prefill wrapper"],
)
@pytest.mark.parametrize("deterministic", [False, True])
def test_fast_decode_plan_refuses_what_is_no_decode_wrapper(
    caps: Capabilities, first: Any, deterministic: bool
) -> None:
    from fi_compat import determinism

    if first == "prefill":
        first = BatchPrefillWithPagedKVCacheWrapper()
    with determinism.deterministic(deterministic), pytest.raises(PlannerConfigError):
        fast_decode_plan(first, 7)
    assert FAST_CALLS == []
