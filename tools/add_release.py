"""Add a FlashInfer release to the data fi-compat ships, in one command (``make add-release``).

Run from the repository root::

    python -m tools.add_release 0.7.4

Every step is the tool that owns its part, run in order, each in its own interpreter so one
step's imports and caches never feed the next; the run stops at the first step that fails
and says which:

1. the release joins ``fi_compat/_records/releases.txt`` (the list the data must match);
2. ``python -m tools.record V``: its record and its surface, by the builder that models an
   unrecorded release on a user's machine (:mod:`fi_compat._recorder`);
3. ``python -m tools.reach V``, ``tools.layers V``, ``tools.sizes V``: what it does, by the
   probes that measure an unmeasured release on a user's machine (:mod:`fi_compat._measured`);
4. everything derived from the data: the release classes the tests run
   (``tests/support/release_classes.json``), the documentation's tables
   (``scripts/gen_compat_table.py``) and charts (``tools.charts``);
5. ``fi-compat diff <previous> V``, printed for review: what engines meet on the upgrade.

A pre-release is recorded but not measured (fi-compat answers "unmeasured" there, as the
measuring tools do for every pre-release).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ROOT / "fi_compat" / "_records" / "releases.txt"

__all__ = ["RELEASES", "add_to_list", "main", "steps"]


def add_to_list(release: str, path: Path = RELEASES) -> bool:
    """Add ``release`` to the list of releases that must be recorded, in version order;
    False when it is there already. Comment lines stay where they are."""
    lines = path.read_text(encoding="utf-8").splitlines()
    listed = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if any(Version(name) == Version(release) for name in listed):
        return False
    comments = [line for line in lines if line.startswith("#")]
    names = sorted([*listed, release], key=Version)
    path.write_text("\n".join([*comments, *names]) + "\n", encoding="utf-8")
    return True


def steps(release: str) -> list[tuple[str, list[str]]]:
    """The commands that add ``release``, in order: (what it does, argv)."""
    python = sys.executable
    found = [("record", [python, "-m", "tools.record", release])]
    if not Version(release).is_prerelease:
        found += [
            ("measure split reach", [python, "-m", "tools.reach", release]),
            ("measure launch layers", [python, "-m", "tools.layers", release]),
            ("measure per-call sizes", [python, "-m", "tools.sizes", release]),
        ]
    found += [
        ("release classes", [python, "-m", "tests.support.release_classes", "--write"]),
        ("documentation tables", [python, "scripts/gen_compat_table.py", "--write"]),
        ("documentation charts", [python, "-m", "tools.charts", "--write"]),
    ]
    return found


def _previous(release: str) -> str | None:
    listed = [
        line.strip()
        for line in RELEASES.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    below = [name for name in listed if Version(name) < Version(release)]
    finals = [name for name in below if not Version(name).is_prerelease]
    candidates = finals or below
    return candidates[-1] if candidates else None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m tools.add_release", description=__doc__)
    parser.add_argument("release", help="the flashinfer-python release, e.g. 0.7.4")
    args = parser.parse_args(argv)
    try:
        release = str(Version(args.release))
    except InvalidVersion:
        parser.error(f"expected a PEP 440 release such as 0.7.4; found {args.release!r}")
    if add_to_list(release):
        print(f"added {release} to {RELEASES.relative_to(ROOT)}", flush=True)
    for what, argv_ in steps(release):
        print(f"== {what}: {' '.join(argv_[1:])}", flush=True)
        if subprocess.run(argv_, cwd=ROOT, check=False).returncode != 0:
            print(f"python -m tools.add_release: the step '{what}' failed", file=sys.stderr)
            return 1
    previous = _previous(release)
    if previous is not None:
        command = [sys.executable, "-m", "fi_compat", "diff", previous, release]
        print(f"== review: fi-compat diff {previous} {release}", flush=True)
        subprocess.run(command, cwd=ROOT, check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
