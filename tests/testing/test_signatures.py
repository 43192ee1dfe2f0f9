"""The shipped signature files: complete, well-formed, deterministic and true to known facts."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from typing import Any

import pytest
from packaging.version import Version

from fi_compat import _records as records_module
from fi_compat._recorder import dump_record
from fi_compat._records import parse_record
from fi_compat._surface import (
    ATTENTION_FAMILIES,
    ATTENTION_MODULES,
    COMM,
    COMM_NAMED_MODULES,
    COMM_SYMBOLS,
    DECODE_MODULE,
    FAST_DECODE_PLAN,
    FLASHINFER,
    MNNVL_MODULE,
    SPLIT_KEYWORDS,
    WRAPPER_SYMBOLS,
)
from fi_compat.errors import InvalidArgumentError
from fi_compat.testing import (
    NameRecord,
    ReleaseRecord,
    UnknownReleaseError,
    available_releases,
    introduced_in,
    listed_releases,
    load_release,
    module_introduced_in,
)

KINDS = (
    "POSITIONAL_ONLY",
    "POSITIONAL_OR_KEYWORD",
    "VAR_POSITIONAL",
    "KEYWORD_ONLY",
    "VAR_KEYWORD",
)
WRAPPERS = tuple(wrapper.key for wrapper in WRAPPER_SYMBOLS)
#: Every name a recorded release lists under ``comm.functions``.
COMM_FUNCTIONS = tuple(
    name for symbol in COMM_SYMBOLS if symbol.kind == "function" for name in symbol.names
)
HAZARDS = (
    "comm_requires_cuda_runtime",
    "import_queries_gpu",
    "comm_requires_triton",
    "comm_requires_python",
)
NAME_KINDS = ("function", "class", "enum", "module", "value")
#: What a name record holds beyond kind and defined_in, by kind.
NAME_PARTS = {
    "function": {"function"},
    "class": {"class"},
    "enum": {"class", "enum"},
    "module": set(),
    "value": set(),
}


def _text(release: str) -> str:
    """The release's record as the shipped store holds it (its member's text)."""
    with (
        resources.files("fi_compat._records").joinpath("surface.zip").open("rb") as handle,
        zipfile.ZipFile(handle) as store,
    ):
        return store.read(f"records/{release}.json").decode("utf-8")


#: The releases the facts below are stated for: the final releases from 0.2.9 on (the
#: records of older and pre-releases are checked for form above and in
#: tests/upgrade/test_every_module.py).
FINALS = [
    release
    for release in available_releases()
    if not Version(release).is_prerelease and Version(release) >= Version("0.2.9")
]


def _records() -> Iterator[ReleaseRecord]:
    for release in FINALS:
        yield load_release(release)


# ---------------------------------------------------------------------- completeness


def test_a_caller_changing_the_release_lists_changes_no_later_answer() -> None:
    for lister in (listed_releases, available_releases):
        first = lister()
        expected = list(first)
        first.append("9.9.9")
        first.reverse()
        assert lister() == expected


def test_the_store_holds_every_listed_release() -> None:
    listed = listed_releases()
    assert available_releases() == listed
    # every release the registry holds, pre-releases included
    assert listed[0] == "0.2.0.post1"
    assert listed[-1] == "0.7.4"
    assert len(listed) == 112
    assert len(set(listed)) == 112
    assert sum(Version(release).is_prerelease for release in listed) == 38
    assert listed == sorted(listed, key=Version)
    # ... and the surface store holds the same releases
    from fi_compat._records._store import store_releases

    assert list(store_releases()) == listed


def test_available_releases_are_sorted_by_version_not_text() -> None:
    releases = available_releases()
    assert releases.index("0.2.9") < releases.index("0.2.10") < releases.index("0.2.11")
    assert releases.index("0.6.9") < releases.index("0.6.10") < releases.index("0.6.10.post1")


def test_load_release_by_equivalent_version_and_unknown() -> None:
    assert load_release("0.7.2post1").release == "0.7.2.post1"
    assert load_release("0.6.5") is load_release("0.6.5")
    with pytest.raises(UnknownReleaseError):
        load_release("0.2.6.post2")
    with pytest.raises(LookupError):
        load_release("nonsense")


class _RaisingStr(str):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize(
    "release",
    [
        "0." + "1" * 5000,  # too long for int(): packaging raises ValueError, not InvalidVersion
        "0.6.5\0",
        _RaisingStr("0.0.1"),
        "\udcff",
    ],
    ids=["huge-number", "nul", "repr-raises", "lone-surrogate"],
)
def test_an_unparsable_or_hostile_release_string_is_unknown(release: str) -> None:
    with pytest.raises(UnknownReleaseError) as caught:
        load_release(release)
    assert len(str(caught.value)) < 300


# ------------------------------------------------------------------------- well-formed


def _check_function(data: Mapping[str, Any], where: str) -> None:
    assert set(data) <= {
        "qualname",
        "defined_in",
        "decorators",
        "parameters",
        "returns",
        "forwards_kwargs_to",
        "forwards_kwargs_drops",
        "returns_attribute",
        "keeps",
    }, where
    if "returns_attribute" in data:
        assert data["returns_attribute"].isidentifier(), where
    parameter_names = {p["name"] for p in data["parameters"]}
    for kept in data.get("keeps", ()):
        assert set(kept) <= {"attribute", "parameter", "when_none", "none_computed"}, where
        assert kept["attribute"].isidentifier(), where
        assert kept["parameter"] in parameter_names, where
        assert kept.get("none_computed", True) is True, f"{where}: a false flag is left out"
    assert data.get("keeps", ["x"]), f"{where}: an empty keeps list is left out"
    assert data.get("forwards_kwargs_drops", ["x"]), f"{where}: an empty drops list is left out"
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
            if "staticmethod" not in method["decorators"]:
                assert method["parameters"][0]["name"] in ("self", "cls"), where
    attributes = data["attributes"]
    assert attributes == sorted(set(attributes)), where
    assert all(name.isidentifier() for name in attributes), where


def _check_names(table: Mapping[str, Any], where: str) -> None:
    for name, entry in table.items():
        assert name.isidentifier(), where
        assert not name.startswith("_"), f"{where}.{name}"
        assert entry["kind"] in NAME_KINDS, f"{where}.{name}"
        assert set(entry) - {"conditional"} == {"kind", "defined_in"} | NAME_PARTS[entry["kind"]], (
            f"{where}.{name}"
        )
        assert entry.get("conditional", True) is True, f"{where}.{name}: only true is written"
        if entry["kind"] == "function":
            _check_function(entry["function"], f"{where}.{name}")
            assert entry["function"]["defined_in"] == entry["defined_in"], f"{where}.{name}"
        if "class" in entry:
            _check_class(entry["class"], f"{where}.{name}")
            assert entry["class"]["defined_in"] == entry["defined_in"], f"{where}.{name}"
            assert "__init__" in entry["class"]["methods"], f"{where}.{name}"


@pytest.mark.parametrize("release", listed_releases())
def test_file_is_well_formed(release: str) -> None:
    text = _text(release)
    data = json.loads(text)
    # Deterministic formatting: what the recorder writes, byte for byte.
    assert text + "\n" == dump_record(data)
    assert data["schema"] == 3
    assert data["release"] == release
    assert set(data) == {
        "schema",
        "release",
        "source",
        "import",
        "comm",
        "attention",
        "decode",
        "attention_families",
    }
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
    assert "names" not in comm
    assert "submodules" not in comm
    assert set(data["decode"]) == set(FAST_DECODE_PLAN.names)
    for name, func in data["decode"].items():
        if func is not None:
            _check_function(func, name)
    record = load_release(release)
    assert record.module(FLASHINFER) is not None, f"{release}: flashinfer is not recorded"
    for module in (*COMM_NAMED_MODULES, *ATTENTION_MODULES):
        _check_typed_names(record, module)
    assert table_wrappers_are_families(data, record), release
    families = data["attention_families"]
    assert list(families) == sorted(ATTENTION_FAMILIES)
    for name, family in families.items():
        if family is None:
            continue
        _check_class(family, name)
        assert set(family["methods"]) | set(family["aliases"]) == set(FAMILY_METHODS), name
        assert not set(family["methods"]) & set(family["aliases"]), name
        assert family["methods"]["__init__"] is not None, name
        for alias, target in family["aliases"].items():
            assert family["methods"][target]["qualname"].rpartition(".")[2] == target, name
            assert alias != target, name
        assert set(family["family_bases"]) <= set(ATTENTION_FAMILIES) - {name}, name
        assert all(families[base] is not None for base in family["family_bases"]), name
        target = family["plan_forwards_to"]
        assert target is None or family["methods"][target] is not None, name


FAMILY_METHODS = ("__init__", "plan", "begin_forward", "run", "forward", "_plan_impl")


def table_wrappers_are_families(data: Mapping[str, Any], record: ReleaseRecord) -> bool:
    """Each attention family top-level ``flashinfer`` lists is in its name table as a class
    defined where the family record says, with every family method it has (the table adds
    the other public methods and properties)."""
    table = record.public_names(FLASHINFER)
    for name, family in data["attention_families"].items():
        if family is None:
            continue
        entry = table.get(name)
        assert entry is not None, name
        assert entry.kind == "class", name
        assert entry.defined_in == family["defined_in"], name
        assert entry.cls is not None, name
        public = {method for method in FAMILY_METHODS if not method.startswith("_")}
        defined = {method for method, found in family["methods"].items() if found is not None}
        present = (defined | set(family["aliases"])) & public
        assert present <= set(entry.cls.methods), name
    return True


def _check_typed_names(record: ReleaseRecord, module: str) -> None:
    """Every name of ``module`` in the store reads as a well-formed record."""
    found = record.module(module)
    if found is None:
        return
    for name, entry in found.names.items():
        where = f"{record.release}: {module}.{name}"
        assert name.isidentifier(), where
        assert entry.kind in NAME_KINDS, where
        assert (entry.function is not None) is (entry.kind == "function"), where
        assert (entry.cls is not None) is (entry.kind in ("class", "enum")), where
        if entry.function is not None:
            assert entry.function.defined_in == entry.defined_in, where
        if entry.cls is not None:
            assert entry.cls.defined_in == entry.defined_in, where
            assert "__init__" in entry.cls.methods, where


def test_the_wrappers_are_the_same_as_families() -> None:
    for record in _records():
        for name, wrapper in record.attention.items():
            family = record.attention_family(name)
            assert wrapper is not None
            assert family is not None, (record.release, name)
            assert family.defined_in == wrapper.defined_in
            assert family.attributes == wrapper.attributes
            for method, recorded in wrapper.methods.items():
                assert family.method(method) == recorded, (record.release, name, method)


def test_families_by_release() -> None:
    def has(family: str) -> list[str]:
        return _releases_where(lambda r: family in r.attention_families)

    everywhere = FINALS
    for family in ATTENTION_FAMILIES[:3]:
        assert has(family) == everywhere, family
    latest = load_release("0.7.2.post1")
    assert latest.attention_families == ATTENTION_FAMILIES
    graph = latest.attention_family("CUDAGraphBatchDecodeWithPagedKVCacheWrapper")
    assert graph is not None
    assert graph.family_bases == ("BatchDecodeWithPagedKVCacheWrapper",)
    assert graph.plan_forwards_to == "_plan_impl"
    assert graph.aliases == {"begin_forward": "plan"}
    sink = latest.attention_family("BatchAttentionWithAttentionSinkWrapper")
    assert sink is not None
    assert sink.family_bases == ("BatchPrefillWithPagedKVCacheWrapper",)
    shared = latest.attention_family("BatchPrefillWithSharedPrefixPagedKVCacheWrapper")
    assert shared is not None
    assert shared.method("plan") is None
    begin = shared.method("begin_forward")
    assert begin is not None
    assert begin.name == "begin_forward"
    cascade = latest.attention_family("MultiLevelCascadeAttentionWrapper")
    assert cascade is not None
    assert cascade.aliases == {"begin_forward": "plan", "forward": "run"}
    assert cascade.method("forward") == cascade.method("run")
    assert latest.attention_family("NoSuchWrapper") is None
    assert latest.acceptance("BatchMLAPagedAttentionWrapper.plan", "no_such_keyword") == (
        "unsupported"
    )
    with pytest.raises(InvalidArgumentError, match="name"):
        latest.attention_family(5)  # type: ignore[arg-type]


def test_records_without_families_read_as_having_none() -> None:
    data = json.loads(_text("0.6.5"))
    del data["attention_families"]
    old = parse_record(data)
    assert old.attention_families == ()
    assert old.attention_family("BatchDecodeWithPagedKVCacheWrapper") is None
    assert old.attention == load_release("0.6.5").attention


# ---------------------------------------------------------------------- known facts


def _releases_where(predicate: Callable[[ReleaseRecord], bool]) -> list[str]:
    return [record.release for record in _records() if predicate(record)]


def _from(first: str) -> list[str]:
    return [r for r in FINALS if Version(r) >= Version(first)]


def _between(first: str, last: str) -> list[str]:
    return [r for r in FINALS if Version(first) <= Version(r) <= Version(last)]


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
    assert _releases_where(lambda r: r.legacy_api) == FINALS
    assert (
        _releases_where(
            lambda r: (
                r.comm_function("trtllm_destroy_ipc_workspace_for_all_reduce_fusion") is not None
            )
        )
        == FINALS
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
        == FINALS
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
    assert record.acceptance("BatchDecodeWithPagedKVCacheWrapper.plan", "fixed_split_size") == (
        "supported"
    )
    assert record.acceptance("BatchDecodeWithPagedKVCacheWrapper.plan", "no_such_option") == (
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


# -------------------------------------------------------- name tables, attributes, decode


def _first_exporting(module: str, name: str) -> str | None:
    """The first final release (of all recorded, 0.2.x included) whose module has it."""
    finals = [r for r in available_releases() if not Version(r).is_prerelease]
    return next((r for r in finals if name in load_release(r).public_names(module)), None)


@pytest.mark.parametrize(
    ("name", "first"),
    [
        # 0.2.9 .. 0.2.12 export it as FP4QuantizationSFLayout (trtllm_ar renamed it).
        ("QuantizationSFLayout", "0.2.13"),
        ("FP4QuantizationSFLayout", "0.2.7.post1"),  # flashinfer.comm arrived then
        ("MoeAlltoAll", "0.6.0"),
        ("moe_a2a_get_workspace_size_per_rank", "0.6.0"),
        ("PcieIpcAllReduceWorkspace", "0.7.0"),
        ("Mapping", "0.2.7.post1"),
        ("TRTLLMAllReduceFusionWorkspace", "0.6.0"),
        ("is_mnnvl_cutedsl_supported", "0.7.2.post1"),
        # Never exported from flashinfer.comm itself: from its submodules only.
        ("TorchDistBackend", None),
        ("MnnvlConfig", None),
    ],
)
def test_first_release_exporting_a_comm_name(name: str, first: str | None) -> None:
    assert introduced_in(COMM, name) == first
    assert _first_exporting(COMM, name) == first


def test_fp4_layout_was_renamed_in_0213() -> None:
    old = _releases_where(lambda r: "FP4QuantizationSFLayout" in r.public_names(COMM))
    new = _releases_where(lambda r: "QuantizationSFLayout" in r.public_names(COMM))
    assert old == _between("0.2.9", "0.2.12")
    assert new == _from("0.2.13")
    layout = load_release("0.7.2.post1").public_names(COMM)["QuantizationSFLayout"]
    # A constant holder (like AllReduceFusionPattern), with its members' values.
    assert layout.kind == "enum"
    assert layout.defined_in == "flashinfer.comm.trtllm_ar"
    assert layout.enum is not None
    assert dict(layout.enum.members) == {"SWIZZLED_128x4": 0, "SWIZZLED_8x4": 1, "LINEAR": 2}


@pytest.mark.parametrize(
    ("name", "first"),
    [
        ("McastGPUBuffer", "0.2.8"),
        ("MnnvlMemory", "0.2.7.post1"),
        ("CommBackend", "0.3.0"),
        ("MnnvlConfig", "0.3.0"),
        ("is_mnnvl_fabric_supported", "0.6.0"),
        ("TorchDistBackend", "0.6.0"),
        ("is_multicast_supported", "0.6.16"),
        ("all_ranks_agree", "0.6.16"),
        ("ProcessGroup", None),  # imported under ``if TYPE_CHECKING:`` only
    ],
)
def test_first_release_exporting_an_mnnvl_name(name: str, first: str | None) -> None:
    assert introduced_in(MNNVL_MODULE, name) == first


def test_mnnvl_of_0_7_2_post1() -> None:
    names = load_release("0.7.2.post1").public_names(MNNVL_MODULE)
    backend, base = names["TorchDistBackend"], names["CommBackend"]
    assert (backend.kind, backend.defined_in) == ("class", "flashinfer.comm.comm_backend")
    assert (base.kind, base.defined_in) == ("class", "flashinfer.comm.abstractions")
    assert backend.cls is not None
    assert base.cls is not None
    assert backend.cls.bases == ()  # duck-typed: it does not derive from CommBackend
    assert backend.cls.attributes == ("_dist", "_group")
    # The name table records every public method; comm.classes only what fi-compat reads.
    assert {"bcast", "allgather", "barrier", "Split", "Get_rank", "Get_size"} <= set(
        backend.cls.methods
    )
    torch_dist_backend = load_release("0.7.2.post1").torch_dist_backend
    assert torch_dist_backend is not None
    assert backend.cls.method("bcast") == torch_dist_backend.method("bcast")
    config = names["MnnvlConfig"].cls
    assert config is not None
    init = config.method("__init__")  # a dataclass: its __init__ is the one its fields make
    assert init is not None
    assert init.decorators == ("generated",)
    assert "comm_backend" in init.keyword_names
    assert "comm_backend" in config.attributes
    assert names["torch"].kind == "module"
    assert (names["logger"].kind, names["logger"].defined_in) == ("value", MNNVL_MODULE)
    assert "ProcessGroup" not in names


def test_mnnvl_is_in_every_release_and_reads_as_empty_when_absent() -> None:
    assert all(record.public_names(MNNVL_MODULE) for record in _records())
    # a release without the module: nothing, not an error
    first = introduced_in(MNNVL_MODULE, "MnnvlMemory")
    assert first is not None
    before = available_releases()[available_releases().index(first) - 1]
    assert load_release(before).public_names(MNNVL_MODULE) == {}
    assert load_release(before).module(MNNVL_MODULE) is None


def test_name_tables_agree_with_the_symbol_records() -> None:
    # Two readings of the same source: the comm functions/classes of the surface, and the
    # table of every public name.
    for record in _records():
        names = record.public_names(COMM)
        for name in COMM_FUNCTIONS:
            function = record.comm_function(name)
            assert (name in names) is (function is not None), (record.release, name)
            if function is not None:
                assert names[name].kind == "function"
                assert names[name].function == function
        for name, cls in record.comm_classes.items():
            if cls is not None and cls.exported:
                entry = names[name]
                assert entry.kind == "class", (record.release, name)
                assert entry.cls is not None
                assert entry.cls.attributes == cls.attributes


def test_public_names_are_read_only_name_records() -> None:
    names = load_release("0.7.2.post1").public_names(COMM)
    assert all(
        isinstance(entry, NameRecord) and entry.name == name for name, entry in names.items()
    )
    with pytest.raises(TypeError):
        names["MoeAlltoAll"] = names["Mapping"]  # type: ignore[index]
    alltoall = names["MoeAlltoAll"]
    assert (alltoall.kind, alltoall.defined_in) == ("class", "flashinfer.comm.trtllm_moe_alltoall")
    assert alltoall.function is None
    size = names["moe_a2a_get_workspace_size_per_rank"]
    assert size.kind == "function"
    assert size.cls is None
    assert size.function is not None
    assert size.function.defined_in == size.defined_in


WORKSPACE_METHODS = {"__init__", "backend", "destroy", "is_buffer_size_sufficient"}
CHECKPOINT_METHODS = {"checkpoint_prepare", "checkpoint_restore"}


def test_trtllm_workspace_methods_and_attributes() -> None:
    def workspace(record: ReleaseRecord) -> Any:
        return record.public_names(COMM).get("TRTLLMAllReduceFusionWorkspace")

    assert _releases_where(lambda r: workspace(r) is not None) == _from("0.6.0")
    checkpoints = _releases_where(
        lambda r: workspace(r) is not None and set(workspace(r).cls.methods) >= CHECKPOINT_METHODS
    )
    assert checkpoints == _from("0.6.15")
    latest = workspace(load_release("0.7.2.post1")).cls
    assert set(latest.methods) == WORKSPACE_METHODS | CHECKPOINT_METHODS
    sufficient = latest.method("is_buffer_size_sufficient")
    assert sufficient.qualname == "TRTLLMAllReduceFusionWorkspace.is_buffer_size_sufficient"
    assert latest.method("backend").is_property
    assert not latest.method("destroy").is_property
    # Its own __init__, and world_size/rank/_destroyed from AllReduceFusionWorkspace.__init__
    # through super().__init__.
    assert latest.attributes == (
        "_destroyed",
        "_internal_workspace",
        "ipc_handles",
        "mem_handles",
        "metadata",
        "rank",
        "workspace_tensor",
        "world_size",
    )


def test_mnnvl_workspace_has_mc_ptr_in_every_release() -> None:
    for record in _records():
        entry = record.public_names(COMM).get("MNNVLAllReduceFusionWorkspace")
        if entry is None:
            assert record.version < Version("0.6.0")
            continue
        assert entry.cls is not None
        assert {"mc_ptr", "uc_ptrs_dev", "buffer_size_bytes", "rank"} <= set(entry.cls.attributes)
        assert set(entry.cls.methods) >= WORKSPACE_METHODS


def test_workspace_classes_not_exported_still_have_attributes() -> None:
    cutedsl = load_release("0.7.2.post1").comm_class("MNNVLCuteDSLAllReduceFusionWorkspace")
    assert cutedsl is not None
    assert cutedsl.exported is False
    assert {"world_size", "rank", "group", "max_token_num"} <= set(cutedsl.attributes)


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_attention_wrappers_keep_backend_and_cuda_graph_flags(wrapper: str) -> None:
    def attributes(record: ReleaseRecord) -> tuple[str, ...]:
        found = record.wrapper(wrapper)
        assert found is not None
        return found.attributes

    for record in _records():
        assert {"_backend", "_use_cuda_graph"} <= set(attributes(record)), record.release
    # Only the decode wrapper keeps the tensor-core switch.
    tensor_cores = _releases_where(lambda r: "_use_tensor_cores" in attributes(r))
    expected = FINALS if wrapper == "BatchDecodeWithPagedKVCacheWrapper" else []
    assert tensor_cores == expected


def test_fast_decode_plan_from_040() -> None:
    assert _releases_where(lambda r: r.fast_decode_plan is not None) == _from(
        FAST_DECODE_PLAN.introduced_in
    )
    plan = load_release("0.7.2.post1").fast_decode_plan
    assert plan is not None
    assert plan.defined_in == DECODE_MODULE
    assert plan.parameters[0].name == "self"  # bound onto the decode wrapper by engines
    for keyword in SPLIT_KEYWORDS:
        assert keyword in plan.keyword_names
        assert plan.parameter(keyword) is not None
    assert plan.var_keyword is None
    first = load_release(FAST_DECODE_PLAN.introduced_in).fast_decode_plan
    assert first is not None
    assert all(keyword in first.keyword_names for keyword in SPLIT_KEYWORDS)
    assert _releases_where(
        lambda r: (
            r.fast_decode_plan is not None
            and r.fast_decode_plan.parameter("q_len_per_req") is not None
        )
    ) == _from("0.6.16")


def test_schema_1_data_reads_with_empty_additions() -> None:
    data = json.loads(_text("0.6.5"))
    data["schema"] = 1
    del data["decode"]
    for cls in [*data["comm"]["classes"].values(), *data["attention"].values()]:
        if cls is not None:
            del cls["attributes"]
    old = parse_record(data)
    assert old.public_names(COMM) == {}
    assert old.public_names(MNNVL_MODULE) == {}
    assert old.fast_decode_plan is None
    wrapper = old.wrapper("BatchDecodeWithPagedKVCacheWrapper")
    assert wrapper is not None
    assert wrapper.attributes == ()
    assert old.comm_functions == load_release("0.6.5").comm_functions
    data["schema"] = 4
    with pytest.raises(ValueError, match="schema"):
        parse_record(data)


def test_introduced_in_is_cached_and_none_for_unknown_names() -> None:
    assert introduced_in(COMM, "no_such_name") is None
    assert introduced_in(MNNVL_MODULE, "allreduce_fusion") is None
    assert introduced_in(COMM, "allreduce_fusion") == "0.6.0"
    calls: list[str] = []
    original = load_release

    def counting(version: str) -> ReleaseRecord:
        calls.append(version)
        return original(version)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records_module, "load_release", counting)
        assert introduced_in(COMM, "allreduce_fusion") == "0.6.0"
    assert calls == []


HOSTILE_MODULES = [None, 5, b"flashinfer.comm", "", ["flashinfer.comm"], {"a": 1}, COMM_SYMBOLS[0]]
#: Strings that name no module of any release: every module is recorded, so these answer
#: "nothing", not an error.
NO_MODULES = ["flashinfer.comm.", "FLASHINFER.COMM", " flashinfer.comm", "flashinfer.nope", "\0"]


@pytest.mark.parametrize("bad", HOSTILE_MODULES, ids=repr)
def test_public_names_refuses_anything_but_a_module_name(bad: object) -> None:
    record = load_release("0.7.2.post1")
    with pytest.raises(InvalidArgumentError, match="module"):
        record.public_names(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="module"):
        record.module(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", HOSTILE_MODULES, ids=repr)
def test_introduced_in_refuses_anything_but_a_module_name(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="module"):
        introduced_in(bad, "MoeAlltoAll")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", HOSTILE_MODULES, ids=repr)
def test_module_introduced_in_refuses_anything_but_a_module_name(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="module"):
        module_introduced_in(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NO_MODULES, ids=repr)
def test_a_module_no_release_ships_has_no_names(name: str) -> None:
    record = load_release("0.7.2.post1")
    assert record.public_names(name) == {}
    assert record.module(name) is None
    assert introduced_in(name, "MoeAlltoAll") is None
    assert module_introduced_in(name) is None


def test_every_module_of_a_release_is_there() -> None:
    record = load_release("0.7.2.post1")
    assert "flashinfer.fused_moe.core" in record.names
    assert "flashinfer.sampling" in record.names
    assert "flashinfer.comm.comm_backend" in record.names
    assert record.public_names("flashinfer.comm.comm_backend")["TorchDistBackend"].kind == "class"


@pytest.mark.parametrize("bad", [None, 5, "", b"MoeAlltoAll", ["MoeAlltoAll"], {"a": 1}, 1.5])
def test_introduced_in_refuses_anything_but_a_name(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="name"):
        introduced_in(COMM, bad)  # type: ignore[arg-type]


def test_the_recorded_hazard_is_a_hazard_record_and_the_old_name_warns() -> None:
    import fi_compat.testing as kit

    record = load_release("0.6.5")
    assert type(record.comm_requires_cuda_runtime) is kit.HazardRecord
    assert "Hazard" not in dir(kit)
    with pytest.warns(DeprecationWarning, match=r"HazardRecord.*0\.4\.0"):
        old = kit.Hazard
    assert old is kit.HazardRecord
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        kit.Nothing  # noqa: B018
