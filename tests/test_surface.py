"""``fi_compat._surface``: the one description of FlashInfer, checked against every release.

Two kinds of test. The table must be true: every gate holds from its release on and never
before it, and every home of every symbol appears in the release its ``since`` names, as
recorded from the real wheels. And the table must be the only one: no other module of the
package spells a FlashInfer function, class or submodule name in its code, so a rename or
a new keyword upstream is a change to ``_surface.py`` alone.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

import fi_compat.comm
from fi_compat import _surface, capabilities
from fi_compat._surface import (
    ALL_SYMBOLS,
    ATTENTION_WRAPPERS,
    COMM,
    GATES,
    TORCH_DIST_BACKEND,
    UNIFIED_FUSION,
    Symbol,
    symbol_named,
)
from fi_compat.errors import InvalidArgumentError
from fi_compat.testing import available_releases, load_release
from fi_compat.testing._releases import ReleaseRecord

PACKAGE = Path(_surface.__file__).parent
RELEASES = available_releases()


def _records() -> Iterator[ReleaseRecord]:
    for release in RELEASES:
        yield load_release(release)


@pytest.mark.parametrize("gate", list(GATES), ids=str)
def test_each_gate_holds_from_its_release_on_and_never_before(gate: str) -> None:
    introduced = Version(GATES[gate].introduced_in)
    wrong = [
        f"{record.release}: has={record.has(gate)}"
        for record in _records()
        if record.has(gate) != (record.version >= introduced)
    ]
    assert not wrong, f"gate {gate} ({GATES[gate].introduced_in}) disagrees with {wrong}"


def test_every_gate_release_is_a_recorded_release() -> None:
    assert {gate.introduced_in for gate in GATES.values()} <= set(RELEASES)


def _has_home(record: ReleaseRecord, symbol: Symbol, home: _surface.Home) -> bool:
    if symbol is TORCH_DIST_BACKEND:
        backend = record.torch_dist_backend
        return backend is not None and backend.module == home.module
    if symbol in ATTENTION_WRAPPERS:
        return record.attention.get(home.name) is not None
    if symbol.kind == "function":
        return record.comm_functions.get(home.name) is not None
    if symbol.kind == "enum":
        return record.comm_enums.get(home.name) is not None
    return record.comm_classes.get(home.name) is not None


@pytest.mark.parametrize("symbol", ALL_SYMBOLS, ids=lambda symbol: symbol.key)
def test_each_home_first_appears_in_the_release_its_since_names(symbol: Symbol) -> None:
    for home in symbol.homes:
        first = next((r.release for r in _records() if _has_home(r, symbol, home)), None)
        assert first == home.since, f"{home.dotted}: first recorded in {first}"


@pytest.mark.parametrize("symbol", ALL_SYMBOLS, ids=lambda symbol: symbol.key)
def test_every_name_of_a_symbol_finds_it(symbol: Symbol) -> None:
    assert symbol_named(symbol.key) is symbol
    assert all(symbol_named(name) is symbol for name in symbol.names)
    assert symbol.homes[-1].since == symbol.since
    assert [Version(home.since) for home in symbol.homes] == sorted(
        (Version(home.since) for home in symbol.homes), reverse=True
    ), "homes must be listed newest first"


@pytest.mark.parametrize("bad", ["no_such_gate", "", None, 5, b"group", ["group"], GATES["group"]])
def test_an_unknown_gate_is_refused_by_the_loader(bad: object) -> None:
    record = load_release(RELEASES[-1])
    with pytest.raises(InvalidArgumentError, match="gate"):
        record.has(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [None, "create_allreduce_fusion_workspace", 5, _surface.Home(COMM, "x", "0.1"), GATES["group"]],
)
def test_locate_refuses_anything_but_a_symbol_before_looking(
    bad: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    looked: list[object] = []
    monkeypatch.setattr(capabilities, "_find", lambda *args: looked.append(args))
    with pytest.raises(InvalidArgumentError, match="symbol"):
        capabilities.locate(bad)  # type: ignore[arg-type]
    assert looked == []


def test_locate_finds_nothing_without_flashinfer(no_flashinfer: None) -> None:
    assert capabilities.locate(UNIFIED_FUSION) is None


# ------------------------------------------------------------ nobody else spells a name


def _flashinfer_names() -> set[str]:
    """Names of FlashInfer's functions, classes and submodules that only _surface holds."""
    names = {_surface.PLAN_IMPL, _surface.CUDART_MODULE}
    for symbol in ALL_SYMBOLS:
        names.add(symbol.key)
        for home in symbol.homes:
            names.add(home.name)
            if home.module not in (_surface.FLASHINFER, COMM):
                names.add(home.module)
    return names


_SPELLED = re.compile(
    r"(?<!\w)(" + "|".join(map(re.escape, sorted(_flashinfer_names(), key=len)[::-1])) + r")(?!\w)"
)


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


#: fi-compat's own drop-in names (``fi_compat.comm.allreduce_fusion``, ...) are FlashInfer's
#: by design: a string that is exactly one of them (an ``__all__`` entry) or names it in
#: ``fi_compat.comm`` is about fi-compat, not FlashInfer.
_DROP_IN = frozenset(fi_compat.comm.__all__)
_OURS = re.compile(r"fi_compat\.comm\.\w+")


def _spellings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if node.value in _DROP_IN:
                continue
            for match in _SPELLED.finditer(_OURS.sub("", node.value)):
                found.append(f"line {node.lineno}: {match.group(1)!r} in {node.value!r}")
    return found


_MODULES = sorted(
    path
    for path in PACKAGE.rglob("*.py")
    if path.name != "_surface.py" and "signatures" not in path.parts
)


@pytest.mark.parametrize("path", _MODULES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_no_module_but_the_surface_spells_a_flashinfer_name(path: Path) -> None:
    assert _spellings(path) == [], "use the symbols of fi_compat._surface instead"


def test_the_spelling_check_catches_a_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""Docstrings may say allreduce_fusion."""\n'
        'a = "flashinfer.comm.trtllm_allreduce_fusion"\n'
        'b = f"{x} takes no group= on create_allreduce_fusion_workspace"\n'
        'c = "allreduce-fusion workspace (not a name)"\n'
        'd = ["allreduce_fusion", "see fi_compat.comm.allreduce_fusion"]\n',
        encoding="utf-8",
    )
    found = _spellings(module)
    assert len(found) == 2
    assert "trtllm_allreduce_fusion" in found[0]
    assert "create_allreduce_fusion_workspace" in found[1]
