"""The probe and the report against real flashinfer-python wheels, one subprocess each.

Each release in :data:`tests.support.release_harness.RELEASES` is downloaded once into a cache
outside the repository and imported by ``python -m fi_compat report --json`` with the
workarounds a CPU machine needs (see ``tests/support/release_harness.py``); the report must agree
with the release's recorded signatures (``fi_compat/_records``). A release whose
``flashinfer.comm`` needs the CUDA runtime is imported a second time without it, and must
fail the documented way. Without access to the package registry the group is skipped,
saying so.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs torch")

from fi_compat.testing import load_release
from tests.support import release_classes
from tests.support.release_harness import (
    RELEASES,
    DownloadError,
    Harness,
    ImportRun,
    Prepared,
    RegistryUnreachableError,
    expected_answers,
    expected_torch_dist_backend,
    recorded_keywords,
    reported_answers,
)

pytestmark = pytest.mark.release_matrix

#: The only place a release may query GPU 0 while ``import flashinfer`` runs.
GPU_QUERY_SITE = "flashinfer/gdn_kernels/gdn_decode_bf16_state.py"

#: Callables whose keyword sets the report lists under ``signatures``.
SIGNATURES = (
    "create_allreduce_fusion_workspace",
    "allreduce_fusion",
    "trtllm_create_ipc_workspace_for_all_reduce_fusion",
    "trtllm_allreduce_fusion",
    "BatchPrefillWithPagedKVCacheWrapper.plan",
    "BatchPrefillWithRaggedKVCacheWrapper.plan",
    "BatchDecodeWithPagedKVCacheWrapper.plan",
)


class _Session:
    """One harness for the session; remembers downloads, runs and an unreachable registry."""

    def __init__(self) -> None:
        self.harness = Harness()
        self.unreachable: str | None = None

    @functools.cache  # noqa: B019 - one instance per session, the cache dies with it
    def prepare(self, version: str) -> Prepared:
        if self.unreachable is not None:
            pytest.skip(self.unreachable)
        try:
            return self.harness.prepare(version)
        except RegistryUnreachableError as error:
            self.unreachable = f"package registry unreachable, real releases not tested: {error}"
            pytest.skip(self.unreachable)

    @functools.cache  # noqa: B019 - one instance per session, the cache dies with it
    def report(self, version: str, cuda_runtime: bool) -> ImportRun:
        return self.harness.report(self.prepare(version), cuda_runtime=cuda_runtime)

    def traceback(self, version: str, cuda_runtime: bool) -> str:
        return self.harness.comm_traceback(self.prepare(version), cuda_runtime=cuda_runtime)


@pytest.fixture(scope="session")
def session() -> _Session:
    return _Session()


def _with_workarounds(session: _Session, version: str) -> ImportRun:
    """The run with every workaround; fails loudly when ``flashinfer.comm`` still fails."""
    run = session.report(version, True)
    assert run.returncode == 0, run.describe()
    report = run.report
    assert report["flashinfer"]["import_error"] is None, run.describe()
    if not report["comm"]["available"]:
        pytest.fail(
            f"FINDING: import flashinfer.comm of flashinfer-python {version} fails even with "
            f"the workarounds: {report['comm']['error']}\n"
            f"{session.traceback(version, True)}"
        )
    return run


releases = pytest.mark.parametrize("version", list(RELEASES))


@releases
def test_subprocess_imports_the_downloaded_release(session: _Session, version: str) -> None:
    run = _with_workarounds(session, version)
    info = run.report["flashinfer"]
    release_dir = session.prepare(version).release_dir
    found = (info["version"], info["installed"], info["source_build"], Path(info["location"]))
    assert found == (version, True, False, release_dir / "flashinfer"), run.describe()


@releases
def test_nine_answers_match_the_recorded_signatures(session: _Session, version: str) -> None:
    report = _with_workarounds(session, version).report
    assert reported_answers(report) == expected_answers(load_release(version))


@releases
def test_unified_and_legacy_api_match_the_recorded_signatures(
    session: _Session, version: str
) -> None:
    record = load_release(version)
    comm = _with_workarounds(session, version).report["comm"]
    assert (comm["unified_api"], comm["legacy_api"]) == (record.unified_api, record.legacy_api)


@releases
def test_keyword_sets_match_the_recorded_signatures(session: _Session, version: str) -> None:
    record = load_release(version)
    signatures = _with_workarounds(session, version).report["signatures"]
    for qualname in SIGNATURES:
        section = "flashinfer." if "." in qualname else "flashinfer.comm."
        shape = signatures.get(section + qualname)
        found = None if shape is None else (shape["keywords"], shape["open_ended"])
        assert found == recorded_keywords(record, qualname), qualname


@releases
def test_torch_dist_backend_matches_the_recorded_source(session: _Session, version: str) -> None:
    comm = _with_workarounds(session, version).report["comm"]
    found = (comm["torch_dist_backend"], comm["bcast_root_is_group_local"]["status"])
    assert found == expected_torch_dist_backend(load_release(version))


@releases
def test_decode_plan_forwarding_is_followed_as_recorded(session: _Session, version: str) -> None:
    wrapper = load_release(version).wrapper("BatchDecodeWithPagedKVCacheWrapper")
    assert wrapper is not None
    plan = wrapper.method("plan")
    assert plan is not None
    signatures = _with_workarounds(session, version).report["signatures"]
    via = signatures["flashinfer.BatchDecodeWithPagedKVCacheWrapper.plan"]["via"]
    expected = ["plan"] if plan.forwards_kwargs_to is None else ["plan", plan.forwards_kwargs_to]
    assert [hop.rpartition(".")[2] for hop in via] == expected


@releases
def test_gpu_stub_is_used_only_where_documented(session: _Session, version: str) -> None:
    log = _with_workarounds(session, version).harness_log
    callers = {call["caller"].rpartition(":")[0] for call in log["gpu_calls"]}
    assert log["gpu_stub"] is True
    assert bool(callers) is RELEASES[version].gpu_query, log["gpu_calls"]
    assert all(caller.endswith(GPU_QUERY_SITE) for caller in callers), log["gpu_calls"]


@releases
def test_triton_is_imported_exactly_when_needed(session: _Session, version: str) -> None:
    log = _with_workarounds(session, version).harness_log
    assert log["triton_imported"] is RELEASES[version].triton


@releases
def test_recorded_comm_import_hazards_match_the_real_release(
    session: _Session, version: str
) -> None:
    record = load_release(version)
    needs = RELEASES[version]
    session.prepare(version)  # skips without the registry, like the other tests
    assert record.comm_requires_cuda_runtime.value is needs.cuda_runtime
    assert record.comm_requires_triton.value is needs.triton
    assert record.import_queries_gpu.value is needs.gpu_query


#: What a release does without the CUDA runtime follows its import hazards: one run per class.
@pytest.mark.parametrize("version", release_classes.releases("imports", list(RELEASES)))
def test_comm_without_the_cuda_runtime(session: _Session, version: str) -> None:
    run = session.report(version, False)
    assert run.returncode == 0, run.describe()
    report = run.report
    comm = report["comm"]
    assert report["flashinfer"]["import_error"] is None, run.describe()
    if not RELEASES[version].cuda_runtime:
        assert comm["available"] is True, (
            f"{version} should import flashinfer.comm without the CUDA runtime:\n"
            f"{session.traceback(version, False)}"
        )
        return
    error = comm["error"] or ""
    if comm["available"] or not error.startswith("AssertionError") or "libcudart" not in error:
        pytest.fail(
            f"FINDING: flashinfer-python {version} without a loaded CUDA runtime: expected "
            f"import flashinfer.comm to raise AssertionError about libcudart; the report says "
            f"available={comm['available']}, error={comm['error']!r}\n"
            f"{session.traceback(version, False)}"
        )
    assert (comm["unified_api"], comm["legacy_api"]) == (False, False)
    expected = expected_answers(load_release(version), comm_available=False)
    assert reported_answers(report) == expected
    assert "comm-needs-cuda-runtime" in {hazard["id"] for hazard in report["hazards"]}


@releases
def test_report_lists_the_import_hazards_the_release_really_has(
    session: _Session, version: str
) -> None:
    needs = RELEASES[version]
    ids = {hazard["id"] for hazard in _with_workarounds(session, version).report["hazards"]}
    assert ("import-queries-gpu" in ids, "comm-needs-triton" in ids) == (
        needs.gpu_query,
        needs.triton,
    )


def test_harness_cache_is_outside_the_repository() -> None:
    repository = Path(__file__).resolve().parent.parent
    assert not Harness().root.resolve().is_relative_to(repository)


def test_a_release_that_does_not_exist_is_a_failure_not_a_skip(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    with pytest.raises((DownloadError, RegistryUnreachableError)) as caught:
        harness.download("flashinfer-python==0.0.0.dev999999")
    if isinstance(caught.value, RegistryUnreachableError):
        pytest.skip(f"package registry unreachable, real releases not tested: {caught.value}")
    assert "flashinfer-python==0.0.0.dev999999" in str(caught.value)
