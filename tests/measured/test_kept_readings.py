"""What is read of the installed distribution on every answer about an unmeasured release
(the listing of its site folder, its ``METADATA``'s version) is read once per state of the
files: kept while their timestamps are the ones they had when read, and only when those
had settled (``fi_compat._local.SETTLED_NS``), so that no later change can keep them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fi_compat import _local
from fi_compat._measured import installed

#: A modification time well before any settling limit.
LONG_AGO_NS = time.time_ns() - 60 * 1_000_000_000


def _age(path: Path, when_ns: int = LONG_AGO_NS) -> None:
    os.utime(path, ns=(when_ns, when_ns))


@pytest.fixture(autouse=True)
def _nothing_kept() -> Iterator[None]:
    _local._LISTINGS.clear()
    installed._HEADERS.clear()
    yield
    _local._LISTINGS.clear()
    installed._HEADERS.clear()


def _counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[object]:
    calls: list[object] = []
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0] if args else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def _site(root: Path, *versions: str) -> Path:
    site = root / "site"
    site.mkdir()
    (site / "numpy").mkdir()
    for version in versions:
        (site / f"flashinfer_python-{version}.dist-info").mkdir()
    return site


def test_a_settled_folder_is_listed_once_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _site(tmp_path, "0.7.4")
    _age(site)
    listings = _counting(monkeypatch, os, "listdir")
    first = _local.distribution_folders(site)
    assert first == [site / "flashinfer_python-0.7.4.dist-info"]
    assert _local.distribution_folders(site) == first
    assert len(listings) == 1
    # A dist-info folder made (pip installing another release) changes the folder's time.
    (site / "flashinfer_python-0.7.5.dist-info").mkdir()
    assert _local.distribution_folders(site) == [
        site / "flashinfer_python-0.7.4.dist-info",
        site / "flashinfer_python-0.7.5.dist-info",
    ]
    assert len(listings) == 2
    (site / "flashinfer_python-0.7.4.dist-info").rmdir()
    assert _local.distribution_folders(site) == [site / "flashinfer_python-0.7.5.dist-info"]


def test_a_folder_changed_a_moment_ago_is_listed_every_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change in the same clock tick as the listing would keep the folder's time: a
    listing of a folder whose time has not settled is used once, never kept."""
    site = _site(tmp_path, "0.7.4")
    _age(site, time.time_ns())
    listings = _counting(monkeypatch, os, "listdir")
    for _ in range(3):
        assert _local.distribution_folders(site) == [site / "flashinfer_python-0.7.4.dist-info"]
    assert len(listings) == 3
    assert not _local._LISTINGS


def test_an_unlistable_folder_has_no_distribution(tmp_path: Path) -> None:
    assert _local.distribution_folders(tmp_path / "missing") == []
    file = tmp_path / "file"
    file.write_text("")
    _age(file)
    assert _local.distribution_folders(file) == []


def test_a_version_header_is_read_once_per_state_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metadata = tmp_path / "METADATA"
    metadata.write_text("Name: flashinfer-python\nVersion: 0.7.4\n\nbody\n")
    _age(metadata)
    opened = _counting(monkeypatch, Path, "open")
    assert installed._version_header(metadata) == "0.7.4"
    assert installed._version_header(metadata) == "0.7.4"
    assert len(opened) == 1
    # Rewritten in place (same size, same inode): its times change, so it is read again.
    metadata.write_text("Name: flashinfer-python\nVersion: 0.7.5\n\nbody\n")
    opened.clear()
    assert installed._version_header(metadata) == "0.7.5"
    # Rewritten a moment ago: read again on every ask, and not kept.
    assert installed._version_header(metadata) == "0.7.5"
    assert len(opened) == 2


def test_a_missing_metadata_is_an_os_error_as_before(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        installed._version_header(tmp_path / "METADATA")


def test_a_few_readings_are_kept_and_the_store_starts_again_past_its_limit() -> None:
    readings: _local.Readings[str] = _local.Readings(most=2)
    reads: list[str] = []

    def reader(key: str) -> Callable[[], str]:
        def read() -> str:
            reads.append(key)
            return f"read {key}"

        return read

    for key in ("a", "b", "a", "b"):
        assert readings.read(key, (1,), LONG_AGO_NS, reader(key)) == f"read {key}"
    assert (reads, len(readings)) == (["a", "b"], 2)
    assert readings.read("c", (1,), LONG_AGO_NS, reader("c")) == "read c"
    assert len(readings) == 1  # emptied to make room: "a" is read again when asked
    assert readings.read("a", (1,), LONG_AGO_NS, reader("a")) == "read a"
    assert readings.read("a", (2,), LONG_AGO_NS, reader("a")) == "read a"  # another state
    assert reads == ["a", "b", "c", "a", "a"]
