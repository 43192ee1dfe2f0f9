"""Proof by leaving a release out: the installed flashinfer-python, set aside with
``FI_COMPAT_UNRECORDED`` and modelled from its installed files alone, answers exactly as the
shipped data does (issue 49).

Every answer is taken twice in fresh interpreters sharing one cache, once from the shipped
data and once from the day-one path (the release modelled by ``fi-compat record`` from the
installed package, its facts measured on this machine), and the two must be equal: the
report's JSON, ``diff`` against its neighbour below, a scan of an engine tree across it,
and the fake's signatures.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from fi_compat._records import available_releases
from tests.support.day_one import model_in, run_python, shipped_model

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]

ENGINE = """
    import flashinfer
    from flashinfer.comm import allreduce_fusion, create_allreduce_fusion_workspace
    from flashinfer.decode import BatchDecodeWithPagedKVCacheWrapper


    def build(world_size, rank, group):
        workspace = create_allreduce_fusion_workspace(
            backend="trtllm", world_size=world_size, rank=rank, max_token_num=128,
            hidden_dim=4096, group=group,
        )
        return workspace


    def plan(wrapper: BatchDecodeWithPagedKVCacheWrapper, indptr):
        wrapper.plan(indptr, fixed_split_size=128, disable_split_kv=False)
        return flashinfer.utils._get_range_buf(16, "cpu")
"""

FAKE_SIGNATURES = """
import inspect, json, sys
from fi_compat._surface import NAMED_MODULES
from fi_compat.testing import fake_flashinfer
import importlib
found = {}
with fake_flashinfer(sys.argv[1]):
    for module in sorted(NAMED_MODULES):
        try:
            imported = importlib.import_module(module)
        except ImportError as error:
            found[module] = f"ImportError: {error}"
            continue
        for name in sorted(vars(imported)):
            value = getattr(imported, name)
            if name.startswith("__") or not callable(value):
                continue
            try:
                found[f"{module}.{name}"] = str(inspect.signature(value))
            except (TypeError, ValueError):
                found[f"{module}.{name}"] = type(value).__name__
print(json.dumps(found, sort_keys=True))
"""


def _release() -> str:
    """The installed release: the venv pins one fi-compat ships data for (else the test
    has nothing shipped to compare with, which is a broken set-up, not a skip)."""
    release = importlib.metadata.version("flashinfer-python")
    assert release in available_releases(), f"fi-compat ships no data for {release}"
    return release


@pytest.fixture(scope="module")
def modelled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The shared cache, with the installed release modelled on the day-one path, an engine
    tree to scan, and the folder holding the model."""
    root = tmp_path_factory.mktemp("day-one")
    cache, engine = root / "cache", root / "engine"
    engine.mkdir()
    (engine / "engine.py").write_text(textwrap.dedent(ENGINE), encoding="utf-8")
    release = _release()
    done = json.loads(run_python(["-m", "fi_compat", "record", "--json"], cache, release))
    assert done["records"][0]["action"] == "modelled"
    return cache, engine, Path(done["records"][0]["folder"])


@pytest.fixture(scope="module")
def paths(modelled: tuple[Path, Path, Path]) -> tuple[Path, Path]:
    """The shared cache and the engine tree."""
    return modelled[0], modelled[1]


def test_the_model_of_the_installed_files_is_the_shipped_one(
    modelled: tuple[Path, Path, Path],
) -> None:
    """The record and every module's names, built from the installed package's files, equal
    what fi-compat ships for the release (from the published wheel), byte for byte but
    where the files were read from."""
    record, surface = model_in(modelled[2])
    shipped_record, shipped_surface = shipped_model(_release())
    assert surface == shipped_surface
    assert {**record, "source": None} == {**shipped_record, "source": None}
    assert record["source"] != shipped_record["source"]  # an installed tree, not the wheel


def _both(argv: list[str], cache: Path) -> tuple[str, str]:
    release = _release()
    return run_python(argv, cache, None), run_python(argv, cache, release)


def _neighbour_below(release: str) -> str:
    finals = [r for r in available_releases() if "rc" not in r]
    return finals[finals.index(release) - 1]


def test_the_report_from_the_files_alone_equals_the_shipped_one(
    paths: tuple[Path, Path],
) -> None:
    shipped, day_one = _both(["-m", "fi_compat", "report", "--json"], paths[0])
    assert json.loads(day_one) == json.loads(shipped)
    assert "not a recorded release" not in day_one


def test_the_diff_from_the_files_alone_equals_the_shipped_one(paths: tuple[Path, Path]) -> None:
    release = _release()
    argv = ["-m", "fi_compat", "diff", _neighbour_below(release), release, "--json"]
    shipped, day_one = _both(argv, paths[0])
    assert json.loads(day_one) == json.loads(shipped)
    assert json.loads(shipped)["changes"]  # a diff that compares something


def test_a_scan_from_the_files_alone_equals_the_shipped_one(paths: tuple[Path, Path]) -> None:
    release = _release()
    # From a release far enough below that the engine's uses have changes to judge.
    argv = ["-m", "fi_compat", "scan", str(paths[1]), "--from", "0.6.8", "--to", release]
    argv.append("--json")
    shipped, day_one = _both(argv, paths[0])
    assert json.loads(day_one) == json.loads(shipped)
    assert json.loads(shipped)["findings"]


def test_the_fakes_signatures_from_the_files_alone_equal_the_shipped_ones(
    paths: tuple[Path, Path],
) -> None:
    release = _release()
    shipped, day_one = _both(["-c", FAKE_SIGNATURES, release], paths[0])
    assert json.loads(day_one) == json.loads(shipped)
    assert len(json.loads(shipped)) > 50
