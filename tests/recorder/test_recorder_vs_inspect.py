"""The recorded 0.7.2.post1 file against ``inspect`` on the real installed FlashInfer.

Skipped unless the real flashinfer-python 0.7.2.post1 is importable here.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.metadata
import inspect
import json
from collections.abc import Callable
from types import FunctionType, ModuleType
from typing import Any

import pytest

from fi_compat._surface import COMM, DECODE_MODULE, FLASHINFER, NAMED_MODULES
from fi_compat.testing import FunctionRecord, ReleaseRecord, load_release
from tests.support.fresh import fresh_python

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


# ------------------------------------------------------------------------- name tables


_CODE = (FunctionType, staticmethod, classmethod, property)


def _holds_constants(cls: type) -> bool:
    """A plain class of constants (``AllReduceFusionPattern``): what fi-compat calls an enum.

    No base, not a dataclass, no annotations and no ``def`` of any kind: class-level
    constants only, at least one of them public.
    """
    own = vars(cls)
    plain = cls.__bases__ == (object,) and not dataclasses.is_dataclass(cls)
    code = "__annotations__" in own or any(isinstance(value, _CODE) for value in own.values())
    return plain and not code and any(not name.startswith("_") for name in own)


def _live_kind(value: object) -> str:
    if inspect.ismodule(value):
        return "module"
    if inspect.isclass(value):
        enum_like = issubclass(value, enum.Enum) or _holds_constants(value)
        return "enum" if enum_like else "class"
    if inspect.isfunction(inspect.unwrap(value)):  # type: ignore[arg-type]
        return "function"
    return "value"


@pytest.mark.parametrize("module", NAMED_MODULES)
def test_recorded_names_are_what_dir_shows_but_side_effect_submodules(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord, module: str
) -> None:
    live = importlib.import_module(module)
    bound = set(vars(live))
    shown = {name for name in dir(live) if not name.startswith("_")}
    names = record.public_names(module)
    recorded = set(names)
    # A conditional name is bound only where what guards it imports (0.7.2.post1's CuTe DSL
    # MoE APIs): absent here, and the record says why.
    missing = recorded - shown
    assert all(names[name].conditional for name in missing), missing
    # What dir() shows beyond the record are the submodules that were imported (by this
    # module's own ``from .allreduce import ...`` or by anyone else) and so were bound on
    # their package by the import system, not by a statement of the module; and the names
    # its own ``__dir__`` lists that its ``__getattr__`` serves (0.7.x's prims-ts helpers in
    # flashinfer.decode), which no statement binds either.
    lazy = {name for name in shown - recorded - bound if hasattr(live, "__getattr__")}
    extra = {name: getattr(live, name) for name in shown - recorded - lazy}
    assert {name: getattr(value, "__name__", None) for name, value in extra.items()} == {
        name: f"{module}.{name}" for name in extra
    }
    if module == COMM:
        assert extra, "flashinfer.comm's own imports bind its submodules on it"


@pytest.mark.parametrize("module", NAMED_MODULES)
def test_recorded_kinds_and_homes_match_inspect(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord, module: str
) -> None:
    live = importlib.import_module(module)
    checked = 0
    for name, entry in record.public_names(module).items():
        if entry.conditional and not hasattr(live, name):
            continue  # its optional dependency does not import on this machine
        value = getattr(live, name)
        assert entry.defined_in is not None, name
        if entry.kind == "value" and not entry.defined_in.startswith(FLASHINFER):
            # Imported from outside the release: the source cannot tell its kind, only the
            # module it comes from, which the import loaded.
            assert importlib.import_module(entry.defined_in) is not None, name
            continue
        assert entry.kind == _live_kind(value), name
        checked += 1
        if entry.kind == "module":
            assert value.__name__ == entry.defined_in, name
        elif entry.kind == "function":
            assert inspect.unwrap(value).__module__ == entry.defined_in, name
            assert _recorded_shape(entry.function) == _shape(value), name
        elif entry.kind in ("class", "enum"):
            assert value.__module__ == entry.defined_in, name
    assert checked > 10


def _method_shape(cls: type, name: str) -> list[tuple[str, str, bool]]:
    """The signature of a method as its ``def`` declares it (``self`` or ``cls`` included)."""
    found = inspect.getattr_static(cls, name)
    if isinstance(found, staticmethod | classmethod):
        found = found.__func__
    elif isinstance(found, property):
        found = found.fget
    return _shape(found)


@pytest.mark.parametrize("module", NAMED_MODULES)
def test_classes_record_every_public_method_with_its_signature(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord, module: str
) -> None:
    live = importlib.import_module(module)
    for name, entry in record.public_names(module).items():
        if entry.cls is None or (entry.conditional and not hasattr(live, name)):
            continue
        cls = getattr(live, name)
        public = {
            method
            for owner in cls.__mro__
            if owner.__module__.startswith(FLASHINFER)
            for method, value in vars(owner).items()
            if not method.startswith("_")
            and (callable(value) or isinstance(value, staticmethod | classmethod | property))
            and not inspect.isclass(value)
        }
        recorded = {method for method in entry.cls.methods if not method.startswith("_")}
        assert recorded == public, name
        for method, func in entry.cls.methods.items():
            if func is not None:
                assert _recorded_shape(func) == _method_shape(cls, method), f"{name}.{method}"
                kind = inspect.getattr_static(cls, method)
                assert func.is_property is isinstance(kind, property), f"{name}.{method}"
        if entry.enum is not None:
            for member, value in entry.enum.members.items():
                if not isinstance(value, str):
                    live_member = getattr(cls, member)
                    if isinstance(live_member, enum.Enum):
                        live_member = live_member.value
                    if isinstance(value, list) and len(value) == 1 and isinstance(live_member, int):
                        value = value[0]  # `Name = (2,)` of an int enum (JSON keeps a list)
                    assert live_member == value, f"{name}.{member}"


def test_fast_decode_plan_matches_inspect(
    real: tuple[ModuleType, ModuleType], record: ReleaseRecord
) -> None:
    decode = importlib.import_module(DECODE_MODULE)
    plan = record.fast_decode_plan
    assert plan is not None
    live = getattr(decode, plan.name)
    assert _recorded_shape(plan) == _shape(live)
    assert inspect.unwrap(live).__module__ == plan.defined_in


# ---------------------------------------------------------------- every module, live

#: Imports every recorded module of the installed release that imports on this machine, in
#: a process of its own, and prints, as JSON, what its namespace holds that the record does
#: not and what the record holds that the namespace lacks.
_EVERY_MODULE = """
import importlib, inspect, json, logging, sys, warnings
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
from fi_compat._records import load_release
record = load_release(sys.argv[1])
found = {"modules": 0, "names": 0, "absent": [], "unrecorded": []}
for name in sorted(record.names):
    try:
        live = importlib.import_module(name)
    except BaseException:
        continue  # needs a GPU, CUDA or a package this machine lacks
    recorded = record.module(name)
    if recorded is None or recorded.unreadable is not None:
        continue
    found["modules"] += 1
    bound = vars(live)
    for member in recorded.names:
        found["names"] += 1
        if member not in bound and not recorded.names[member].conditional:
            served = hasattr(live, "__getattr__") and recorded.binds(member)
            if not served:
                found["absent"].append(f"{name}.{member}")
    try:
        source = inspect.getsource(live)
    except (OSError, TypeError):
        source = ""
    for member, value in bound.items():
        if member in recorded.names or (member.startswith("__") and member.endswith("__")):
            continue
        if inspect.ismodule(value):
            continue  # a submodule bound on its package by the import system
        if "globals()[" in source or "globals().update" in source:
            continue  # written by code the recorder does not run
        found["unrecorded"].append(f"{name}.{member}")
print(json.dumps(found))
"""


def test_every_importable_module_binds_what_its_record_says(
    real: tuple[ModuleType, ModuleType],
) -> None:
    """Every recorded module of the installed release that imports on this CPU machine
    (about 1,500 of 1,900), in a fresh process: each name the record holds unconditionally
    is bound (or served by the module's ``__getattr__``), and each name the import binds is
    recorded, but for submodules the import system binds and names a module writes through
    ``globals()``. Tuple targets, loop variables, ``del`` and names bound only in an
    ``except`` handler were found missing or wrong this way. (Made once per input: the
    script, the installed distributions and this checkout, :mod:`tests.support.fresh`.)"""
    done = fresh_python(["-c", _EVERY_MODULE, RELEASE], timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["modules"] > 1000
    assert found["names"] > 30000
    assert found["absent"] == []
    assert found["unrecorded"] == []
