"""Every public name of ``flashinfer.comm`` and ``flashinfer.comm.mnnvl`` from ``fi_compat.comm``.

Under the fake of each recorded release, a name the release has is the release's own object
(handed through, not copied), except the names fi-compat adapts and the submodules, which are
fi-compat's (``tests/comm/test_submodules.py``); a name it lacks raises
:class:`~fi_compat.errors.NameUnavailableError`, an ``AttributeError`` that names the first
recorded release that has it, so ``hasattr`` is False and ``from ... import`` raises
``ImportError``, as with FlashInfer itself. ``fi_compat.comm.mnnvl.TorchDistBackend`` maps a
group-local ``bcast`` root on the releases whose own ``bcast`` reads it as global.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

import fi_compat.comm
import fi_compat.comm.mnnvl
from fi_compat import _probe
from fi_compat._records import introduced_in
from fi_compat._surface import COMM, LEGACY_FUSION, MNNVL_MODULE, TORCH_DIST_BACKEND
from fi_compat.capabilities import Status, get_capabilities
from fi_compat.errors import FiCompatError, NameUnavailableError
from fi_compat.testing import available_releases, fake_flashinfer, load_release
from tests.support import fakes, release_classes
from tests.support.fakes import FakePackage

RELEASES = [
    v
    for v in available_releases()
    if not Version(v).is_prerelease and Version(v) >= Version("0.2.9")
]
#: The releases the tests below run on: the first and last of each 'names' class
#: (tests/support/release_classes.py; every one with --all-releases).
SWEPT = release_classes.releases("names", RELEASES)
NEWEST = load_release(RELEASES[-1])
OURS = frozenset(fi_compat.comm.__all__)
#: fi-compat's own stand-ins for submodules of the same name.
SUBMODULES = frozenset({"mnnvl"})


@pytest.fixture(params=SWEPT)
def release(request: pytest.FixtureRequest) -> Iterator[Any]:
    with fake_flashinfer(request.param) as fake:
        yield fake


def _public(module: Any) -> list[str]:
    return sorted(name for name in vars(module) if not name.startswith("_"))


def test_every_public_name_of_the_installed_comm_is_handed_through(release: Any) -> None:
    names = _public(release.comm)
    assert names
    for name in names:
        value = getattr(fi_compat.comm, name)
        if name in SUBMODULES:
            assert value is sys.modules[f"fi_compat.comm.{name}"]
        elif getattr(release.comm, name) is sys.modules.get(f"{COMM}.{name}"):
            # A submodule: fi-compat's, handed through (tests/comm/test_submodules.py).
            assert value is sys.modules[f"fi_compat.comm.{name}"], name
            assert getattr(value.__spec__, "origin", None) == f"{COMM}.{name}", name
        elif name in OURS:
            assert value is not getattr(release.comm, name), name  # adapted, ours
        else:
            assert value is getattr(release.comm, name), name


def test_a_handed_through_name_follows_the_installed_release() -> None:
    """Nothing is cached: another release (or a refreshed probe) is seen at once."""
    older, newer = RELEASES[0], RELEASES[-1]
    with fake_flashinfer(older) as fake:
        name = LEGACY_FUSION.key  # in every release, handed through
        first = getattr(fi_compat.comm, name)
        assert first is getattr(fake.comm, name)
    with fake_flashinfer(newer) as fake:
        assert hasattr(fake.comm, name), name
        assert getattr(fi_compat.comm, name) is getattr(fake.comm, name) is not first


def _public_names_of(version: str) -> list[str]:
    return sorted(load_release(version).public_names(COMM))


def _lacking(version: str) -> list[str]:
    """Public names of the newest release's flashinfer.comm that ``version`` lacks."""
    have = set(load_release(version).public_names(COMM))
    return sorted(set(NEWEST.public_names(COMM)) - have - OURS - SUBMODULES)


@pytest.mark.parametrize("version", [v for v in RELEASES if _lacking(v)][:3] + RELEASES[-2:-1])
def test_a_name_the_release_lacks_names_the_release_that_brought_it(version: str) -> None:
    lacking = _lacking(version)
    if not lacking:
        pytest.skip(f"{version} has every public name of {RELEASES[-1]}")
    with fake_flashinfer(version) as fake:
        for name in lacking[:25]:
            assert not hasattr(fake.comm, name)
            first = introduced_in(COMM, name)
            assert first is not None
            with pytest.raises(NameUnavailableError) as info:
                getattr(fi_compat.comm, name)
            error = info.value
            assert isinstance(error, AttributeError)
            assert isinstance(error, FiCompatError)
            assert error.name == name
            assert error.introduced_in == first
            assert f"{COMM}.{name}" in str(error)
            assert f"flashinfer {version} without it" in str(error)
            assert first in str(error)
            assert not hasattr(fi_compat.comm, name)
            with pytest.raises(ImportError, match=name):
                exec(f"from fi_compat.comm import {name}", {})


def test_a_name_no_release_has_says_so(release: Any) -> None:
    with pytest.raises(NameUnavailableError, match="no recorded FlashInfer release") as info:
        fi_compat.comm.NoSuchFlashInferName  # noqa: B018
    assert info.value.introduced_in is None


@pytest.mark.parametrize("name", ["__wrapped__", "_private", "__path_hooks__", "_"])
def test_private_names_are_never_handed_through(name: str, release: Any) -> None:
    setattr(release.comm, name, object())  # even when the release has one
    with pytest.raises(AttributeError):
        getattr(fi_compat.comm, name)
    with pytest.raises(AttributeError):
        getattr(fi_compat.comm.mnnvl, name)


def test_star_import_gives_our_names_only() -> None:
    namespace: dict[str, Any] = {}
    exec("from fi_compat.comm import *", namespace)
    assert set(namespace) - {"__builtins__"} == OURS
    assert dir(fi_compat.comm) == sorted(OURS) or set(dir(fi_compat.comm)) == OURS


# ----------------------------------------------------------------- when comm cannot be used


def test_without_flashinfer_every_name_is_unavailable(no_flashinfer: None) -> None:
    with pytest.raises(NameUnavailableError, match=rf"{COMM}\.QuantizationSFLayout"):
        fi_compat.comm.QuantizationSFLayout  # noqa: B018
    with pytest.raises(NameUnavailableError, match="MnnvlConfig"):
        fi_compat.comm.mnnvl.MnnvlConfig  # noqa: B018
    with pytest.raises(NameUnavailableError, match=TORCH_DIST_BACKEND.key):
        fi_compat.comm.mnnvl.TorchDistBackend  # noqa: B018
    assert not hasattr(fi_compat.comm, "MoeAlltoAll")


def test_comm_that_asserts_on_import_gives_attribute_errors_saying_why() -> None:
    """Up to 0.6.13 ``import flashinfer.comm`` asserts without a CUDA runtime."""
    version = next(v for v in RELEASES if load_release(v).comm_requires_cuda_runtime.value)
    with fake_flashinfer(version, cuda_runtime=False):
        with pytest.raises(NameUnavailableError, match="AssertionError") as info:
            fi_compat.comm.trtllm_allreduce_fusion  # noqa: B018
        assert "unusable" in str(info.value)
        assert not hasattr(fi_compat.comm.mnnvl, "TorchDistBackend")


@pytest.mark.parametrize(
    "raises", ["SystemExit(3)", "OSError('libnvidia-ml.so.1')", "AssertionError()", "ImportError"]
)
def test_a_submodule_that_raises_on_import_is_a_finding(
    raises: str, fake_package: FakePackage
) -> None:
    files = fakes.package()
    files["flashinfer/comm/mnnvl.py"] = f"raise {raises}\n"
    fake_package(files)
    with pytest.raises(NameUnavailableError, match=MNNVL_MODULE) as info:
        fi_compat.comm.mnnvl.MnnvlConfig  # noqa: B018
    assert "unusable" in str(info.value)
    assert isinstance(info.value.__cause__, BaseException)


def test_keyboard_interrupt_in_a_submodule_import_propagates(fake_package: FakePackage) -> None:
    files = fakes.package()
    files["flashinfer/comm/mnnvl.py"] = "raise KeyboardInterrupt\n"
    fake_package(files)
    with pytest.raises(KeyboardInterrupt):
        fi_compat.comm.mnnvl.MnnvlConfig  # noqa: B018


def test_a_hostile_str_in_the_import_error_is_described(fake_package: FakePackage) -> None:
    files = fakes.package()
    files["flashinfer/comm/mnnvl.py"] = (
        "class Bad(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise Bad\n"
    )
    fake_package(files)
    with pytest.raises(NameUnavailableError, match="Bad"):
        fi_compat.comm.mnnvl.MnnvlConfig  # noqa: B018


# ---------------------------------------------------------------------- fi_compat.comm.mnnvl


def test_mnnvl_names_are_handed_through(release: Any) -> None:
    module = sys.modules.get(MNNVL_MODULE)
    if module is None:
        try:
            module = importlib.import_module(MNNVL_MODULE)
        except ImportError:
            assert not load_release(release.version).public_names(MNNVL_MODULE)
            with pytest.raises(NameUnavailableError):
                fi_compat.comm.mnnvl.MnnvlConfig  # noqa: B018
            return
    for name in _public(module):
        if name == TORCH_DIST_BACKEND.key:
            continue
        assert getattr(fi_compat.comm.mnnvl, name) is getattr(module, name), name


class _Group:
    """Stands in for a torch.distributed ProcessGroup (only its identity matters)."""


def test_torch_dist_backend_maps_the_root_where_the_release_does_not(release: Any) -> None:
    caps = get_capabilities()
    native = _probe.locate(TORCH_DIST_BACKEND)
    if native is None:
        with pytest.raises(NameUnavailableError) as info:
            fi_compat.comm.mnnvl.TorchDistBackend  # noqa: B018
        assert info.value.introduced_in is not None
        return
    ours = fi_compat.comm.mnnvl.TorchDistBackend
    if caps.comm.bcast_root_is_group_local.status is Status.SUPPORTED:
        assert ours is native
        return
    assert issubclass(ours, native)
    assert ours is not native
    assert ours is fi_compat.comm.mnnvl.TorchDistBackend  # one adapter per class
    group = _Group()
    for backend in (ours(group=group), ours(group)):
        assert backend._fi_compat_group is group
        assert isinstance(backend, native)
    assert ours()._fi_compat_group is None  # the default group: local root is global


def test_the_adapted_bcast_broadcasts_from_the_global_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    version = next(
        v
        for v in RELEASES
        if load_release(v).torch_dist_backend is not None
        and load_release(v).torch_dist_backend.bcast_root_is_group_local is False  # type: ignore[union-attr]
    )
    torch_distributed = pytest.importorskip("torch.distributed")
    seen: list[tuple[Any, ...]] = []

    def broadcast_object_list(objects: list[Any], src: int, group: Any) -> None:
        seen.append((list(objects), src, group))
        objects[0] = "from the root"

    monkeypatch.setattr(torch_distributed, "get_global_rank", lambda group, rank: rank + 4)
    monkeypatch.setattr(torch_distributed, "broadcast_object_list", broadcast_object_list)
    with fake_flashinfer(version):
        group = _Group()
        backend = fi_compat.comm.mnnvl.TorchDistBackend(group=group)
        assert backend.bcast("data", 1) == "from the root"
    assert seen == [(["data"], 5, group)]


def test_the_package_and_its_submodule_attribute_agree() -> None:
    assert fi_compat.comm.mnnvl is sys.modules["fi_compat.comm.mnnvl"]
    assert Path(fi_compat.comm.mnnvl.__file__ or "").name == "mnnvl.py"
