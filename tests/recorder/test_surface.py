"""The surface recorder (every module, every name), the store it is packed into, and the
loader's reading of that store: on small source trees built here, so that each rule is
seen failing and passing."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from fi_compat._recorder.archive import read_release
from fi_compat._recorder.resolve import Package
from fi_compat._recorder.store import (
    decode_ranges,
    encode_ranges,
    extend,
    pack,
    unpack,
    unpack_records,
)
from fi_compat._recorder.surface import (
    PRIVATE,
    is_private_module,
    is_recorded_module,
    served_names,
    surface,
)
from fi_compat._records import _store as store_module
from fi_compat._records._format import (
    compact_name,
    compact_parameter,
    expand_name,
    expand_parameter,
    parameters,
)
from fi_compat._records._store import ANY, Store


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def _surface(tmp_path: Path, files: Mapping[str, str]) -> dict[str, Any]:
    return surface(Package(read_release(_tree(tmp_path / "release", files))))


BASE = {
    "flashinfer/__init__.py": """
        from . import norm
        from .norm import rmsnorm as rmsnorm
        from .norm import _private_helper
        __version__ = "9.9"
    """,
    "flashinfer/norm.py": """
        import torch
        from typing import Optional

        def rmsnorm(input: torch.Tensor, weight, eps: float = 1e-6, *, out=None) -> torch.Tensor:
            pass

        def _private_helper(x, /, y):
            pass

        def _get_range_buf(n):
            pass
    """,
    "flashinfer/fused_moe/__init__.py": """
        from .core import trtllm_fp4_block_scale_moe, RoutingMethodType
    """,
    "flashinfer/fused_moe/core.py": """
        import enum
        from dataclasses import dataclass, field

        class RoutingMethodType(enum.IntEnum):
            Default = 0
            Renormalize = 1

        def trtllm_fp4_block_scale_moe(routing_logits, hidden_states, per_token_scale=None):
            pass

        @dataclass(frozen=True)
        class MoEConfig:
            num_experts: int
            top_k: int = 2
            tags: list = field(default_factory=list)
            cache: dict = field(init=False, default=None)
    """,
    "flashinfer/_private_mod.py": "X = 1\n",
    "flashinfer/data/cutlass/python/lib.py": "from cutlass_library.library import *\n",
}


@pytest.fixture
def found(tmp_path: Path) -> dict[str, Any]:
    return _surface(tmp_path, BASE)


# ----------------------------------------------------------------------------- recorder


def test_every_importable_module_is_recorded_and_nothing_else(found: dict[str, Any]) -> None:
    assert sorted(found) == [
        "flashinfer",
        "flashinfer._private_mod",
        "flashinfer.fused_moe",
        "flashinfer.fused_moe.core",
        "flashinfer.norm",
    ]
    # a private module is recorded as shipped, its names not read
    assert found["flashinfer._private_mod"] == {"unreadable": PRIVATE}
    assert is_private_module("flashinfer._private_mod")
    assert not is_private_module("flashinfer.norm")
    assert not is_private_module("flashinfer.data._x")
    assert is_recorded_module("flashinfer.fused_moe.core")
    assert is_recorded_module("flashinfer.__main__")
    assert not is_recorded_module("flashinfer._private_mod")
    assert not is_recorded_module("flashinfer.attention._core.x")
    assert not is_recorded_module("flashinfer.data")
    assert not is_recorded_module("flashinfer.data.cutlass.python.lib")
    assert is_recorded_module("flashinfer.database")  # only the package data is left out


def test_private_names_and_outside_imports_are_recorded(found: dict[str, Any]) -> None:
    norm = found["flashinfer.norm"]["names"]
    assert set(norm) == {"torch", "Optional", "rmsnorm", "_private_helper", "_get_range_buf"}
    assert norm["_get_range_buf"]["kind"] == "function"
    assert norm["torch"] == {"kind": "module", "defined_in": "torch"}
    assert norm["Optional"] == {"kind": "value", "defined_in": "typing"}
    top = found["flashinfer"]["names"]
    assert top["norm"] == {"kind": "module", "defined_in": "flashinfer.norm"}
    assert top["__version__"] == {"kind": "value", "defined_in": "flashinfer", "literal": "'9.9'"}


def test_a_reexport_with_the_same_record_is_stored_once(found: dict[str, Any]) -> None:
    top = found["flashinfer"]["names"]
    assert top["rmsnorm"] == {
        "kind": "function",
        "defined_in": "flashinfer.norm",
        "same": "rmsnorm",
    }
    moe = found["flashinfer.fused_moe"]["names"]
    assert moe["RoutingMethodType"]["same"] == "RoutingMethodType"
    assert moe["RoutingMethodType"]["kind"] == "enum"
    # the definition itself is whole
    assert found["flashinfer.norm"]["names"]["rmsnorm"]["function"]["qualname"] == "rmsnorm"


def test_a_dataclass_constructor_is_its_fields(found: dict[str, Any]) -> None:
    config = found["flashinfer.fused_moe.core"]["names"]["MoEConfig"]["class"]
    init = config["methods"]["__init__"]
    assert init["decorators"] == ["generated"]
    assert [(p["name"], p.get("default")) for p in init["parameters"]] == [
        ("self", None),
        ("num_experts", None),
        ("top_k", "2"),
        ("tags", "list()"),
    ]


def test_named_tuples_and_keyword_only_dataclasses(tmp_path: Path) -> None:
    files = {
        "flashinfer/__init__.py": """
            from dataclasses import dataclass, KW_ONLY
            from typing import NamedTuple

            class Point(NamedTuple):
                x: int
                y: int = 0

            @dataclass(kw_only=True)
            class Base:
                plan: object = None

            @dataclass
            class Binding(Base):
                state: object

            @dataclass(init=False)
            class Manual:
                a: int
        """
    }
    names = _surface(tmp_path, files)["flashinfer"]["names"]

    def params(name: str) -> list[tuple[str, str]]:
        init = names[name]["class"]["methods"]["__init__"]
        return [(p["name"], p["kind"]) for p in init["parameters"]]

    assert params("Point") == [("x", "POSITIONAL_OR_KEYWORD"), ("y", "POSITIONAL_OR_KEYWORD")]
    # dataclasses put keyword-only fields last, whatever class declares them
    assert params("Binding") == [
        ("self", "POSITIONAL_OR_KEYWORD"),
        ("state", "POSITIONAL_OR_KEYWORD"),
        ("plan", "KEYWORD_ONLY"),
    ]
    assert names["Manual"]["class"]["methods"]["__init__"] is None


def test_all_open_star_imports_and_unreadable_modules(tmp_path: Path) -> None:
    files = {
        "flashinfer/__init__.py": (
            "from torch import *\nfrom .a import *\n__all__ = ['x', 'y']\nx = 1\n"
        ),
        "flashinfer/a.py": "__all__ = ['_listed']\n_listed = 1\n_hidden = 2\n",
        "flashinfer/broken.py": "def f(:\n",
    }
    found = _surface(tmp_path, files)
    top = found["flashinfer"]
    assert top["open"] == ["torch"]
    assert top["all"] == ["x", "y"]
    # ``__all__`` names are recorded (``y``, bound by nothing the source shows), and a star
    # import binds the target's ``__all__``, private or not
    assert set(top["names"]) == {"x", "y", "_listed", "__all__"}
    assert found["flashinfer.broken"] == {"unreadable": found["flashinfer.broken"]["unreadable"]}
    assert "cannot parse" in found["flashinfer.broken"]["unreadable"]


def test_every_way_a_module_level_statement_binds_a_name(tmp_path: Path) -> None:
    """Read off 0.7.2.post1's sources against ``inspect``: tuple targets (``_MMA_N_MIN,
    _MMA_N_MAX = 8, 256``), starred ones, loop and ``with`` variables bind; ``del`` at the
    top level unbinds (``del _log_import_version``); a name bound only in an ``except``
    handler is conditional (bound only when the guarded import fails)."""
    files = {
        "flashinfer/__init__.py": """
            _A, (_B, *_REST) = 1, (2, 3, 4)
            [first, second] = 5, 6
            for _loop in range(2):
                pass
            with open(__file__) as _handle:
                pass

            def _helper():
                pass

            _helper()
            del _helper
            if first:
                del second  # not at the top level: may or may not run
            try:
                from torch import tensor
            except ImportError:
                from numpy import array as _fallback
        """,
    }
    names = _surface(tmp_path, files)["flashinfer"]["names"]
    assert {"_A", "_B", "_REST", "first", "second", "_loop", "_handle"} <= set(names)
    assert "_helper" not in names
    assert names["_fallback"].get("conditional") is True
    assert names["tensor"].get("conditional") is True  # bound only when the import works


def test_a_module_that_replaces_itself_in_sys_modules_is_unreadable(tmp_path: Path) -> None:
    """0.7.2.post1's ``flashinfer.experimental.b12x`` hands out the ``b12x`` package: its
    names are that package's, which the release does not hold."""
    files = {
        "flashinfer/__init__.py": "",
        "flashinfer/shim.py": (
            "import importlib\nimport sys\n\n"
            "sys.modules[__name__] = importlib.import_module('b12x')\n"
        ),
    }
    found = _surface(tmp_path, files)["flashinfer.shim"]
    assert list(found) == ["unreadable"]
    assert "sys.modules[__name__]" in found["unreadable"]


@pytest.mark.parametrize(
    ("source", "served"),
    [
        ("def __getattr__(name):\n    if name == 'a':\n        return 1\n", ["a"]),
        (
            "_L = {'a': 1, 'b': 2}\ndef __getattr__(name):\n    if name in _L:\n        pass\n",
            ["a", "b"],
        ),
        (
            "_L = frozenset({'c'})\ndef __getattr__(n):\n    if n not in _L:\n        raise E\n",
            ["c"],
        ),
        ("def __getattr__(name):\n    if name in ('a', 'b'):\n        pass\n", ["a", "b"]),
        ("def __getattr__(name):\n    return lookup(name)\n", "*"),
        ("def __getattr__(name):\n    if name in registry():\n        pass\n", "*"),
        ("def __getattr__(name):\n    if name.startswith('x'):\n        pass\n", "*"),
        ("x = 1\n", None),
    ],
)
def test_what_a_module_getattr_serves(tmp_path: Path, source: str, served: Any) -> None:
    files = {"flashinfer/__init__.py": source}
    package = Package(read_release(_tree(tmp_path / "r", files)))
    module = package.get("flashinfer")
    assert module is not None
    assert served_names(module) == served


# ----------------------------------------------------------------------------- the store


@pytest.mark.parametrize(
    "indices", [[], [0], [0, 1, 2], [0, 2, 4], [3, 4, 5, 9, 10, 40], list(range(111))]
)
def test_ranges_round_trip(indices: list[int]) -> None:
    text = encode_ranges(indices)
    assert decode_ranges(text) == indices
    assert encode_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


@pytest.mark.parametrize(
    "source",
    [
        "def f(): pass",
        "def f(a, b=1, *args, c, d: int = 2, **kw) -> torch.Tensor: pass",
        "def f(a, /, b, *, c=None): pass",
        "def f(a, b=1, /, c=2): pass",
        "def f(self, x: Optional['G'] = None, *, y: Callable[[int], str] = lambda v: ','): pass",
        "def f(*, only): pass",
        "def f(a: 'x = 1, y' = '(') -> 'a) -> b': pass",
    ],
)
def test_parameters_round_trip(source: str) -> None:
    func = ast.parse(source).body[0]
    assert isinstance(func, ast.FunctionDef)
    records = parameters(func.args)
    compact = [compact_parameter(record) for record in records]
    assert [expand_parameter(item) for item in compact] == records
    # the commonest parameter is one string in a list
    assert compact_parameter({"name": "x", "kind": "POSITIONAL_OR_KEYWORD"}) == ["x"]


@pytest.mark.parametrize(
    "record",
    [
        {"kind": "value", "defined_in": "typing"},
        {"kind": "value", "defined_in": None},
        {"kind": "module", "defined_in": "flashinfer.norm"},
        {"kind": "module", "defined_in": "os", "conditional": True},
        {"kind": "function", "defined_in": "flashinfer.norm", "same": "rmsnorm"},
        {"kind": "class", "defined_in": "flashinfer.x", "same": "C", "conditional": True},
        {"kind": "function", "defined_in": "m", "function": {"qualname": "f"}},
    ],
)
def test_short_names_round_trip(record: dict[str, Any]) -> None:
    assert expand_name(compact_name(record)) == record


def test_an_unknown_short_name_is_refused() -> None:
    with pytest.raises(ValueError, match="expected a stored name record"):
        expand_name("!nonsense")


def _three(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """Three releases: 1.0 and 1.1 are BASE; 2.0rc1 adds a keyword, a module and drops one."""
    second = dict(BASE)
    second["flashinfer/fused_moe/core.py"] = BASE["flashinfer/fused_moe/core.py"].replace(
        "per_token_scale=None", "per_token_scale=None, *, cache=None"
    )
    second["flashinfer/moe_ep.py"] = "def dispatch(x):\n    pass\n"
    del second["flashinfer/norm.py"]
    second["flashinfer/__init__.py"] = "from . import fused_moe\n"
    return {
        "1.0": _surface(tmp_path / "a", BASE),
        "1.1": _surface(tmp_path / "b", BASE),
        "2.0rc1": _surface(tmp_path / "c", second),
    }


def _records_of(surfaces: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A record per release (what the per-release part of the store holds)."""
    return {release: {"schema": 3, "release": release} for release in surfaces}


def test_packing_is_lossless_and_deterministic(tmp_path: Path) -> None:
    surfaces = _three(tmp_path)
    records = _records_of(surfaces)
    data = pack(surfaces, records)
    assert pack(surfaces, records) == data
    assert unpack(data) == surfaces
    assert unpack(data, only=["1.1", "2.0rc1"]) == {r: surfaces[r] for r in ("1.1", "2.0rc1")}
    assert unpack_records(data) == records
    (tmp_path / "surface.zip").write_bytes(data)
    store = Store(tmp_path / "surface.zip")
    assert store.record("1.1") == records["1.1"]
    store.close()


def test_unpacking_some_releases_of_the_shipped_store_gives_what_unpacking_all_gives() -> None:
    """``only`` decodes just the lines its releases need: the same surfaces, key order
    included, as unpacking every release, and the same records. The oldest release and a
    pre-release are decoded alone, and all four together: the middle and the newest are
    checked there (one path serves one release or several; the newest alone was the
    costliest decode here)."""
    import json
    from importlib import resources

    data = resources.files("fi_compat._records").joinpath("surface.zip").read_bytes()
    every, records = unpack(data), unpack_records(data)
    releases = list(every)
    picked = [releases[0], releases[len(releases) // 2], releases[-1]]
    picked.append(next(release for release in releases if "rc" in release))
    for release in picked:
        assert unpack_records(data, only=[release]) == {release: records[release]}
    for release in (picked[0], picked[-1]):
        alone = unpack(data, only=[release])
        assert list(alone) == [release]
        assert alone[release] == every[release]
        assert json.dumps(alone[release]) == json.dumps(every[release])
    several = unpack(data, only=picked)
    assert list(several) == [release for release in releases if release in picked]
    assert json.dumps(several) == json.dumps({release: every[release] for release in several})


def test_a_release_without_its_record_is_not_packed(tmp_path: Path) -> None:
    surfaces = _three(tmp_path)
    records = _records_of(surfaces)
    del records["1.1"]
    with pytest.raises(ValueError, match=r"surfaces without a record \['1.1'\]"):
        pack(surfaces, records)


def test_each_distinct_record_is_stored_once(tmp_path: Path) -> None:
    import io
    import json
    import zipfile

    three = _three(tmp_path)
    data = pack(three, _records_of(three))
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        index = json.loads(archive.read("index.json"))
        # small modules: one shard holds them all
        assert index["shards"] == ["flashinfer"]
        core = json.loads(archive.read("0.names.json"))["flashinfer.fused_moe.core"]
        lines = archive.read("0.records").decode().splitlines()
    records = {
        name: json.loads(versions)
        for module, name, versions in (line.split("\t", 2) for line in lines)
        if module == "flashinfer.fused_moe.core"
    }
    # PEP 440 order: the release candidate of 2.0 after 1.1
    assert index["releases"] == ["1.0", "1.1", "2.0rc1"]
    assert index["modules"]["flashinfer.norm"] == "0-1"
    assert index["modules"]["flashinfer.moe_ep"] == "2"
    versions = core["names"]["trtllm_fp4_block_scale_moe"]
    # defined in the module itself: "."
    assert versions == [["0-1", "#function:."], ["2", "#function:."]]
    changed = records["trtllm_fp4_block_scale_moe"][1]
    assert ["cache", 3, "None"] in changed["function"]["params"]
    # an import from outside the release is one short string for every release, kept in the
    # name index only
    assert core["names"]["enum"] == [["0-2", "@enum"]]
    assert core["names"]["MoEConfig"] == [["0-2", "#class:."]]
    assert "enum" not in records  # no full record to keep


def _four(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """``_three`` and a 1.2 between 1.1 and 2.0rc1 with ``__all__`` and a module of its own."""
    third = dict(BASE)
    third["flashinfer/__init__.py"] = "from . import norm\n__all__ = ['norm']\n"
    third["flashinfer/extra.py"] = "def only_here(x, *, y=2):\n    pass\n"
    return {**_three(tmp_path), "1.2": _surface(tmp_path / "d", third)}


@pytest.mark.parametrize(
    ("start", "drop", "add"),
    [
        (["1.0", "1.1", "1.2"], [], ["2.0rc1"]),  # the day-one case: a newer release
        (["1.0", "1.1", "2.0rc1"], [], ["1.2"]),  # one between (positions move)
        (["1.1", "1.2", "2.0rc1"], [], ["1.0"]),  # an older one
        (["1.0", "1.1", "1.2", "2.0rc1"], ["1.2"], []),  # set aside
        (["1.0", "1.1", "1.2", "2.0rc1"], ["1.0", "2.0rc1"], []),
        (["1.0", "1.1", "1.2", "2.0rc1"], ["1.1"], ["1.1"]),  # modelled in place of itself
        (["1.0", "1.1", "2.0rc1"], ["2.0rc1"], ["1.2"]),
        (["1.0"], ["1.0"], ["1.2", "2.0rc1"]),  # nothing left of the start
    ],
)
def test_extending_a_packed_store_gives_the_bytes_of_packing_the_result(
    tmp_path: Path, start: list[str], drop: list[str], add: list[str]
) -> None:
    four = _four(tmp_path)
    records = _records_of(four)
    data = pack({r: four[r] for r in start}, {r: records[r] for r in start})
    extended = extend(data, {r: four[r] for r in add}, {r: records[r] for r in add}, drop)
    result = sorted({*start, *add} - (set(drop) - set(add)))
    assert extended == pack({r: four[r] for r in result}, {r: records[r] for r in result})
    assert unpack(extended) == {r: four[r] for r in result}


def test_extending_needs_a_record_for_every_surface(tmp_path: Path) -> None:
    four = _four(tmp_path)
    data = pack({"1.0": four["1.0"]}, _records_of({"1.0": 0}))
    with pytest.raises(ValueError, match=r"surfaces without a record \['1.2'\]"):
        extend(data, {"1.2": four["1.2"]}, {})


# ----------------------------------------------------------------------------- the reader


@pytest.fixture
def stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    path = tmp_path / "surface.zip"
    three = _three(tmp_path)
    path.write_bytes(pack(three, _records_of(three)))
    opened = Store(path)
    monkeypatch.setattr(store_module, "opened", lambda: opened)
    store_module.module_record.cache_clear()
    store_module.modules_of.cache_clear()
    yield opened
    opened.close()
    store_module.module_record.cache_clear()
    store_module.modules_of.cache_clear()


def test_the_reader_gives_each_release_its_own_facts(stored: Store) -> None:
    assert store_module.store_releases() == ("1.0", "1.1", "2.0rc1")
    assert "flashinfer.norm" in store_module.modules_of("1.0")
    assert "flashinfer.norm" not in store_module.modules_of("2.0rc1")
    old = store_module.module_record("1.0", "flashinfer.fused_moe.core")
    new = store_module.module_record("2.0rc1", "flashinfer.fused_moe.core")
    assert old is not None
    assert new is not None
    moe_old = old.names["trtllm_fp4_block_scale_moe"].function
    moe_new = new.names["trtllm_fp4_block_scale_moe"].function
    assert moe_old is not None
    assert moe_new is not None
    assert "cache" not in moe_old.keyword_names
    assert "cache" in moe_new.keyword_names
    assert store_module.module_record("2.0rc1", "flashinfer.norm") is None
    assert store_module.module_record("9.9", "flashinfer") is None


def test_a_shared_record_reads_as_its_definition(stored: Store) -> None:
    top = store_module.module_record("1.0", "flashinfer")
    norm = store_module.module_record("1.0", "flashinfer.norm")
    assert top is not None
    assert norm is not None
    shared, own = top.names["rmsnorm"], norm.names["rmsnorm"]
    assert shared.function == own.function
    assert shared.defined_in == "flashinfer.norm"
    assert top.shape("rmsnorm") == ("function", "flashinfer.norm", False)
    # one stored record, one identity: what the diff compares without building records (a
    # shared record's identity is its definition's, and its own binding's)
    version = top.version("rmsnorm")
    assert isinstance(version, tuple)
    assert version[0] == norm.version("rmsnorm")
    later, later_norm = (
        store_module.module_record("1.1", module) for module in ("flashinfer", "flashinfer.norm")
    )
    assert later is not None
    assert later_norm is not None
    assert later.version("rmsnorm") == version
    assert later_norm.version("rmsnorm") == norm.version("rmsnorm")


def test_alike_follows_a_reexport_to_its_home(stored: Store) -> None:
    """``tables.json``: a module reads alike in two releases only when every name, a
    re-export's definition included, holds one stored record in both."""
    alike = store_module.alike
    # 1.0 and 1.1 are the same tree
    assert alike("flashinfer.fused_moe.core", "1.0", "1.1")
    assert alike("flashinfer.fused_moe", "1.0", "1.1")
    # 2.0rc1 adds cache= to trtllm_fp4_block_scale_moe in core ...
    assert not alike("flashinfer.fused_moe.core", "1.0", "2.0rc1")
    # ... which the package re-exports from an unchanged __init__.py: not alike either
    package = store_module.module_record("2.0rc1", "flashinfer.fused_moe")
    assert package is not None
    assert package.shape("trtllm_fp4_block_scale_moe") == (
        "function",
        "flashinfer.fused_moe.core",
        False,
    )
    assert not alike("flashinfer.fused_moe", "1.0", "2.0rc1")
    # a release without the module, or unknown to the store, is never alike
    assert not alike("flashinfer.norm", "1.0", "2.0rc1")
    assert not alike("flashinfer.norm", "1.0", "9.9")


@pytest.mark.parametrize(
    ("old", "new"),
    [("0.6.5", "0.7.2.post1"), ("0.7.1rc2", "0.7.2"), ("0.7.2", "0.7.2.post1"), ("0.2.9", "0.3.0")],
)
def test_the_shipped_store_says_alike_exactly_where_nothing_differs(old: str, new: str) -> None:
    """The shipped ``tables.json`` against the name index itself, for every module both
    releases ship: alike exactly when every name has one identity in both (what the diff
    would otherwise compare name by name) and the module's own facts agree."""
    store_module.module_record.cache_clear()
    for module in sorted(store_module.modules_of(old) & store_module.modules_of(new)):
        before = store_module.module_record(old, module)
        after = store_module.module_record(new, module)
        assert before is not None
        assert after is not None
        same = (before.all_names, before.served, before.open, before.unreadable) == (
            after.all_names,
            after.served,
            after.open,
            after.unreadable,
        ) and all(
            before.version(name) == after.version(name)
            for name in set(before.names) | set(after.names)
        )
        assert store_module.alike(module, old, new) == same, module
        runs = store_module.alike_runs(module)
        flat = [release for run in runs for release in run]
        assert len(flat) == len(set(flat)), module  # the runs cut the releases, once each
        assert any({old, new} <= set(run) for run in runs) == same, module


def test_binds_tells_present_absent_and_unknown() -> None:
    from types import MappingProxyType

    from fi_compat._records import ModuleRecord, NameRecord

    names = MappingProxyType({"a": NameRecord("a", "value", "m", None, None)})
    complete = ModuleRecord("m", "1.0", names)
    assert complete.binds("a") is True
    assert complete.binds("b") is False
    assert ModuleRecord("m", "1.0", names, served=("b",)).binds("b") is True
    assert ModuleRecord("m", "1.0", names, served=ANY).binds("b") is None
    assert ModuleRecord("m", "1.0", names, open=("torch",)).binds("b") is None
    assert ModuleRecord("m", "1.0", MappingProxyType({}), unreadable="x").binds("a") is None


def test_the_installed_data_stays_within_8_mb() -> None:
    # the records, the store and the measurements fi-compat ships (issue 39's budget)
    package = Path(store_module.__file__).parent.parent
    data = [package / "_records" / "surface.zip", *package.glob("_measured/*.json")]
    assert (package / "_records" / "surface.zip") in data
    assert sum(path.stat().st_size for path in data) <= 8_000_000


def test_the_shipped_store_leaves_no_file_open_at_exit() -> None:
    """The process-wide store's archive owns its file: a process that read it ends without
    a ResourceWarning (in development mode, where Python reports one)."""
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "dev",
            "-c",
            "from fi_compat._records._store import module_record\n"
            "assert module_record('0.7.2.post1', 'flashinfer') is not None\n",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr


def test_a_definition_re_exported_under_a_guard_is_conditional_only_where_guarded(
    tmp_path: Path,
) -> None:
    # The record of a def or class is made once and handed to every module that binds it;
    # what one module adds to it (here "conditional") must not reach the others.
    found = _surface(
        tmp_path,
        {
            "flashinfer/__init__.py": """
                try:
                    from .kernels import Wrapper, launch
                except ImportError:
                    pass
            """,
            "flashinfer/kernels.py": """
                import typing

                class Wrapper:
                    def __init__(self, workspace):
                        self._workspace = workspace

                    @typing.overload
                    def run(self, q): ...

                    def run(self, q, k=None):
                        pass

                def launch(x, *, stream=None):
                    pass
            """,
            "flashinfer/again.py": "from .kernels import Wrapper, launch\n",
        },
    )
    own = found["flashinfer.kernels"]["names"]
    assert "conditional" not in own["Wrapper"]
    assert "conditional" not in own["launch"]
    guarded = found["flashinfer"]["names"]
    assert guarded["Wrapper"] == {
        "kind": "class",
        "defined_in": "flashinfer.kernels",
        "same": "Wrapper",
        "conditional": True,
    }
    assert guarded["launch"]["conditional"] is True
    assert found["flashinfer.again"]["names"]["Wrapper"]["same"] == "Wrapper"
    # The implementation after a ``@typing.overload`` stub, as Python binds it.
    run = own["Wrapper"]["class"]["methods"]["run"]
    assert [p["name"] for p in run["parameters"]] == ["self", "q", "k"]
    assert own["Wrapper"]["class"]["attributes"] == ["_workspace"]


def test_the_collector_is_paused_while_modelling_and_restored_after() -> None:
    import gc

    from fi_compat._recorder.resolve import collector_paused

    def fail_while_paused() -> None:
        with collector_paused():
            assert not gc.isenabled()
            raise KeyError("modelling failed")

    assert gc.isenabled()
    with pytest.raises(KeyError):
        fail_while_paused()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()
