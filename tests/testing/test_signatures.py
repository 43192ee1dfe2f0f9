"""The shipped signature files: complete, well-formed, deterministic and true to known facts."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from typing import Any

import pytest
from packaging.version import Version

from fi_compat._surface import ATTENTION_WRAPPERS, COMM_SYMBOLS
from fi_compat.testing import (
    ReleaseRecord,
    UnknownReleaseError,
    available_releases,
    listed_releases,
    load_release,
)
from tools.recorder.output import dump_record

KINDS = (
    "POSITIONAL_ONLY",
    "POSITIONAL_OR_KEYWORD",
    "VAR_POSITIONAL",
    "KEYWORD_ONLY",
    "VAR_KEYWORD",
)
WRAPPERS = tuple(wrapper.key for wrapper in ATTENTION_WRAPPERS)
#: Every name a recorded release lists under ``comm.functions``.
COMM_FUNCTIONS = tuple(
    name for symbol in COMM_SYMBOLS if symbol.kind == "function" for name in symbol.names
)
HAZARDS = ("comm_requires_cuda_runtime", "import_queries_gpu", "comm_requires_triton")


def _text(release: str) -> str:
    return (
        resources.files("fi_compat.testing")
        .joinpath("signatures")
        .joinpath(f"{release}.json")
        .read_text(encoding="utf-8")
    )


def _records() -> Iterator[ReleaseRecord]:
    for release in available_releases():
        yield load_release(release)


# ---------------------------------------------------------------------- completeness


def test_one_file_per_listed_release() -> None:
    listed = listed_releases()
    assert available_releases() == listed
    assert listed[0] == "0.2.9"
    assert listed[-1] == "0.7.2.post1"
    assert len(listed) == 58
    assert len(set(listed)) == 58
    assert listed == sorted(listed, key=Version)


def test_available_releases_are_sorted_by_version_not_text() -> None:
    releases = available_releases()
    assert releases.index("0.2.9") < releases.index("0.2.10") < releases.index("0.2.11")
    assert releases.index("0.6.9") < releases.index("0.6.10") < releases.index("0.6.10.post1")


def test_load_release_by_equivalent_version_and_unknown() -> None:
    assert load_release("0.7.2post1").release == "0.7.2.post1"
    assert load_release("0.6.5") is load_release("0.6.5")
    with pytest.raises(UnknownReleaseError):
        load_release("0.2.8")
    with pytest.raises(LookupError):
        load_release("nonsense")


# ------------------------------------------------------------------------- well-formed


def _check_function(data: Mapping[str, Any], where: str) -> None:
    assert set(data) <= {
        "qualname",
        "defined_in",
        "decorators",
        "parameters",
        "returns",
        "forwards_kwargs_to",
    }, where
    assert data["defined_in"].startswith("flashinfer"), where
    assert all(isinstance(d, str) for d in data["decorators"]), where
    names = [p["name"] for p in data["parameters"]]
    assert len(names) == len(set(names)), where
    order = [KINDS.index(p["kind"]) for p in data["parameters"]]
    assert order == sorted(order), f"{where}: kinds out of order"
    assert sum(p["kind"] == "VAR_POSITIONAL" for p in data["parameters"]) <= 1, where
    assert sum(p["kind"] == "VAR_KEYWORD" for p in data["parameters"]) <= 1, where
    seen_default = False
    for p in data["parameters"]:
        assert set(p) <= {"name", "kind", "default", "annotation"}, where
        assert p["name"].isidentifier(), where
        if p["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD"):
            # Python forbids a parameter without a default after one with a default.
            assert "default" in p or not seen_default, f"{where}: {p['name']}"
            seen_default = seen_default or "default" in p
        if p["kind"] in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            assert "default" not in p, where


def _check_class(data: Mapping[str, Any], where: str) -> None:
    assert isinstance(data["defined_in"], str), where
    assert isinstance(data["bases"], list), where
    for name, method in data["methods"].items():
        if method is not None:
            _check_function(method, f"{where}.{name}")
            assert method["parameters"][0]["name"] in ("self", "cls"), where


@pytest.mark.parametrize("release", listed_releases())
def test_file_is_well_formed(release: str) -> None:
    text = _text(release)
    data = json.loads(text)
    # Deterministic formatting: what the recorder writes, byte for byte.
    assert text == dump_record(data)
    assert data["schema"] == 1
    assert data["release"] == release
    assert set(data) == {"schema", "release", "source", "import", "comm", "attention"}
    assert release in data["source"]["filename"]
    assert len(data["source"]["sha256"]) == 64
    for hazard in HAZARDS:
        value = data["import"][hazard]
        assert isinstance(value["value"], bool)
        assert (value["evidence"] is not None) is value["value"]
        if value["value"]:
            assert value["evidence"].startswith("flashinfer/")
    comm = data["comm"]
    assert set(comm["functions"]) == set(COMM_FUNCTIONS)
    for name, func in comm["functions"].items():
        if func is not None:
            _check_function(func, name)
            assert func["qualname"] == name
    for name, cls in comm["classes"].items():
        if cls is not None:
            _check_class(cls, name)
    assert "TorchDistBackend" in comm["classes"]
    assert set(comm["workspace_classes"]) <= set(comm["classes"])
    assert set(data["attention"]) == set(WRAPPERS)
    for name, wrapper in data["attention"].items():
        assert wrapper is not None, f"{release} lacks {name}"
        _check_class(wrapper, name)
        assert wrapper["methods"]["__init__"] is not None
        assert wrapper["methods"]["plan"] is not None
        target = wrapper["plan_forwards_to"]
        assert target is None or wrapper["methods"][target] is not None
    pattern = comm["enums"]["AllReduceFusionPattern"]
    if pattern is not None:
        assert pattern["members"]["kAllReduce"] == 0
        assert pattern["members"]["kARResidualRMSNorm"] == 1


# ---------------------------------------------------------------------- known facts


def _releases_where(predicate: Callable[[ReleaseRecord], bool]) -> list[str]:
    return [record.release for record in _records() if predicate(record)]


def _from(first: str) -> list[str]:
    return [r for r in available_releases() if Version(r) >= Version(first)]


def _between(first: str, last: str) -> list[str]:
    return [r for r in available_releases() if Version(first) <= Version(r) <= Version(last)]


def test_unified_api_from_060() -> None:
    assert _releases_where(lambda r: r.unified_api) == _from("0.6.0")
    record = load_release("0.6.0")
    func = record.comm_function("create_allreduce_fusion_workspace")
    assert func is not None
    assert func.defined_in == "flashinfer.comm.allreduce"
    assert func.returns == "AllReduceFusionWorkspace"
    assert record.workspace_classes == (
        "AllReduceFusionWorkspace",
        "TRTLLMAllReduceFusionWorkspace",
        "MNNVLAllReduceFusionWorkspace",
    )
    for name in record.workspace_classes:
        workspace = record.comm_class(name)
        assert workspace is not None
        assert workspace.exported is True
        destroy = workspace.method("destroy")
        assert destroy is not None
        assert [p.name for p in destroy.parameters] == ["self"]
    base = record.comm_class("AllReduceFusionWorkspace")
    assert base is not None
    assert base.defined_in == "flashinfer.comm.workspace_base"
    # 0.7.2.post1 also builds a CuTe DSL workspace that flashinfer.comm does not export.
    cutedsl = load_release("0.7.2.post1").comm_class("MNNVLCuteDSLAllReduceFusionWorkspace")
    assert cutedsl is not None
    assert cutedsl.exported is False
    assert cutedsl.method("destroy") is not None


def test_legacy_api_in_every_release() -> None:
    assert _releases_where(lambda r: r.legacy_api) == available_releases()
    assert (
        _releases_where(
            lambda r: (
                r.comm_function("trtllm_destroy_ipc_workspace_for_all_reduce_fusion") is not None
            )
        )
        == available_releases()
    )


def test_group_on_workspace_factory_from_0610_post1() -> None:
    assert _releases_where(
        lambda r: r.accepts("create_allreduce_fusion_workspace", "group")
    ) == _from("0.6.10.post1")


def test_comm_backend_on_workspace_factory_from_060() -> None:
    assert _releases_where(
        lambda r: r.accepts("create_allreduce_fusion_workspace", "comm_backend")
    ) == _from("0.6.0")


def test_trigger_completion_at_end_on_allreduce_fusion_from_068() -> None:
    assert _releases_where(
        lambda r: r.accepts("allreduce_fusion", "trigger_completion_at_end")
    ) == _from("0.6.8")
    # The legacy function had it all along.
    assert (
        _releases_where(lambda r: r.accepts("trtllm_allreduce_fusion", "trigger_completion_at_end"))
        == available_releases()
    )


@pytest.mark.parametrize("keyword", ["fixed_split_size", "disable_split_kv"])
def test_split_kv_settings_on_all_three_plans(keyword: str) -> None:
    expected = _from("0.4.0")
    for wrapper in WRAPPERS:
        qualname = f"{wrapper}.plan"

        def accepts(record: ReleaseRecord, qualname: str = qualname) -> bool:
            return record.accepts(qualname, keyword)

        assert _releases_where(accepts) == expected, wrapper


def test_decode_plan_forwards_kwargs_from_0615() -> None:
    def forwards(record: ReleaseRecord) -> bool:
        wrapper = record.wrapper("BatchDecodeWithPagedKVCacheWrapper")
        return wrapper is not None and wrapper.plan_forwards_to == "_plan_impl"

    assert _releases_where(forwards) == _from("0.6.15")
    record = load_release("0.6.15")
    plan = record.function("BatchDecodeWithPagedKVCacheWrapper.plan")
    assert plan is not None
    assert plan.var_keyword == "kwargs"
    assert plan.parameter("fixed_split_size") is None
    assert record.support("BatchDecodeWithPagedKVCacheWrapper.plan", "fixed_split_size") == (
        "supported"
    )
    assert record.support("BatchDecodeWithPagedKVCacheWrapper.plan", "no_such_option") == (
        "unsupported"
    )


def test_torch_dist_backend_location_and_bcast_root() -> None:
    def module(record: ReleaseRecord) -> str | None:
        backend = record.torch_dist_backend
        return backend.module if backend is not None else None

    assert _releases_where(lambda r: module(r) == "flashinfer.comm.mnnvl") == _between(
        "0.6.0", "0.6.15.post1"
    )
    assert _releases_where(lambda r: module(r) == "flashinfer.comm.comm_backend") == _from("0.6.16")
    assert _releases_where(
        lambda r: bool(r.torch_dist_backend and r.torch_dist_backend.bcast_root_is_group_local)
    ) == _from("0.6.13")


def test_comm_import_needs_cuda_runtime_up_to_0613() -> None:
    assert _releases_where(lambda r: r.comm_requires_cuda_runtime.value) == _between(
        "0.2.9", "0.6.13"
    )
    evidence = load_release("0.6.13").comm_requires_cuda_runtime.evidence
    assert evidence is not None
    assert evidence.startswith("flashinfer/comm/cuda_ipc.py:")
    assert "CudaRTLibrary()" in evidence
    assert "libcudart is not loaded in the current process" in evidence


def test_import_queries_gpu_068_to_070_except_0612_and_0613() -> None:
    # gdn_kernels/gdn_decode_bf16_state.py sets NUM_SMS from get_device_properties(0) at
    # module level in 0.6.8 .. 0.6.11.post3 and again 0.6.14 .. 0.7.0.post1; 0.6.12 and
    # 0.6.13 read the SM count lazily instead, and 0.7.1 dropped the module-level query.
    assert _releases_where(lambda r: r.import_queries_gpu.value) == [
        *_between("0.6.8", "0.6.11.post3"),
        *_between("0.6.14", "0.7.0.post1"),
    ]
    for release in ("0.6.8", "0.6.14", "0.7.0.post1"):
        evidence = load_release(release).import_queries_gpu.evidence
        assert evidence is not None
        assert evidence.startswith("flashinfer/gdn_kernels/gdn_decode_bf16_state.py:")
        assert "torch.cuda.get_device_properties(0)" in evidence


def test_comm_needs_triton_from_0610_to_0613() -> None:
    assert _releases_where(lambda r: r.comm_requires_triton.value) == _between("0.6.10", "0.6.13")
    evidence = load_release("0.6.10").comm_requires_triton.evidence
    assert evidence is not None
    assert "import triton" in evidence


def test_decorated_functions_record_the_decorator() -> None:
    record = load_release("0.7.2.post1")
    func = record.comm_function("allreduce_fusion")
    assert func is not None
    assert any(d.startswith("flashinfer_api") for d in func.decorators)
    assert func.defined_in == "flashinfer.comm.allreduce"
    legacy = record.comm_function("trtllm_allreduce_fusion")
    assert legacy is not None
    assert legacy.defined_in == "flashinfer.comm.trtllm_ar"
