"""Record flashinfer-python releases into ``fi_compat/_records/`` (``make record``).

Run from the repository root::

    python -m tools.record 0.7.3 [VERSION ...]   # these releases (``make record V=0.7.3``)
    python -m tools.record --all                 # every release in releases.txt
                                                 # (``make record-all``)
    python -m tools.record --path FILE_OR_TREE [--release 0.7.3] [--output -]
                                                 # a wheel, sdist or tree you already have

A release is downloaded once into the release cache (:mod:`tools.releases`), as a wheel
when it has one, else as its sdist, and read without being imported. Each record is
written to ``<output>/<version>.json`` (``--output -`` prints it instead). Output is
deterministic: re-recording an unchanged release writes an identical file.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from fi_compat._surface import DISTRIBUTIONS
from fi_compat.testing import RecordingError, listed_releases
from tools.recorder import dump_record, record_release, write_record
from tools.releases import DownloadError, RegistryUnreachableError, ReleaseCache

__all__ = ["SIGNATURES", "main"]

#: The recorded data of the checkout this file belongs to.
SIGNATURES = Path(__file__).resolve().parent.parent / "fi_compat" / "_records"

#: One release to record: its file or tree, and its version (None: from the file name).
Job = tuple[Path, "str | None"]


def _record(job: Job) -> dict[str, Any]:
    path, release = job
    return record_release(path, release=release)


def _recorded(jobs: list[Job], workers: int) -> Iterator[dict[str, Any]]:
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
        "--output", default=str(SIGNATURES), help="directory for <version>.json.gz, or - for stdout"
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
        for record in _recorded(jobs, max(1, min(args.jobs, len(jobs)))):
            if args.output == "-":
                sys.stdout.write(dump_record(record))
            else:
                print(write_record(record, Path(args.output)))
    except (DownloadError, RegistryUnreachableError, RecordingError) as error:
        print(f"python -m tools.record: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
