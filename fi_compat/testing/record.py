"""Command line: record one flashinfer-python release's signatures as JSON.

``python -m fi_compat.testing.record RELEASE_FILE_OR_DIR [--release X] [--output DIR]``

Reads a wheel, an sdist or a source tree without importing it and writes
``<DIR>/<version>.json`` (``-`` as DIR prints to stdout). See
``fi_compat/testing/signatures/README.md`` for the format.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fi_compat.testing._recorder import dump_record, record_release, write_record

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m fi_compat.testing.record",
        description="Record a flashinfer-python release's signatures (without importing it).",
    )
    parser.add_argument("path", type=Path, help="a .whl, an sdist .tar.gz or a source tree")
    parser.add_argument("--release", help="version to record (default: from the file name)")
    parser.add_argument(
        "--output", default="-", help="directory for <version>.json, or - for stdout"
    )
    args = parser.parse_args(argv)
    record = record_release(args.path, release=args.release)
    if args.output == "-":
        sys.stdout.write(dump_record(record))
    else:
        print(write_record(record, Path(args.output)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
