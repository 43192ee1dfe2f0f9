"""The call sites a migration guide lists, and what ``fi-compat scan`` says of each.

Each guide (``docs/migration/vllm.md``, ``docs/migration/sglang.md``) has a table of the
engine's FlashInfer call sites; its first column names the file and the functions. This
module reads those (:func:`listed_sites`), scans the engine's published source for two
FlashInfer bumps, and renders, for every use the scan finds in those functions, its
``file:line`` and verdicts: the table between ``<!-- scan-sites: start -->`` and
``<!-- scan-sites: end -->`` in the same guide, which ``tests/upgrade/test_engine_sources.py``
compares with a fresh scan.

    python -m tests.support.scan_sites --write   # rewrite both guides' tables
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fi_compat.upgrade import Finding, ScanResult, scan_tree
from tests.support.engine_wheels import ENGINES, unpack

ROOT = Path(__file__).resolve().parents[2]
#: The two bumps each guide's table shows: from the oldest unified-API release SGLang ran
#: and from the last release before the unified API, both to the newest.
PAIRS: tuple[tuple[str, str], ...] = (("0.6.5", "0.7.2.post1"), ("0.5.3", "0.7.2.post1"))
#: The downgrade each engine's tree is also judged on, as fi-compat serves it after the
#: import swap (``fi-compat scan --fi-compat``): where it breaks.
DOWNGRADE = ("0.7.2.post1", "0.5.3")
START, END = "<!-- scan-sites: start -->", "<!-- scan-sites: end -->"
MODULE = "<module>"


@dataclass(frozen=True)
class Guide:
    """One engine's guide: where its call-site table is, and the file its rows default to
    (paths are relative to the engine's package, as the guides write them)."""

    engine: str
    path: Path
    section: str
    default_file: str | None


GUIDES: dict[str, Guide] = {
    "vllm": Guide("vllm", ROOT / "docs/migration/vllm.md", "## The call sites", None),
    "sglang": Guide(
        "sglang",
        ROOT / "docs/migration/sglang.md",
        "## Call sites fi-compat serves",
        "srt/layers/flashinfer_comm_fusion.py",
    ),
}

_PATH = re.compile(r"`([\w/]+\.py)`")
_NAME = re.compile(r"`\.?([A-Za-z_][\w.]*)(?:\(\))?`")


@dataclass(frozen=True)
class Site:
    """One row of a guide's call-site table: the file and the functions it names."""

    file: str
    functions: tuple[str, ...]
    text: str


def _table(text: str, section: str) -> list[list[str]]:
    body = text.split(section, 1)[1]
    rows: list[list[str]] = []
    for line in body.splitlines()[1:]:
        if line.startswith("|"):
            if not line.startswith("| ---"):
                rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break  # the first table of the section ends here
    return rows[1:]  # the header


def listed_sites(guide: Guide) -> list[Site]:
    """The rows of the guide's call-site table whose FlashInfer column names a FlashInfer
    call (a row that goes through the engine's own custom op names none)."""
    sites: list[Site] = []
    current = guide.default_file
    owner = ""
    for cells in _table(guide.path.read_text(encoding="utf-8"), guide.section):
        first, call = cells[0], cells[1]
        plain = re.sub(r"\([^)]*\)", "", first)  # "(called from ... in x.py)" is context
        path = _PATH.search(plain)
        if path is not None:
            current = path.group(1)
        assert current is not None, first
        names = []
        for match in _NAME.finditer(plain.replace(path.group(0), "") if path else plain):
            name = match.group(1)
            if match.group(0).startswith("`.") and owner:
                name = f"{owner}.{name}"
            names.append(name)
            if "." in name:
                owner = name.rpartition(".")[0]
        if ("module" in plain and ("import" in plain or "block" in plain)) or (
            not names and plain.startswith("same block")
        ):
            names.append(MODULE)
        if call.startswith("the custom op"):
            continue
        if not names and plain.startswith("same"):
            names = list(sites[-1].functions) if sites else []
        sites.append(Site(current, tuple(names), first))
    return sites


def _in(finding: Finding, function: str) -> bool:
    if function == MODULE:
        return finding.scope == MODULE
    return finding.scope == function or finding.scope.endswith(f".{function}")


def found_at(site: Site, result: ScanResult) -> list[Finding]:
    """The findings of ``result`` in the site's file and functions."""
    return [
        finding
        for finding in result.findings
        if finding.path == site.file and any(_in(finding, name) for name in site.functions)
    ]


def scan(engine: str, into: Path) -> tuple[Path, dict[tuple[str, str], ScanResult]]:
    """The engine's package unpacked under ``into``, and its scan for each of :data:`PAIRS`
    (every use, unchanged ones included)."""
    package = unpack(ENGINES[engine], into)
    return package, {pair: scan_tree(package, *pair) for pair in PAIRS}


def _verdict(findings: Sequence[Finding]) -> str:
    if not findings:
        return "-"
    parts = []
    for finding in findings:
        if finding.rule == "unchanged":
            parts.append("unchanged")
            continue
        since = f", {finding.release}" if finding.release else ""
        parts.append(f"{finding.category.value} ({finding.rule}{since})")
    return "; ".join(dict.fromkeys(parts))


def render(guide: Guide, results: dict[tuple[str, str], ScanResult]) -> str:
    """The guide's scan-sites table for these results."""
    header = [
        "| site | use | " + " | ".join(f"{old} → {new}" for old, new in PAIRS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in PAIRS) + " |",
    ]
    keys: dict[tuple[str, int, str, str], None] = {}
    sites = listed_sites(guide)
    first = results[PAIRS[0]]
    for site in sites:
        for finding in found_at(site, first):
            keys[(finding.path, finding.line, finding.scope, finding.target)] = None
    lines = list(header)
    for path, line, scope, target in sorted(keys, key=lambda key: (key[0], key[1], key[3])):
        cells = []
        for pair in PAIRS:
            here = [
                f
                for f in results[pair].findings
                if (f.path, f.line, f.target) == (path, line, target)
            ]
            cells.append(_verdict(here))
        kind = next(
            f.kind for f in first.findings if (f.path, f.line, f.target) == (path, line, target)
        )
        where = f"`{path}:{line}` ({'module level' if scope == MODULE else f'`{scope}`'})"
        lines.append(f"| {where} | `{target}` ({kind}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_in(guide: Guide) -> str:
    """The scan-sites table as the guide has it."""
    text = guide.path.read_text(encoding="utf-8")
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def write(guide: Guide, table: str) -> None:
    text = guide.path.read_text(encoding="utf-8")
    before, rest = text.split(START, 1)
    after = rest.split(END, 1)[1]
    guide.path.write_text(f"{before}{START}\n{table}\n{END}{after}", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the guides' tables")
    args = parser.parse_args(argv)
    for guide in GUIDES.values():
        with tempfile.TemporaryDirectory() as directory:
            _, results = scan(guide.engine, Path(directory))
            table = render(guide, results)
        if args.write:
            write(guide, table)
        else:
            sys.stdout.write(f"{guide.path.name}\n{table}\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
