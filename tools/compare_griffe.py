"""Compare griffe's static reading of each recorded release with the recorded JSON.

``make compare-griffe`` (or ``python -m tools.compare_griffe [--jobs N] [VERSION ...]``).

griffe (https://mkdocstrings.github.io/griffe/) loads a package from source without
importing it and resolves aliases and re-exports, which is what the recorder's hand-written
:mod:`ast` reader does. For every release in ``releases.txt`` this loads the very files the
recorder reads (the release's ``flashinfer`` package, from the same cached wheel or sdist)
with griffe, and checks each fact the recorded JSON holds about a callable against
griffe's answer:

* ``presence``: the name is bound in ``flashinfer.comm`` / ``flashinfer`` (or in the
  module a class was found in), for every recorded name, null or not;
* for every recorded function and method: ``defined_in`` (the module of the ``def``),
  ``qualname`` (the class that defines an inherited method), ``decorators``, ``returns``
  and, parameter by parameter, ``names``, ``kinds``, ``defaults`` and ``annotations`` as
  source text.

It prints the number of releases and callables compared, then each kind of fact with how
many were compared and how many differ, with a few examples of each difference.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import griffe

from fi_compat._recorder import read_release
from fi_compat._surface import COMM, DISTRIBUTIONS, FLASHINFER, symbol_named
from fi_compat.testing import listed_releases
from tools.record import SIGNATURES
from tools.releases import ReleaseCache

__all__ = ["Tally", "compare_release", "main"]

#: Distinct differences shown per kind of fact.
_EXAMPLES = 4


@dataclass
class Tally:
    """What was compared and what differed, for one release or summed over several.

    ``differences`` maps each kind of fact to each distinct difference found (where, and
    both answers) and the releases it was found in.
    """

    releases: list[str] = field(default_factory=list)
    callables: int = 0
    compared: Counter[str] = field(default_factory=Counter)
    differ: Counter[str] = field(default_factory=Counter)
    differences: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    seconds: float = 0.0

    def check(self, fact: str, where: str, recorded: object, found: object) -> bool:
        """Count one fact of this (single) release; note it when griffe's answer differs."""
        self.compared[fact] += 1
        if recorded == found:
            return True
        self.differ[fact] += 1
        text = f"{where}: recorded {recorded!r}, griffe {found!r}"
        self.differences.setdefault(fact, {}).setdefault(text, []).extend(self.releases)
        return False

    def add(self, other: Tally) -> None:
        """Sum ``other`` into this tally."""
        self.releases += other.releases
        self.callables += other.callables
        self.compared.update(other.compared)
        self.differ.update(other.differ)
        self.seconds += other.seconds
        for fact, found in other.differences.items():
            for text, releases in found.items():
                self.differences.setdefault(fact, {}).setdefault(text, []).extend(releases)


# ---------------------------------------------------------------------------- griffe


def _load(path: Path, scratch: Path) -> griffe.GriffeLoader:
    """griffe's reading of the files the recorder reads from ``path``."""
    for relative, text in read_release(path).files.values():
        target = scratch / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    loader = griffe.GriffeLoader(search_paths=[scratch], allow_inspection=False)
    loader.load(FLASHINFER)
    loader.resolve_aliases(implicit=True, external=False)
    return loader


def _member(loader: griffe.GriffeLoader, module: str, name: str) -> griffe.Object | None:
    """What ``module.name`` finally is, following aliases; None when unbound or unresolved."""
    try:
        found = loader.modules_collection.get_member(f"{module}.{name}")
        return found.final_target if isinstance(found, griffe.Alias) else found
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _method(cls: griffe.Class, name: str) -> griffe.Function | None:
    try:
        found = cls.all_members.get(name)
        target = found.final_target if isinstance(found, griffe.Alias) else found
    except (ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return target if isinstance(target, griffe.Function) else None


def _text(value: str | griffe.Expr | None) -> str | None:
    return None if value is None else str(value)


# -------------------------------------------------------------------------- comparison


def _compare_function(
    tally: Tally, where: str, recorded: Mapping[str, Any], func: griffe.Function
) -> None:
    tally.callables += 1
    tally.check("defined_in", where, recorded["defined_in"], func.module.path)
    owner = func.parent
    qualname = f"{owner.name}.{func.name}" if isinstance(owner, griffe.Class) else func.name
    tally.check("qualname", where, recorded["qualname"], qualname)
    tally.check(
        "decorators",
        where,
        recorded["decorators"],
        [_text(decorator.value) for decorator in func.decorators],
    )
    tally.check("returns", where, recorded.get("returns"), _text(func.returns))
    params = recorded["parameters"]
    found = list(func.parameters)
    if not tally.check(
        "parameter names", where, [p["name"] for p in params], [p.name for p in found]
    ):
        return
    for param, other in zip(params, found, strict=True):
        at = f"{where}({param['name']})"
        tally.check("parameter kinds", at, param["kind"], other.kind.name.upper())
        tally.check("parameter defaults", at, param.get("default"), _text(other.default))
        tally.check("parameter annotations", at, param.get("annotation"), _text(other.annotation))


def _compare_class(
    tally: Tally, where: str, recorded: Mapping[str, Any], cls: griffe.Class
) -> None:
    for name, method in recorded["methods"].items():
        found = _method(cls, name)
        at = f"{where}.{name}"
        present = tally.check("presence", at, method is not None, found is not None)
        if present and found is not None:
            _compare_function(tally, at, method, found)


def _compare_names(
    tally: Tally,
    loader: griffe.GriffeLoader,
    records: Mapping[str, Mapping[str, Any] | None],
    modules: Callable[[str, Mapping[str, Any] | None], tuple[str, ...]],
    kind: str,
) -> list[tuple[str, Mapping[str, Any], griffe.Object]]:
    """Check each recorded name's presence; return those both readers found, as ``kind``.

    ``modules`` gives the modules a name is looked up in (found in any counts).
    """
    both = []
    for name, recorded in records.items():
        where = f"{'|'.join(modules(name, recorded))}.{name}"
        hits = (_member(loader, module, name) for module in modules(name, recorded))
        found = next((hit for hit in hits if hit is not None), None)
        present = tally.check("presence", where, recorded is not None, found is not None)
        if (
            present
            and recorded is not None
            and found is not None
            and tally.check("kind", where, kind, found.kind.value)
        ):
            both.append((where, recorded, found))
    return both


def _class_modules(name: str, recorded: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Where a recorded ``comm`` class is looked up: as the record says it was found."""
    if recorded is None:
        symbol = symbol_named(name)
        return tuple(home.module for home in symbol.homes) if symbol else (COMM,)
    if "module" in recorded:
        return (recorded["module"],)
    return (COMM,) if recorded["exported"] else (recorded["defined_in"],)


def compare_release(version: str, path: Path) -> Tally:
    """Compare one release's recorded JSON with griffe's reading of ``path``."""
    started = time.monotonic()
    record = json.loads((SIGNATURES / f"{version}.json").read_text(encoding="utf-8"))
    tally = Tally(releases=[version])

    def comm(_name: str, _recorded: object) -> tuple[str, ...]:
        return (COMM,)

    def top(_name: str, _recorded: object) -> tuple[str, ...]:
        return (FLASHINFER,)

    with tempfile.TemporaryDirectory(prefix="fi-compat-griffe-") as scratch:
        loader = _load(path, Path(scratch))
        section = record["comm"]
        for where, recorded, found in _compare_names(
            tally, loader, section["functions"], comm, "function"
        ):
            assert isinstance(found, griffe.Function)
            _compare_function(tally, where, recorded, found)
        _compare_names(tally, loader, section["enums"], comm, "class")
        classes = _compare_names(tally, loader, section["classes"], _class_modules, "class")
        wrappers = _compare_names(tally, loader, record["attention"], top, "class")
        for where, recorded, found in classes + wrappers:
            assert isinstance(found, griffe.Class)
            _compare_class(tally, where, recorded, found)
    tally.seconds = time.monotonic() - started
    return tally


# ------------------------------------------------------------------------------ report


def _report(total: Tally) -> str:
    lines = [
        f"releases compared: {len(total.releases)}",
        f"callables compared (functions and methods both readers found): {total.callables}",
        f"griffe load + compare time: {total.seconds:.0f} s (summed over releases)",
        "",
        f"{'fact':<24}{'compared':>10}{'differ':>10}",
    ]
    for fact in sorted(total.compared):
        lines.append(f"{fact:<24}{total.compared[fact]:>10}{total.differ[fact]:>10}")
    lines.append(f"{'all':<24}{total.compared.total():>10}{total.differ.total():>10}")
    for fact, found in sorted(total.differences.items()):
        lines += ["", f"{fact}: {len(found)} distinct difference(s)"]
        for text, releases in list(found.items())[:_EXAMPLES]:
            span = releases[0] if len(releases) == 1 else f"{releases[0]} .. {releases[-1]}"
            lines.append(f"  {text}  [{len(releases)} release(s): {span}]")
    return "\n".join(lines)


def _compare(job: tuple[str, Path]) -> Tally:
    logging.getLogger("griffe").setLevel(logging.CRITICAL)  # its per-file warnings
    return compare_release(*job)


def main(argv: list[str] | None = None) -> int:
    """Entry point: compare the releases given (default: all listed) and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m tools.compare_griffe", description=__doc__)
    parser.add_argument("versions", nargs="*", help="releases (default: all in releases.txt)")
    parser.add_argument("--jobs", type=int, default=2, help="releases compared at once")
    args = parser.parse_args(argv)
    cache = ReleaseCache()
    versions = args.versions or listed_releases()
    jobs = [
        (version, cache.download(f"{DISTRIBUTIONS[0]}=={version}", wheel_only=False))
        for version in versions
    ]
    total = Tally()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for version, tally in zip(versions, pool.map(_compare, jobs), strict=True):
            differ = tally.differ.total()
            print(f"{version}: {tally.callables} callables, {differ} differences", flush=True)
            total.add(tally)
    print()
    print(_report(total))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
