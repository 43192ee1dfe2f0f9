"""The recorded 0.7.2.post1 file against ``inspect`` on the real installed FlashInfer.

Skipped unless the real flashinfer-python 0.7.2.post1 is importable here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fi_compat.testing import FunctionRecord, ReleaseRecord, load_release
from fi_compat.testing._releases import parse_record
from tools.recorder import record_release

RELEASE = "0.7.2.post1"

pytestmark = pytest.mark.real_flashinfer


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.fixture(scope="module")
def real() -> tuple[ModuleType, ModuleType]:
    if _installed_version() != RELEASE:
        pytest.skip(f"needs flashinfer-python {RELEASE} installed")
    try:
        flashinfer = importlib.import_module("flashinfer")
        comm = importlib.import_module("flashinfer.comm")
    except Exception as error:  # the real package may not import on this machine
        pytest.skip(f"flashinfer not importable: {type(error).__name__}: {error}")
    return flashinfer, comm


@pytest.fixture(scope="module")
def record() -> ReleaseRecord:
    return load_release(RELEASE)


def _shape(func: Callable[..., Any]) -> list[tuple[str, str, bool]]:
    return [
        (p.name, p.kind.name, p.default is not p.empty)
        for p in inspect.signature(func).parameters.values()
    ]


def _recorded_shape(func: FunctionRecord | None) -> list[tuple[str, str, bool]]:
    assert func is not None
    return [(p.name, p.kind, p.has_default) for p in func.parameters]


def test_comm_functions_match_inspect(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord
) -> None:
    _, comm = real
    assert record.comm_exists
    for name, func in record.comm_functions.items():
        assert hasattr(comm, name) is (func is not None), name
        if func is None:
            continue
        actual = getattr(comm, name)
        assert _recorded_shape(func) == _shape(actual), name
        assert inspect.unwrap(actual).__module__ == func.defined_in, name


def test_comm_classes_and_pattern_match(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord
) -> None:
    _, comm = real
    pattern = record.comm_enums["AllReduceFusionPattern"]
    assert pattern is not None
    for member, value in pattern.members.items():
        assert getattr(comm.AllReduceFusionPattern, member) == value
    assert len(pattern.members) >= 6
    for name in record.workspace_classes:
        cls_record = record.comm_class(name)
        assert cls_record is not None
        assert hasattr(comm, name) is bool(cls_record.exported), name
        cls = getattr(importlib.import_module(cls_record.defined_in), name)
        assert cls.__module__ == cls_record.defined_in
        assert _recorded_shape(cls_record.method("destroy")) == _shape(cls.destroy)


def test_torch_dist_backend_matches(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord
) -> None:
    backend = record.torch_dist_backend
    assert backend is not None
    assert backend.module is not None
    cls = importlib.import_module(backend.module).TorchDistBackend
    assert cls.__module__ == backend.defined_in
    for method in ("__init__", "bcast"):
        assert _recorded_shape(backend.method(method)) == _shape(getattr(cls, method)), method
    group_local = "get_global_rank" in inspect.getsource(cls.bcast)
    assert backend.bcast_root_is_group_local is group_local


def test_attention_wrappers_match_inspect(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord
) -> None:
    flashinfer, _ = real
    for name, wrapper in record.attention.items():
        assert wrapper is not None, name
        cls = getattr(flashinfer, name)
        assert cls.__module__ == wrapper.defined_in
        for method_name, method in wrapper.methods.items():
            assert _recorded_shape(method) == _shape(getattr(cls, method_name)), (
                f"{name}.{method_name}"
            )
    decode = record.wrapper("BatchDecodeWithPagedKVCacheWrapper")
    assert decode is not None
    assert decode.plan_forwards_to == "_plan_impl"
    assert "self._plan_impl(" in inspect.getsource(
        flashinfer.BatchDecodeWithPagedKVCacheWrapper.plan
    )


def test_recorded_hazards_agree_with_this_cpu_machine(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord
) -> None:
    # Both imports just succeeded without a GPU, so neither hazard can be recorded here.
    assert record.comm_requires_cuda_runtime.value is False
    assert record.import_queries_gpu.value is False


def test_rerecording_the_installed_tree_gives_the_shipped_record(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord
) -> None:
    flashinfer, _ = real
    site = Path(str(flashinfer.__file__)).parent.parent
    fresh = record_release(site, release=RELEASE)
    shipped = load_release(RELEASE)
    assert parse_record(fresh).comm_functions == shipped.comm_functions
    assert parse_record(fresh).attention == shipped.attention
