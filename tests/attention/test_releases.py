"""The planner against the recorded signatures of every flashinfer-python release.

Each release's fake ``flashinfer`` (``fi_compat.testing.fake_flashinfer``) has exactly that
release's ``plan`` signatures, so a call that would not bind raises ``TypeError`` there as it
would in the real release. What each release should do is derived from its record, never
typed in here: deterministic planning binds where every wrapper's ``plan`` accepts both
split settings (following ``**kwargs`` to ``_plan_impl``) and is refused up front elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from packaging.version import Version

from fi_compat import determinism
from fi_compat._surface import GATES
from fi_compat.attention import SPLIT_KEYWORDS, AttentionPlanner, Layout, PlanArgs, Settings
from fi_compat.errors import DeterminismUnavailableError
from fi_compat.testing import (
    FakeFlashInfer,
    FunctionRecord,
    ReleaseRecord,
    available_releases,
    fake_flashinfer,
    load_release,
)
from tests.support import release_classes

#: The final releases: the split reach is measured for those (attention/reach.json); a
#: pre-release is recorded, unmeasured, and refused under determinism
#: (tests/attention/test_wrapper_releases.py).
RELEASES = [release for release in available_releases() if not Version(release).is_prerelease]
#: The releases the tests below run on: the first and last of each 'attention' class
#: (tests/support/release_classes.py; every one with --all-releases).
SWEPT = release_classes.releases("attention", RELEASES)
PAGED, RAGGED, DECODE = (
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchDecodeWithPagedKVCacheWrapper",
)
#: The order in which the planner checks its wrappers (prefill, ragged, decode).
KINDS = (PAGED, RAGGED, DECODE)


@pytest.fixture(autouse=True)
def _switch_off() -> Iterator[None]:
    with determinism.deterministic(False):
        yield


def plan_record(record: ReleaseRecord, kind: str) -> FunctionRecord:
    wrapper = record.wrapper(kind)
    assert wrapper is not None, f"{record.release} has no {kind}"
    plan = wrapper.method("plan")
    assert plan is not None
    return plan


def takes_split(record: ReleaseRecord, kind: str) -> bool:
    return all(record.accepts(f"{kind}.plan", keyword) for keyword in SPLIT_KEYWORDS)


def required_positionals(func: FunctionRecord) -> tuple[str, ...]:
    """A label for each required positional parameter after ``self``."""
    return tuple(
        f"<{p.name}>"
        for p in func.parameters[1:]
        if p.kind in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD") and not p.has_default
    )


def make_wrapper(fi: FakeFlashInfer, kind: str) -> Any:
    """Build a fake wrapper the way engines do; set what FlashInfer's __init__ would record."""
    init = fi.record.wrapper(kind).method("__init__")  # type: ignore[union-attr]
    assert init is not None
    kwargs: dict[str, Any] = {
        name: value
        for name, value in (("use_tensor_cores", True), ("backend", "fa2"))
        if name in init.keyword_names
    }  # fa2: the backend measured to hand the split settings to the kernel (0.4.0+)
    wrapper = getattr(fi.flashinfer, kind)(*required_positionals(init), **kwargs)
    wrapper._use_tensor_cores = True  # FlashInfer's __init__ stores it there (0.2.x-0.7.x)
    return wrapper


def seen_split(fi: FakeFlashInfer, kind: str) -> list[dict[str, Any]]:
    """The split settings that reached the callable that finally declares them."""
    plan = plan_record(fi.record, kind)
    target = plan.forwards_kwargs_to if plan.forwards_kwargs_to else "plan"
    return [
        {k: call.arguments[k] for k in SPLIT_KEYWORDS if k in call.arguments}
        for call in fi.calls_to(f"{kind}.{target}")
    ]


def test_the_matrix_covers_both_sides_of_the_gate() -> None:
    gate = Version(GATES["fixed_split_size"].introduced_in)
    assert any(Version(r) < gate for r in RELEASES)
    assert any(Version(r) >= gate for r in RELEASES)


@pytest.mark.parametrize("release", SWEPT)
def test_recorded_support_matches_the_gate(release: str) -> None:
    """The release named in messages (``_gates``) agrees with every recorded release."""
    record = load_release(release)
    gate = GATES["fixed_split_size"].introduced_in
    assert GATES["disable_split_kv"].introduced_in == gate
    for kind in KINDS:
        assert takes_split(record, kind) is (Version(release) >= Version(gate)), kind


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "cuda_graph"])
@pytest.mark.parametrize("layout", list(Layout), ids=str)
@pytest.mark.parametrize("release", SWEPT)
def test_deterministic_planning_binds_or_is_refused(
    release: str, layout: Layout, graph: bool
) -> None:
    record = load_release(release)
    n = len(layout.roles)
    settings = Settings(cuda_graph=graph)
    with fake_flashinfer(release) as fi:
        paged = [make_wrapper(fi, PAGED) for _ in range(n)]
        decode = [make_wrapper(fi, DECODE) for _ in range(n)]
        ragged = make_wrapper(fi, RAGGED)
        fi.clear_calls()
        with determinism.deterministic(True):
            if not all(takes_split(record, kind) for kind in KINDS):
                first = next(kind for kind in KINDS if not takes_split(record, kind))
                with pytest.raises(DeterminismUnavailableError) as info:
                    AttentionPlanner(
                        layout,
                        prefill=paged,
                        ragged=ragged,
                        decode=decode,
                        window_left=2 if layout is Layout.SLIDING_WINDOW else None,
                        settings=settings,
                    )
                message = str(info.value)
                assert f"{first}.plan" in message
                assert f"on flashinfer {release}" in message
                assert record.acceptance(f"{first}.plan", "fixed_split_size") in message
                assert fi.calls == []  # refused before any plan ran
                return
            planner = AttentionPlanner(
                layout,
                prefill=paged,
                ragged=ragged,
                decode=decode,
                window_left=2 if layout is Layout.SLIDING_WINDOW else None,
                settings=settings,
            )
        planner.plan_prefill(
            [PlanArgs(*required_positionals(plan_record(record, PAGED)))] * n,
            PlanArgs(*required_positionals(plan_record(record, RAGGED))),
        )
        planner.plan_decode([PlanArgs(*required_positionals(plan_record(record, DECODE)))] * n)

        for kind, count in ((PAGED, n), (RAGGED, 1), (DECODE, n)):
            seen = seen_split(fi, kind)
            assert len(seen) == count, kind
            expected: dict[str, object]
            if graph:
                expected = {"fixed_split_size": None, "disable_split_kv": True}
            else:
                size = settings.decode_split_size if kind == DECODE else settings.prefill_split_size
                expected = {"fixed_split_size": size, "disable_split_kv": False}
            assert seen == [expected] * count, kind


@pytest.mark.parametrize("release", SWEPT)
def test_planning_off_binds_on_every_release_and_adds_nothing(release: str) -> None:
    record = load_release(release)
    with fake_flashinfer(release) as fi:
        planner = AttentionPlanner.sliding_window(
            2,
            prefill=(make_wrapper(fi, PAGED), make_wrapper(fi, PAGED)),
            ragged=make_wrapper(fi, RAGGED),
            decode=(make_wrapper(fi, DECODE), make_wrapper(fi, DECODE)),
        )
        fi.clear_calls()
        planner.plan_prefill(
            [PlanArgs(*required_positionals(plan_record(record, PAGED)))] * 2,
            PlanArgs(*required_positionals(plan_record(record, RAGGED))),
        )
        planner.plan_decode([PlanArgs(*required_positionals(plan_record(record, DECODE)))] * 2)
        plans = [call for call in fi.calls if call.name.endswith(".plan")]
        assert len(plans) == 5
        for kind in KINDS:
            assert all(seen == {} for seen in seen_split(fi, kind))
