"""Engines' published wheels scanned and graded in a fresh interpreter, once per input.

Three test files scan published engine wheels with :func:`fi_compat.upgrade.scan_tree`:
``tests/upgrade/test_unseen_engines.py`` and ``test_engine_fallbacks.py`` grade the scans
from FlashInfer's own wheels against an independent inventory of the engine's tree
(:mod:`tests.support.unseen_engines`); ``test_engine_sources.py`` holds them against the
migration guides (:mod:`tests.support.scan_sites`). Unpacking, scanning, the inventory and
that grading are a pure function of published files (never changed), this checkout and the
interpreter, and most of those files' time. So they run here, in a fresh interpreter made
once per input (:func:`tests.support.fresh.fresh_python`, :mod:`tools.results`: an unchanged
input is answered from the kept result, the coverage it measured included), and the tests
assert on what it prints::

    python -m tests.support.engine_scans graded lmdeploy==0.18.0 sglang==0.5.10 ...
    python -m tests.support.engine_scans graded vllm==0.11.2     # with its fallbacks
    python -m tests.support.engine_scans sources sglang          # an engine of GUIDES

``graded`` takes any engines of :data:`GRADED` and grades them in one run, as one test
process did before: they share its readings of FlashInfer's records and wheels (the six of
:data:`~tests.support.unseen_engines.UNSEEN` graded in a run each took a third longer, 53 s
against 38 s without coverage). Each engine is unpacked into a scratch directory of its
own; ``graded`` prints ``{"engines": {requirement: engine}}``, ``sources`` prints one
engine, each engine a JSON object:

``scans``
    One per pair of releases scanned, in order: ``pair`` (``[old, new]``) and ``result``
    (:meth:`~fi_compat.upgrade.ScanResult.to_dict`: every finding, the unchanged ones too;
    ``root`` and ``roots`` relative to the scratch directory, which is gone). ``graded``
    scans :func:`~tests.support.unseen_engines.pairs` and adds ``false_breaks``
    (``[[finding, why], ...]``, :func:`~tests.support.unseen_engines.false_breaks`) and
    ``silent_misses`` (``[[use, why], ...]``, :func:`~tests.support.unseen_engines.silent_misses`,
    on the downgrade to 0.6.5; null on the upgrade, which no test grades for them).
    ``sources`` scans :data:`~tests.support.scan_sites.PAIRS`, then
    :data:`~tests.support.scan_sites.DOWNGRADE` as fi-compat serves it (``fi_compat``).
``inventory``, ``behind`` (``graded``)
    The independent inventory (:func:`~tests.support.unseen_engines.uses_of`) and, for
    vLLM 0.11.2, the uses behind its fallbacks
    (:func:`~tests.support.engine_fallbacks.fallback_uses`): what the grading reads.

A finding is its ``to_dict()``, a use an object of :class:`EngineUse`'s fields. The
coverage grader, which reads only a scan and the uses, is left to the tests.

In the test process, :func:`graded` and :func:`sources` first download every wheel the run
reads, raising what :class:`tools.releases.ReleaseCache` raises for the test to skip on (so
no run is made, or kept, for a wheel that is not here); then they run it and read its JSON
back into :class:`~fi_compat.upgrade.Finding`, :class:`~fi_compat.upgrade.ScanResult` and
:class:`EngineUse` objects, each result checked to give back what the run printed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from fi_compat.upgrade import Category, Diagnostic, Finding, ScanResult, scan_tree
from tests.support.engine_fallbacks import ENGINE, FILES, fallback_uses
from tests.support.engine_uses import EngineUse
from tests.support.engine_wheels import ENGINES, engine_wheel
from tests.support.scan_sites import DOWNGRADE, GUIDES
from tests.support.scan_sites import scan as scan_sites
from tests.support.unseen_engines import (
    NEWEST,
    OLDEST,
    UNSEEN,
    UnseenEngine,
    false_breaks,
    fetch,
    pairs,
    scan,
    silent_misses,
    unpack,
    uses_of,
)

__all__ = ["GRADED", "Graded", "graded", "main", "read_graded", "read_result", "sources"]

#: The engines ``graded`` knows: those of UNSEEN, and vLLM 0.11.2 with its fallbacks.
GRADED: dict[str, UnseenEngine] = {**UNSEEN, ENGINE.requirement: ENGINE}
#: How long a run may take: SGLang's, made afresh under coverage on a busy machine, takes
#: a few minutes.
TIMEOUT = 1800

Pair = tuple[str, str]


# ------------------------------------------------------------------------ the JSON


def _use_json(use: EngineUse) -> dict[str, Any]:
    return {
        "path": use.path,
        "line": use.line,
        "kind": use.kind,
        "target": use.target,
        "keywords": list(use.keywords),
        "positional": use.positional,
        "unpacked": use.unpacked,
        "caught": sorted(use.caught),
        "scope": use.scope,
    }


def _read_use(data: dict[str, Any]) -> EngineUse:
    use = EngineUse(
        data["path"],
        data["line"],
        data["kind"],
        data["target"],
        tuple(data["keywords"]),
        data["positional"],
        data["unpacked"],
        frozenset(data["caught"]),
        data["scope"],
    )
    if _use_json(use) != data:
        raise ValueError(f"a use does not read back as the run printed it: {data}")
    return use


def _read_finding(data: dict[str, Any]) -> Finding:
    values = {field.name: data[field.name] for field in fields(Finding)}
    values["category"] = Category(values["category"])
    return Finding(**values)


def read_result(data: dict[str, Any]) -> ScanResult:
    """The :class:`ScanResult` whose ``to_dict()`` is ``data`` (``fi-compat scan --json
    --all``'s document); raises ValueError when no result gives back exactly ``data``."""
    result = ScanResult(
        data["root"],
        data["old"],
        data["new"],
        data["fi_compat"],
        data["files"],
        tuple(_read_finding(finding) for finding in data["findings"]),
        tuple(Diagnostic(**diagnostic) for diagnostic in data["diagnostics"]),
        tuple(data["roots"]),
    )
    if result.to_dict() != data:
        raise ValueError(f"the scan {data['old']} -> {data['new']} does not read back as printed")
    return result


@dataclass(frozen=True)
class Graded:
    """An engine's scans and their grading, as the run that made them printed them."""

    #: The independent inventory of the engine's tree.
    inventory: list[EngineUse]
    #: The uses behind the engine's fallbacks (vLLM 0.11.2's; none for the others).
    behind: list[EngineUse]
    #: Each pair's scan, by ``(old, new)``.
    results: dict[Pair, ScanResult]
    #: Each pair's ``breaks`` findings the two releases' files do not prove, with why.
    false_breaks: dict[Pair, list[tuple[Finding, str]]]
    #: The uses failing on the new release, by the files, with no finding saying so at
    #: their line, with why: for each pair graded for them (the downgrade).
    silent_misses: dict[Pair, list[tuple[EngineUse, str]]]

    @property
    def uses(self) -> list[EngineUse]:
        """What the grading read: the inventory, then the uses behind the fallbacks."""
        return [*self.inventory, *self.behind]


def _pair(entry: dict[str, Any]) -> Pair:
    old, new = entry["pair"]
    return str(old), str(new)


def read_graded(document: dict[str, Any]) -> Graded:
    """One engine of what ``python -m tests.support.engine_scans graded ...`` printed, read
    back."""
    results: dict[Pair, ScanResult] = {}
    wrong: dict[Pair, list[tuple[Finding, str]]] = {}
    missed: dict[Pair, list[tuple[EngineUse, str]]] = {}
    for entry in document["scans"]:
        pair = _pair(entry)
        results[pair] = read_result(entry["result"])
        wrong[pair] = [(_read_finding(finding), str(why)) for finding, why in entry["false_breaks"]]
        if entry["silent_misses"] is not None:
            missed[pair] = [(_read_use(use), str(why)) for use, why in entry["silent_misses"]]
    return Graded(
        [_read_use(use) for use in document["inventory"]],
        [_read_use(use) for use in document["behind"]],
        results,
        wrong,
        missed,
    )


# ------------------------------------------------------------------------ the run


def _relative(document: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """A result's ``to_dict()`` with its root and roots relative to ``scratch``."""
    return {
        **document,
        "root": os.path.relpath(document["root"], scratch),
        "roots": [os.path.relpath(root, scratch) for root in document["roots"]],
    }


def _graded(requirement: str, scratch: Path) -> dict[str, Any]:
    engine = GRADED[requirement]
    roots = unpack(engine, scratch)
    inventory = uses_of(engine, scratch)
    behind = (
        [use for name in FILES for use in fallback_uses(scratch, name)] if engine == ENGINE else []
    )
    uses = [*inventory, *behind]
    scans = []
    for old, new in pairs(engine):
        result = scan(engine, roots, old, new)
        missed = silent_misses(result, uses) if (old, new) == (NEWEST, OLDEST) else None
        scans.append(
            {
                "pair": [old, new],
                "result": _relative(result.to_dict(), scratch),
                "false_breaks": [
                    [finding.to_dict(), why] for finding, why in false_breaks(result, uses)
                ],
                "silent_misses": (
                    None if missed is None else [[_use_json(use), why] for use, why in missed]
                ),
            }
        )
    return {
        "inventory": [_use_json(use) for use in inventory],
        "behind": [_use_json(use) for use in behind],
        "scans": scans,
    }


def _sources(engine: str, scratch: Path) -> dict[str, Any]:
    package, results = scan_sites(engine, scratch)
    results[DOWNGRADE] = scan_tree(package, *DOWNGRADE, fi_compat=True)
    return {
        "scans": [
            {"pair": list(pair), "result": _relative(result.to_dict(), scratch)}
            for pair, result in results.items()
        ]
    }


def _printed(make: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """What ``make`` gives for a scratch directory of its own, checked not to name it (a
    kept result would name a directory that is gone)."""
    with tempfile.TemporaryDirectory(prefix="fi-compat-engine-") as directory:
        scratch = Path(directory).resolve()
        document = make(scratch)
        text = json.dumps(document)
        for named in {directory, str(scratch)}:
            if named in text:
                raise RuntimeError(f"the scans name their scratch directory {named}")
    return document


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("graded", help="scan and grade engines never tuned to").add_argument(
        "requirements", nargs="+", choices=sorted(GRADED)
    )
    commands.add_parser("sources", help="scan an engine a guide lists").add_argument(
        "engine", choices=sorted(GUIDES)
    )
    args = parser.parse_args(argv)
    if args.command == "graded":
        document = {
            "engines": {
                requirement: _printed(functools.partial(_graded, requirement))
                for requirement in args.requirements
            }
        }
    else:
        document = _printed(functools.partial(_sources, args.engine))
    sys.stdout.write(json.dumps(document) + "\n")
    return 0


# ------------------------------------------------------------------------ the test side


def _run(*argv: str) -> dict[str, Any]:
    """What ``python -m tests.support.engine_scans ARGV`` printed, made once per input."""
    from tests.support.fresh import support_json

    return support_json("tests.support.engine_scans", *argv, timeout=TIMEOUT)


def graded(requirements: Sequence[str]) -> dict[str, Graded]:
    """The engines of :data:`GRADED` scanned for each of their pairs and graded, in one
    run, by requirement.

    Raises
    ------
    tools.releases.RegistryUnreachableError, tools.releases.DownloadError
        A wheel the run reads is not cached and could not be downloaded (the test skips).
    """
    for requirement in requirements:
        fetch(GRADED[requirement])
    engines = _run("graded", *requirements)["engines"]
    return {requirement: read_graded(engines[requirement]) for requirement in requirements}


def sources(engine: str) -> dict[Pair, ScanResult]:
    """The engine of :data:`~tests.support.scan_sites.GUIDES` scanned for each pair of
    :data:`~tests.support.scan_sites.PAIRS` and for the downgrade after the import swap
    (:data:`~tests.support.scan_sites.DOWNGRADE`).

    Raises
    ------
    tools.releases.RegistryUnreachableError
        The engine's wheel is not cached and the registry cannot be reached (the test skips).
    """
    engine_wheel(ENGINES[engine])
    document = _run("sources", engine)
    return {_pair(entry): read_result(entry["result"]) for entry in document["scans"]}


if __name__ == "__main__":
    sys.exit(main())
