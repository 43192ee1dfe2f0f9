"""``fi-compat record``: model a FlashInfer release fi-compat did not ship data for.

The model (what the release has and takes: every module's names and signatures, its comm
and attention records, its import hazards) is built from the release's own files by the
builder that made the shipped data, without importing them, and kept in the user's cache
(:mod:`fi_compat._local`): every later fi-compat process on this machine answers for the
release as for a shipped one. The installed release is modelled on first use anyway; this
command does it ahead of time (CI, container builds), or models a release that is not
installed: a wheel, sdist or tree given by ``--path``, or a release fetched from the
package index (``pip download --no-deps``).

Exit status: 0 every release asked for has a model, 1 one could not be modelled (the
message says why and what to do), 2 bad command line, 141 stdout closed early.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from fi_compat.cli._output import write_err, write_out

__all__ = ["register", "run"]


def __dir__() -> list[str]:
    return list(__all__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``record`` subcommand."""
    parser = subparsers.add_parser(
        "record",
        help="model a FlashInfer release fi-compat has no data for, from its own files",
        description="Model FlashInfer releases from their own files into the user's cache: "
        "the installed release (no argument), releases fetched from the package index "
        "(RELEASE ...), or a wheel, sdist or tree (--path). A release fi-compat ships data "
        "for is modelled only when FI_COMPAT_UNRECORDED sets it aside.",
        epilog="Exit status: 0 modelled, 1 a release could not be modelled, 2 bad command "
        "line, 141 stdout closed early (128 + SIGPIPE).",
    )
    parser.add_argument("releases", metavar="RELEASE", nargs="*", help="e.g. 0.7.4")
    parser.add_argument("--path", type=Path, help="a .whl, an sdist .tar.gz or a source tree")
    parser.add_argument("--release", help="with --path: the release (default: from the name)")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Model, print."""
    from packaging.version import InvalidVersion, Version

    from fi_compat._records import known_model, model_release
    from fi_compat.errors import RecordingError

    if args.release is not None and args.path is None:
        write_err("fi-compat record: --release needs --path")
        return 2
    if args.path is not None and args.releases:
        write_err("fi-compat record: give RELEASE ... or --path, not both")
        return 2
    for name in args.releases:
        try:
            Version(name)
        except InvalidVersion:
            write_err(f"fi-compat record: expected a PEP 440 release such as 0.7.4; found {name!r}")
            return 2
    jobs: list[tuple[str | None, Path | None]]
    if args.path is not None:
        jobs = [(args.release, args.path)]
    elif args.releases:
        jobs = [(name, None) for name in args.releases]
    else:
        jobs = [(None, None)]
    results: list[dict[str, Any]] = []
    status = 0
    for release, path in jobs:
        started = time.perf_counter()
        try:
            done = model_release(release, path=path)
        except RecordingError as error:
            write_err(f"fi-compat record: {error}")
            status = 1
            continue
        result = {
            **done,
            "seconds": round(time.perf_counter() - started, 1),
            "known": known_model(done["release"]),
        }
        results.append(result)
    if args.json:
        write_out(json.dumps({"records": results}, indent=2))
        return status
    for result in results:
        write_out(_text(result))
    return status


def _text(result: dict[str, Any]) -> str:
    release = result["release"]
    if result["action"] == "shipped":
        return (
            f"flashinfer {release}: fi-compat ships its model; nothing to do "
            f"(FI_COMPAT_UNRECORDED={release} models it from its files instead)"
        )
    lines = [
        f"flashinfer {release}: modelled from {result['source']} into {result['folder']} "
        f"in {result['seconds']} s"
        if result["action"] == "modelled"
        else f"flashinfer {release}: already modelled from {result['source']} ({result['folder']})",
    ]
    previous = result.get("previous")
    if previous:
        lines.append(f"  review what changed: fi-compat diff {previous} {release}")
    return "\n".join(lines)
