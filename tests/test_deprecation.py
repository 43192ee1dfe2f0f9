"""The deprecation paths of fi-compat 0.3.0: old spellings still work, warn at the caller,
and name the release that removes them."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from fi_compat import Status, _deprecation, capabilities
from fi_compat._probe import locate
from fi_compat._signature import inspect_callable
from fi_compat.attention import FamilyReach, family_reach
from fi_compat.errors import InvalidArgumentError
from fi_compat.testing import fake_flashinfer, load_release
from fi_compat.testing.pytest_plugin import FakeFlashInferFactory
from tests.support import fakes
from tests.support.fakes import FakePackage


def test_locate_is_private_and_the_old_name_warns_from_the_callers_line() -> None:
    assert "locate" not in capabilities.__all__
    assert "locate" not in dir(capabilities)
    with pytest.warns(DeprecationWarning, match=r"capabilities\.locate.*0\.4\.0") as caught:
        old = capabilities.locate
    assert old is locate
    assert caught[0].filename == __file__
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        capabilities.nothing  # noqa: B018


def test_load_release_takes_release_and_the_old_keyword_warns() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_release(release="0.6.5").release == "0.6.5"
    with pytest.warns(DeprecationWarning, match=r"version=.*release=.*0\.4\.0") as caught:
        record = load_release(version="0.6.5")  # type: ignore[call-arg]
    assert record is load_release("0.6.5")
    assert caught[0].filename == __file__


def test_both_spellings_at_once_are_refused() -> None:
    with pytest.raises(TypeError, match="deprecated spelling"):
        load_release("0.6.5", version="0.6.5")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="deprecated spelling"):
        load_release(release="0.6.5", version="0.6.5")  # type: ignore[call-arg]


def test_fake_flashinfer_takes_release_and_the_old_keyword_warns() -> None:
    with fake_flashinfer(release="0.6.5") as fake:
        assert fake.version == "0.6.5"
    with pytest.warns(DeprecationWarning, match="version=") as caught:
        manager = fake_flashinfer(version="0.6.5")  # type: ignore[call-arg]
    assert caught[0].filename == __file__
    with manager as fake:
        assert fake.version == "0.6.5"


def test_the_fixture_takes_release_and_the_old_keyword_warns(
    fake_flashinfer: FakeFlashInferFactory,
) -> None:
    assert fake_flashinfer(release="0.6.5").version == "0.6.5"
    with pytest.warns(DeprecationWarning, match="version=") as caught:
        fake = fake_flashinfer(version="0.7.2.post1")  # type: ignore[call-arg]
    assert fake.version == "0.7.2.post1"
    assert caught[0].filename == __file__


def test_renamed_keyword_leaves_the_signature_and_other_calls_alone() -> None:
    @_deprecation.renamed_keyword("old", "new", until="9.9")
    def function(new: int, other: int = 0) -> int:
        return new + other

    assert function.__name__ == "function"
    assert function(1, other=2) == 3
    with pytest.warns(DeprecationWarning, match="9.9"):
        assert function(old=1, other=2) == 3  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("old", "engine", "field"),
    [
        ("SGLANG_0_5_23_RULES", "sglang", "rules"),
        ("SGLANG_0_5_23_FUSION_ARCHITECTURES", "sglang", "architectures"),
        ("sglang_0_5_23_backend", "sglang", "backend"),
        ("sglang_0_5_23_refusal", "sglang", "refusal"),
        ("VLLM_0_33_0_RULES", "vllm", "rules"),
        ("vllm_0_33_0_backend", "vllm", "backend"),
        ("vllm_0_33_0_refusal", "vllm", "refusal"),
    ],
)
def test_policy_names_with_a_release_in_them_warn_and_are_the_data(
    old: str, engine: str, field: str
) -> None:
    from fi_compat import policy

    assert old not in policy.__all__
    assert old not in dir(policy)
    with pytest.warns(DeprecationWarning, match=rf"policy\.{old}.*engine_rules.*0\.4\.0") as caught:
        found = getattr(policy, old)
    assert found is getattr(policy.engine_rules(engine), field)
    assert caught[0].filename == __file__


def test_release_record_support_is_acceptance_and_answers_status() -> None:
    record = load_release("0.6.5")
    plan = "BatchDecodeWithPagedKVCacheWrapper.plan"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        answer = record.acceptance(plan, "fixed_split_size")
    assert answer == "supported"  # what support() returned: equal to the plain string
    assert answer is Status.SUPPORTED
    assert record.acceptance(plan, "no_such_keyword") == "unsupported"
    with pytest.warns(
        DeprecationWarning,
        match=r"ReleaseRecord\.support is now ReleaseRecord\.acceptance.*0\.4\.0",
    ) as caught:
        old = record.support(plan, "fixed_split_size")
    assert old is answer
    assert caught[0].filename == __file__


def test_shape_support_is_acceptance() -> None:
    def plan(self: object, fixed_split_size: int = 0) -> None: ...

    shape = inspect_callable("W.plan", plan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        answer = shape.acceptance("fixed_split_size")
    assert answer.status is Status.SUPPORTED
    with pytest.warns(
        DeprecationWarning, match=r"Shape\.support.*Shape\.acceptance.*0\.4\.0"
    ) as caught:
        assert shape.support("fixed_split_size") == answer
    assert caught[0].filename == __file__


@pytest.mark.parametrize("name", ["acceptance", "support"])
@pytest.mark.parametrize("keyword", [None, 3, b"fixed_split_size", ["fixed_split_size"]])
def test_shape_acceptance_refuses_what_is_not_a_str(name: str, keyword: object) -> None:
    """Old and new spelling alike: a typed error naming the argument, not ``unsupported``."""

    def plan(self: object, fixed_split_size: int = 0) -> None: ...

    shape = inspect_callable("W.plan", plan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(InvalidArgumentError, match="expected keyword to be a str") as raised:
            getattr(shape, name)(keyword)
    assert isinstance(raised.value, TypeError)


def test_capabilities_plan_support_is_plan_acceptance(fake_package: FakePackage) -> None:
    fake_package(fakes.package(version="0.7.2"))
    caps = capabilities.get_capabilities()
    wrapper = capabilities.ATTENTION_WRAPPERS[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        answer = caps.plan_acceptance(wrapper, "fixed_split_size")
    assert answer.status is Status.SUPPORTED
    with pytest.warns(
        DeprecationWarning, match=r"plan_support.*plan_acceptance.*0\.4\.0"
    ) as caught:
        assert caps.plan_support(wrapper, "fixed_split_size") == answer
    assert caught[0].filename == __file__


def test_family_reach_plan_takes_is_plan_accepts() -> None:
    facts = family_reach("0.7.2", "BatchPrefillWithPagedKVCacheWrapper")
    assert facts is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert facts.plan_accepts is True
    with pytest.warns(DeprecationWarning, match=r"plan_takes.*plan_accepts.*0\.4\.0") as caught:
        assert facts.plan_takes is True
    assert caught[0].filename == __file__
    fields: dict[str, Any] = {"release": "0.7.2", "family": "F", "backend_attribute": None}
    fields.update(default_backend=None, backends={})
    with pytest.warns(DeprecationWarning, match=r"FamilyReach\(plan_takes=\.\.\.\)") as caught:
        old = FamilyReach(plan_takes=False, **fields)  # type: ignore[call-arg]
    assert caught[0].filename == __file__
    assert old == FamilyReach(plan_accepts=False, **fields)
    with pytest.raises(TypeError, match="deprecated spelling"):
        FamilyReach("0.7.2", "F", True, plan_takes=True)  # type: ignore[call-arg]


def test_renamed_keyword_finds_the_new_keyword_at_any_position() -> None:
    @_deprecation.renamed_keyword("old", "new", until="9.9")
    def function(first: int, new: int = 0) -> int:
        return first * 10 + new

    with pytest.warns(DeprecationWarning, match="9.9"):
        assert function(1, old=2) == 12  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="deprecated spelling"):
        function(1, 2, old=3)  # type: ignore[call-arg]


@pytest.mark.parametrize("name", ["acceptance", "support"])
@pytest.mark.parametrize(
    ("qualname", "keyword", "wrong"),
    [
        (3, "fixed_split_size", "qualname"),
        ("W.plan", None, "keyword"),
        (None, "fixed_split_size", "qualname"),
        ("W.plan", b"k", "keyword"),
    ],
)
def test_release_record_acceptance_refuses_what_is_not_a_str(
    name: str, qualname: object, keyword: object, wrong: str
) -> None:
    """Old and new spelling alike: a typed error naming the argument, not an answer."""
    record = load_release("0.6.5")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(InvalidArgumentError, match=f"expected {wrong} to be a str") as raised:
            getattr(record, name)(qualname, keyword)
    assert isinstance(raised.value, TypeError)
