"""``fi_compat.comm.<submodule>`` against the real flashinfer-python installed by the test set-up.

Every public submodule of the installed ``flashinfer.comm``, at any depth, is importable from
``fi_compat.comm`` and hands out FlashInfer's own objects, except the drop-in names, which are
``fi_compat.comm``'s; a module FlashInfer has but cannot import here raises
``FlashInferUnavailableError`` saying why, and one it does not have ``ModuleUnavailableError``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

import fi_compat.comm as comm
from fi_compat._surface import COMM, FLASHINFER
from fi_compat.capabilities import get_capabilities
from fi_compat.comm import _submodules
from fi_compat.comm._names import public_part
from fi_compat.comm._submodules import HandedThroughModule
from fi_compat.errors import FlashInferUnavailableError, ModuleUnavailableError

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]

OURS = frozenset(comm.__all__)


def _real_comm() -> Any:
    try:
        return importlib.import_module(COMM)
    except Exception as error:  # e.g. no CUDA runtime before 0.6.14
        pytest.skip(f"flashinfer.comm does not import here: {error}")


def _walk(location: str, prefix: str) -> Iterator[str]:
    for found in pkgutil.iter_modules([location]):
        if public_part(found.name):
            yield f"{prefix}{found.name}"
            if found.ispkg:
                yield from _walk(os.path.join(location, found.name), f"{prefix}{found.name}.")


def _submodule_names() -> list[str]:
    """Every public submodule of the installed flashinfer.comm, at any depth, as fi-compat
    names it (``mnnvl_cutedsl.kernel_ht``): found from its files, none imported."""
    spec = importlib.util.find_spec(FLASHINFER)  # a top-level name: nothing is imported
    if spec is None or spec.submodule_search_locations is None:
        return []
    return sorted(
        name
        for location in spec.submodule_search_locations
        for name in _walk(os.path.join(location, COMM.rpartition(".")[2]), "")
    )


SUBMODULES = _submodule_names() if importlib.util.find_spec("flashinfer") else []


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    """Each test imports the handed-through modules anew."""
    _submodules.forget()
    yield
    _submodules.forget()


def _theirs(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"{COMM}.{name}")
    except Exception:  # needs what this machine lacks (nvshmem, triton)
        return None


# --------------------------------------------------------------------------- what engines do


def test_sglang_imports_mapping() -> None:
    _real_comm()
    # Run-time modules: type checkers do not see them (docs/guide/comm.md says so).
    from fi_compat.comm.mapping import Mapping  # type: ignore[import-not-found]

    assert Mapping is importlib.import_module(f"{COMM}.mapping").Mapping


def test_aphrodite_imports_the_mnnvl_moe() -> None:
    _real_comm()
    from fi_compat.comm.trtllm_alltoall import MnnvlMoe  # type: ignore[import-not-found]

    assert MnnvlMoe is importlib.import_module(f"{COMM}.trtllm_alltoall").MnnvlMoe


def test_tokenspeed_imports_the_pattern_codes_of_the_drop_in() -> None:
    real = _real_comm()
    from fi_compat.comm.allreduce import (  # type: ignore[import-not-found]
        AllReduceFusionPattern,
        allreduce_fusion,
        create_allreduce_fusion_workspace,
    )

    assert AllReduceFusionPattern is comm.AllReduceFusionPattern
    assert AllReduceFusionPattern is not real.AllReduceFusionPattern
    assert allreduce_fusion is comm.allreduce_fusion
    assert create_allreduce_fusion_workspace is comm.create_allreduce_fusion_workspace


def test_the_installed_release_has_submodules_to_hand_out() -> None:
    _real_comm()
    assert {"mapping", "trtllm_alltoall", "allreduce", "mnnvl_cutedsl.kernel_ht"} <= set(SUBMODULES)


# --------------------------------------------------------------------- every submodule, names


@pytest.mark.parametrize("name", SUBMODULES)
def test_every_submodule_hands_out_flashinfers_names(name: str) -> None:
    _real_comm()
    theirs = _theirs(name)
    if theirs is None:
        with pytest.raises(FlashInferUnavailableError) as info:
            importlib.import_module(f"fi_compat.comm.{name}")
        assert not isinstance(info.value, ModuleNotFoundError)  # it is there, and raises
        assert f"{COMM}.{name} unusable (" in str(info.value)
        return
    ours = importlib.import_module(f"fi_compat.comm.{name}")
    if name == "mnnvl":  # fi-compat's own module (tests/comm/test_names.py)
        assert not isinstance(ours, HandedThroughModule)
        return
    assert isinstance(ours, HandedThroughModule)
    assert ours.__spec__ is not None
    assert ours.__spec__.origin == theirs.__name__
    assert hasattr(ours, "__path__") == hasattr(theirs, "__path__")
    public = [item for item in vars(theirs) if not item.startswith("_")]
    for item in public:
        value = getattr(ours, item)
        original = getattr(theirs, item)
        if item in OURS:
            assert value is getattr(comm, item), item
        elif isinstance(original, ModuleType) and original is sys.modules.get(
            f"{theirs.__name__}.{item}"
        ):
            assert value is sys.modules[f"fi_compat.comm.{name}.{item}"], item
        else:
            assert value is original, item


def test_the_drop_in_replaces_these_names_in_the_installed_release() -> None:
    """docs/guide/comm.md ("Drop-in names") lists the names the submodules take from the
    drop-in in 0.7.2.post1."""
    _real_comm()
    replaced = set()
    for name in SUBMODULES:
        theirs = _theirs(name)
        if theirs is not None and name != "mnnvl":
            ours = importlib.import_module(f"fi_compat.comm.{name}")
            for item in OURS & set(vars(theirs)):
                assert getattr(ours, item) is getattr(comm, item)
                replaced.add(f"{name}.{item}")
    assert replaced == {
        "allreduce.AllReduceFusionPattern",
        "allreduce.allreduce_fusion",
        "allreduce.create_allreduce_fusion_workspace",
        "mnnvl_cutedsl_ar.AllReduceFusionPattern",
        "trtllm_ar.AllReduceFusionPattern",
    }


# ------------------------------------------------------------------------- nested, attribute


def test_a_nested_submodule_is_imported_once_through_fi_compat() -> None:
    _real_comm()
    import fi_compat.comm.mnnvl_cutedsl.kernel_ht as ours  # type: ignore[import-not-found]

    theirs = importlib.import_module(f"{COMM}.mnnvl_cutedsl.kernel_ht")
    parent = sys.modules["fi_compat.comm.mnnvl_cutedsl"]
    assert isinstance(parent, HandedThroughModule)
    assert parent.__path__ == []  # no second copy of FlashInfer's files under our name
    assert parent.kernel_ht is ours
    assert comm.mnnvl_cutedsl.kernel_ht is ours
    for item in [item for item in vars(theirs) if not item.startswith("_")]:
        if not isinstance(getattr(theirs, item), ModuleType):
            assert getattr(ours, item) is getattr(theirs, item), item
    ours_loaded = [name for name in sys.modules if name.startswith("fi_compat.comm.mnnvl_cutedsl")]
    assert all(isinstance(sys.modules[name], HandedThroughModule) for name in ours_loaded)


def test_attribute_access_without_an_import_statement() -> None:
    _real_comm()
    mapping = comm.mapping
    assert isinstance(mapping, HandedThroughModule)
    assert mapping is sys.modules["fi_compat.comm.mapping"]
    assert mapping.Mapping is importlib.import_module(f"{COMM}.mapping").Mapping
    kernel = comm.mnnvl_cutedsl.kernel_ht
    assert kernel is sys.modules["fi_compat.comm.mnnvl_cutedsl.kernel_ht"]


def test_star_import_takes_what_flashinfers_star_import_takes() -> None:
    _real_comm()
    theirs: dict[str, Any] = {}
    ours: dict[str, Any] = {}
    exec(f"from {COMM}.mapping import *", theirs)
    exec("from fi_compat.comm.mapping import *", ours)
    assert set(ours) == set(theirs)
    assert all(ours[name] is theirs[name] for name in ours if name != "__builtins__")
    assert sorted(dir(comm.mapping)) == sorted(set(theirs) - {"__builtins__"})


def test_find_spec_answers_without_importing_the_module() -> None:
    _real_comm()
    sys.modules.pop(f"{COMM}.ulysses_topology", None)
    spec = importlib.util.find_spec("fi_compat.comm.ulysses_topology")
    assert spec is not None
    assert spec.origin == f"{COMM}.ulysses_topology"
    assert f"{COMM}.ulysses_topology" not in sys.modules


# -------------------------------------------------------------------------------- missing


def test_a_submodule_no_release_has_raises_module_not_found() -> None:
    _real_comm()
    version = get_capabilities().flashinfer.version
    assert version is not None
    with pytest.raises(ModuleNotFoundError) as info:
        import fi_compat.comm.no_such_module  # type: ignore[import-not-found]  # noqa: F401
    error = info.value
    assert isinstance(error, ModuleUnavailableError)
    assert error.name == "fi_compat.comm.no_such_module"
    assert error.introduced_in is None
    message = str(error)
    assert f"{COMM}.no_such_module" in message
    assert f"flashinfer {version} without it" in message
    assert "no recorded FlashInfer release has" in message
    assert "fi_compat.comm.no_such_module" not in sys.modules
    with pytest.raises(ModuleUnavailableError):
        importlib.util.find_spec("fi_compat.comm.no_such_module")
    assert not hasattr(comm, "no_such_module")


def test_from_import_of_a_missing_name_is_still_an_import_error() -> None:
    _real_comm()
    with pytest.raises(ImportError, match="NoSuchFlashInferName"):
        exec("from fi_compat.comm import NoSuchFlashInferName", {})


# ----------------------------------------------------------------------- imports FlashInfer


def test_flashinfer_is_imported_when_a_submodule_is_and_not_before() -> None:
    code = (
        "import sys\n"
        "import fi_compat.comm\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('flashinfer', 'torch')]\n"
        "from fi_compat.comm.mapping import Mapping\n"
        f"assert Mapping is sys.modules['{COMM}.mapping'].Mapping\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
