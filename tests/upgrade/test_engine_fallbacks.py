"""``fi-compat scan`` on an engine that rebinds FlashInfer names to fallbacks: vLLM 0.11.2.

vLLM 0.11.2 (its published wheel, fetched at test time and cached, never committed; skipped
with the reason when neither cache nor registry has it) writes both idioms:
``compilation/collective_fusion.py`` keeps ``flashinfer.comm`` only where it has
``trtllm_allreduce_fusion`` (``flashinfer_comm = flashinfer_comm if hasattr(...) else
None``), and ``v1/attention/backends/mla/common.py`` puts ``object`` in place of
``BatchPrefillWithRaggedKVCacheWrapper`` where its import fails. The uses behind them are
found here by a reading of their own (:func:`fallback_uses`), and each must get a verdict,
with the engine graded as :mod:`tests.support.unseen_engines` grades the others: no false
break, no silent miss, every use of the independent inventory found.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from fi_compat.upgrade import ScanResult
from tests.support.engine_uses import EngineUse
from tests.support.release_files import release_files
from tests.support.unseen_engines import (
    NEWEST,
    OLDEST,
    UnseenEngine,
    coverage,
    false_breaks,
    pairs,
    scan,
    silent_misses,
    unpack,
    uses_of,
)
from tools.releases import DownloadError, RegistryUnreachableError

#: vLLM 0.11.2 pins flashinfer-python 0.5.2.
ENGINE = UnseenEngine("vllm==0.11.2", "3.11", "vllm", "0.5.2")
#: The files writing the two idioms, and how many uses each has behind them at least.
FILES = {
    "vllm/compilation/collective_fusion.py": 10,
    "vllm/v1/attention/backends/mla/common.py": 4,
}

Scanned = tuple[list[EngineUse], list[EngineUse], dict[tuple[str, str], ScanResult]]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Scanned:
    """The independent inventory, the uses behind the fallbacks, and both scans."""
    into = tmp_path_factory.mktemp("vllm")
    try:
        roots = unpack(ENGINE, into)
        for release in {NEWEST, OLDEST, ENGINE.pin}:
            release_files(release)
    except (RegistryUnreachableError, DownloadError) as error:  # pragma: no cover
        pytest.skip(f"{ENGINE.requirement} or a FlashInfer wheel is not cached: {error}")
    behind = [use for name in FILES for use in fallback_uses(into, name)]
    results = {pair: scan(ENGINE, roots, *pair) for pair in pairs(ENGINE)}
    return uses_of(ENGINE, into), behind, results


# ------------------------------------------------------------------ the reading of its own


def _flashinfer(module: str | None) -> bool:
    return module is not None and module.split(".")[0] == "flashinfer"


def _rebound(tree: ast.Module) -> dict[str, str]:
    """The top-level names imported from FlashInfer in a ``try`` whose handler binds them to
    something else, or rebound by a conditional expression keeping them on one arm, with
    the FlashInfer path each is."""
    imported: dict[str, str] = {}
    rebound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _flashinfer(alias.name) and alias.asname:
                    imported[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level and _flashinfer(node.module):
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                for statement in handler.body:
                    if isinstance(statement, ast.Assign):
                        for target in statement.targets:
                            if isinstance(target, ast.Name) and target.id in imported:
                                rebound[target.id] = imported[target.id]
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp):
            arm = node.value.body
            for target in node.targets:
                if (
                    isinstance(target, ast.Name)
                    and isinstance(arm, ast.Name)
                    and arm.id == target.id
                    and target.id in imported
                ):
                    rebound[target.id] = imported[target.id]
    return rebound


def _made(tree: ast.Module, name: str) -> tuple[set[str], set[str]]:
    """What holds objects ``name`` builds, as written: the targets of ``x = name(...)``, and
    the containers of ``xs.append(name(...))``."""
    built = {
        id(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == name
    }
    objects: set[str] = set()
    containers: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and id(node.value) in built:
            objects.update(ast.unparse(target) for target in node.targets)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and any(id(argument) in built for argument in node.args)
        ):
            containers.add(ast.unparse(node.func.value))
    return objects, containers


def _chain(node: ast.Attribute) -> tuple[str, list[str]]:
    """The name a chain of attributes starts from, and the attributes."""
    parts = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    return (current.id if isinstance(current, ast.Name) else ""), parts[::-1]


def _use(path: str, node: ast.expr, kind: str, target: str) -> EngineUse:
    return EngineUse(path, node.lineno, kind, target, (), 0, False, frozenset(), "")


def _uses(tree: ast.Module, path: str) -> Iterator[EngineUse]:
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for name, target in _rebound(tree).items():
        objects, containers = _made(tree, name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == name:
                yield _use(path, node, "call", target)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = node.func.value
                if ast.unparse(receiver) in objects or (
                    isinstance(receiver, ast.Subscript)
                    and ast.unparse(receiver.value) in containers
                ):
                    yield _use(path, node, "call", f"{target}.{node.func.attr}")
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and id(node) not in inner
                and _chain(node)[0] == name
            ):
                kind = "call" if id(node) in called else "attribute"
                yield _use(path, node, kind, ".".join((target, *_chain(node)[1])))


def fallback_uses(root: Path, name: str) -> list[EngineUse]:
    """The uses, in file ``name`` under ``root``, of a FlashInfer name its code rebinds to a
    fallback: calls of it and of methods of the objects it builds, chains read off it."""
    tree = ast.parse((root / name).read_text(encoding="utf-8"))
    return sorted(set(_uses(tree, name)), key=lambda use: (use.line, use.target))


# ------------------------------------------------------------------ the verdicts


def test_the_reading_finds_the_uses_behind_both_idioms(engine: Scanned) -> None:
    _, behind, _ = engine
    for name, least in FILES.items():
        found = [use for use in behind if use.path == name]
        assert len(found) >= least, (name, found)


def test_every_use_behind_a_fallback_gets_a_verdict(engine: Scanned) -> None:
    _, behind, results = engine
    for pair, result in results.items():
        covered = coverage(result, behind)
        assert not covered.unjudged, f"{pair}: no finding at " + ", ".join(
            f"{u.path}:{u.line} {u.target}" for u in covered.unjudged
        )
        assert not covered.unverified, pair
        targets = {(f.path, f.line): f.target for f in result.findings}
        for use in behind:
            assert targets[use.path, use.line].startswith(use.target.rpartition(".")[0])


def test_the_engine_is_graded_as_the_unseen_ones_are(engine: Scanned) -> None:
    inventory, behind, results = engine
    uses = [*inventory, *behind]
    for pair, result in results.items():
        assert not false_breaks(result, uses), pair
        covered = coverage(result, uses)
        assert not covered.unjudged, pair
        assert covered.share >= 0.95, f"{pair}: {covered.judged}/{covered.total} judged"
    assert not silent_misses(results[(NEWEST, OLDEST)], uses)
