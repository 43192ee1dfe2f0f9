"""Both sides of a change: what a missing name or submodule of ``fi_compat.comm`` says.

A name or submodule the installed release lacks says whether it has not arrived yet (the
release to install) or was removed (the release that removed it, the last that has it, what
to pin, and where else it is bound or when it came back, where the records show it). Checked
with recorded releases installed through the fake on both sides of a change, and with
hand-written packages for what no record covers: a release newer than every recorded one,
one between two recorded releases, a pre-release, a source build, a hostile version string,
and files that contradict their own release's record.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pytest
from packaging.version import Version

import fi_compat.comm
from fi_compat._records import (
    available_releases,
    introduced_in,
    load_release,
)
from fi_compat._surface import COMM
from fi_compat.comm import _names, _submodules
from fi_compat.errors import ModuleUnavailableError, NameUnavailableError
from fi_compat.testing import fake_flashinfer
from tests.support import fakes
from tests.support.fakes import FakePackage

#: Removed from ``flashinfer.comm`` (and from its home) in 0.6.10.post1; 0.6.10 brought it.
GONE = "decode_cp_a2a_allocate_workspace"
#: Arrived in ``flashinfer.comm`` in 0.6.10.post1.
CAME = "decode_cp_a2a_allocate_mnnvl_workspace"
#: In the 0.7.2 pre-releases and again in 0.7.2.post1, not in 0.7.2.
BETWEEN = "tp_moe_finalize_rmsnorm"


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    _submodules.forget()
    yield
    _submodules.forget()


def _has(release: str, name: str) -> bool:
    return name in load_release(release).public_names(COMM)


def _missing_name(name: str) -> NameUnavailableError:
    with pytest.raises(NameUnavailableError) as info:
        getattr(fi_compat.comm, name)
    return info.value


def _missing_module(name: str) -> ModuleUnavailableError:
    with pytest.raises(ModuleUnavailableError) as info:
        importlib.import_module(f"fi_compat.comm.{name}")
    return info.value


# ---------------------------------------------------------------- recorded on both sides


def test_the_records_hold_the_cases_below() -> None:
    """The facts the tests below rest on, read from the records themselves."""
    assert introduced_in(COMM, GONE) == "0.6.10"
    assert (_has("0.6.10", GONE), _has("0.6.10.post1", GONE), _has("0.7.2.post1", GONE)) == (
        True,
        False,
        False,
    )
    assert introduced_in(COMM, CAME) == "0.6.10.post1"
    shipped = ("0.7.2rc6", "0.7.2", "0.7.2.post1")
    assert [load_release(r).module(f"{COMM}.{BETWEEN}") is not None for r in shipped] == [
        True,
        False,
        True,
    ]


@pytest.mark.parametrize("installed", ["0.6.10.post1", "0.7.0", "0.7.2.post1"])
def test_a_removed_name_says_when_it_went_and_what_to_pin(installed: str) -> None:
    with fake_flashinfer(installed):
        error = _missing_name(GONE)
    message = str(error)
    assert f"found flashinfer {installed} without it (removed in 0.6.10.post1, last in 0.6.10)" in (
        message
    )
    assert "FlashInfer changed this in 0.6.10.post1." in message
    assert "Fix: pin flashinfer-python < 0.6.10.post1" in message
    assert "install flashinfer-python >=" not in message  # no release after it has it
    assert error.introduced_in == "0.6.10"


@pytest.mark.parametrize("installed", ["0.6.5", "0.6.10"])
def test_a_name_not_arrived_yet_says_what_to_install(installed: str) -> None:
    with fake_flashinfer(installed):
        error = _missing_name(CAME)
    message = str(error)
    assert f"found flashinfer {installed} without it (it arrived in 0.6.10.post1)" in message
    assert "FlashInfer changed this in 0.6.10.post1." in message
    assert f"Fix: install flashinfer-python >= 0.6.10.post1, or do without {CAME}" in message
    assert "removed" not in message
    assert "pin" not in message
    assert error.introduced_in == "0.6.10.post1"


def test_from_a_final_release_the_final_releases_tell() -> None:
    """The module was in the 0.7.2 pre-releases, not in 0.7.2, and is in 0.7.2.post1: from
    the final 0.7.2, whose history is the final releases', it arrives in 0.7.2.post1 (from a
    pre-release, see test_an_unrecorded_pre_release)."""
    with fake_flashinfer("0.7.2"):
        arrives = str(_missing_module(BETWEEN))
    assert "without it (it arrived in 0.7.2.post1)" in arrives
    assert "install flashinfer-python >= 0.7.2.post1" in arrives


def test_a_final_release_is_cited_between_final_releases() -> None:
    """trtllm_custom_all_reduce left flashinfer.comm in the 0.7.0 pre-releases: from 0.7.0
    the removal is cited at 0.7.0, as the diff cites it."""
    name = "trtllm_custom_all_reduce"
    assert _has("0.6.18.post1", name)
    assert not any(_has(r, name) for r in available_releases() if Version(r) >= Version("0.7.0rc3"))
    with fake_flashinfer("0.7.0"):
        message = str(_missing_name(name))
    assert "(removed in 0.7.0, last in 0.6.18.post1)" in message
    assert "pin flashinfer-python < 0.7.0," in message
    with fake_flashinfer("0.7.0rc3"):
        message = str(_missing_name(name))
    assert "(removed in 0.7.0rc3, last in 0.6.18.post1)" in message


def test_a_name_still_bound_at_its_home_says_where_to_import_it_from() -> None:
    """flashinfer.comm stopped binding all_gather_matmul in 0.6.14 (its attribute is then the
    submodule of that name), while the module defining it still binds it; 0.7.0 binds the
    function in flashinfer.comm again."""
    home = f"{COMM}.all_gather_matmul.all_gather_matmul"
    assert load_release("0.6.13").public_names(COMM)["all_gather_matmul"].defined_in == home
    assert "all_gather_matmul" in load_release("0.6.14").public_names(home)
    assert load_release("0.7.0").public_names(COMM)["all_gather_matmul"].kind == "function"
    with fake_flashinfer("0.6.14"):
        message = str(_names.unavailable(COMM, "all_gather_matmul", None))
    assert "(removed in 0.6.14, last in 0.6.13)" in message
    assert (
        f"Fix: pin flashinfer-python < 0.6.14, or import it from {home}, which still binds it "
        "in 0.6.14, or install flashinfer-python >= 0.7.0, which has it again, or do without "
        "all_gather_matmul" in message
    )


# -------------------------------------------------------------- releases no record covers


def _package(version: str, *, extra_comm: str = "") -> dict[str, str]:
    files = fakes.package(version=version)
    files["flashinfer/comm/__init__.py"] += extra_comm
    return files


def test_a_release_newer_than_every_recorded_one(fake_package: FakePackage) -> None:
    """A release newer than every known one that lacks a submodule the newest known release
    has (the day 0.7.4 came out: flashinfer.comm.trtllm_alltoall, there from 0.2.7.post1 to
    0.7.2.post1, was gone): the last release with it, and absent from the installed one."""
    newest = available_releases()[-1]
    present = next(
        submodule
        for submodule in ("mapping", "cuda_ipc", "trtllm_ar", "comm_backend")
        if f"flashinfer.comm.{submodule}" in load_release(newest).names
    )
    version = "99.0.0"
    fake_package(_package(version))
    message = str(_missing_module(present))
    assert f"found flashinfer {version} without it (last in {newest}" in message
    assert f"last in {newest}, absent from the installed {version})" in message
    assert "FlashInfer changed this" not in message
    assert f"Fix: pin flashinfer-python <= {newest}, or do without" in message
    assert "install flashinfer-python >=" not in message


def test_the_release_that_removed_a_submodule_is_named(fake_package: FakePackage) -> None:
    """0.7.4 removed flashinfer.comm.trtllm_alltoall: on it, the message names 0.7.4 as the
    release that removed it, where it once said to install >= 0.2.7.post1."""
    fake_package(_package("0.7.4"))
    message = str(_missing_module("trtllm_alltoall"))
    assert "removed in 0.7.4, last in 0.7.2.post1" in message
    assert "pin flashinfer-python < 0.7.4" in message
    assert "install flashinfer-python >=" not in message


def test_a_release_between_two_recorded_ones(fake_package: FakePackage) -> None:
    """0.6.10.post0 lies between 0.6.10 and 0.6.10.post1: the removal happened by then, in no
    recorded release; the arrival is still ahead."""
    version = "0.6.10.post0"
    assert version not in available_releases()
    fake_package(_package(version))
    message = str(_missing_name(GONE))
    assert "(last in 0.6.10, absent from the installed 0.6.10.post0)" in message
    assert "Fix: pin flashinfer-python <= 0.6.10, or do without" in message
    came = str(_missing_name(CAME))
    assert "(it arrived in 0.6.10.post1)" in came


def test_an_unrecorded_pre_release(fake_package: FakePackage) -> None:
    """From a pre-release every release counts: 0.7.2rc7 comes after 0.7.2rc6, the last with
    the module, and 0.7.2.post1 has it again."""
    version = "0.7.2rc7"
    assert version not in available_releases()
    fake_package(_package(version))
    message = str(_missing_module(BETWEEN))
    assert "(last in 0.7.2rc6, absent from the installed 0.7.2rc7)" in message
    assert (
        "pin flashinfer-python <= 0.7.2rc6, or install flashinfer-python >= 0.7.2.post1, "
        "which has it again" in message
    )


@pytest.mark.parametrize("version", ["0.0.0+unknown", "0.6.5+local", "not a version", "9" * 40])
def test_a_version_that_tells_nothing_claims_no_side(
    version: str, fake_package: FakePackage
) -> None:
    """A source build, a local build or an unparsable version: only the first release that
    has the name; a huge but valid version is a release after every recorded one."""
    fake_package(_package(version))
    message = str(_missing_name(GONE))
    if version.isdigit():
        assert "(removed in 0.6.10.post1, last in 0.6.10)" in message
        return
    assert "without it (first in 0.6.10)" in message
    assert "install flashinfer-python >= 0.6.10 (a release that has it)" in message
    assert "removed" not in message
    assert "arrived" not in message


def test_files_that_contradict_their_own_record(fake_package: FakePackage) -> None:
    """A package calling itself 0.7.2 without flashinfer.comm.mapping, which 0.7.2 ships."""
    fake_package(_package("0.7.2"))
    message = str(_missing_module("mapping"))
    assert "although flashinfer 0.7.2 as recorded has it" in message
    assert "reinstall flashinfer-python==0.7.2 from the package index" in message
    assert "FlashInfer changed this" not in message


def test_a_name_no_release_has_points_at_the_name(fake_package: FakePackage) -> None:
    fake_package(_package("99.0.0"))
    error = _missing_name("no_such_name_in_any_release")
    assert "(in no recorded release)" in str(error)
    assert "check the name" in str(error)
    assert error.introduced_in is None


@pytest.mark.parametrize("name", ["not an identifier", "x" * 5000, "naïve", "class", "9lives"])
def test_a_hostile_name_is_in_no_recorded_release(name: str) -> None:
    """Names no module can bind still get the typed error, in no recorded release, without
    the records being asked anything they cannot answer."""
    with fake_flashinfer("0.7.2.post1"):
        error = _missing_name(name)
    message = str(error)
    assert "(in no recorded release)" in message
    assert "check the name" in message
    assert "removed" not in message
    assert error.introduced_in is None
