"""Record flashinfer-python releases into ``fi_compat/_records/`` (``make record``).

Run from the repository root::

    python -m tools.record 0.7.3 [VERSION ...]   # these releases (``make record V=0.7.3``)
    python -m tools.record --all                 # every release in releases.txt
                                                 # (``make record-all``)
    python -m tools.record --path FILE_OR_TREE [--release 0.7.3] [--output -]
                                                 # a wheel, sdist or tree you already have

A release is downloaded once into the release cache (:mod:`tools.releases`), as a wheel
when it has one, else as its sdist, and read without being imported. Each release gives
two things, both merged into the one store ``<output>/surface.zip``
(:mod:`fi_compat._recorder.store`): its record and its surface (every module,
:mod:`fi_compat._recorder.surface`). The store is unpacked, the release put in (replacing
an older recording of it) and the store packed again; ``--output -`` prints the record
instead. A surface
takes a minute to record for a recent release, so it is kept in the release cache under
the release file's digest and :data:`~fi_compat._records._format.SURFACE_VERSION`; a change
to what the surface records bumps that number. Output is deterministic: re-recording an
unchanged release writes identical files.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fi_compat._recorder import dump_record, record_release
from fi_compat._recorder.archive import read_release
from fi_compat._recorder.record import file_sha256
from fi_compat._recorder.resolve import Package, collector_paused
from fi_compat._recorder.store import pack, unpack, unpack_records
from fi_compat._recorder.surface import surface
from fi_compat._records._format import SURFACE_VERSION
from fi_compat._records._store import STORE
from fi_compat._surface import DISTRIBUTIONS
from fi_compat.testing import RecordingError, listed_releases
from tools.releases import DownloadError, RegistryUnreachableError, ReleaseCache, cache_root

__all__ = ["SIGNATURES", "main", "merge_surfaces", "surface_of"]

#: The recorded data of the checkout this file belongs to.
SIGNATURES = Path(__file__).resolve().parent.parent / "fi_compat" / "_records"

#: One release to record: its file or tree, and its version (None: from the file name).
Job = tuple[Path, "str | None"]


#: One release's record and its surface (module -> module record).
Recorded = tuple[dict[str, Any], dict[str, Any]]


def surface_of(
    path: Path, release: str, cache: Path | None = None, sha256: str | None = None
) -> dict[str, Any]:
    """The release's surface, from the cache when this file was recorded by this version of
    the surface recorder (a source tree is always recorded afresh). ``sha256``: the file's
    digest where the caller has it already (the record holds it), else it is computed."""
    full = sha256 if sha256 is not None else file_sha256(path)
    digest = full[:16] if full is not None else "tree"
    folder = (cache or cache_root()) / "surfaces"
    cached = folder / f"{release}-{digest}-v{SURFACE_VERSION}.json.gz"
    if digest != "tree" and cached.is_file():
        found: dict[str, Any] = json.loads(gzip.decompress(cached.read_bytes()))
        return found
    found = surface(Package(read_release(path)))
    if digest != "tree":
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(found, sort_keys=True, separators=(",", ":")).encode()
        cached.write_bytes(gzip.compress(text, mtime=0))
    return found


def _record(job: Job) -> Recorded:
    path, release = job
    with collector_paused():
        record = record_release(path, release=release)
        return record, surface_of(path, record["release"], sha256=record["source"]["sha256"])


def merge_surfaces(
    store: Path, surfaces: dict[str, dict[str, Any]], records: dict[str, dict[str, Any]]
) -> Path:
    """Put these releases' surfaces and records into the store at ``store`` (made when
    absent)."""
    data = store.read_bytes() if store.is_file() else None
    every = unpack(data) if data is not None else {}
    every_record = unpack_records(data) if data is not None else {}
    every.update(surfaces)
    every_record.update(records)
    store.write_bytes(pack(every, every_record))
    return store


def _recorded(jobs: list[Job], workers: int) -> Iterator[Recorded]:
    """Each job's record, in order; in worker processes when several may run at once."""
    if workers == 1:
        yield from map(_record, jobs)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(_record, jobs)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.record",
        description="Record flashinfer-python releases' signatures (without importing them).",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("versions", nargs="*", default=[], help="releases to download and record")
    which.add_argument("--all", action="store_true", help="every release in releases.txt")
    which.add_argument("--path", type=Path, help="a .whl, an sdist .tar.gz or a source tree")
    parser.add_argument("--release", help="with --path: the version (default: from the name)")
    parser.add_argument(
        "--output", default=str(SIGNATURES), help="directory of the store, or - for stdout"
    )
    parser.add_argument("--cache", type=Path, help="release cache (default: tools.releases)")
    parser.add_argument("--jobs", type=int, default=2, help="releases recorded at once")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.release is not None and args.path is None:
        parser.error("--release needs --path")
    try:
        if args.path is not None:
            jobs: list[Job] = [(args.path, args.release)]
        else:
            cache = ReleaseCache(args.cache)
            versions = listed_releases() if args.all else args.versions
            jobs = [
                (cache.download(f"{DISTRIBUTIONS[0]}=={version}", wheel_only=False), version)
                for version in versions
            ]
        surfaces: dict[str, dict[str, Any]] = {}
        records: dict[str, dict[str, Any]] = {}
        for record, found in _recorded(jobs, max(1, min(args.jobs, len(jobs)))):
            if args.output == "-":
                sys.stdout.write(dump_record(record))
            else:
                print(f"recorded {record['release']}")
                surfaces[record["release"]] = found
                records[record["release"]] = record
        if surfaces:
            Path(args.output).mkdir(parents=True, exist_ok=True)
            print(merge_surfaces(Path(args.output) / STORE, surfaces, records))
    except (DownloadError, RegistryUnreachableError, RecordingError) as error:
        print(f"python -m tools.record: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
