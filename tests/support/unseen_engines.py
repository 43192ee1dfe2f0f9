"""``fi-compat scan`` graded on engines it was never tuned to, from FlashInfer's own files.

Five published engines (:data:`UNSEEN`) are scanned from the FlashInfer release each pins
to the newest, and from the newest down to 0.6.5. Each scan is graded without fi-compat's
records: :mod:`tests.support.release_files` reads the two releases' wheels and
:mod:`tests.support.engine_uses` reads the engine's tree.

- :func:`false_breaks`: every ``breaks`` finding must be provably real (the target present
  on the old release and absent on the new one, the keyword taken on the old release and
  refused on the new one, the positional arguments landing elsewhere, the import asserting
  the CUDA runtime) and not caught where it happens.
- :func:`silent_misses`: every use that works on the old release and fails on the new one,
  by the files, must be a ``breaks`` or ``changes behaviour`` finding at its line.
- :func:`coverage`: every use of the independent inventory must get a finding at its line;
  the share that is not ``unverified`` is the scan's coverage.

The wheels come through :class:`tools.releases.ReleaseCache` (downloaded once, cached, never
committed). ``python -m tests.support.unseen_engines [ENGINE ...]`` prints the table the
closing notes quote.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fi_compat.upgrade import Category, Finding, ScanResult, scan_tree
from tests.support.engine_uses import EngineUse, inventory
from tests.support.release_files import ReleaseFiles, release_files
from tools.releases import ReleaseCache

__all__ = [
    "NEWEST",
    "OLDEST",
    "UNSEEN",
    "UnseenEngine",
    "coverage",
    "false_breaks",
    "fetch",
    "pairs",
    "scan",
    "silent_misses",
    "source",
    "unpack",
    "uses_of",
]

NEWEST = "0.7.2.post1"
OLDEST = "0.6.5"


@dataclass(frozen=True)
class UnseenEngine:
    """One published engine: its requirement, the Python its wheel is for, its top-level
    package and the FlashInfer release its metadata pins (or the newest where it pins
    none)."""

    requirement: str
    python: str
    package: str
    pin: str
    #: Engines of :data:`UNSEEN` it imports FlashInfer through, scanned along as roots of
    #: their own (tokenspeed imports its wrappers from tokenspeed-kernel).
    through: tuple[str, ...] = ()


UNSEEN: dict[str, UnseenEngine] = {
    engine.requirement: engine
    for engine in (
        UnseenEngine("sglang==0.5.10", "3.11", "sglang", "0.6.7.post2"),
        UnseenEngine("sglang==0.5.15", "3.11", "sglang", "0.6.12"),
        UnseenEngine("lmdeploy==0.18.0", "3.11", "lmdeploy", "0.7.2"),
        UnseenEngine("tokenspeed-kernel==0.1.4", "3.11", "tokenspeed_kernel", "0.7.1rc2"),
        UnseenEngine("aphrodite-engine==0.24.1", "3.11", "aphrodite", "0.6.18"),
        UnseenEngine(
            "tokenspeed==0.1.1", "3.11", "tokenspeed", "0.7.1rc2", ("tokenspeed-kernel==0.1.4",)
        ),
    )
}


def _wheel(engine: UnseenEngine) -> Path:
    return ReleaseCache().download(engine.requirement, wheel_only=True, python=engine.python)


def fetch(engine: UnseenEngine) -> None:
    """Every wheel :func:`unpack` and the grading of :func:`pairs` read, downloaded into the
    release cache: the engine's, those of the engines it imports FlashInfer through, and
    FlashInfer's for each release of the pairs.

    Raises
    ------
    tools.releases.RegistryUnreachableError
        A wheel is not cached and the registry cannot be reached (the caller skips).
    tools.releases.DownloadError
        The registry answered and a download failed.
    """
    for each in (engine, *(UNSEEN[requirement] for requirement in engine.through)):
        _wheel(each)
    for release in sorted({release for pair in pairs(engine) for release in pair}):
        ReleaseCache().download(f"flashinfer-python=={release}", wheel_only=True)


def source(engine: UnseenEngine, member: str) -> str:
    """One file of the engine's wheel (``member`` as the wheel names it, as :func:`unpack`
    puts it under its root: ``<package>/...``)."""
    with zipfile.ZipFile(_wheel(engine)) as archive:
        return archive.read(member).decode("utf-8")


def unpack(engine: UnseenEngine, into: Path) -> list[Path]:
    """The engine's package's ``*.py`` files unpacked under ``into``, and the roots to scan:
    ``[into]`` holding ``<package>/``; for an engine scanned with those it imports FlashInfer
    through, one ``into/<package>`` root each, holding ``<package>/``."""
    engines = [engine, *(UNSEEN[requirement] for requirement in engine.through)]
    roots = []
    for each in engines:
        root = into / each.package if engine.through else into
        wheel = _wheel(each)
        prefix = f"{each.package}/"
        with zipfile.ZipFile(wheel) as archive:
            members = [n for n in archive.namelist() if n.startswith(prefix) and n.endswith(".py")]
            archive.extractall(root, members)
        roots.append(root)
    return roots


def scan(engine: UnseenEngine, roots: list[Path], old: str, new: str) -> ScanResult:
    """The engine scanned from ``old`` to ``new``, with what it imports FlashInfer through."""
    return scan_tree(roots if engine.through else roots[0], old, new)


def uses_of(engine: UnseenEngine, into: Path) -> list[EngineUse]:
    """The independent inventory of what :func:`unpack` put under ``into`` (following names
    passed from module to module for an engine scanned with others)."""
    return inventory(into, follow=bool(engine.through))


# ------------------------------------------------------------------------------ grading

_KEYWORD = re.compile(r"\(([A-Za-z_]\w*)=\.\.\.\)")
_POSITIONAL = re.compile(r"the (\d+) positional arguments?")
_ASSERTS = "import flashinfer.comm asserts libcudart"


def _at(uses: Sequence[EngineUse], finding: Finding) -> list[EngineUse]:
    return [u for u in uses if u.path == finding.path and u.line == finding.line]


def _same(use: EngineUse, finding: Finding) -> bool:
    return finding.target == use.target or finding.target.startswith(f"{use.target}.")


def _break_is_real(
    finding: Finding, old: ReleaseFiles, new: ReleaseFiles, uses: Sequence[EngineUse]
) -> str | None:
    """None where the files prove the finding; else why not."""
    around = _at(uses, finding)
    if finding.rule == "import-hazard":
        module = finding.target
        while module.count(".") > 1 and not new.is_module(module):
            module = module.rpartition(".")[0]
        comm = module if module.startswith("flashinfer.comm") else None
        if comm is None or "AssertionError" not in finding.message:
            return "an import hazard the files cannot check"
        if not new.asserts_cuda_runtime("flashinfer.comm"):
            return f"{new.version}'s flashinfer.comm does not assert libcudart"
        if old.asserts_cuda_runtime("flashinfer.comm"):
            return f"{old.version}'s flashinfer.comm asserts libcudart too"
        if any(u.catches("AssertionError") for u in around):
            return "the engine catches the AssertionError here"
        return None
    if finding.rule == "name-missing":
        # The use fails where the first part of its path is missing: that part must be
        # there on the old release.
        parts = finding.target.split(".")
        prefixes = [".".join(parts[:end]) for end in range(2, len(parts) + 1)]
        failing = next((p for p in prefixes if new.resolves(p) is False), None)
        if failing is None:
            return f"{finding.target} is not provably missing on {new.version}"
        if old.resolves(failing) is not True:
            return f"{failing} is not provably present on {old.version}"
        raises = "ImportError" if finding.kind == "import" else "AttributeError"
        if any(u.catches(raises) for u in around):
            return f"the engine catches the {raises} here"
        return None
    if finding.rule == "keyword-missing":
        match = _KEYWORD.search(finding.message)
        if match is None:
            return "no keyword named"
        keyword = match[1]
        before, after = old.parameters(finding.target), new.parameters(finding.target)
        if before is None or after is None:
            return f"{finding.target} has no one def on both releases"
        if not before.takes_keyword(keyword) or after.takes_keyword(keyword):
            return f"{keyword}= is not taken on {old.version} and refused on {new.version}"
        if any(u.catches("TypeError") for u in around):
            return "the engine catches the TypeError here"
        return None
    if finding.rule == "positional-shift":
        match = _POSITIONAL.search(finding.message)
        before, after = old.parameters(finding.target), new.parameters(finding.target)
        if match is None or before is None or after is None:
            return "no positional count or no one def on both releases"
        count = int(match[1])
        if before.positional[:count] == after.positional[:count] and (
            len(after.positional) >= count or after.var_positional
        ):
            return f"the first {count} positional parameters are the same"
        return None
    return f"a rule the files cannot check: {finding.rule}"


def false_breaks(result: ScanResult, uses: Sequence[EngineUse]) -> list[tuple[Finding, str]]:
    """Each ``breaks`` finding the two releases' files do not prove, with the reason."""
    old, new = release_files(result.old), release_files(result.new)
    wrong = []
    for finding in result.findings:
        if finding.category is Category.BREAKS:
            reason = _break_is_real(finding, old, new, uses)
            if reason is not None:
                wrong.append((finding, reason))
    return wrong


def _fails(use: EngineUse, old: ReleaseFiles, new: ReleaseFiles) -> str | None:
    """Why ``use`` works on ``old`` and fails on ``new`` by the files; None if it does not
    (or the files do not settle it)."""
    comm = use.target.startswith("flashinfer.comm") and use.kind == "import"
    if (
        comm
        and new.asserts_cuda_runtime("flashinfer.comm")
        and not old.asserts_cuda_runtime("flashinfer.comm")
    ):
        return _ASSERTS
    if old.resolves(use.target) is True and new.resolves(use.target) is False:
        return f"{use.target} is missing"
    if use.kind == "call" and use.keywords:
        before, after = old.parameters(use.target), new.parameters(use.target)
        if before is not None and after is not None:
            for keyword in use.keywords:
                if before.takes_keyword(keyword) and not after.takes_keyword(keyword):
                    return f"{keyword}= is refused"
    return None


def silent_misses(result: ScanResult, uses: Sequence[EngineUse]) -> list[tuple[EngineUse, str]]:
    """Each use that fails on the new release by the files with no ``breaks`` or
    ``changes behaviour`` finding at its line. A failing import of ``flashinfer.comm`` may be
    said once per function: the first import that raises is the one that runs."""
    old, new = release_files(result.old), release_files(result.new)
    said = {
        (f.path, f.line)
        for f in result.findings
        if f.category in (Category.BREAKS, Category.BEHAVIOUR)
    }
    hazards = [
        f
        for f in result.findings
        if f.rule == "import-hazard" and f.category in (Category.BREAKS, Category.BEHAVIOUR)
    ]
    missed = []
    for use in uses:
        why = _fails(use, old, new)
        if why is None or (use.path, use.line) in said:
            continue
        if why == _ASSERTS and any(
            f.path == use.path
            and f.scope == use.scope
            and f.line <= use.line
            and (f.category is Category.BEHAVIOUR) == use.catches("AssertionError")
            for f in hazards
        ):
            continue
        missed.append((use, why))
    return missed


@dataclass(frozen=True)
class Coverage:
    """How many inventory uses got a verdict at their line, were unverified, got nothing."""

    judged: int
    unverified: list[EngineUse]
    unjudged: list[EngineUse]

    @property
    def total(self) -> int:
        return self.judged + len(self.unverified) + len(self.unjudged)

    @property
    def share(self) -> float:
        return self.judged / self.total if self.total else 1.0


def coverage(result: ScanResult, uses: Sequence[EngineUse]) -> Coverage:
    """The inventory's uses by what the scan says at their line."""
    by_line: dict[tuple[str, int], list[Finding]] = {}
    for finding in result.findings:
        for line in range(finding.line, finding.end_line + 1):
            by_line.setdefault((finding.path, line), []).append(finding)
    judged, unverified, unjudged = 0, [], []
    for use in uses:
        found = [f for f in by_line.get((use.path, use.line), []) if _same(use, f)]
        if not found:
            found = by_line.get((use.path, use.line), [])
        if any(f.category is not Category.UNVERIFIED for f in found):
            judged += 1
        elif found:
            unverified.append(use)
        else:
            unjudged.append(use)
    return Coverage(judged, unverified, unjudged)


# ------------------------------------------------------------------------------ the table


def pairs(engine: UnseenEngine) -> tuple[tuple[str, str], tuple[str, str]]:
    """The upgrade (pin to the newest) and the downgrade (the newest to 0.6.5)."""
    return (engine.pin, NEWEST), (NEWEST, OLDEST)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engines", nargs="*", default=list(UNSEEN))
    parser.add_argument("--show", action="store_true", help="list every problem")
    args = parser.parse_args(argv)
    print(
        "| engine | scan | breaks | behaviour | unverified | false breaks | silent misses "
        "| coverage | time |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    status = 0
    for requirement in args.engines:
        engine = UNSEEN[requirement]
        with tempfile.TemporaryDirectory() as scratch:
            roots = unpack(engine, Path(scratch))
            uses = uses_of(engine, Path(scratch))
            for old, new in pairs(engine):
                started = time.perf_counter()
                result = scan(engine, roots, old, new)
                seconds = time.perf_counter() - started
                wrong = false_breaks(result, uses)
                missed = silent_misses(result, uses)
                covered = coverage(result, uses)
                count = result.count
                status |= bool(wrong or missed or covered.unjudged)
                print(
                    f"| {requirement} | {old} → {new} | {count(Category.BREAKS)} "
                    f"| {count(Category.BEHAVIOUR)} | {count(Category.UNVERIFIED)} | {len(wrong)} "
                    f"| {len(missed)} | {covered.judged}/{covered.total} "
                    f"({covered.share:.1%}), {len(covered.unjudged)} unjudged | {seconds:.1f} s |"
                )
                if args.show:
                    for finding, reason in wrong:
                        print(
                            f"    FALSE {finding.path}:{finding.line} {finding.rule} "
                            f"{finding.target}: {reason}"
                        )
                    for use, why in missed:
                        print(f"    MISSED {use.path}:{use.line} {use.kind} {use.target}: {why}")
                    for use in covered.unjudged:
                        print(f"    UNJUDGED {use.path}:{use.line} {use.kind} {use.target}")
                    for use in covered.unverified:
                        print(f"    UNVERIFIED {use.path}:{use.line} {use.kind} {use.target}")
    return status


if __name__ == "__main__":
    sys.exit(main())
