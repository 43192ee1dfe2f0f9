"""What every measurement tool shares: measuring many releases, the shipped file, the CLI.

``tools.reach``, ``tools.layers`` and ``tools.sizes`` each measure something per FlashInfer
release into one JSON file under ``fi_compat/``. They differ in what they measure and how
they classify it; measuring the releases side by side, reading and writing the file, and
the command line (``python -m tools.X [VERSION ...] [--check] [--workers N]``) are here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version


def measured_releases(first: Version) -> list[str]:
    """Every recorded final release from ``first`` on, oldest first: what the measuring
    tools measure (the pre-releases are recorded but not measured: fi-compat answers
    "unmeasured" there)."""
    from fi_compat.testing import listed_releases

    return [
        name
        for name in listed_releases()
        if Version(name) >= first and not Version(name).is_prerelease
    ]


#: Measures one release: its entry in the tool's file.
Measure = Callable[[str], dict[str, Any]]


def measure_all(
    versions: Iterable[str], *, workers: int, measure: Measure
) -> tuple[dict[str, Any], dict[str, str]]:
    """Each release's entry, and the error of each release that could not be measured.

    Releases are measured ``workers`` at a time (each in its own subprocess); one release's
    failure never stops the others.
    """

    def attempt(version: str) -> tuple[str, dict[str, Any] | None, str | None]:
        try:
            return version, measure(version), None
        except Exception as error:  # one release's failure never stops the others
            return version, None, f"{type(error).__name__}: {error}"

    measured: dict[str, Any] = {}
    errors: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for version, entry, error in pool.map(attempt, list(versions)):
            if entry is not None:
                measured[version] = entry
            else:
                errors[version] = error or "unknown error"
    return measured, errors


def load_releases(path: Path) -> dict[str, Any]:
    """The ``releases`` table of a shipped file; empty when there is none (or it is not one)."""
    if not path.is_file():
        return {}
    document = json.loads(path.read_text(encoding="utf-8"))
    releases = document.get("releases") if isinstance(document, dict) else None
    return dict(releases) if isinstance(releases, dict) else {}


def dump_by_version(document: Mapping[str, Any]) -> str:
    """Deterministic text: releases sorted by version, each entry's keys as written."""
    releases = {
        version: document["releases"][version]
        for version in sorted(document["releases"], key=Version)
    }
    return json.dumps({**document, "releases": releases}, indent=1, ensure_ascii=True) + "\n"


def entry_differences(shipped: Mapping[str, Any], measured: Mapping[str, Any]) -> list[str]:
    """One line per measured release whose entry differs from the shipped one."""
    return [
        f"{version}: shipped {shipped.get(version)!r}, measured {entry!r}"
        for version, entry in sorted(measured.items())
        if shipped.get(version) != entry
    ]


def write_if_changed(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (atomically) unless it already holds exactly that."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8"
    ) as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


@dataclass(frozen=True)
class Tool:
    """One measurement tool, as its command line needs it."""

    prog: str
    description: str
    first_release: str
    recorded_releases: Callable[[], list[str]]
    measure_release: Measure
    text: Callable[[Mapping[str, Any]], str]
    """The file's whole text from every release's entry."""
    differences: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]] = entry_differences


def main(
    tool: Tool,
    argv: Sequence[str] | None,
    *,
    output: Path,
    measure: Measure | None,
) -> int:
    """Measure the releases, then write ``output`` (or compare with it, with ``--check``)."""
    parser = argparse.ArgumentParser(prog=tool.prog, description=tool.description)
    parser.add_argument(
        "versions", nargs="*", help=f"releases (default: every one from {tool.first_release})"
    )
    parser.add_argument("--check", action="store_true", help="compare with the shipped file")
    parser.add_argument("--workers", type=int, default=2, help="subprocesses at once")
    args = parser.parse_args(argv)
    versions = list(args.versions) or tool.recorded_releases()
    measured, errors = measure_all(
        versions, workers=args.workers, measure=measure or tool.measure_release
    )
    for version, error in sorted(errors.items()):
        print(f"error: flashinfer-python {version} not measured: {error}", file=sys.stderr)
    shipped = load_releases(output)
    if args.check:
        differences = tool.differences(shipped, measured)
        for line in differences:
            print(f"differs: {line}", file=sys.stderr)
        return 1 if differences or errors else 0
    write_if_changed(output, tool.text({**shipped, **measured}))
    print(f"measured {len(measured)} release(s) into {output}", file=sys.stderr)
    return 1 if errors else 0
