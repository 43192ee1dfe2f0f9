"""The fake-FlashInfer kit: exact signatures, call log, failure modes, sys.modules hygiene."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from fi_compat import capabilities
from fi_compat._signature import Status, inspect_callable
from fi_compat.testing import (
    CUDART_MESSAGE,
    FakeUninstalledError,
    StandIn,
    UnknownReleaseError,
    available_releases,
    load_release,
    pytest_plugin,
)
from fi_compat.testing import fake_flashinfer as make_fake
from tests.support.installed import import_installed
from tests.support.shapes import recorded_shape, shape

# The plugin's fixture, also offered to engines through the pytest11 entry point.
fake_flashinfer = pytest_plugin.fake_flashinfer


def _flashinfer_modules() -> dict[str, Any]:
    return {
        name: module
        for name, module in sys.modules.items()
        if name == "flashinfer" or name.startswith("flashinfer.")
    }


@pytest.fixture(autouse=True)
def _no_leak() -> Iterator[None]:
    before = _flashinfer_modules()
    meta_path = list(sys.meta_path)
    yield
    assert _flashinfer_modules() == before
    assert sys.meta_path == meta_path


# ------------------------------------------------------------------ signatures & calls


def test_unknown_keyword_raises_the_interpreters_type_error() -> None:
    with make_fake("0.6.5"):
        import flashinfer.comm

        with pytest.raises(TypeError) as raised:
            flashinfer.comm.create_allreduce_fusion_workspace(
                backend="trtllm", world_size=2, rank=0, max_token_num=8, hidden_dim=16, group=None
            )
        assert str(raised.value) == (
            "create_allreduce_fusion_workspace() got an unexpected keyword argument 'group'"
        )
        with pytest.raises(TypeError, match="trigger_completion_at_end"):
            flashinfer.comm.allreduce_fusion(
                input="x", workspace="w", pattern=1, trigger_completion_at_end=False
            )


@pytest.mark.parametrize("version", available_releases())
def test_every_release_fakes_its_recorded_signatures(version: str) -> None:
    record = load_release(version)
    with make_fake(version) as fi:
        flashinfer = fi.flashinfer
        assert flashinfer.__version__ == record.release
        for name, wrapper in record.attention.items():
            assert hasattr(flashinfer, name) is (wrapper is not None)
            if wrapper is None:
                continue
            cls = getattr(flashinfer, name)
            assert cls.__module__ == wrapper.defined_in
            for method_name, method in wrapper.methods.items():
                if method is not None:
                    assert shape(getattr(cls, method_name)) == recorded_shape(method)
        if not record.comm_exists:
            return
        comm = fi.comm
        for name, func in record.comm_functions.items():
            assert hasattr(comm, name) is (func is not None), name
            if func is not None:
                assert shape(getattr(comm, name)) == recorded_shape(func), name
                assert getattr(comm, name).__module__ == func.defined_in
        backend = record.torch_dist_backend
        if backend is not None:
            assert backend.module is not None
            cls = importlib.import_module(backend.module).TorchDistBackend
            assert shape(cls.bcast) == recorded_shape(backend.method("bcast"))
            assert ("get_global_rank" in inspect.getsource(cls.bcast)) is bool(
                backend.bcast_root_is_group_local
            )


def test_calls_are_recorded_with_bound_arguments() -> None:
    with make_fake("0.6.10.post1") as fi:
        import flashinfer.comm

        workspace = flashinfer.comm.create_allreduce_fusion_workspace(
            "trtllm", 2, 0, max_token_num=8, hidden_dim=16, group="pg"
        )
        out = flashinfer.comm.allreduce_fusion(
            input="in", workspace=workspace, pattern=1, output="out"
        )
        workspace.destroy()
        workspace.destroy()
        assert out == "out"
        assert [call.name for call in fi.calls] == [
            "create_allreduce_fusion_workspace",
            "allreduce_fusion",
            "TRTLLMAllReduceFusionWorkspace.destroy",
            "TRTLLMAllReduceFusionWorkspace.destroy",
        ]
        assert dict(fi.calls[0].arguments) == {
            "backend": "trtllm",
            "world_size": 2,
            "rank": 0,
            "max_token_num": 8,
            "hidden_dim": 16,
            "group": "pg",
        }
        assert fi.calls[2].instance is workspace
        assert workspace.destroyed is True
        assert isinstance(workspace, flashinfer.comm.AllReduceFusionWorkspace)
        assert (workspace.world_size, workspace.rank) == (2, 0)
        assert fi.calls_to("allreduce_fusion")[0].arguments["workspace"] is workspace
        fi.clear_calls()
        assert fi.calls == []


def test_legacy_api_returns_stand_ins_and_pattern_members() -> None:
    record = load_release("0.5.3")
    with make_fake("0.5.3") as fi:
        comm = fi.comm
        assert not hasattr(comm, "create_allreduce_fusion_workspace")
        handles, buffer = comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(0, 2, 8, 16)
        assert handles == []
        assert isinstance(buffer, StandIn)
        assert comm.trtllm_destroy_ipc_workspace_for_all_reduce_fusion(handles) is None
        pattern = record.comm_enums["AllReduceFusionPattern"]
        assert pattern is not None
        members = pattern.members
        assert comm.AllReduceFusionPattern.kARResidualRMSNorm == members["kARResidualRMSNorm"]
        assert [call.name for call in fi.calls] == [
            "trtllm_create_ipc_workspace_for_all_reduce_fusion",
            "trtllm_destroy_ipc_workspace_for_all_reduce_fusion",
        ]


def test_decode_plan_forwards_kwargs_to_plan_impl() -> None:
    with make_fake("0.6.15") as fi:
        import flashinfer

        cls = flashinfer.BatchDecodeWithPagedKVCacheWrapper
        assert "self._plan_impl(" in inspect.getsource(cls.plan)
        # On tensor cores: without them the release refuses a fixed split size.
        wrapper = cls("buffer", use_tensor_cores=True)
        wrapper.plan("indptr", "indices", "last", 8, 8, 128, 16, fixed_split_size=64)
        assert [call.name for call in fi.calls] == [
            "BatchDecodeWithPagedKVCacheWrapper.__init__",
            "BatchDecodeWithPagedKVCacheWrapper.plan",
            "BatchDecodeWithPagedKVCacheWrapper._plan_impl",
        ]
        assert fi.calls[1].arguments["kwargs"] == {"fixed_split_size": 64}
        assert fi.calls[2].arguments["fixed_split_size"] == 64
        assert fi.calls[2].arguments["indptr"] == "indptr"
        with pytest.raises(TypeError, match="no_such_option"):
            wrapper.plan("indptr", "indices", "last", 8, 8, 128, 16, no_such_option=1)
        # fi-compat's own probe follows the forward through the generated source.
        shape = inspect_callable("plan", cls.plan, owner=cls)
        assert shape.acceptance("fixed_split_size").status is Status.SUPPORTED
        assert shape.acceptance("no_such_option").status is Status.UNSUPPORTED


def test_capability_cache_is_reset_on_enter_and_exit() -> None:
    with make_fake("0.6.5"):
        caps = capabilities.get_capabilities()
        assert caps.flashinfer.version == "0.6.5"
        group = caps.comm.kwargs["create_allreduce_fusion_workspace"]["group"]
        assert group.status is Status.UNSUPPORTED
    with make_fake("0.6.10.post1"):
        caps = capabilities.get_capabilities()
        assert caps.flashinfer.version == "0.6.10.post1"
        group = caps.comm.kwargs["create_allreduce_fusion_workspace"]["group"]
        assert group.status is Status.SUPPORTED
    assert capabilities._cached is None


# ------------------------------------------------------------------------ failure modes


def test_no_cuda_runtime_makes_comm_import_assert() -> None:
    with make_fake("0.6.13", cuda_runtime=False):
        import flashinfer

        assert flashinfer.__version__ == "0.6.13"
        for _ in range(2):  # a failed import is not cached: it fails every time
            with pytest.raises(AssertionError) as raised:
                importlib.import_module("flashinfer.comm")
            assert str(raised.value) == CUDART_MESSAGE
        caps = capabilities.get_capabilities()
        assert caps.comm.available is False
        assert caps.comm.error is not None
        assert "libcudart is not loaded" in caps.comm.error


@pytest.mark.parametrize("error", [OSError, TypeError("bad build")])
def test_comm_import_error_modes(error: type[BaseException] | BaseException) -> None:
    expected = error if isinstance(error, type) else type(error)
    with make_fake("0.7.2.post1", comm_import_error=error):
        importlib.import_module("flashinfer")
        with pytest.raises(expected):
            importlib.import_module("flashinfer.comm")


def test_top_level_import_error_mode() -> None:
    with make_fake("0.6.5", import_error=OSError("libcuda.so.1: cannot open shared object")):
        with pytest.raises(OSError, match="libcuda"):
            importlib.import_module("flashinfer")
        caps = capabilities.get_capabilities()
        assert caps.flashinfer.importable is False


def test_not_installed_mode() -> None:
    with make_fake("0.6.5", installed=False):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("flashinfer")
        assert capabilities.get_capabilities().flashinfer.installed is False


def test_unknown_release() -> None:
    with pytest.raises(UnknownReleaseError, match=r"0\.1\.0"), make_fake("0.1.0"):
        pass
    with pytest.raises(LookupError):
        load_release("not-a-version")


# ----------------------------------------------------------------------- sys.modules


def test_displaced_modules_are_restored_even_after_an_error() -> None:
    # Set aside whatever flashinfer earlier tests imported; put markers in its place.
    saved = _flashinfer_modules()
    for name in saved:
        del sys.modules[name]
    marker = ModuleType("flashinfer")
    sub = ModuleType("flashinfer.comm")
    sys.modules["flashinfer"] = marker
    sys.modules["flashinfer.comm"] = sub
    try:
        seen: list[object] = []

        def use_and_fail() -> None:
            with make_fake("0.6.5") as fi:
                seen.extend([sys.modules["flashinfer"], fi.flashinfer.__version__])
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            use_and_fail()
        assert seen[0] is not marker
        assert seen[1] == "0.6.5"
        assert _flashinfer_modules() == {"flashinfer": marker, "flashinfer.comm": sub}
    finally:
        for name in _flashinfer_modules():
            del sys.modules[name]
        sys.modules.update(saved)


def test_only_flashinfer_and_its_submodules_are_set_aside() -> None:
    """A module whose name merely starts with ``flashinfer`` (a package of its own, such as
    ``flashinfer_bench``) stays in place under the fake; ``flashinfer.<x>`` is set aside and
    restored."""
    others = {
        name: ModuleType(name) for name in ("flashinfer_bench", "flashinferx", "x.flashinfer")
    }
    own = ModuleType("flashinfer.made_up_submodule")
    sys.modules.update(others)
    sys.modules[own.__name__] = own
    try:
        with make_fake("0.6.5"):
            assert all(sys.modules[name] is module for name, module in others.items())
            assert own.__name__ not in sys.modules
        assert all(sys.modules[name] is module for name, module in others.items())
        assert sys.modules[own.__name__] is own
    finally:
        for name in [*others, own.__name__]:
            sys.modules.pop(name, None)


def test_nested_fakes_unwind_in_order() -> None:
    with make_fake("0.6.5") as outer:
        with make_fake("0.7.2.post1") as inner:
            assert importlib.import_module("flashinfer").__version__ == "0.7.2.post1"
            assert inner.version == "0.7.2.post1"
        assert importlib.import_module("flashinfer").__version__ == "0.6.5"
        assert outer.comm.__name__ == "flashinfer.comm"
    assert "flashinfer" not in sys.modules or sys.modules["flashinfer"] is not None


def test_pytest_fixture_factory(fake_flashinfer: pytest_plugin.FakeFlashInferFactory) -> None:
    fi = fake_flashinfer("0.6.5")
    import flashinfer.comm

    assert fi.version == "0.6.5"
    assert flashinfer.comm.trtllm_allreduce_fusion.__name__ == "trtllm_allreduce_fusion"
    second = fake_flashinfer("0.6.15", cuda_runtime=False)
    assert second.version == "0.6.15"
    with pytest.raises(AssertionError):
        importlib.import_module("flashinfer.comm")


# -------------------------------------------------------------- against the real release


@pytest.fixture(scope="module")
def real_072() -> tuple[ModuleType, ...]:
    return import_installed("flashinfer", "flashinfer.comm")


@pytest.mark.real_flashinfer
def test_fake_072_matches_the_real_signatures(real_072: tuple[ModuleType, ModuleType]) -> None:
    real, real_comm = real_072
    record = load_release("0.7.2.post1")
    with make_fake("0.7.2.post1") as fi:
        fake, fake_comm = fi.flashinfer, fi.comm
        assert fake is not real
        for name, func in record.comm_functions.items():
            assert func is not None
            assert shape(getattr(fake_comm, name)) == shape(getattr(real_comm, name)), name
            deprecated = any(d.startswith("deprecated(") for d in func.decorators)
            with warnings.catch_warnings(record=True) as fake_warnings:
                warnings.simplefilter("always")
                with pytest.raises(TypeError) as fake_error:
                    getattr(fake_comm, name)(definitely_not_a_parameter=1)
            with warnings.catch_warnings(record=True) as real_warnings:
                warnings.simplefilter("always")
                with pytest.raises(TypeError) as real_error:
                    getattr(real_comm, name)(definitely_not_a_parameter=1)
            assert str(fake_error.value) == str(real_error.value), name
            assert [str(w.message) for w in fake_warnings] == [
                str(w.message) for w in real_warnings
            ], name
            assert bool(real_warnings) is deprecated, name
        for name in record.attention:
            for method in ("__init__", "plan", "_plan_impl"):
                if hasattr(getattr(real, name), method):
                    assert shape(getattr(getattr(fake, name), method)) == shape(
                        getattr(getattr(real, name), method)
                    ), f"{name}.{method}"
    assert sys.modules["flashinfer"] is real


def test_submodules_the_release_lacks_are_missing() -> None:
    with make_fake("0.6.5"):
        assert importlib.util.find_spec("flashinfer.comm.comm_backend") is None
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("flashinfer.comm.comm_backend")
        # TorchDistBackend of 0.6.5 lives in flashinfer.comm.mnnvl.
        backend = importlib.import_module("flashinfer.comm.mnnvl").TorchDistBackend
        assert backend(group=None).bcast("payload", 0) == "payload"


def test_a_later_fake_of_the_release_reuses_its_package_with_fresh_state() -> None:
    with make_fake("0.6.5") as first:
        comm = first.comm
        vars(comm)["stray_state"] = "first"
        comm.trtllm_destroy_ipc_workspace_for_all_reduce_fusion([])
        destroy = comm.trtllm_destroy_ipc_workspace_for_all_reduce_fusion
    with make_fake("0.6.5") as second:
        assert second.directory == first.directory
        assert second.comm is not comm
        assert not hasattr(second.comm, "stray_state")
        assert second.calls == []
        # The first fake's function still belongs to the first fake, which has ended.
        with pytest.raises(FakeUninstalledError, match="has ended"):
            destroy([])
        second.comm.trtllm_destroy_ipc_workspace_for_all_reduce_fusion([])
        assert [call.name for call in second.calls] == [
            "trtllm_destroy_ipc_workspace_for_all_reduce_fusion"
        ]
    assert [call.name for call in first.calls] == [
        "trtllm_destroy_ipc_workspace_for_all_reduce_fusion"
    ]


def test_live_fakes_of_one_release_get_packages_of_their_own() -> None:
    with make_fake("0.6.5") as outer, make_fake("0.6.5") as inner:
        assert inner.directory != outer.directory
        inner.comm.trtllm_destroy_ipc_workspace_for_all_reduce_fusion([])
        assert len(inner.calls) == 1
        assert outer.calls == []


def test_failure_modes_get_packages_of_their_own() -> None:
    with make_fake("0.6.5") as plain:
        pass
    with make_fake("0.6.5", cuda_runtime=False) as no_runtime:
        assert no_runtime.directory != plain.directory
        with pytest.raises(AssertionError, match="libcudart"):
            importlib.import_module("flashinfer.comm")
    with make_fake("0.6.5", comm_import_error=OSError("planned")) as failing:
        assert failing.directory not in (plain.directory, no_runtime.directory)
        with pytest.raises(OSError, match="planned"):
            importlib.import_module("flashinfer.comm")
    with make_fake("0.6.5") as again:
        assert again.directory == plain.directory
        assert again.comm.__name__ == "flashinfer.comm"


def test_calling_a_fake_after_its_block_ended_is_a_clear_error() -> None:
    with make_fake("0.6.5") as fi:
        destroy = fi.comm.trtllm_destroy_ipc_workspace_for_all_reduce_fusion
    with pytest.raises(FakeUninstalledError, match="has ended"):
        destroy([])
    assert issubclass(FakeUninstalledError, RuntimeError)


@pytest.mark.parametrize(
    "options",
    [
        {"cuda_runtime": "no"},
        {"cuda_runtime": None},
        {"installed": 0},
        {"installed": "false"},
        {"import_error": 5},
        {"import_error": "OSError"},
        {"comm_import_error": int},
        {"comm_import_error": object()},
        {"multicast": "yes"},
        {"multicast": 1},
        {"multicast": None},
        {"confidential_compute": "false"},
        {"confidential_compute": 0},
    ],
)
def test_bad_options_are_refused_before_anything_is_installed(options: dict[str, Any]) -> None:
    from fi_compat.errors import InvalidArgumentError

    before = {name: module for name, module in sys.modules.items() if name.startswith("flashinfer")}
    with pytest.raises(InvalidArgumentError, match=r"^expected "), make_fake("0.6.5", **options):
        pytest.fail("the block must not run")
    after = {name: module for name, module in sys.modules.items() if name.startswith("flashinfer")}
    assert after == before


@pytest.mark.parametrize("error", [OSError, OSError("no libcuda"), SystemExit(3)])
def test_import_error_may_be_a_class_or_an_instance(error: Any) -> None:
    expected = error if isinstance(error, type) else type(error)
    with make_fake("0.6.5", import_error=error), pytest.raises(expected):
        importlib.import_module("flashinfer")


@pytest.mark.parametrize("bad", [None, 5, b"plan", ["plan"]])
def test_record_and_call_log_lookups_take_names(bad: object) -> None:
    from fi_compat.errors import InvalidArgumentError

    record = load_release("0.6.5")
    lookups: list[Callable[[], object]] = [
        lambda: record.acceptance(bad, "group"),  # type: ignore[arg-type]
        lambda: record.acceptance("allreduce_fusion", bad),  # type: ignore[arg-type]
        lambda: record.accepts(bad, "group"),  # type: ignore[arg-type]
        lambda: record.function(bad),  # type: ignore[arg-type]
    ]
    for lookup in lookups:
        with pytest.raises(InvalidArgumentError, match=r"^expected "):
            lookup()
    with make_fake("0.6.5") as kit, pytest.raises(InvalidArgumentError):
        kit.calls_to(bad)  # type: ignore[arg-type]
