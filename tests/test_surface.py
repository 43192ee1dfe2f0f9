"""``fi_compat._surface``: the one description of FlashInfer, checked against every release.

Two kinds of test. The table must be true: every gate holds from its release on and never
before it, and every home of every symbol appears in the release its ``since`` names, as
recorded from the real wheels. And the table must be the only one: no other module of the
package spells a FlashInfer function, class or submodule name in its code, so a rename or
a new keyword upstream is a change to ``_surface.py`` alone.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from packaging.version import Version

import tools
from fi_compat import _probe, _surface, capabilities
from fi_compat._records import ReleaseRecord
from fi_compat._surface import (
    ALL_SYMBOLS,
    COMM,
    COMM_NAMED_MODULES,
    DECODE_MODULE,
    FAST_DECODE_PLAN,
    FLASHINFER,
    GATES,
    LEGACY_FACTORY,
    MNNVL_MODULE,
    NAMED_MODULES,
    TORCH_DIST_BACKEND,
    UNIFIED_FUSION,
    WRAPPER_SYMBOLS,
    Home,
    Symbol,
    symbol_named,
)
from fi_compat.errors import InvalidArgumentError
from fi_compat.testing import available_releases, introduced_in, load_release
from fi_compat.testing import fake_flashinfer as fake_flashinfer_release
from tests.support.spellings import docstrings as spelling_docstrings
from tests.support.spellings import spellings

PACKAGE = Path(_surface.__file__).parent
#: The releases the surface's ``since`` values are stated for: the final releases from 0.2.9
#: on (the records before fi-compat 0.3.0). The older and pre-releases are recorded for the
#: diff and the scan, which cite them; the surface does not restate their history.
RELEASES = [
    release
    for release in available_releases()
    if not Version(release).is_prerelease and Version(release) >= Version("0.2.9")
]


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
    if symbol in WRAPPER_SYMBOLS:
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
        assert first == home.introduced_in, f"{home.dotted}: first recorded in {first}"


@pytest.mark.parametrize("symbol", ALL_SYMBOLS, ids=lambda symbol: symbol.key)
def test_every_name_of_a_symbol_finds_it(symbol: Symbol) -> None:
    assert symbol_named(symbol.key) is symbol
    assert all(symbol_named(name) is symbol for name in symbol.names)
    assert symbol.homes[-1].introduced_in == symbol.introduced_in
    assert [Version(home.introduced_in) for home in symbol.homes] == sorted(
        (Version(home.introduced_in) for home in symbol.homes), reverse=True
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
    monkeypatch.setattr(capabilities, "find", lambda *args: looked.append(args))
    with pytest.raises(InvalidArgumentError, match="symbol"):
        _probe.locate(bad)  # type: ignore[arg-type]
    assert looked == []


def test_locate_finds_nothing_without_flashinfer(no_flashinfer: None) -> None:
    assert _probe.locate(UNIFIED_FUSION) is None


# ------------------------------------------------------------ nobody else spells a name


_MODULES = sorted(
    path
    for path in PACKAGE.rglob("*.py")
    if path.name != "_surface.py" and "signatures" not in path.parts
)


@pytest.mark.parametrize("path", _MODULES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_no_module_but_the_surface_spells_a_flashinfer_name(path: Path) -> None:
    assert spellings(path) == [], "use the symbols of fi_compat._surface instead"


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
    found = spellings(module)
    assert len(found) == 2
    assert "trtllm_allreduce_fusion" in found[0]
    assert "create_allreduce_fusion_workspace" in found[1]


# ------------------------------------------------------------ a rename is one more home

#: The name a future release might give the legacy factory (no release has it).
_NEW_NAME = "trtllm_create_ipc_workspace"


@contextlib.contextmanager
def _renamed_upstream(version: str) -> Iterator[ModuleType]:
    """``fake_flashinfer(version)`` whose legacy factory is reachable under the new name only."""
    with fake_flashinfer_release(version) as fake:
        module = fake.comm
        setattr(module, _NEW_NAME, getattr(module, LEGACY_FACTORY.key))
        delattr(module, LEGACY_FACTORY.key)
        capabilities.clear_cache()
        yield module
    capabilities.clear_cache()


@contextlib.contextmanager
def _one_more_home() -> Iterator[None]:
    """What a rename upstream changes in fi-compat: ``LEGACY_FACTORY`` gains a newest home."""
    before = LEGACY_FACTORY.homes
    object.__setattr__(LEGACY_FACTORY, "homes", (Home(COMM, _NEW_NAME, "9.0.0"), *before))
    try:
        yield
    finally:
        object.__setattr__(LEGACY_FACTORY, "homes", before)
        capabilities.clear_cache()


def test_a_rename_upstream_is_one_more_home_and_nothing_else() -> None:
    """Done-when (b) of issue 11: the legacy factory renamed, ``_surface`` alone changed."""
    torch = pytest.importorskip("torch", reason="needs torch")
    from fi_compat import comm
    from fi_compat.errors import CapabilityMissingError

    legacy_only = next(v for v in RELEASES if not load_release(v).unified_api)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    r, w = torch.randn_like(x), torch.randn(64, dtype=torch.bfloat16)
    # Without the new home the renamed factory is not found: a typed refusal, naming it.
    with _renamed_upstream(legacy_only):
        assert capabilities.get_capabilities().comm.legacy_api is False
        with pytest.raises(CapabilityMissingError):
            comm.create_workspace(2, 0, 16, 64, torch.bfloat16, device="cpu", api="legacy")
    with _one_more_home():
        assert LEGACY_FACTORY.dotted == f"{COMM}.{_NEW_NAME}"
        # With it, the probe, the report and the facade find the factory under its new name...
        with _renamed_upstream(legacy_only) as module:
            caps = capabilities.get_capabilities()
            assert caps.comm.legacy_api is True
            assert _probe.locate(LEGACY_FACTORY) is getattr(module, _NEW_NAME)
            assert _NEW_NAME in caps.comm.kwargs[LEGACY_FACTORY.key]["group"].reason
            workspace = comm.create_workspace(2, 0, 16, 64, torch.bfloat16, device="cpu")
            assert workspace.api == "legacy"
            norm_out, residual_out = comm.allreduce_residual_rmsnorm(x, r, w, workspace=workspace)
            assert norm_out.shape == residual_out.shape == x.shape
            workspace.destroy()
        # ...and the releases that still have the old name keep working.
        with fake_flashinfer_release(legacy_only):
            workspace = comm.create_workspace(2, 0, 16, 64, torch.bfloat16, device="cpu")
            assert workspace.api == "legacy"
            workspace.destroy()


# ------------------------------------------- recorded for engines: name tables and decode


def test_each_home_in_a_named_module_is_introduced_in_its_since() -> None:
    # The name tables, read independently of the symbol records, agree with every home.
    homes = [home for symbol in ALL_SYMBOLS for home in symbol.homes]
    checked = [home for home in homes if home.module in NAMED_MODULES]
    # Every communication module holds homes; of the attention backends' modules, the top
    # level holds the wrappers' (the others are recorded for the fake, not probed).
    assert set(COMM_NAMED_MODULES) | {FLASHINFER} <= {home.module for home in checked}
    for home in checked:
        # introduced_in reads every recorded release; the surface's ``since`` is stated for
        # the releases from 0.2.9 on (RELEASES), so a name older than 0.2.9 says 0.2.9.
        first = introduced_in(home.module, home.name)
        assert first is not None, home.dotted
        if Version(home.introduced_in) > Version("0.2.9"):
            assert first == home.introduced_in, home.dotted
        else:
            assert Version(first) <= Version(home.introduced_in), home.dotted


def test_fast_decode_plan_is_recorded_from_its_since_on() -> None:
    since = Version(FAST_DECODE_PLAN.introduced_in)
    has = [record.release for record in _records() if record.fast_decode_plan is not None]
    assert has == [release for release in RELEASES if Version(release) >= since]
    assert FAST_DECODE_PLAN not in ALL_SYMBOLS, "recorded, never probed"
    assert FAST_DECODE_PLAN.module == DECODE_MODULE


_RECORDED_ONLY = re.compile(
    r"(?<![\w.])("
    + "|".join(map(re.escape, (DECODE_MODULE, MNNVL_MODULE, *FAST_DECODE_PLAN.names)))
    + r")(?![\w])"
)
_TOOLS = Path(tools.__file__).parent


def _code_strings(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of each string constant of a module but its docstrings (those of
    modules, classes, functions and attributes: a string statement after an assignment)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = spelling_docstrings(tree)
    for node in ast.walk(tree):  # __all__ names fi-compat's own objects (a drop-in keeps a name)
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            docstrings.update(id(element) for element in ast.walk(node.value))
    texts = [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    for node in texts:
        if id(node) not in docstrings:
            yield node.lineno, str(node.value)


@pytest.mark.parametrize(
    "path",
    [*_MODULES, *sorted(_TOOLS.rglob("*.py"))],
    ids=lambda path: str(path.relative_to(PACKAGE.parent)),
)
def test_no_module_but_the_surface_spells_a_recorded_only_name(path: Path) -> None:
    # The names the surface declares outside ALL_SYMBOLS (which tests.support.spellings
    # covers) are spelled in _surface.py alone too.
    found = [
        f"line {line}: {text!r}"
        for line, text in _code_strings(path)
        if _RECORDED_ONLY.search(text)
    ]
    assert found == [], "use the constants of fi_compat._surface instead"


def test_the_recorded_only_check_catches_a_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""Docstrings may say flashinfer.decode."""\n'
        'z = 1\n"""So may attribute docstrings: flashinfer.decode."""\n'
        'a = "flashinfer.decode"\n'
        'b = "fast_decode_plan"\n'
        'c = "my_fast_decode_plan_helper"\n'
        'd = "flashinfer.comm.mnnvl.MnnvlConfig"\n',
        encoding="utf-8",
    )
    found = [text for _, text in _code_strings(module) if _RECORDED_ONLY.search(text)]
    assert found == ["flashinfer.decode", "fast_decode_plan", "flashinfer.comm.mnnvl.MnnvlConfig"]
