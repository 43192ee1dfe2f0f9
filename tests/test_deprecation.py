"""The deprecation paths of fi-compat 0.3.0: old spellings still work, warn at the caller,
and name the release that removes them."""

from __future__ import annotations

import warnings

import pytest

from fi_compat import _deprecation, capabilities
from fi_compat._probe import locate
from fi_compat.testing import fake_flashinfer, load_release
from fi_compat.testing.pytest_plugin import FakeFlashInferFactory


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
