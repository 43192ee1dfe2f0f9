"""The fake's engine-facing surface, per recorded release: what SGLang and vLLM touch.

Workspaces built by ``create_allreduce_fusion_workspace`` (their class, methods, attributes,
``is_buffer_size_sufficient`` arithmetic, checkpointing, ``destroy``), the public names of
``flashinfer.comm`` and ``flashinfer.comm.mnnvl``, the attention wrappers' attributes after
construction and ``fast_decode_plan``. The arithmetic is proven against the installed
flashinfer-python 0.7.2.post1 by running its own methods on instances built without
``__init__``.
"""

from __future__ import annotations

import enum
import functools
import importlib
import importlib.metadata
import inspect
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch (size checks take torch dtypes)")

import torch
from packaging.version import Version

from fi_compat._surface import COMM, DECODE_MODULE, MNNVL_MODULE, NAMED_MODULES
from fi_compat.errors import InvalidArgumentError
from fi_compat.testing import (
    ClassRecord,
    FakeFlashInfer,
    ReleaseRecord,
    StandIn,
    available_releases,
    fake_flashinfer,
    load_release,
)
from fi_compat.testing._objects import served as served_by_getattr
from fi_compat.testing._objects import unmodelled_reason
from tests.support import release_classes
from tests.support.installed import import_installed
from tests.support.outside_names import is_outside, outside_binding
from tests.support.shapes import recorded_shape, shape


def _finals() -> list[str]:
    """The recorded final releases: the fake's gates and shapes are stated for those (a
    pre-release is recorded and faked, but has no measured sizes or layers)."""
    return [r for r in available_releases() if not Version(r).is_prerelease]


FACTORY = "create_allreduce_fusion_workspace"
DECODE = "BatchDecodeWithPagedKVCacheWrapper"
PAGED = "BatchPrefillWithPagedKVCacheWrapper"
RAGGED = "BatchPrefillWithRaggedKVCacheWrapper"
#: The class each backend's workspace is, in every release that has the backend.
CLASS_OF = {
    "trtllm": "TRTLLMAllReduceFusionWorkspace",
    "mnnvl": "MNNVLAllReduceFusionWorkspace",
    "mnnvl-cutedsl": "MNNVLCuteDSLAllReduceFusionWorkspace",
}

RELEASES = [v for v in _finals() if Version(v) >= Version("0.5.3")]
#: The releases the tests below run on: the first and last of each 'names' class
#: (tests/support/release_classes.py; every one with --all-releases).
SWEPT = release_classes.releases("fake_names", RELEASES)
#: The comm-only tests of this module run on each class of the comm names.
COMM_SWEPT = release_classes.releases("names", RELEASES)
UNIFIED = [v for v in RELEASES if load_release(v).comm_function(FACTORY) is not None]
SHAPE = {"world_size": 2, "rank": 0, "max_token_num": 128, "hidden_dim": 4096}


def _at_least(version: str, release: str) -> bool:
    return Version(version) >= Version(release)


def _class_record(record: ReleaseRecord, name: str) -> ClassRecord:
    """The class as ``flashinfer.comm`` lists it (every public method), else as recorded
    for the factory (a class ``flashinfer.comm`` does not export)."""
    found = record.public_names(COMM).get(name)
    if found is not None and found.cls is not None:
        return found.cls
    cls = record.comm_class(name)
    assert cls is not None, name
    return cls


def _backends(record: ReleaseRecord) -> list[str]:
    """The backends the release's factory takes, read from its ``backend`` annotation."""
    factory = record.comm_function(FACTORY)
    assert factory is not None
    backend = factory.parameter("backend")
    assert backend is not None
    assert backend.annotation is not None
    return [name for name in CLASS_OF if repr(name) in backend.annotation]


def _create_args(backend: str, dtype: torch.dtype = torch.bfloat16) -> dict[str, Any]:
    args: dict[str, Any] = {"backend": backend, **SHAPE, "dtype": dtype}
    if backend == "mnnvl-cutedsl":
        args["group"] = object()
    return args


@pytest.fixture(autouse=True)
def _no_leak() -> Iterator[None]:
    before = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "flashinfer"}
    meta_path = list(sys.meta_path)
    yield
    after = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "flashinfer"}
    assert after == before
    assert sys.meta_path == meta_path


def _check_methods(cls: type, record: ClassRecord) -> None:
    for name, method in record.methods.items():
        if method is None:
            continue
        static = inspect.getattr_static(cls, name)
        if method.is_property:
            assert isinstance(static, property), f"{cls.__name__}.{name}"
            continue
        if isinstance(static, staticmethod):
            assert "staticmethod" in method.decorators, name
        if isinstance(static, classmethod):
            assert shape(getattr(cls, name)) == recorded_shape(method)[1:], name
        else:
            assert shape(getattr(cls, name)) == recorded_shape(method), f"{cls.__name__}.{name}"


# ------------------------------------------------------------------------- workspaces


def test_the_recorded_facts_these_tests_rely_on() -> None:
    """Read from each release's sources: which releases have what (a recording error fails
    here, not as a confusing fake failure)."""
    for version in UNIFIED:
        record = load_release(version)
        assert _backends(record)[:2] == ["trtllm", "mnnvl"]
        assert ("mnnvl-cutedsl" in _backends(record)) is _at_least(version, "0.7.2.post1")
        for backend in ("trtllm", "mnnvl"):
            cls = _class_record(record, CLASS_OF[backend])
            assert (cls.method("checkpoint_prepare") is not None) is _at_least(version, "0.6.15")
    assert [v for v in RELEASES if v not in UNIFIED] == ["0.5.3"]
    for version in _finals():
        record = load_release(version)
        assert (record.fast_decode_plan is not None) is _at_least(version, "0.4.0")
        mnnvl = record.public_names(MNNVL_MODULE)
        assert ("TorchDistBackend" in mnnvl) is _at_least(version, "0.6.0")
        assert ("CommBackend" in mnnvl) is _at_least(version, "0.3.0")


@pytest.mark.parametrize("version", UNIFIED)
def test_workspace_is_the_recorded_class_with_its_interface(version: str) -> None:
    record = load_release(version)
    with fake_flashinfer(version) as fi:
        comm = fi.comm
        for backend in _backends(record):
            workspace = comm.create_allreduce_fusion_workspace(**_create_args(backend))
            cls = type(workspace)
            assert cls.__name__ == CLASS_OF[backend]
            cls_record = _class_record(record, cls.__name__)
            assert cls.__module__ == cls_record.defined_in
            assert isinstance(workspace, comm.AllReduceFusionWorkspace)
            _check_methods(cls, cls_record)
            assert set(cls_record.attributes) <= set(vars(workspace))
            assert workspace.backend == backend
            assert (workspace.world_size, workspace.rank) == (2, 0)
            assert workspace._destroyed is False
            # Constructing the class directly gives the same workspace.
            assert hasattr(cls, "is_buffer_size_sufficient")
            workspace.destroy()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("version", UNIFIED)
def test_sglang_style_workspace_use(version: str, dtype: torch.dtype) -> None:
    """What SGLang's FlashInferWorkspaceManager does with a workspace."""
    with fake_flashinfer(version) as fi:
        comm = importlib.import_module("flashinfer.comm")
        accepted = inspect.signature(comm.create_allreduce_fusion_workspace).parameters
        create: dict[str, Any] = {**SHAPE, "dtype": dtype, "gpus_per_node": 2}
        if "group" in accepted:
            create["group"] = object()
        for backend in ("trtllm", "mnnvl"):
            workspace = comm.create_allreduce_fusion_workspace(backend=backend, **create)
            checks = inspect.signature(workspace.is_buffer_size_sufficient).parameters
            ask: dict[str, Any] = {"tp_size": 2, "num_tokens": 128, "hidden_dim": 4096}
            ask["dtype"] = dtype
            if "use_oneshot" in checks:
                ask["use_oneshot"] = True
            else:
                strategy_type = type(checks["strategy"].default)
                assert issubclass(strategy_type, enum.Enum)
                ask["strategy"] = strategy_type["TWOSHOT"]
            assert ("use_oneshot" in checks) is (backend == "trtllm")
            assert workspace.is_buffer_size_sufficient(**ask) is True
            assert workspace.is_buffer_size_sufficient(**{**ask, "num_tokens": 1 << 20}) is False
            assert workspace.backend == backend
            if backend == "trtllm":
                assert workspace.metadata["use_fp32_lamport"] is (dtype == torch.float32)
                other = torch.bfloat16 if dtype == torch.float32 else torch.float32
                assert workspace.is_buffer_size_sufficient(**{**ask, "dtype": other}) is False
                assert workspace.is_buffer_size_sufficient(**{**ask, "tp_size": 4}) is False
            workspace.destroy()
            workspace.destroy()
            assert workspace._destroyed is True
            assert len(fi.calls_to(f"{CLASS_OF[backend]}.destroy")) == 2


@pytest.mark.parametrize("version", UNIFIED)
def test_vllm_style_workspace_use(version: str) -> None:
    """What vLLM's flashinfer_all_reduce does: comm_backend, mc_ptr, checkpointing."""
    with fake_flashinfer(version) as fi:
        backend_cls = importlib.import_module(MNNVL_MODULE).TorchDistBackend
        comm = fi.comm
        accepted = inspect.signature(comm.create_allreduce_fusion_workspace).parameters
        create: dict[str, Any] = {**SHAPE, "dtype": torch.bfloat16}
        create["comm_backend"] = backend_cls(group="pg")
        if "group" in accepted:
            create["group"] = "pg"
        for backend in ("mnnvl", "trtllm"):
            workspace = comm.create_allreduce_fusion_workspace(backend=backend, **create)
            mc_ptr = getattr(workspace, "mc_ptr", 0)
            assert isinstance(mc_ptr, int)
            assert (mc_ptr != 0) is (backend == "mnnvl")
            checkpoints = _at_least(version, "0.6.15")
            assert hasattr(workspace, "checkpoint_prepare") is checkpoints
            assert hasattr(workspace, "checkpoint_restore") is checkpoints
            if checkpoints:
                for _ in range(2):  # repeated calls are no-ops
                    assert workspace.checkpoint_prepare() is None
                for _ in range(2):
                    assert workspace.checkpoint_restore(backend_cls(group="pg")) is None
            workspace.destroy()
            if checkpoints:
                with pytest.raises(AttributeError):
                    workspace.checkpoint_prepare()
            if backend == "mnnvl":
                assert not hasattr(workspace, "mc_ptr")  # destroy() frees it


@pytest.mark.parametrize("version", [v for v in UNIFIED if _at_least(v, "0.6.16")])
def test_checkpointing_raises_not_implemented_where_the_release_would(version: str) -> None:
    """From 0.6.16 a TRT-LLM workspace under Confidential Computing is backed by torch
    symmetric memory, which cannot be checkpointed (vLLM catches NotImplementedError)."""
    with fake_flashinfer(version, confidential_compute=True) as fi:
        workspace = fi.comm.create_allreduce_fusion_workspace(**_create_args("trtllm"))
        assert workspace.mem_handles == []
        assert "control_flag_ptr" not in workspace.metadata
        with pytest.raises(NotImplementedError, match="torch symmetric memory"):
            workspace.checkpoint_prepare()
        with pytest.raises(NotImplementedError):
            workspace.checkpoint_restore(None)
        with pytest.raises(ValueError, match="Confidential Computing"):
            fi.comm.create_allreduce_fusion_workspace(**_create_args("mnnvl"))


def test_confidential_compute_on_0_6_15_has_no_workspace() -> None:
    """0.6.15 has no Confidential Computing path: its SymmDeviceMemory needs multicast."""
    with (
        fake_flashinfer("0.6.15", confidential_compute=True) as fi,
        pytest.raises(RuntimeError, match="multicast"),
    ):
        fi.comm.create_allreduce_fusion_workspace(**_create_args("trtllm"))


@pytest.mark.parametrize("version", UNIFIED)
def test_auto_resolves_as_the_release_does_on_one_node(version: str) -> None:
    with fake_flashinfer(version) as fi:
        workspace = fi.comm.create_allreduce_fusion_workspace(**_create_args("auto"))
        assert workspace.backend == "mnnvl"
        assert type(workspace).__name__ == CLASS_OF["mnnvl"]
    with fake_flashinfer(version, multicast=False) as fi:
        factory = fi.comm.create_allreduce_fusion_workspace
        if _at_least(version, "0.6.16"):  # 0.6.16 asks every rank about multicast
            assert factory(**_create_args("auto")).backend == "trtllm"
            with pytest.raises(ValueError, match="world_size=32"):
                factory(**{**_create_args("auto"), "world_size": 32})
            assert factory(**_create_args("trtllm")).backend == "trtllm"
        elif _at_least(version, "0.6.10") and not _at_least(version, "0.6.15"):
            # Torch symmetric memory: MNNVL is built, with a null multicast pointer.
            workspace = factory(**_create_args("auto"))
            assert (workspace.backend, workspace.mc_ptr) == ("mnnvl", 0)
            assert factory(**_create_args("trtllm")).backend == "trtllm"
        else:
            for backend in ("auto", "mnnvl", "trtllm"):
                with pytest.raises(RuntimeError, match="multicast"):
                    factory(**_create_args(backend))
        if _at_least(version, "0.6.16") or not _at_least(version, "0.6.10"):
            with pytest.raises(RuntimeError, match="multicast"):
                factory(**_create_args("mnnvl"))


def test_trtllm_metadata_is_what_the_release_computes() -> None:
    expected = {
        "tp_rank": 0,
        "tp_size": 2,
        "max_token_num": 128,
        "hidden_dim": 4096,
        "use_fp32_lamport": True,
        "buffer_size": 2 * 128 * 4096 * 2,
        "flag_size": 2 * 256 * 4,
        "lamport_comm_size": 2 * 128 * 4096 * 4,
        "lamport_buffer_size": 3 * 2 * 128 * 4096 * 4,
    }
    for version, extra in (("0.6.5", set()), ("0.6.12", set()), ("0.7.1", {"control_flag_ptr"})):
        with fake_flashinfer(version) as fi:
            workspace = fi.comm.create_allreduce_fusion_workspace(
                **_create_args("trtllm", torch.float32)
            )
            metadata = dict(workspace.metadata)
            assert set(metadata) - set(expected) == extra, version
            assert {k: v for k, v in metadata.items() if k in expected} == expected, version
            assert isinstance(metadata.get("control_flag_ptr", 0), int)
    with fake_flashinfer("0.7.2") as fi:  # 0.7.2 sizes the two-shot buffer by element size
        workspace = fi.comm.create_allreduce_fusion_workspace(
            **_create_args("trtllm", torch.float32)
        )
        assert workspace.metadata["buffer_size"] == 2 * 128 * 4096 * 4
    with fake_flashinfer("0.7.2") as fi:  # the Lamport buffer is capped at 2 GiB - 2 MiB
        big = {**_create_args("trtllm"), "max_token_num": 1 << 20, "hidden_dim": 8192}
        assert fi.comm.create_allreduce_fusion_workspace(**big).metadata["lamport_comm_size"] == (
            2147483647 & ~((1 << 21) - 1)
        )


@pytest.mark.parametrize(
    ("version", "buffer_size_bytes", "largest_two_shot"),
    [
        ("0.6.5", 2795520, 170),  # SymmDeviceMemory, 16-byte alignment
        ("0.6.12", 2097152, 128),  # torch symmetric memory: the size requested
        ("0.7.2.post1", 2795520, 170),  # SymmDeviceMemory, 32-byte alignment
    ],
)
def test_mnnvl_buffer_is_what_the_release_allocates(
    version: str, buffer_size_bytes: int, largest_two_shot: int
) -> None:
    """world 2, 128 tokens x 4096 bf16: the two-shot size (2 MiB) wins over the one-shot
    one at 64 tokens (1 MiB); three Lamport buffers and a 2 KiB signal pad in 2 MiB pages."""
    with fake_flashinfer(version) as fi:
        workspace = fi.comm.create_allreduce_fusion_workspace(**_create_args("mnnvl"))
        assert workspace.buffer_size_bytes == buffer_size_bytes
        assert workspace.workspace_size_bytes == 3 * buffer_size_bytes
        strategy = type(
            inspect.signature(workspace.is_buffer_size_sufficient).parameters["strategy"].default
        )
        ask = {"tp_size": 2, "hidden_dim": 4096, "dtype": torch.bfloat16}
        two_shot = strategy.TWOSHOT
        assert workspace.is_buffer_size_sufficient(
            num_tokens=largest_two_shot, **ask, strategy=two_shot
        )
        assert not workspace.is_buffer_size_sufficient(
            num_tokens=largest_two_shot + 1, **ask, strategy=two_shot
        )
        # AUTO picks one-shot up to 1 MiB of payload (64 tokens here), two-shot above.
        assert workspace.get_required_buffer_size_bytes(2, 64, 4096, torch.bfloat16) == 1 << 20
        assert workspace.get_required_buffer_size_bytes(2, 65, 4096, torch.bfloat16) == (
            2 * 33 * 2 * 4096 * 2
        )
        # force_oneshot_support sizes the buffer for one-shot at max_token_num.
        forced = fi.comm.create_allreduce_fusion_workspace(
            **_create_args("mnnvl"), force_oneshot_support=True
        )
        assert forced.is_buffer_size_sufficient(num_tokens=128, **ask, strategy=strategy.ONESHOT)


@pytest.mark.parametrize(
    ("version", "buffer_size_bytes"), [("0.6.17", 2096464), ("0.6.18", 2096448)]
)
def test_mnnvl_buffer_alignment_changed_in_0_6_18(version: str, buffer_size_bytes: int) -> None:
    """96 tokens: 1.5 MiB per buffer, three in 3 pages of 2 MiB less the signal pad; a third
    of that rounded down to 16 bytes (to the two-shot stages' 32 bytes from 0.6.18)."""
    with fake_flashinfer(version) as fi:
        shape = {**_create_args("mnnvl"), "max_token_num": 96}
        workspace = fi.comm.create_allreduce_fusion_workspace(**shape)
        assert workspace.buffer_size_bytes == buffer_size_bytes


def test_mnnvl_cutedsl_where_the_release_has_it() -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        factory = fi.comm.create_allreduce_fusion_workspace
        workspace = factory(**_create_args("mnnvl-cutedsl"), top_k=8)
        assert (workspace.backend, workspace.top_k, workspace.rms_eps) == ("mnnvl-cutedsl", 8, 1e-6)
        assert not hasattr(fi.comm, CLASS_OF["mnnvl-cutedsl"])  # not exported
        ask = {"tp_size": 2, "num_tokens": 128, "hidden_dim": 4096, "dtype": torch.bfloat16}
        assert workspace.is_buffer_size_sufficient(**ask)
        assert not workspace.is_buffer_size_sufficient(**{**ask, "num_tokens": 129})
        assert not workspace.is_buffer_size_sufficient(**{**ask, "hidden_dim": 2048})
        assert not hasattr(workspace, "checkpoint_prepare")
        with pytest.raises(ValueError, match="comm_backend"):
            factory(**_create_args("mnnvl-cutedsl"), comm_backend=object())
        with pytest.raises(ValueError, match="top_k"):
            factory(**_create_args("trtllm"), top_k=8)
        module = importlib.import_module("flashinfer.comm.mnnvl_cutedsl_ar")
        direct = getattr(module, CLASS_OF["mnnvl-cutedsl"])(2, 1, 64, 4096, torch.bfloat16)
        assert (direct.backend, direct.rank, direct.max_token_num) == ("mnnvl-cutedsl", 1, 64)
    with fake_flashinfer("0.7.2") as fi, pytest.raises(RuntimeError, match="unknown backend"):
        fi.comm.create_allreduce_fusion_workspace(**_create_args("mnnvl-cutedsl"))


@pytest.mark.parametrize("version", ["0.6.5", "0.6.12", "0.7.2.post1"])
def test_workspace_classes_constructed_directly(version: str) -> None:
    with fake_flashinfer(version) as fi:
        comm = fi.comm
        trtllm = comm.TRTLLMAllReduceFusionWorkspace(2, 1, 128, 4096, torch.float32)
        assert (trtllm.backend, trtllm.rank, trtllm.metadata["use_fp32_lamport"]) == (
            "trtllm",
            1,
            True,
        )
        mapping_cls = importlib.import_module("flashinfer.comm.mapping").Mapping
        mapping = mapping_cls(world_size=4, rank=2, gpus_per_node=4, tp_size=4)
        mnnvl = comm.MNNVLAllReduceFusionWorkspace(mapping, 128, 4096, torch.bfloat16)
        assert (mnnvl.backend, mnnvl.world_size, mnnvl.rank, mnnvl.tp_size) == ("mnnvl", 4, 2, 4)
        via_factory = comm.create_allreduce_fusion_workspace(
            **{**_create_args("mnnvl"), "world_size": 4, "rank": 2}
        )
        assert mnnvl.buffer_size_bytes == via_factory.buffer_size_bytes
        assert [c.name for c in fi.calls[:2]] == [
            "TRTLLMAllReduceFusionWorkspace.__init__",
            "Mapping.__init__",
        ]


# ------------------------------------------------------------------------- public names


def _submodule(module: str, name: str) -> bool:
    return f"{module}.{name}" in sys.modules


def _served_names(record: ReleaseRecord, module: str) -> tuple[str, ...] | str | None:
    """What ``module``'s ``__getattr__`` serves, as recorded (None without the module)."""
    found = record.module(module)
    return found.served if found is not None else None


@pytest.mark.parametrize("version", SWEPT)
def test_named_modules_have_exactly_the_recorded_names(version: str) -> None:
    record = load_release(version)
    everywhere = {
        module: set().union(*(load_release(v).public_names(module) for v in _finals()))
        for module in NAMED_MODULES
    }
    with fake_flashinfer(version):
        for module_name in NAMED_MODULES:
            names = record.public_names(module_name)
            if not names:
                with pytest.raises(ImportError):
                    importlib.import_module(module_name)
                continue
            module = importlib.import_module(module_name)
            for name, found in names.items():
                if (
                    unmodelled_reason(found) is not None
                    and name != "__version__"
                    and not served_by_getattr(found, _served_names(record, module_name))
                ):
                    assert not hasattr(module, name), name  # a value the source cannot tell
                    continue
                if is_outside(found):
                    outside_binding(module, name, found)  # the object, or unbound saying why
                    continue
                value = getattr(module, name)
                if found.kind == "function":
                    assert callable(value), name
                    assert not isinstance(value, type), name
                    if found.function is not None:
                        assert shape(value) == recorded_shape(found.function), name
                elif found.kind == "class":
                    assert isinstance(value, type), name
                    if found.cls is not None:
                        _check_methods(value, found.cls)
                elif found.kind == "enum":
                    assert isinstance(value, type), name
                    for member, literal in (found.enum.members if found.enum else {}).items():
                        got = getattr(value, member)
                        if isinstance(got, enum.Enum):
                            got = got.value
                        if isinstance(literal, str) and not isinstance(got, str):
                            continue  # source text (1 << 1): against the real release below
                        if isinstance(literal, list) and len(literal) == 1 and isinstance(got, int):
                            literal = literal[0]  # `Name = (2,)` of an int enum is 2
                        assert got == literal, (name, member)
                elif found.kind == "module" and found.defined_in in sys.modules:
                    assert value is sys.modules[found.defined_in], name
                elif found.kind == "module":
                    # A module from outside FlashInfer that no one imported (pynvml without
                    # FlashInfer installed): the fake imports nothing, it binds a stand-in.
                    assert isinstance(value, ModuleType | StandIn), name
            # A name the module's __getattr__ serves is there, as in the release (0.6.14's
            # flashinfer.comm serves all_gather_matmul).
            recorded = record.module(module_name)
            served = recorded.served if recorded is not None else None
            served_names = served if isinstance(served, tuple) else ()
            for name in everywhere[module_name] - set(names) - set(served_names):
                if not _submodule(module_name, name):
                    assert not hasattr(module, name), f"{module_name}.{name}"


@pytest.mark.parametrize("version", COMM_SWEPT)
def test_mnnvl_backends_import_exactly_where_recorded(version: str) -> None:
    """SGLang: ``from flashinfer.comm.mnnvl import TorchDistBackend`` (and ``CommBackend``)
    inside ``try``/``except ImportError``."""
    record = load_release(version)
    with fake_flashinfer(version):
        for name in ("TorchDistBackend", "CommBackend"):
            expected = name in record.public_names(MNNVL_MODULE)
            try:
                found = getattr(importlib.import_module(MNNVL_MODULE), name)
            except (ImportError, AttributeError):
                assert not expected, name
                continue
            assert expected, name
            assert isinstance(found, type)

            class Subclass(found):  # type: ignore[misc, valid-type]
                """Engines subclass both."""

            assert issubclass(Subclass, found)
        if "TorchDistBackend" in record.public_names(MNNVL_MODULE):
            backend_cls = importlib.import_module(MNNVL_MODULE).TorchDistBackend
            assert backend_cls(group="pg").bcast("data", 0) == "data"


def test_names_from_outside_the_release_are_the_objects_or_stand_ins() -> None:
    import typing

    with fake_flashinfer("0.7.2.post1"):
        mnnvl = importlib.import_module(MNNVL_MODULE)
        assert mnnvl.Any is typing.Any
        assert mnnvl.os is sys.modules["os"]
        assert mnnvl.torch is torch  # already imported here; never imported by the fake
        comm = importlib.import_module(COMM)
        assert comm.QuantizationSFLayout.SWIZZLED_128x4 == 0  # vLLM's layout code
        assert comm.AllReduceFusionPattern.kARResidualRMSNorm == 1


# ---------------------------------------------------------------------------- wrappers


@pytest.mark.parametrize("version", COMM_SWEPT)
def test_wrappers_keep_what_their_constructor_was_given(version: str) -> None:
    record = load_release(version)
    buffer = torch.empty(16, dtype=torch.uint8)
    indptr, indices, last = torch.zeros(3), torch.zeros(8), torch.zeros(2)
    with fake_flashinfer(version) as fi:
        flashinfer = fi.flashinfer
        decode = getattr(flashinfer, DECODE)(
            buffer,
            "HND",
            use_cuda_graph=True,
            use_tensor_cores=False,
            paged_kv_indptr_buffer=indptr,
            paged_kv_indices_buffer=indices,
            paged_kv_last_page_len_buffer=last,
            backend="fa2",
        )
        assert decode._backend == "fa2"
        assert decode._use_tensor_cores is False
        assert decode._use_cuda_graph is True
        assert decode._kv_layout == "HND"
        assert decode._float_workspace_buffer is buffer
        assert decode._paged_kv_indptr_buf is indptr
        assert decode._paged_kv_indices_buf is indices
        assert decode._paged_kv_last_page_len_buf is last
        assert decode.device == buffer.device
        wrapper = record.wrapper(DECODE)
        assert wrapper is not None
        assert wrapper.attributes
        assert set(wrapper.attributes) <= set(vars(decode))
        # Defaults as the release has them; tensor cores forced on by trtllm-gen.
        plain = getattr(flashinfer, DECODE)(buffer)
        assert (plain._kv_layout, plain._backend, plain._use_cuda_graph) == ("NHD", "auto", False)
        assert plain._use_tensor_cores is False
        assert getattr(flashinfer, DECODE)(buffer, backend="trtllm-gen")._use_tensor_cores is True
        for name in (PAGED, RAGGED):
            cls = getattr(flashinfer, name)
            prefill = cls(buffer, "HND", use_cuda_graph=True, qo_indptr_buf=indptr, backend="fa2")
            assert (prefill._backend, prefill._kv_layout, prefill._use_cuda_graph) == (
                "fa2",
                "HND",
                True,
            )
            assert prefill._qo_indptr_buf is indptr
            assert prefill._float_workspace_buffer is buffer
            recorded = record.wrapper(name)
            assert recorded is not None
            assert set(recorded.attributes) <= set(vars(prefill))
            assert not hasattr(prefill, "_use_tensor_cores")


def test_decode_wrapper_forces_tensor_cores_for_the_releases_backends() -> None:
    buffer = torch.empty(16, dtype=torch.uint8)
    for version, backend, forced in (
        ("0.6.12", "cute-dsl", False),  # 0.6.13 added cute-dsl
        ("0.6.13", "cute-dsl", True),
        ("0.7.0", "prims-ts", True),  # 0.7.0 only
        ("0.7.1", "prims-ts", False),
    ):
        with fake_flashinfer(version) as fi:
            wrapper = getattr(fi.flashinfer, DECODE)(buffer, backend=backend)
            assert wrapper._use_tensor_cores is forced, (version, backend)


# ---------------------------------------------------------------------- fast_decode_plan


@pytest.mark.parametrize("version", _finals())
def test_fast_decode_plan_exactly_where_recorded(version: str) -> None:
    record = load_release(version)
    with fake_flashinfer(version) as fi:
        decode = importlib.import_module(DECODE_MODULE)
        present = record.fast_decode_plan is not None
        assert hasattr(decode, "fast_decode_plan") is present
        assert hasattr(fi.flashinfer, "fast_decode_plan") is present
        if not present:
            return
        plan = decode.fast_decode_plan
        assert plan is fi.flashinfer.fast_decode_plan
        assert shape(plan) == recorded_shape(record.fast_decode_plan)
        wrapper = getattr(fi.flashinfer, DECODE)(torch.empty(16, dtype=torch.uint8))
        wrapper.begin_forward = functools.partial(plan, wrapper)  # SGLang's replay swap
        split = {
            name: value
            for name, value in (("fixed_split_size", 64), ("disable_split_kv", True))
            if name in inspect.signature(plan).parameters
        }
        fi.clear_calls()
        assert wrapper.begin_forward("indptr", "indices", "last", 8, 8, 128, 16, **split) is None
        (call,) = fi.calls_to("fast_decode_plan")
        assert call.instance is wrapper
        assert call.arguments == {
            "indptr": "indptr",
            "indices": "indices",
            "last_page_len": "last",
            "num_qo_heads": 8,
            "num_kv_heads": 8,
            "head_dim": 128,
            "page_size": 16,
            **split,
        }
        with pytest.raises(TypeError, match="no_such_option"):
            plan(wrapper, "i", "x", "l", 8, 8, 128, 16, no_such_option=1)
    if version == "0.7.2.post1":
        assert {"fixed_split_size", "disable_split_kv"} <= set(split)


# ---------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("option", ["multicast", "confidential_compute"])
@pytest.mark.parametrize("bad", [None, 0, 1, "yes", "False", [True]])
def test_hardware_options_take_bools_only(option: str, bad: object) -> None:
    options: dict[str, Any] = {option: bad}
    with (
        pytest.raises(InvalidArgumentError, match=r"^expected "),
        fake_flashinfer("0.7.2.post1", **options),
    ):
        pytest.fail("the block must not run")


def test_hostile_calls_into_workspaces_fail_as_the_release_would() -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        factory = fi.comm.create_allreduce_fusion_workspace
        with pytest.raises(RuntimeError, match="unknown backend 'nccl'"):
            factory(**_create_args("nccl"))
        with pytest.raises(RuntimeError, match="unknown backend None"):
            factory(**{**_create_args("trtllm"), "backend": None})
        with pytest.raises(TypeError):  # None <= 16
            factory(**{**_create_args("auto"), "world_size": None})
        with pytest.raises(TypeError, match="unexpected keyword argument 'no_such'"):
            factory(**_create_args("trtllm"), no_such=1)
        with pytest.raises(ZeroDivisionError):
            factory(**{**_create_args("mnnvl"), "hidden_dim": 0})
        with pytest.raises(ValueError, match="UINT32_MAX"):
            factory(**{**_create_args("mnnvl"), "max_token_num": 1 << 24})
        with pytest.raises(AssertionError):
            factory(**{**_create_args("mnnvl"), "dtype": None})
        with pytest.raises(TypeError, match=r"torch\.dtype"):
            factory(**{**_create_args("mnnvl"), "dtype": "bfloat16"})
        with pytest.raises(ValueError, match="tp_rank"):
            factory(**{**_create_args("mnnvl-cutedsl"), "rank": 2})
        mnnvl = factory(**_create_args("mnnvl"))
        trtllm = factory(**_create_args("trtllm"))
        for workspace in (mnnvl, trtllm):
            with pytest.raises(TypeError, match="missing"):
                workspace.is_buffer_size_sufficient(2, 128)
            with pytest.raises(TypeError, match="unexpected keyword"):
                workspace.is_buffer_size_sufficient(2, 128, 4096, torch.bfloat16, bogus=1)
            with pytest.raises(TypeError, match="missing"):
                workspace.checkpoint_restore()
            with pytest.raises(TypeError):
                workspace.is_buffer_size_sufficient(2, None, 4096, torch.bfloat16)
        with pytest.raises(TypeError, match=r"torch\.dtype"):
            mnnvl.is_buffer_size_sufficient(2, 128, 4096, "bfloat16")
        # A string is no float32: the metadata check sees a 16-bit dtype, as the release.
        assert trtllm.is_buffer_size_sufficient(2, 128, 4096, "bfloat16") is True
        trtllm.destroy()  # frees the metadata the check reads, as the release does
        with pytest.raises(AttributeError):
            trtllm.is_buffer_size_sufficient(2, 128, 4096, torch.bfloat16)


def test_properties_can_be_steered_by_tests() -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        workspace = fi.comm.create_allreduce_fusion_workspace(**_create_args("mnnvl"))
        workspace.backend = "trtllm"
        assert workspace.backend == "trtllm"


def test_a_workspace_outlives_its_fake_only_as_an_error() -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        workspace = fi.comm.create_allreduce_fusion_workspace(**_create_args("mnnvl"))
    from fi_compat.errors import FakeUninstalledError

    with pytest.raises(FakeUninstalledError):
        workspace.is_buffer_size_sufficient(2, 128, 4096, torch.bfloat16)


# -------------------------------------------------------------- against the real release


@pytest.fixture(scope="module")
def real() -> ModuleType:
    return import_installed(
        "flashinfer.comm.trtllm_mnnvl_ar", "flashinfer.comm.mnnvl_cutedsl_ar", "flashinfer.comm"
    )[-1]


def _twin(real_cls: type, **attributes: Any) -> Any:
    """A real workspace built without ``__init__`` (nothing to free: ``_destroyed``)."""
    twin: Any = object.__new__(real_cls)
    vars(twin).update(attributes, _destroyed=True)
    return twin


DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MADE = [
    (tp, tokens, hidden, dtype)
    for tp in (2, 8)
    for tokens in (1, 128, 3000)
    for hidden in (1024, 7168)
    for dtype in DTYPES
]
ASKED = [
    (tp, tokens, hidden, dtype)
    for tp in (2, 8)
    for tokens in (1, 64, 65, 128, 129, 341, 1000, 3001, 16384)
    for hidden in (1024, 4096, 7168)
    for dtype in DTYPES
]


@pytest.mark.real_flashinfer
def test_size_arithmetic_matches_the_real_072(real: ModuleType) -> None:
    mnnvl_module = sys.modules["flashinfer.comm.trtllm_mnnvl_ar"]
    cutedsl_module = sys.modules["flashinfer.comm.mnnvl_cutedsl_ar"]
    real_mnnvl = mnnvl_module.MNNVLAllReduceFusionWorkspace
    real_strategy = mnnvl_module.MNNVLAllreduceFusionStrategy
    real_cutedsl = getattr(cutedsl_module, CLASS_OF["mnnvl-cutedsl"])
    with fake_flashinfer("0.7.2.post1") as fi:
        factory = fi.comm.create_allreduce_fusion_workspace
        fake_strategy = type(
            inspect.signature(fi.comm.MNNVLAllReduceFusionWorkspace.is_buffer_size_sufficient)
            .parameters["strategy"]
            .default
        )
        assert [(m.name, m.value) for m in fake_strategy] == [
            (m.name, m.value) for m in real_strategy
        ]
        seen: set[tuple[str, bool]] = set()
        for tp, tokens, hidden, dtype in MADE:
            made: dict[str, Any] = {"world_size": tp, "rank": 0, "max_token_num": tokens}
            made |= {"hidden_dim": hidden, "dtype": dtype}
            trtllm = factory(backend="trtllm", **made)
            mnnvl = factory(backend="mnnvl", **made)
            twins = {
                "trtllm": _twin(real.TRTLLMAllReduceFusionWorkspace, metadata=trtllm.metadata),
                "mnnvl": _twin(real_mnnvl, buffer_size_bytes=mnnvl.buffer_size_bytes),
            }
            cutedsl = None
            if tp in (2, 4, 8, 16) and dtype == torch.bfloat16:
                cutedsl = factory(backend="mnnvl-cutedsl", group=object(), **made)
                twins["mnnvl-cutedsl"] = _twin(
                    real_cutedsl,
                    world_size=tp,
                    max_token_num=tokens,
                    hidden_dim=hidden,
                    dtype=dtype,
                )
            for asked in ASKED:
                answer = trtllm.is_buffer_size_sufficient(*asked)
                assert answer == twins["trtllm"].is_buffer_size_sufficient(*asked), (made, asked)
                seen.add(("trtllm", answer))
                for member in real_strategy:
                    fake_member = fake_strategy[member.name]
                    answer = mnnvl.is_buffer_size_sufficient(*asked, strategy=fake_member)
                    real_answer = twins["mnnvl"].is_buffer_size_sufficient(*asked, strategy=member)
                    assert answer == real_answer, (made, asked, member)
                    seen.add((f"mnnvl {member.name}", answer))
                if cutedsl is not None:
                    answer = cutedsl.is_buffer_size_sufficient(*asked)
                    real_answer = twins["mnnvl-cutedsl"].is_buffer_size_sufficient(*asked)
                    assert answer == real_answer, (made, asked)
                    seen.add(("mnnvl-cutedsl", answer))
            fi.clear_calls()
        # The grid reaches both answers of every check.
        kinds = {"trtllm", "mnnvl-cutedsl", *(f"mnnvl {m.name}" for m in real_strategy)}
        assert seen == {(kind, answer) for kind in kinds for answer in (True, False)}
        for asked in ASKED:
            for member in real_strategy:
                fake_member = fake_strategy[member.name]
                assert fi.comm.MNNVLAllReduceFusionWorkspace.get_required_buffer_size_bytes(
                    *asked, fake_member
                ) == real_mnnvl.get_required_buffer_size_bytes(*asked, member)


@pytest.mark.real_flashinfer
def test_workspace_methods_have_the_real_072_signatures(real: ModuleType) -> None:
    cutedsl_module = sys.modules["flashinfer.comm.mnnvl_cutedsl_ar"]
    with fake_flashinfer("0.7.2.post1") as fi:
        for backend, name in CLASS_OF.items():
            fake_cls = type(fi.comm.create_allreduce_fusion_workspace(**_create_args(backend)))
            real_cls = getattr(real, name, None) or getattr(cutedsl_module, name)
            for method in ("__init__", "is_buffer_size_sufficient", "destroy"):
                assert shape(getattr(fake_cls, method)) == shape(getattr(real_cls, method))
            for method in ("checkpoint_prepare", "checkpoint_restore"):
                assert hasattr(fake_cls, method) is hasattr(real_cls, method), (name, method)
                if hasattr(real_cls, method):
                    assert shape(getattr(fake_cls, method)) == shape(getattr(real_cls, method))
            assert isinstance(inspect.getattr_static(fake_cls, "backend"), property)


@pytest.mark.real_flashinfer
def test_public_names_match_the_real_072(real: ModuleType) -> None:
    """Every recorded name of the named modules (flashinfer.comm, flashinfer.comm.mnnvl and
    the attention backends' modules): the real module has it (a conditional one where its
    optional dependency imports), a function has the real signature, a class the real
    methods' signatures, an enum or constant holder the real members and values."""
    record = load_release("0.7.2.post1")
    reals = {module: importlib.import_module(module) for module in NAMED_MODULES}
    checked_values = 0
    with fake_flashinfer("0.7.2.post1"):
        for module_name in NAMED_MODULES:
            fake = importlib.import_module(module_name)
            for name, found in record.public_names(module_name).items():
                if found.conditional and not hasattr(reals[module_name], name):
                    continue  # an optional dependency that does not import on this machine
                real_value = getattr(reals[module_name], name)
                if unmodelled_reason(found) is not None and not served_by_getattr(
                    found, _served_names(record, module_name)
                ):
                    assert not hasattr(fake, name), name  # a value the source cannot tell
                    continue
                if is_outside(found):
                    # the very object, or unbound saying why (a name imported under another,
                    # which the record does not keep)
                    value = outside_binding(fake, name, found)
                    assert value is None or value is real_value, name
                    continue
                value = getattr(fake, name)
                if found.literal is not None:
                    # the value as imported; a dict, list or set may have changed since
                    assert type(value) is type(real_value), name
                    if not isinstance(value, dict | list | set):
                        assert value == real_value, name
                    checked_values += 1
                elif found.kind == "function":
                    assert shape(value) == shape(real_value), name
                elif found.kind == "class" and found.cls is not None:
                    for method, recorded in found.cls.methods.items():
                        if recorded is not None and not recorded.is_property:
                            assert shape(getattr(value, method)) == shape(
                                getattr(real_value, method)
                            ), f"{name}.{method}"
                elif found.kind == "enum" and found.enum is not None:
                    for member in found.enum.members:
                        got, want = getattr(value, member), getattr(real_value, member)
                        assert isinstance(got, enum.Enum) is isinstance(want, enum.Enum)
                        got = got.value if isinstance(got, enum.Enum) else got
                        want = want.value if isinstance(want, enum.Enum) else want
                        assert got == want, f"{name}.{member}"
    assert checked_values > 0


def test_kits_are_what_the_fixture_yields() -> None:
    with fake_flashinfer("0.7.2.post1", multicast=False) as fi:
        assert isinstance(fi, FakeFlashInfer)
        assert (fi.multicast, fi.confidential_compute) == (False, False)
