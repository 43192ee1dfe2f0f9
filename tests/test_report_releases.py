"""The probe and ``fi-compat report --json`` against every recorded flashinfer-python release.

Each release is imitated by :func:`fi_compat.testing.fake_flashinfer`, which builds a fake
``flashinfer`` with exactly that release's recorded signatures. Every expectation is read
from the recorded data (the store ``fi_compat/_records/surface.zip``) through
:func:`fi_compat.testing.load_release`; none is typed in here.
"""

from __future__ import annotations

import functools
import json

import pytest

from fi_compat.capabilities import Capabilities, get_capabilities
from fi_compat.cli import main
from fi_compat.testing import (
    CUDART_MESSAGE,
    FunctionRecord,
    ReleaseRecord,
    available_releases,
    fake_flashinfer,
    listed_releases,
    load_release,
)
from tests.support import release_classes
from tests.support.release_harness import (
    NINE,
    expected_answers,
    expected_torch_dist_backend,
    recorded_keywords,
    reported_answers,
)

DECODE = "BatchDecodeWithPagedKVCacheWrapper"

#: Callables whose keyword sets the probe reads, as the recorded data names them.
COMM_CALLABLES = (
    "create_allreduce_fusion_workspace",
    "allreduce_fusion",
    "trtllm_create_ipc_workspace_for_all_reduce_fusion",
    "trtllm_allreduce_fusion",
)
PLANS = (
    "BatchPrefillWithPagedKVCacheWrapper.plan",
    "BatchPrefillWithRaggedKVCacheWrapper.plan",
    f"{DECODE}.plan",
)


def _decode_plan(record: ReleaseRecord) -> FunctionRecord | None:
    wrapper = record.wrapper(DECODE)
    return wrapper.method("plan") if wrapper is not None else None


def _forwards(version: str) -> bool:
    plan = _decode_plan(load_release(version))
    return plan is not None and plan.forwards_kwargs_to is not None


RELEASES = available_releases()
#: The releases the tests below run on: the first and last of each 'everything' class
#: (tests/support/release_classes.py; every one with --all-releases).
SWEPT = release_classes.releases("everything", RELEASES)
#: Releases whose ``import flashinfer.comm`` asserts that libcudart is loaded.
NEEDS_CUDA_RUNTIME = [
    version for version in RELEASES if load_release(version).comm_requires_cuda_runtime.value
]
#: Releases whose decode ``plan(**kwargs)`` forwards to another method.
FORWARDING = [version for version in RELEASES if _forwards(version)]

every_release = pytest.mark.parametrize("version", SWEPT)


@functools.cache
def _probed(version: str) -> Capabilities:
    """What the probe finds under the release's fake: once per release for the tests that
    read it (a :class:`Capabilities` is a snapshot, read after the fake is gone)."""
    with fake_flashinfer(version):
        return get_capabilities(refresh=True)


def _answers(capabilities: Capabilities) -> dict[tuple[str, str, str], str]:
    return {
        (section, owner, keyword): (
            capabilities.comm.kwargs if section == "comm" else capabilities.attention
        )[owner][keyword].status.value
        for section, owner, keyword in NINE
    }


def _report_json(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main(["report", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report: dict[str, object] = json.loads(captured.out)
    return report


def test_every_listed_release_has_a_signature_file() -> None:
    assert listed_releases() == RELEASES


def test_the_matrix_covers_every_change_the_probe_answers() -> None:
    # Without these the parametrised tests below would pass vacuously.
    assert NEEDS_CUDA_RUNTIME
    assert FORWARDING
    assert len(NEEDS_CUDA_RUNTIME) < len(RELEASES)
    answers = [expected_answers(load_release(version)) for version in RELEASES]
    for item in NINE:
        statuses = {answered[item] for answered in answers}
        assert statuses == {"supported", "unsupported"}, item


@every_release
def test_probe_answers_what_the_release_declares(version: str) -> None:
    record = load_release(version)
    capabilities = _probed(version)
    assert capabilities.flashinfer.version == record.release
    assert capabilities.flashinfer.import_error is None
    assert capabilities.comm.available is record.comm_exists, capabilities.comm.error
    assert _answers(capabilities) == expected_answers(record, comm_available=record.comm_exists)
    assert (capabilities.comm.unified_api, capabilities.comm.legacy_api) == (
        record.unified_api,
        record.legacy_api,
    )


@every_release
def test_probe_reads_the_recorded_keyword_sets(version: str) -> None:
    record = load_release(version)
    capabilities = _probed(version)
    shapes = {**capabilities.comm.shapes, **capabilities.attention_shapes}
    for qualname in (*COMM_CALLABLES, *PLANS):
        shape = shapes.get(qualname)
        found = None
        if shape is not None:
            assert shape.keywords is not None, shape.error
            found = (sorted(shape.keywords), shape.open_ended)
        assert found == recorded_keywords(record, qualname), qualname


@every_release
def test_probe_finds_the_recorded_torch_dist_backend(version: str) -> None:
    comm = _probed(version).comm
    found = (comm.torch_dist_backend, comm.bcast_root_is_group_local.status.value)
    assert found == expected_torch_dist_backend(load_release(version))


@pytest.mark.parametrize("version", FORWARDING)
def test_decode_plan_kwargs_are_followed_to_where_they_are_declared(version: str) -> None:
    record = load_release(version)
    plan = _decode_plan(record)
    assert plan is not None
    assert plan.forwards_kwargs_to is not None
    capabilities = _probed(version)
    shape = capabilities.attention_shapes[f"{DECODE}.plan"]
    assert [hop.rpartition(".")[2] for hop in shape.via] == ["plan", plan.forwards_kwargs_to]
    assert shape.open_ended is False
    for keyword in ("fixed_split_size", "disable_split_kv"):
        support = capabilities.plan_acceptance(DECODE, keyword)
        assert support.status.value == record.acceptance(f"{DECODE}.plan", keyword)
        if keyword not in plan.keyword_names and support.supported:
            assert "forwarding" in support.reason, support.reason


@every_release
def test_report_json_answers_what_the_release_declares(
    version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    record = load_release(version)
    with fake_flashinfer(version):
        report = _report_json(capsys)
    assert report["flashinfer"]["version"] == record.release  # type: ignore[index]
    comm = report["comm"]
    assert comm["available"] is record.comm_exists  # type: ignore[index]
    assert (comm["unified_api"], comm["legacy_api"]) == (  # type: ignore[index]
        record.unified_api,
        record.legacy_api,
    )
    assert reported_answers(report) == expected_answers(record, comm_available=record.comm_exists)


@pytest.mark.parametrize("version", NEEDS_CUDA_RUNTIME)
def test_comm_without_cuda_runtime_is_a_finding_not_a_crash(
    version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    record = load_release(version)
    with fake_flashinfer(version, cuda_runtime=False):
        capabilities = get_capabilities(refresh=True)
        report = _report_json(capsys)
    comm = capabilities.comm
    assert comm.available is False
    assert comm.error is not None
    assert comm.error.startswith("AssertionError: ")
    assert "libcudart" in comm.error
    assert CUDART_MESSAGE in comm.error
    assert (comm.unified_api, comm.legacy_api) == (False, False)
    expected = expected_answers(record, comm_available=False)
    assert _answers(capabilities) == expected
    assert report["comm"]["available"] is False  # type: ignore[index]
    assert report["comm"]["error"] == comm.error  # type: ignore[index]
    assert reported_answers(report) == expected
    hazard_ids = [hazard["id"] for hazard in report["hazards"]]  # type: ignore[attr-defined]
    assert "comm-needs-cuda-runtime" in hazard_ids
