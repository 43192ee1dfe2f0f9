"""Extending a packed store gives the bytes of packing its releases again.

:func:`fi_compat._recorder.store.extend` copies a module as stored when none of its releases
moves, goes, or comes back reading differently, and works out again only the others; these
tests pin the cases that decide between the two, on small stores packed by hand and on the
shipped data.
"""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from fi_compat._recorder import __main__ as recorder_main
from fi_compat._recorder import store
from fi_compat._recorder.store import extend, pack, unpack, unpack_records

Surface = dict[str, dict[str, Any]]


def _function(home: str, name: str, *parameters: str) -> dict[str, Any]:
    function = {
        "decorators": [],
        "defined_in": home,
        "parameters": [{"kind": "POSITIONAL_OR_KEYWORD", "name": p} for p in parameters],
        "qualname": name,
    }
    return {"defined_in": home, "function": function, "kind": "function"}


def _reexport(home: str, name: str) -> dict[str, Any]:
    return {"defined_in": home, "kind": "function", "same": name}


def _release(norm: tuple[str, ...], *, extra: bool = False, gemm: str = "a") -> Surface:
    """A small release: ``pkg`` re-exports ``pkg.norm.rmsnorm`` (whose parameters are
    ``norm``), ``pkg.gemm`` holds one function whose parameter is ``gemm``, ``pkg.util``
    never changes, and ``pkg.extra`` comes and goes."""
    surface: Surface = {
        "pkg": {
            "names": {
                "rmsnorm": _reexport("pkg.norm", "rmsnorm"),
                "typing": {"defined_in": "typing", "kind": "module"},
            },
            "all": ["rmsnorm"],
        },
        "pkg.norm": {
            "names": {
                "rmsnorm": _function("pkg.norm", "rmsnorm", *norm),
                "Optional": {"defined_in": "typing", "kind": "value"},
            }
        },
        "pkg.gemm": {"names": {"mm": _function("pkg.gemm", "mm", gemm)}},
        "pkg.util": {"names": {"helper": _function("pkg.util", "helper", "x")}},
    }
    if extra:
        surface["pkg.extra"] = {"names": {"only_here": _function("pkg.extra", "only_here", "y")}}
    return surface


#: Five releases: rmsnorm gains ``eps`` in 1.2 and ``out`` in 2.0, ``pkg.extra`` lives in
#: 1.1 and 1.2 only, and ``mm`` changes in 1.2 and changes back in 1.3.
RELEASES: dict[str, Surface] = {
    "1.0": _release(("x",)),
    "1.1": _release(("x",), extra=True),
    "1.2": _release(("x", "eps"), extra=True, gemm="b"),
    "1.3": _release(("x", "eps")),
    "2.0": _release(("x", "eps", "out")),
}


def _record(release: str) -> dict[str, Any]:
    return {"schema": 3, "release": release}


def _packed(surfaces: dict[str, Surface]) -> bytes:
    return pack(surfaces, {release: _record(release) for release in surfaces})


def _check(start: dict[str, Surface], add: dict[str, Surface], drop: Iterable[str] = ()) -> bytes:
    """``extend`` of ``start``'s store equals ``pack`` of the result (and unpacks to it), with
    the shipped shard size (one shard here) and with sizes that cut these stores into shards
    of one module each, or at a module that just fits (``_tight``)."""
    dropped = list(drop)
    result = {r: s for r, s in start.items() if r not in dropped and r not in add} | add
    for size in (*_tight(result), store.SHARD_BYTES):  # the shipped size last: returned
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store, "SHARD_BYTES", size)
            extended = extend(_packed(start), add, {r: _record(r) for r in add}, dropped)
            assert extended == _packed(result), size
    assert unpack(extended) == unpack(_packed(result))
    return extended


def _tight(surfaces: dict[str, Surface]) -> list[int]:
    """Shard sizes at which a module of these releases' store just fits in the first shard,
    or just does not: a module weighed a byte off is cut elsewhere."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "SHARD_BYTES", 1)  # a shard per module, to weigh each
        data = _packed(surfaces)
    weights: list[int] = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        shards = json.loads(archive.read("index.json"))["shards"]
        for number, module in enumerate(shards):
            index = len(archive.read(f"{number}.names.json")) - len(json.dumps(module)) - 3
            lines = archive.read(f"{number}.records").decode().split("\n")
            spelled = [
                f"{json.dumps(name)}:{versions}"
                for _, name, versions in (line.split("\t", 2) for line in lines if line)
            ]
            weights.append(index + len("{" + ",".join(spelled) + "}"))
    sums = [sum(weights[: count + 1]) for count in range(len(weights))]
    return [1, *sums, *(size - 1 for size in sums)]


def _some(*releases: str) -> dict[str, Surface]:
    return {release: RELEASES[release] for release in releases}


def test_a_newest_release_with_a_new_a_changed_and_an_old_module() -> None:
    """``pkg.extra`` is new again, ``pkg.norm`` changes, ``pkg.gemm`` reads as 1.2 did, and
    ``pkg.util`` reads as every release did."""
    newest = _release(("x", "eps", "out", "bias"), extra=True, gemm="b")
    _check(_some("1.0", "1.1", "1.2", "1.3", "2.0"), {"3.0": newest})


def test_a_newest_release_with_a_module_of_its_own_only() -> None:
    _check(_some("1.0", "1.1", "1.2"), {"9.9.8": {"pkg.new": RELEASES["1.1"]["pkg.extra"]}})


@pytest.mark.parametrize("release", ["1.0", "1.1", "1.2", "1.3", "2.0"])
def test_a_release_set_aside_and_added_again_unchanged_gives_the_same_store(release: str) -> None:
    start = _some("1.0", "1.1", "1.2", "1.3", "2.0")
    extended = _check(start, {release: RELEASES[release]}, [release])
    assert extended == _packed(start)


@pytest.mark.parametrize(
    "changed",
    [
        _release(("x", "eps")),  # pkg.norm as 1.3 has it, pkg.gemm as 1.0, no pkg.extra
        _release(("x", "eps"), extra=True, gemm="c"),  # pkg.gemm as no release has it
        {**_release(("x", "eps"), extra=True, gemm="b"), "pkg.util": {"names": {}}},
        {**_release(("x", "eps"), extra=True, gemm="b"), "pkg.new": {"names": {}}},
        {k: v for k, v in _release(("x", "eps"), extra=True, gemm="b").items() if k != "pkg"},
    ],
)
def test_a_middle_release_set_aside_and_added_again_changed(changed: Surface) -> None:
    _check(_some("1.0", "1.1", "1.2", "1.3", "2.0"), {"1.2": changed}, ["1.2"])


def test_a_reexport_reads_differently_when_its_home_changes_alone() -> None:
    """``pkg`` holds the same records in 1.2 modelled again, but its ``rmsnorm`` leads to
    ``pkg.norm``, which now reads as in 1.1: so does ``pkg`` (its runs are found again)."""
    again = _release(("x",), extra=True, gemm="b")
    assert again["pkg"] == RELEASES["1.2"]["pkg"]
    _check(_some("1.0", "1.1", "1.2", "1.3", "2.0"), {"1.2": again}, ["1.2"])


def test_a_release_with_a_different_number_in_a_set_aside_ones_place() -> None:
    _check(_some("1.0", "1.1", "1.2", "2.0"), {"1.3": RELEASES["1.2"]}, ["1.2"])
    _check(_some("1.0", "1.1", "1.3"), {"2.0": RELEASES["1.3"]}, ["1.3"])


@pytest.mark.parametrize(
    ("start", "drop", "add"),
    [
        (["1.0", "1.1", "1.3", "2.0"], [], ["1.2"]),  # positions move
        (["1.0", "1.1", "1.2", "1.3", "2.0"], ["1.1"], []),
        (["1.0", "1.1", "1.2", "1.3", "2.0"], ["2.0"], []),  # the newest set aside
        (["1.0", "1.1", "1.2", "1.3", "2.0"], ["1.3", "2.0"], []),
        (["1.0", "1.1"], [], ["1.2", "1.3", "2.0"]),  # several newer ones at once
        (["1.0", "1.3"], [], ["1.1", "1.2", "2.0"]),
        (["1.0", "1.1", "1.2", "1.3", "2.0"], ["1.2", "2.0"], ["1.2", "2.0"]),
        (["1.0", "1.1", "1.2", "1.3", "2.0"], ["1.0"], ["1.0"]),
    ],
)
def test_extending_gives_the_bytes_of_packing(
    start: list[str], drop: list[str], add: list[str]
) -> None:
    _check(_some(*start), _some(*add), drop)


# ------------------------------------------------------------------------- three shipped releases


#: Real releases, with 0.6.14 between its neighbours: packed alone, they make a store of the
#: shipped data's shape (364 modules re-exporting across each other, three shards) at a
#: thirteenth of the whole store's size, which a test extends in a fraction of a second.
REAL = ("0.6.13", "0.6.14", "0.6.15")


@pytest.fixture(scope="module")
def real() -> bytes:
    """The shipped store's three :data:`REAL` releases, packed as fi-compat packs a store."""
    data = resources.files("fi_compat._records").joinpath("surface.zip").read_bytes()
    return pack(unpack(data, only=list(REAL)), unpack_records(data, only=list(REAL)))


def test_a_newest_release_added_to_shipped_releases_and_set_aside_again(real: bytes) -> None:
    norm = unpack(real, only=["0.6.14"])["0.6.14"]["flashinfer.norm"]
    surface = {"flashinfer.norm": norm, "flashinfer.brand_new": {"names": {}}}
    record = {"schema": 3, "release": "9.9.8"}
    extended = extend(real, {"9.9.8": surface}, {"9.9.8": record})
    assert unpack(extended, only=["9.9.8"]) == {"9.9.8": surface}
    assert unpack_records(extended, only=["9.9.8"]) == {"9.9.8": record}
    assert extend(extended, {}, {}, ["9.9.8"]) == real


def test_a_shipped_release_modelled_again_with_a_change_and_then_without(real: bytes) -> None:
    """A change in ``flashinfer.norm``, which ``flashinfer`` re-exports, is stored; modelled
    again without it, the release gives back the store (every other module of the
    release compared with the stored one and copied: a release set aside and modelled again
    unchanged gives the same bytes, which this holds as well)."""
    release = "0.6.14"
    surface, records = unpack(real, only=[release]), unpack_records(real, only=[release])
    norm = surface[release]["flashinfer.norm"]["names"]
    name = next(n for n in ("rmsnorm", *sorted(norm)) if norm[n]["kind"] == "function")
    function = norm[name]["function"]
    changed = {"function": {**function, "parameters": function["parameters"][1:]}}
    again = {
        release: {
            **surface[release],
            "flashinfer.norm": {"names": {**norm, name: {**norm[name], **changed}}},
        }
    }
    extended = extend(real, again, records, [release])
    assert unpack(extended, only=[release]) == again
    assert extend(extended, surface, records, [release]) == real


def test_a_store_extended_at_another_level_holds_the_same_members(real: bytes) -> None:
    """The merged store in a user's cache is deflated at level 1 (``store`` job): the same
    members, byte for byte once inflated, in the same order."""
    norm = unpack(real, only=["0.6.14"])["0.6.14"]["flashinfer.norm"]
    added = ({"9.9.8": {"flashinfer.norm": norm}}, {"9.9.8": {"schema": 3, "release": "9.9.8"}})
    shipped_level = extend(real, *added)
    fast = extend(real, *added, level=recorder_main.MERGED_LEVEL)
    assert fast != shipped_level
    with (
        zipfile.ZipFile(io.BytesIO(shipped_level)) as slow_archive,
        zipfile.ZipFile(io.BytesIO(fast)) as fast_archive,
    ):
        assert fast_archive.namelist() == slow_archive.namelist()
        for name in slow_archive.namelist():
            assert fast_archive.read(name) == slow_archive.read(name), name


def test_the_store_job_writes_the_merged_store_at_its_level(tmp_path: Path) -> None:
    """``python -m fi_compat._recorder store`` (what a first use runs) writes the shipped
    store's members, each deflated at :data:`fi_compat._recorder.__main__.MERGED_LEVEL`."""
    shipped = resources.files("fi_compat._records").joinpath("surface.zip").read_bytes()
    target = recorder_main.store(tmp_path / "store.zip", [], [])
    with (
        zipfile.ZipFile(io.BytesIO(shipped)) as shipped_archive,
        zipfile.ZipFile(target) as archive,
    ):
        assert archive.namelist() == shipped_archive.namelist()
        for info in archive.infolist():
            data = archive.read(info)
            assert data == shipped_archive.read(info.filename), info.filename
            deflate = zlib.compressobj(recorder_main.MERGED_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
            assert info.compress_size == len(deflate.compress(data) + deflate.flush())
