"""``deterministic:<Family>:<backend>`` agrees with the deterministic wrapper, everywhere.

For several releases and every family and backend ``reach.json`` measures for them, a fake
wrapper built as engines build it (``use_tensor_cores=True`` for decode) is served by
:func:`fi_compat.attention.deterministic_wrapper` exactly where ``fi-compat report
--require deterministic:<Family>:<backend>`` is met; a refusal's ``feature`` is that very
name, which ``--require`` accepts. The decode fast plan's names agree with installing the
release's ``fast_decode_plan`` on a served decode wrapper.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from packaging.version import Version

from fi_compat import determinism
from fi_compat._requirements.attention import deterministic_support
from fi_compat.attention import (
    DeterminismUnavailableError,
    Settings,
    TensorCoresRequiredError,
    deterministic_wrapper,
    family_reach,
)
from fi_compat.capabilities import get_capabilities
from fi_compat.report import REQUIREMENT_NAMES, build_report, missing
from fi_compat.testing import available_releases, fake_flashinfer
from tests.attention.test_wrapper_releases import make

#: Releases where the measurement changes: the first with the split settings, the decode
#: auto dip (0.6.0), the last 0.6 and the newest, plus one before 0.4.0 (nothing measured).
RELEASES = ["0.3.1", "0.4.0", "0.6.0", "0.6.18", available_releases()[-1]]
GRAPH = "CUDAGraphBatchDecodeWithPagedKVCacheWrapper"
DECODE = "BatchDecodeWithPagedKVCacheWrapper"
FAST = "fast_decode_plan"


@pytest.fixture(autouse=True)
def _on() -> Iterator[None]:
    with determinism.deterministic(True):
        yield


def _pairs(release: str) -> list[tuple[str, str]]:
    """Every (family, backend) measured for ``release``; for an unmeasured release, the
    newest release's (its wrappers are refused: nothing was measured)."""
    measured = release if Version(release) >= Version("0.4.0") else available_releases()[-1]
    from fi_compat.attention._reach import measured_pairs

    return [(f, b) for f, b in measured_pairs() if _measured(measured, f, b)]


def _measured(release: str, family: str, backend: str) -> bool:
    facts = family_reach(release, family)
    return facts is not None and backend in facts.backends


def _settings(family: str) -> Settings:
    return Settings(cuda_graph=True) if family == GRAPH else Settings()


@pytest.mark.parametrize("release", RELEASES)
def test_the_wrapper_serves_exactly_where_the_requirement_is_met(release: str) -> None:
    seen = {"served": 0, "refused": 0}
    with fake_flashinfer(release) as fi:
        caps = get_capabilities()
        requirements = build_report(caps)["requirements"]
        for family, backend in _pairs(release):
            if family == FAST or getattr(fi.flashinfer, family, None) is None:
                continue
            name = f"deterministic:{family}:{backend}"
            assert name in REQUIREMENT_NAMES
            met = requirements[name]["status"] == "met"
            assert (missing(caps, [name]) == []) is met, name
            try:
                wrapper = make(fi, family, backend)
            except Exception:  # the release's class does not take this backend value
                continue
            fi.clear_calls()
            if met:
                deterministic_wrapper(wrapper, _settings(family), capabilities=caps)
                seen["served"] += 1
                continue
            with pytest.raises(DeterminismUnavailableError) as info:
                deterministic_wrapper(wrapper, _settings(family), capabilities=caps)
            assert info.value.feature in REQUIREMENT_NAMES, (name, info.value.feature)
            assert info.value.feature in (name, "fixed_split_size", "disable_split_kv"), name
            assert fi.kernel_plans == [], name
            seen["refused"] += 1
    assert seen["refused"]
    assert seen["served"] or Version(release) < Version("0.4.0")


@pytest.mark.parametrize("release", RELEASES[1:])
def test_the_cuda_graph_decode_wrapper_resolves_auto_and_is_refused(release: str) -> None:
    name = f"deterministic:{GRAPH}:default"
    with fake_flashinfer(release) as fi:
        caps = get_capabilities()
        wrapper = make(fi, GRAPH, "default")
        assert wrapper._backend == "auto"  # what the real __init__ hands its base
        with pytest.raises(DeterminismUnavailableError) as info:
            deterministic_wrapper(wrapper, capabilities=caps)
        assert info.value.feature == name
        assert "auto" in str(info.value)
        assert missing(caps, [name])


@pytest.mark.parametrize("release", RELEASES[1:])
def test_the_fast_plan_names_agree_with_installing_the_fast_plan(release: str) -> None:
    with fake_flashinfer(release) as fi:
        caps = get_capabilities()
        for family, backend in _pairs(release):
            if family != FAST:
                continue
            name = f"deterministic:{FAST}:{backend}"
            met = missing(caps, [name]) == []
            try:
                wrapper = make(fi, DECODE, backend)
            except Exception:  # the release's class does not take this backend value
                continue
            if missing(caps, [f"deterministic:{DECODE}:{backend}"]):
                with pytest.raises(DeterminismUnavailableError) as refused:
                    deterministic_wrapper(wrapper, capabilities=caps)
                assert not met, name
                assert refused.value.feature == f"deterministic:{DECODE}:{backend}"
                continue
            wrapped = deterministic_wrapper(wrapper, capabilities=caps)
            fast = functools.partial(fi.flashinfer.decode.fast_decode_plan, wrapped)
            if met:
                wrapped.begin_forward = fast
                continue
            with pytest.raises(DeterminismUnavailableError) as info:
                wrapped.begin_forward = fast
            assert info.value.feature == name


def test_a_decode_wrapper_without_tensor_cores_names_its_family_and_backend() -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        caps = get_capabilities()
        wrapper = fi.flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            "<buffer>", "NHD", use_tensor_cores=False, backend="fa2"
        )
        with pytest.raises(TensorCoresRequiredError) as info:
            deterministic_wrapper(wrapper, capabilities=caps)
        name = f"deterministic:{DECODE}:fa2"
        assert info.value.feature == name
        assert name in REQUIREMENT_NAMES
        assert missing(caps, [name]) == []
        assert "use_tensor_cores=True" in deterministic_support(caps)[name].reason
