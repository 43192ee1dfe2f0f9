"""Re-record the signature files of every flashinfer-python release fi-compat ships.

Reads ``fi_compat/testing/signatures/releases.txt``, downloads each release with
``pip download`` into a cache directory (never into the repository), runs the recorder
(which parses the source and never imports it) and writes
``fi_compat/testing/signatures/<version>.json``. Re-running on the same files produces
identical output.

Usage::

    python scripts/record_releases.py [--cache /tmp/fi-releases] [--jobs 2] [VERSION ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from fi_compat.testing._recorder import record_release, version_from_filename, write_record
from fi_compat.testing._releases import listed_releases

SIGNATURES = Path(__file__).resolve().parent.parent / "fi_compat" / "testing" / "signatures"


def find_cached(cache: Path, version: str) -> Path | None:
    """The wheel (preferred) or sdist of ``version`` already in ``cache``."""
    candidates = [path for path in cache.iterdir() if version_from_filename(path.name) == version]
    candidates.sort(key=lambda path: (not path.name.endswith(".whl"), path.name))
    return candidates[0] if candidates else None


def download(cache: Path, version: str) -> Path:
    """Download one release into ``cache`` (a wheel when there is one, else the sdist)."""
    found = find_cached(cache, version)
    if found is not None:
        return found
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":none:"]
    target = [f"flashinfer-python=={version}", "-d", str(cache)]
    done = subprocess.run([*base, *target], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # Some sdists pin build requirements that are gone from PyPI (0.4.x pins an
        # apache-tvm-ffi pre-release); preparing their metadata in this environment works.
        done = subprocess.run(
            [*base, "--no-build-isolation", *target], capture_output=True, text=True, check=False
        )
    found = find_cached(cache, version)
    if found is None:
        raise SystemExit(f"could not download flashinfer-python=={version}:\n{done.stderr}")
    return found


def record_one(path: Path, version: str) -> str:
    """Record one release file and write its JSON; returns the written path."""
    return str(write_record(record_release(path, release=version), SIGNATURES))


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", help="only these releases (default: all listed)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/fi-releases"))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    versions = args.versions or listed_releases()
    args.cache.mkdir(parents=True, exist_ok=True)
    files = {version: download(args.cache, version) for version in versions}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {
            version: pool.submit(record_one, path, version) for version, path in files.items()
        }
        for version, future in futures.items():
            print(f"{version}: {future.result()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
