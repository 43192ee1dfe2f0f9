"""The capability probe against hand-written fake FlashInfer packages."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from packaging.version import Version

from fi_compat import capabilities
from fi_compat.capabilities import ATTENTION_WRAPPERS, Status, get_capabilities
from tests.support import fakes
from tests.support.fakes import FakePackage


def statuses(table: Any) -> dict[str, dict[str, str]]:
    return {owner: {k: v.status.value for k, v in kw.items()} for owner, kw in table.items()}


def test_new_release_supports_everything(fake_package: FakePackage) -> None:
    fake_package(fakes.package(version="0.7.2"))
    caps = get_capabilities()
    assert caps.flashinfer.installed
    assert caps.flashinfer.version == "0.7.2"
    assert caps.flashinfer.parsed_version == Version("0.7.2")
    assert not caps.flashinfer.source_build
    assert caps.comm.available
    assert caps.comm.error is None
    assert caps.comm.unified_api
    assert caps.comm.legacy_api
    assert statuses(caps.comm.kwargs)["create_allreduce_fusion_workspace"] == {
        "group": "supported",
        "comm_backend": "supported",
    }
    assert statuses(caps.comm.kwargs)["allreduce_fusion"] == {
        "trigger_completion_at_end": "supported"
    }
    for wrapper in ATTENTION_WRAPPERS:
        assert statuses(caps.attention)[f"{wrapper}.plan"] == {
            "fixed_split_size": "supported",
            "disable_split_kv": "supported",
        }


def test_old_unified_release_lacks_group_and_trigger(fake_package: FakePackage) -> None:
    fake_package(fakes.package(version="0.6.5", comm=fakes.OLD_COMM))
    caps = get_capabilities()
    kwargs = caps.comm.kwargs
    assert kwargs["create_allreduce_fusion_workspace"]["group"].status is Status.UNSUPPORTED
    assert kwargs["create_allreduce_fusion_workspace"]["comm_backend"].supported
    trigger = kwargs["allreduce_fusion"]["trigger_completion_at_end"]
    assert trigger.status is Status.UNSUPPORTED
    assert "allreduce_fusion" in trigger.reason
    assert caps.comm.shapes["create_allreduce_fusion_workspace"].keywords is not None
    assert "group" not in caps.comm.shapes["create_allreduce_fusion_workspace"].keywords


def test_legacy_only_release(fake_package: FakePackage) -> None:
    fake_package(fakes.package(version="0.5.3", comm=fakes.LEGACY_COMM))
    caps = get_capabilities()
    assert caps.comm.available
    assert not caps.comm.unified_api
    assert caps.comm.legacy_api
    group = caps.comm.kwargs["create_allreduce_fusion_workspace"]["group"]
    assert group.status is Status.UNSUPPORTED
    assert group.reason == "flashinfer.comm has no create_allreduce_fusion_workspace"
    assert caps.comm.kwargs["trtllm_create_ipc_workspace_for_all_reduce_fusion"]["group"].supported


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        ('AssertionError("libcudart is not loaded in the current process")', "AssertionError"),
        ('OSError("libcuda.so.1: cannot open shared object file")', "OSError"),
        ("TypeError(\"'NoneType' object is not callable\")", "TypeError"),
    ],
)
def test_comm_import_failure_is_a_finding(
    fake_package: FakePackage, raised: str, expected: str
) -> None:
    fake_package(fakes.package(comm_raises=raised))
    caps = get_capabilities()
    assert caps.flashinfer.importable
    assert not caps.comm.available
    assert caps.comm.error is not None
    assert caps.comm.error.startswith(f"{expected}: ")
    assert not caps.comm.unified_api
    assert not caps.comm.legacy_api
    for answers in caps.comm.kwargs.values():
        for support in answers.values():
            assert support.status is Status.UNKNOWN
            assert expected in support.reason
    # The attention wrappers live in flashinfer itself and are still probed.
    assert caps.plan_acceptance("BatchDecodeWithPagedKVCacheWrapper", "fixed_split_size").supported


def test_flashinfer_import_failure_is_a_finding(fake_package: FakePackage) -> None:
    fake_package(fakes.package(init_raises='RuntimeError("CUDA driver initialization failed")'))
    caps = get_capabilities()
    assert caps.flashinfer.installed
    assert not caps.flashinfer.importable
    assert caps.flashinfer.import_error == "RuntimeError: CUDA driver initialization failed"
    assert not caps.comm.available
    for answers in caps.attention.values():
        assert {s.status for s in answers.values()} == {Status.UNKNOWN}


def test_not_installed(no_flashinfer: None) -> None:
    caps = get_capabilities()
    assert not caps.flashinfer.installed
    assert caps.flashinfer.version is None
    assert caps.flashinfer.import_error is None
    assert not caps.comm.available
    assert caps.comm.error is not None
    assert "not installed" in caps.comm.error


def test_signatureless_callable_is_unknown(fake_package: FakePackage) -> None:
    fake_package(fakes.package(comm=fakes.SIGNATURELESS_COMM))
    caps = get_capabilities()
    trigger = caps.comm.kwargs["allreduce_fusion"]["trigger_completion_at_end"]
    assert trigger.status is Status.UNKNOWN
    assert "ValueError: no signature found" in trigger.reason
    assert caps.comm.unified_api
    assert caps.comm.kwargs["create_allreduce_fusion_workspace"]["group"].supported


def test_kwargs_forwarder_is_followed(fake_package: FakePackage) -> None:
    fake_package(fakes.package(wrappers=fakes.DIRECT_WRAPPERS + fakes.FORWARDING_DECODE))
    caps = get_capabilities()
    support = caps.plan_acceptance("BatchDecodeWithPagedKVCacheWrapper", "fixed_split_size")
    assert support.status is Status.SUPPORTED
    assert "_plan_impl" in support.reason
    shape = caps.attention_shapes["BatchDecodeWithPagedKVCacheWrapper.plan"]
    assert shape.keywords is not None
    assert "window_left" in shape.keywords
    assert not shape.open_ended
    assert shape.via[-1].endswith("BatchDecodeWithPagedKVCacheWrapper._plan_impl")


def test_kwargs_forwarder_to_a_target_without_the_keyword(fake_package: FakePackage) -> None:
    target_without = fakes.FORWARDING_DECODE.replace(
        "fixed_split_size=None,\n                   disable_split_kv=False", "causal=False"
    )
    assert target_without != fakes.FORWARDING_DECODE
    fake_package(fakes.package(wrappers=fakes.DIRECT_WRAPPERS + target_without))
    caps = get_capabilities()
    support = caps.plan_acceptance("BatchDecodeWithPagedKVCacheWrapper", "disable_split_kv")
    assert support.status is Status.UNSUPPORTED
    assert "_plan_impl" in support.reason


@pytest.mark.parametrize("source", [fakes.OPAQUE_DECODE, fakes.UNRESOLVABLE_DECODE])
def test_bare_kwargs_is_unknown_never_supported(fake_package: FakePackage, source: str) -> None:
    fake_package(fakes.package(wrappers=fakes.DIRECT_WRAPPERS + source))
    caps = get_capabilities()
    for keyword in ("fixed_split_size", "disable_split_kv"):
        support = caps.plan_acceptance("BatchDecodeWithPagedKVCacheWrapper", keyword)
        assert support.status is Status.UNKNOWN
        assert "**kwargs" in support.reason


def test_release_before_split_settings(fake_package: FakePackage) -> None:
    fake_package(fakes.package(version="0.3.1", wrappers=fakes.OLD_WRAPPERS))
    caps = get_capabilities()
    for wrapper in ATTENTION_WRAPPERS:
        assert caps.plan_acceptance(wrapper, "fixed_split_size").status is Status.UNSUPPORTED


def test_missing_wrapper_is_unsupported(fake_package: FakePackage) -> None:
    fake_package(fakes.package(wrappers=fakes.FORWARDING_DECODE))
    caps = get_capabilities()
    support = caps.plan_acceptance("BatchPrefillWithRaggedKVCacheWrapper", "fixed_split_size")
    assert support.status is Status.UNSUPPORTED
    assert support.reason == "flashinfer has no BatchPrefillWithRaggedKVCacheWrapper"


@pytest.mark.parametrize(
    ("version", "parsed", "source_build"),
    [
        ("0.0.0+unknown", Version("0.0.0+unknown"), True),
        ("0.6.10.post1", Version("0.6.10.post1"), False),
        ("0.6.11+cu128", Version("0.6.11+cu128"), True),
        ("not-a-version", None, True),
    ],
)
def test_version_parsing(
    fake_package: FakePackage, version: str, parsed: Version | None, source_build: bool
) -> None:
    fake_package(fakes.package(version=version))
    info = get_capabilities().flashinfer
    assert info.version == version
    assert info.parsed_version == parsed
    assert info.source_build is source_build


def test_cached_and_refresh(fake_package: FakePackage) -> None:
    fake_package(fakes.package(version="0.6.5", comm=fakes.OLD_COMM))
    first = get_capabilities()
    assert get_capabilities() is first
    refreshed = get_capabilities(refresh=True)
    assert refreshed is not first
    assert refreshed == first


def test_capabilities_are_frozen(fake_package: FakePackage) -> None:
    fake_package(fakes.package())
    caps = get_capabilities()
    with pytest.raises(AttributeError):
        caps.comm = caps.comm  # type: ignore[misc]
    with pytest.raises(TypeError):
        caps.comm.kwargs["allreduce_fusion"] = {}  # type: ignore[index]


def test_one_probe_for_many_threads(
    fake_package: FakePackage, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_package(fakes.package())
    real_probe = capabilities.probe
    calls = []
    started = threading.Barrier(8)

    def counting_probe() -> capabilities.Capabilities:
        calls.append(1)
        return real_probe()

    monkeypatch.setattr(capabilities, "probe", counting_probe)
    results: list[capabilities.Capabilities] = []

    def worker() -> None:
        started.wait()
        results.append(get_capabilities())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(results) == 8
    assert all(result is results[0] for result in results)


def test_torch_dist_backend_root(fake_package: FakePackage) -> None:
    backend = """
class TorchDistBackend:
    def __init__(self, group=None):
        self._group = group
    def bcast(self, data, root):
        return data
"""
    fake_package({**fakes.package(), "flashinfer/comm/mnnvl.py": backend})
    comm = get_capabilities().comm
    assert comm.torch_dist_backend == "flashinfer.comm.mnnvl.TorchDistBackend"
    assert comm.bcast_root_is_group_local.status is Status.UNSUPPORTED


@pytest.mark.parametrize("refresh", ["yes", "false", 1, 0, None, [True]])
def test_refresh_takes_a_bool_only(refresh: Any) -> None:
    from fi_compat.errors import InvalidArgumentError

    get_capabilities()  # cached: a non-bool must be refused on the cached path too
    with pytest.raises(InvalidArgumentError, match="expected refresh to be a bool"):
        get_capabilities(refresh=refresh)
