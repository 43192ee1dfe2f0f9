"""The builder's two jobs for :mod:`fi_compat._records._catalogue`, each run in a process of
its own: reading a recent release's source, or packing every release's surface into one
store, takes seconds of every core and a few GB, which an engine's process should neither
wait in nor keep.

``python -m fi_compat._recorder model PATH OUT [--release R] [--jobs N]``
    Model the release at ``PATH`` into ``OUT``: its record (``record.json.gz``) and surface
    (``surface.json.gz``), compact JSON, gzip-compressed; prints the release. ``N``
    processes share the work (default: one per core, or this one alone for a small release;
    the output is the same).
``python -m fi_compat._recorder store TARGET [--drop R ...] [--add SURFACE ...]``
    Pack the shipped store less the releases dropped, plus each surface file added (with the
    ``record.json.gz`` beside it), into ``TARGET`` (written whole or not at all); prints
    ``TARGET``.

Either exits 1 with ``RecordingError: <why>`` as the last line of stderr when it cannot.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from fi_compat.errors import RecordingError

#: The gzip level of a model's files. A 0.7 release's surface is 34 MB of JSON, which the
#: builder compresses after its workers are done, while nothing else runs: level 6 takes
#: half the time of level 9 (0.5 s instead of 0.9 s, measured) for a file 3% larger. Only
#: the container changes with the level, never what it decompresses to.
_GZIP_LEVEL = 6


def _write(path: Path, data: Any) -> None:
    text = json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")
    path.write_bytes(gzip.compress(text, compresslevel=_GZIP_LEVEL, mtime=0))


def model(path: Path, out: Path, release: str | None, jobs: int | None = None) -> str:
    """Write the record and surface of the release at ``path`` into ``out``; its release.
    ``jobs``: processes to model it with (default: one per core, or one for a small
    release; see :mod:`.model`)."""
    from fi_compat._recorder.model import model_release

    record, surface = model_release(path, release, jobs)
    try:
        name = str(Version(record["release"]))
    except InvalidVersion as error:
        raise RecordingError(
            f"expected a PEP 440 release for the files at {path}; found "
            f"{record['release']!r}. Fix: give the release (--release VERSION)"
        ) from error
    record["release"] = name
    _write(out / "record.json.gz", record)
    _write(out / "surface.json.gz", surface)
    return name


#: The merged store's deflate level. It lives in this machine's cache, where size matters
#: little: at level 1 it takes 5.9 MB where the shipped level takes 3.9, and compressing its
#: 67 MB of JSON takes 0.2 s instead of 1.1 (about a third of extending the store by a
#: newest release).
MERGED_LEVEL = 1


def store(target: Path, dropped: Sequence[str], added: Sequence[Path]) -> Path:
    """The shipped store less ``dropped``, plus the ``added`` surfaces, into ``target``
    (deflated at :data:`MERGED_LEVEL`)."""
    from importlib import resources

    from fi_compat._recorder.store import extend

    shipped = resources.files("fi_compat._records").joinpath("surface.zip").read_bytes()
    surfaces: dict[str, Any] = {}
    records: dict[str, Any] = {}
    for path in added:
        record = json.loads(gzip.decompress((path.parent / "record.json.gz").read_bytes()))
        surfaces[record["release"]] = json.loads(gzip.decompress(path.read_bytes()))
        records[record["release"]] = record
    scratch = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    scratch.write_bytes(extend(shipped, surfaces, records, dropped, level=MERGED_LEVEL))
    os.replace(scratch, target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fi_compat._recorder")
    jobs = parser.add_subparsers(dest="job", required=True)
    modelling = jobs.add_parser("model")
    modelling.add_argument("path", type=Path)
    modelling.add_argument("out", type=Path)
    modelling.add_argument("--release")
    modelling.add_argument("--jobs", type=int, default=None)
    packing = jobs.add_parser("store")
    packing.add_argument("target", type=Path)
    packing.add_argument("--drop", action="append", default=[])
    packing.add_argument("--add", action="append", default=[], type=Path)
    args = parser.parse_args(argv)
    try:
        if args.job == "model":
            print(model(args.path, args.out, args.release, args.jobs))
        else:
            print(store(args.target, args.drop, args.add))
    except (RecordingError, OSError, ValueError, KeyError) as error:
        print(f"RecordingError: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # The process does its one job and ends. Either job holds a whole release's parsed trees
    # or every release's surfaces: millions of objects with no cycles to reclaim, which the
    # cyclic collector would walk again and again (see ``resolve.collector_paused``), and
    # which the interpreter would free one by one on the way out (about 4 s for a 0.7
    # release, measured). So the collector stays off and the process leaves through
    # ``os._exit`` once its output is flushed; the operating system takes the memory back
    # whole.
    gc.disable()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
