"""``fi_compat.comm.<submodule>`` under fakes: recorded releases, hand-written packages, bad names.

A submodule the installed release has is FlashInfer's, handed through; one it lacks raises
``ModuleUnavailableError`` (a ``ModuleNotFoundError``) naming the first recorded release that
ships it; one that raises on import gives ``FlashInferUnavailableError`` saying why; a name
that cannot be a public module is the import system's plain ``ModuleNotFoundError``, and
nothing is asked of FlashInfer for it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from packaging.version import Version

import fi_compat.comm
from fi_compat._records import module_introduced_in
from fi_compat._surface import COMM
from fi_compat.comm import _names, _submodules
from fi_compat.comm._submodules import HandedThroughModule, SubmoduleFinder
from fi_compat.errors import (
    FiCompatError,
    FlashInferUnavailableError,
    ModuleUnavailableError,
    NameUnavailableError,
)
from fi_compat.testing import available_releases, fake_flashinfer, load_release
from tests.support import fakes
from tests.support.fakes import FakePackage

RELEASES = [v for v in available_releases() if load_release(v).comm_exists]
NEWEST = RELEASES[-1]
#: What engines import from comm's submodules: SGLang, aphrodite-engine, tokenspeed-kernel.
ENGINE_MODULES = ("mapping", "trtllm_alltoall", "allreduce")


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    """Each test imports the handed-through modules anew, whatever release is installed."""
    _submodules.forget()
    yield
    _submodules.forget()


def _before(module: str) -> str | None:
    """The newest recorded release with flashinfer.comm but without ``module``, before the
    first that ships it (a pre-release of that one may have it already), or None."""
    first = module_introduced_in(module)
    assert first is not None, module
    older = [
        v
        for v in RELEASES
        if Version(v) < Version(first) and load_release(v).module(module) is None
    ]
    return older[-1] if older else None


# ------------------------------------------------------------------------- recorded releases


def test_the_engines_imports_give_the_fakes_objects() -> None:
    # The newest release with every module the engines import (0.7.4 removed trtllm_alltoall).
    with_all = [
        release
        for release in available_releases()
        if f"{COMM}.trtllm_alltoall" in load_release(release).names
    ][-1]
    with fake_flashinfer(with_all):
        # Run-time modules: type checkers do not see them (docs/guide/comm.md says so).
        from fi_compat.comm.allreduce import (  # type: ignore[import-not-found]
            AllReduceFusionPattern,
        )
        from fi_compat.comm.mapping import Mapping  # type: ignore[import-not-found]
        from fi_compat.comm.trtllm_alltoall import MnnvlMoe  # type: ignore[import-not-found]

        assert Mapping is sys.modules[f"{COMM}.mapping"].Mapping
        assert MnnvlMoe is sys.modules[f"{COMM}.trtllm_alltoall"].MnnvlMoe
        assert AllReduceFusionPattern is fi_compat.comm.AllReduceFusionPattern
        assert AllReduceFusionPattern is not sys.modules[f"{COMM}.allreduce"].AllReduceFusionPattern


@pytest.mark.parametrize("name", ENGINE_MODULES)
def test_a_release_without_the_module_names_the_release_that_brought_it(name: str) -> None:
    module = f"{COMM}.{name}"
    version = _before(module)
    if version is None:
        pytest.skip("every recorded release with flashinfer.comm has this module")
    first = module_introduced_in(module)
    assert first is not None
    with fake_flashinfer(version):
        with pytest.raises(ModuleNotFoundError) as info:
            importlib.import_module(f"fi_compat.comm.{name}")
        error = info.value
        assert isinstance(error, ModuleUnavailableError)
        assert isinstance(error, FlashInferUnavailableError)
        assert isinstance(error, FiCompatError)
        assert error.name == f"fi_compat.comm.{name}"
        assert error.introduced_in == first
        message = str(error)
        assert f"expected {module} (for fi_compat.comm.{name})" in message
        assert f"found flashinfer {version} without it" in message
        assert f"FlashInfer changed this in {first}" in message
        assert f"install flashinfer-python >= {first}" in message
        # As an attribute: an AttributeError saying the same, so hasattr is False.
        with pytest.raises(NameUnavailableError) as attribute:
            getattr(fi_compat.comm, name)
        assert attribute.value.introduced_in == first
        assert first in str(attribute.value)
        assert version in str(attribute.value)
        assert "no recorded FlashInfer release" not in str(attribute.value)
        assert not hasattr(fi_compat.comm, name)


def test_a_handed_through_module_follows_the_installed_release() -> None:
    """Names are looked up on each access: another release is seen without a new import,
    and a release without the module says which release has it."""
    module = f"{COMM}.mapping"
    older = _before(module)
    with fake_flashinfer(NEWEST):
        mapping = importlib.import_module("fi_compat.comm.mapping")

        first = mapping.Mapping
        assert first is sys.modules[module].Mapping
    with fake_flashinfer(RELEASES[-2]):
        if module in sys.modules or importlib.util.find_spec(module) is not None:
            assert mapping.Mapping is importlib.import_module(module).Mapping is not first
    if older is None:
        return
    with fake_flashinfer(older):
        with pytest.raises(NameUnavailableError) as info:
            mapping.Mapping  # noqa: B018
        message = str(info.value)
        assert f"flashinfer {older} without {module} (it arrived in " in message
        assert str(module_introduced_in(module)) in message


# ---------------------------------------------------------------------- hand-written packages


def test_a_submodule_that_raises_on_import_says_why(fake_package: FakePackage) -> None:
    files = fakes.package()
    files["flashinfer/comm/broken.py"] = "raise OSError('libnvshmem_host.so.3')\n"
    fake_package(files)
    with pytest.raises(FlashInferUnavailableError) as info:
        importlib.import_module("fi_compat.comm.broken")
    error = info.value
    assert not isinstance(error, ModuleNotFoundError)
    assert error.name == "fi_compat.comm.broken"
    assert f"{COMM}.broken unusable (OSError: libnvshmem_host.so.3)" in str(error)
    assert isinstance(error.__cause__, OSError)
    assert "fi_compat.comm.broken" not in sys.modules
    with pytest.raises(NameUnavailableError, match="libnvshmem_host"):
        fi_compat.comm.broken  # noqa: B018


def test_a_missing_dependency_of_a_submodule_is_not_a_missing_submodule(
    fake_package: FakePackage,
) -> None:
    files = fakes.package()
    files["flashinfer/comm/needs.py"] = "import no_such_dependency_of_flashinfer\n"
    fake_package(files)
    with pytest.raises(FlashInferUnavailableError, match="no_such_dependency") as info:
        importlib.import_module("fi_compat.comm.needs")
    assert not isinstance(info.value, ModuleUnavailableError)


def test_keyboard_interrupt_in_a_submodule_import_propagates(fake_package: FakePackage) -> None:
    files = fakes.package()
    files["flashinfer/comm/stop.py"] = "raise KeyboardInterrupt\n"
    fake_package(files)
    with pytest.raises(KeyboardInterrupt):
        importlib.import_module("fi_compat.comm.stop")


def test_a_comm_that_raises_on_import_says_so(fake_package: FakePackage) -> None:
    fake_package(fakes.package(comm_raises="AssertionError('libcudart is not loaded')"))
    with pytest.raises(FlashInferUnavailableError) as info:
        importlib.import_module("fi_compat.comm.mapping")
    assert not isinstance(info.value, ModuleNotFoundError)  # cannot tell whether it has it
    assert f"{COMM} unusable (AssertionError: libcudart is not loaded)" in str(info.value)


def test_without_flashinfer_a_submodule_is_unavailable(no_flashinfer: None) -> None:
    with pytest.raises(FlashInferUnavailableError, match=f"{COMM}.mapping"):
        importlib.import_module("fi_compat.comm.mapping")
    assert not hasattr(fi_compat.comm, "mapping")


def test_nested_submodules_and_their_names(fake_package: FakePackage) -> None:
    files = fakes.package()
    files["flashinfer/comm/outer/__init__.py"] = "from .inner import value\n"
    files["flashinfer/comm/outer/inner.py"] = (
        "from flashinfer.comm.allreduce import allreduce_fusion\nvalue = object()\n"
        "__all__ = ['value', 'allreduce_fusion', '_hidden']\n_hidden = 1\n"
    )
    files["flashinfer/comm/allreduce.py"] = "def allreduce_fusion(*args, **kwargs): pass\n"
    fake_package(files)
    inner = importlib.import_module("fi_compat.comm.outer.inner")

    theirs = sys.modules[f"{COMM}.outer.inner"]
    outer = sys.modules["fi_compat.comm.outer"]
    assert isinstance(inner, HandedThroughModule)
    assert isinstance(outer, HandedThroughModule)
    assert outer.__path__ == []
    assert not hasattr(inner, "__path__")
    assert inner.value is theirs.value is outer.value
    assert inner.allreduce_fusion is fi_compat.comm.allreduce_fusion  # the drop-in's
    assert outer.inner is inner
    assert fi_compat.comm.outer.inner is inner
    assert inner.__all__ == ["value", "allreduce_fusion"]  # public names of FlashInfer's
    assert dir(inner) == ["allreduce_fusion", "value"]
    namespace: dict[str, Any] = {}
    exec("from fi_compat.comm.outer.inner import *", namespace)
    assert set(namespace) - {"__builtins__"} == {"value", "allreduce_fusion"}
    with pytest.raises(AttributeError):
        inner._hidden  # noqa: B018
    with pytest.raises(ModuleUnavailableError, match=f"{COMM}.outer.absent"):
        importlib.import_module("fi_compat.comm.outer.absent")


# ------------------------------------------------------------------------------ hostile names


@pytest.mark.parametrize(
    "name",
    [
        "_private",
        "__path__",
        "__main__",
        "_names.extra",
        "no-such",
        "a b",
        "class",
        "\x00",
        "",
        "mnnvl.",
        "mnnvl.extra",
    ],
)
def test_a_name_that_is_no_public_module_asks_nothing_of_flashinfer(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse() -> None:
        raise AssertionError("FlashInfer was asked")

    monkeypatch.setattr(_names, "get_capabilities", refuse)
    with pytest.raises(ModuleNotFoundError) as info:
        importlib.import_module(f"fi_compat.comm.{name}")
    assert not isinstance(info.value, FiCompatError)  # the import system's own answer
    assert not [key for key, value in sys.modules.items() if isinstance(value, HandedThroughModule)]


@pytest.mark.parametrize("name", ["_private", "__wrapped__", "__file__", "__all__"])
def test_private_names_of_a_handed_through_module_ask_nothing(
    name: str, fake_package: FakePackage, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = fakes.package()
    files["flashinfer/comm/plain.py"] = "_private = __wrapped__ = 1\n"
    fake_package(files)
    plain = importlib.import_module("fi_compat.comm.plain")

    if name == "__all__":
        assert plain.__all__ == []
        return
    monkeypatch.setattr(_names, "get_capabilities", lambda: pytest.fail("FlashInfer was asked"))
    assert not hasattr(plain, name)


@pytest.mark.parametrize("raises", ["RuntimeError", "KeyboardInterrupt"])
def test_a_module_whose_getattr_raises(raises: str, fake_package: FakePackage) -> None:
    """Whether FlashInfer's module is a package is asked of its ``__path__``, which its own
    ``__getattr__`` answers: an exception there means no package, KeyboardInterrupt stops."""
    files = fakes.package()
    files["flashinfer/comm/odd.py"] = f"value = 1\ndef __getattr__(name):\n    raise {raises}\n"
    fake_package(files)
    if raises == "KeyboardInterrupt":
        with pytest.raises(KeyboardInterrupt):
            importlib.import_module("fi_compat.comm.odd")
        return
    odd = importlib.import_module("fi_compat.comm.odd")
    assert not hasattr(odd, "__path__")
    assert odd.value == 1


def test_a_finder_that_raises_is_not_a_missing_module(
    fake_package: FakePackage, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Hostile:
        def find_spec(self, fullname: str, *args: object) -> None:
            if fullname == f"{COMM}.weird":
                raise RuntimeError("hostile finder")

    fake_package(fakes.package())
    monkeypatch.setattr(sys, "meta_path", [Hostile(), *sys.meta_path])
    with pytest.raises(FlashInferUnavailableError, match="RuntimeError: hostile finder") as info:
        importlib.import_module("fi_compat.comm.weird")
    assert not isinstance(info.value, ModuleNotFoundError)


def test_a_module_gone_from_the_installed_release(
    fake_package: FakePackage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dir()`` of a handed-through module whose FlashInfer module is gone is empty, and
    its names raise ``NameUnavailableError``; without a ``__name__`` it hands out nothing."""
    files = fakes.package()
    files["flashinfer/comm/plain.py"] = "value = 1\n"
    fake_package(files)
    plain = importlib.import_module("fi_compat.comm.plain")
    assert dir(plain) == ["value"]
    monkeypatch.setitem(sys.modules, f"{COMM}.plain", None)  # blocked, as if removed
    assert dir(plain) == []
    with pytest.raises(NameUnavailableError, match=f"without {COMM}.plain"):
        plain.value  # noqa: B018
    monkeypatch.delitem(sys.modules, f"{COMM}.plain")
    assert plain.value == 1
    del plain.__name__
    with pytest.raises(AttributeError):
        plain.value  # noqa: B018


def test_the_own_modules_of_fi_compat_are_never_handed_out() -> None:
    assert not isinstance(importlib.import_module("fi_compat.comm._names"), HandedThroughModule)
    assert not isinstance(importlib.import_module("fi_compat.comm.mnnvl"), HandedThroughModule)
    assert SubmoduleFinder().find_spec("fi_compat.comm._dropin") is None
    assert SubmoduleFinder().find_spec("fi_compat.commx") is None
    assert SubmoduleFinder().find_spec("flashinfer.comm.mapping") is None
    # Below a module of fi-compat's own (not a handed-through one), nothing is handed out.
    assert SubmoduleFinder().find_spec("fi_compat.comm.mnnvl.mapping") is None


# ------------------------------------------------------------------------- install and forget


def test_importing_again_leaves_one_finder_at_the_end() -> None:
    _submodules.install()
    _submodules.install()
    ours = [finder for finder in sys.meta_path if isinstance(finder, SubmoduleFinder)]
    assert len(ours) == 1
    assert sys.meta_path[-1] is ours[0]


def test_forget_takes_the_modules_out(fake_package: FakePackage) -> None:
    files = fakes.package()
    files["flashinfer/comm/plain.py"] = "value = 1\n"
    fake_package(files)
    importlib.import_module("fi_compat.comm.plain")

    assert "plain" in vars(fi_compat.comm)
    _submodules.forget()
    assert "fi_compat.comm.plain" not in sys.modules
    assert "plain" not in vars(fi_compat.comm)
    assert fi_compat.comm.plain.value == 1  # and imported again on the next access
