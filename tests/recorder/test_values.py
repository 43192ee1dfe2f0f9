"""A module-level value is recorded as what it is once imported, or as opaque with why."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fi_compat._recorder.archive import read_release
from fi_compat._recorder.resolve import Package
from fi_compat._recorder.surface import surface
from fi_compat._recorder.values import MOST_CHARACTERS, spell

UTILS = """
    import os
    import torch
    from typing import Dict, List, Tuple
    from .constants import LIMIT, LIMIT as RENAMED

    _cache_buf: Dict[Tuple[str, torch.device], torch.Tensor] = {}
    _cache_buf_retired: List[torch.Tensor] = []
    BACKENDS = ("fa2", "fa3", "trtllm-gen")
    PAGE_SIZES = {1, 16, 32, 64}
    NAMES = {"b", "a", "c"}
    TABLE = {(64, 128): "small", (128, 256): "large"}
    INT32_MAX = 2 ** 31 - 1
    BELOW = INT32_MAX - (LIMIT - 1)
    ALIASED = RENAMED * 2
    NEGATIVE = -1
    FLAG = not False
    SCALE = 1.0 / 8
    TEXT = "fi" + "-" + "compat"
    CHAINED = OTHER = 7
    FIRST, SECOND = 1, 2

    # computed at import
    LEVEL = int(os.environ.get("FLASHINFER_LOGLEVEL", "0"))
    DTYPES = (torch.float16, torch.bfloat16)
    SQUARES = {n: n * n for n in range(4)}
    MERGED = {**TABLE}
    HUGE = 2 ** 255 * 2 ** 255
    EXPONENT = 2 ** 100000
    SHIFTED = 1 << 10 ** 6
    INFINITE = 1e400
    DIVIDED = 1 / 0
    LOOPED = 0
    for LOOPED in range(3):
        pass
    UNHASHABLE = {[1]: 2}
    CHOSEN = 1 if LIMIT else 0
    SELFISH = SELFISH + 1
    ROUND = AND_ROUND * 2
    AND_ROUND = ROUND + 1
    CYCLE_A = 1
    del CYCLE_A
    WIDE = "x" * 100000

    # bound by several statements, or where the machine decides
    TWICE = 1
    TWICE = 2
    try:
        import cutlass
        AVAILABLE = True
    except ImportError:
        AVAILABLE = False
    if os.environ.get("X"):
        GUARDED = 1

    # changed at import after it is bound
    REGISTRY = {}
    REGISTRY["fa2"] = 1
    ITEMS = []
    ITEMS.append(1)
    HANDED = {}
    print(HANDED)
    NESTED = ([], 1)
    NESTED[0].append(2)
    COUNT = 0
    COUNT += 1
    DECORATED = {}

    @DECORATED.setdefault
    def registered():
        pass

    # a mutable value only a function changes (at run time, not at import): its import value
    RUNTIME = {}

    def fill():
        RUNTIME["x"] = 1

    # an immutable value handed to a call: nothing can change it
    SIZES = (1, 2)
    print(SIZES)
"""

CONSTANTS = """
    LIMIT = 1 << 8
"""


def _names(tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "release"
    for name, text in {
        "flashinfer/__init__.py": "from .utils import BACKENDS as BACKENDS\n",
        "flashinfer/utils.py": UTILS,
        "flashinfer/constants.py": CONSTANTS,
    }.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    found = surface(Package(read_release(root)))
    return {**found["flashinfer.utils"]["names"], "top.BACKENDS": found["flashinfer"]["names"]}


@pytest.fixture(scope="module")
def names(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _names(tmp_path_factory.mktemp("values"))


LITERALS = {
    "_cache_buf": {},
    "_cache_buf_retired": [],
    "BACKENDS": ("fa2", "fa3", "trtllm-gen"),
    "PAGE_SIZES": {1, 16, 32, 64},
    "NAMES": {"a", "b", "c"},
    "TABLE": {(64, 128): "small", (128, 256): "large"},
    "INT32_MAX": 2**31 - 1,
    "BELOW": 2**31 - 1 - 255,
    "ALIASED": 512,
    "NEGATIVE": -1,
    "FLAG": True,
    "SCALE": 0.125,
    "TEXT": "fi-compat",
    "CHAINED": 7,
    "OTHER": 7,
    "RUNTIME": {},
    "SIZES": (1, 2),
}

OPAQUE = {
    "LEVEL": "computed at import",
    "DTYPES": "computed at import",
    "SQUARES": "computed at import",
    "MERGED": "computed at import",
    "HUGE": "too large to keep",
    "SHIFTED": "computed at import",
    "INFINITE": "computed at import",
    "DIVIDED": "computed at import",
    "LOOPED": "bound by several statements",
    "UNHASHABLE": "computed at import",
    "CHOSEN": "computed at import",
    "SELFISH": "computed at import",
    "ROUND": "computed at import",
    "AND_ROUND": "computed at import",
    "EXPONENT": "computed at import",
    "WIDE": "too large to keep",
    "FIRST": "computed at import",
    "TWICE": "bound by several statements",
    "AVAILABLE": "bound by several statements",
    "GUARDED": "bound in an if, try or with",
    "REGISTRY": "changed at import after it is bound",
    "ITEMS": "changed at import after it is bound",
    "HANDED": "changed at import after it is bound",
    "NESTED": "changed at import after it is bound",
    "COUNT": "changed at import after it is bound",
    "DECORATED": "changed at import after it is bound",
}


@pytest.mark.parametrize("name", sorted(LITERALS))
def test_a_value_the_source_tells_is_recorded_as_its_literal(
    names: dict[str, Any], name: str
) -> None:
    record = names[name]
    assert record["kind"] == "value"
    assert record["defined_in"] == "flashinfer.utils"
    assert "opaque" not in record
    value = ast.literal_eval(record["literal"])
    assert value == LITERALS[name]
    assert type(value) is type(LITERALS[name])


@pytest.mark.parametrize("name", sorted(OPAQUE))
def test_a_value_the_source_cannot_tell_is_opaque_with_why(
    names: dict[str, Any], name: str
) -> None:
    record = names[name]
    assert record["kind"] == "value"
    assert "literal" not in record
    assert record["opaque"] == OPAQUE[name]


def test_a_reexported_value_carries_the_literal_of_its_definition(names: dict[str, Any]) -> None:
    assert names["top.BACKENDS"]["BACKENDS"] == {
        "kind": "value",
        "defined_in": "flashinfer.utils",
        "literal": "('fa2', 'fa3', 'trtllm-gen')",
    }


def test_a_deleted_name_and_imports_get_no_value(names: dict[str, Any]) -> None:
    assert "CYCLE_A" not in names
    assert "literal" not in names["os"]
    assert "opaque" not in names["os"]
    assert "literal" not in names["Dict"]
    assert "opaque" not in names["Dict"]


def test_a_set_is_spelled_the_same_under_every_hash_seed(tmp_path: Path) -> None:
    """Sets of strings iterate in an order that depends on PYTHONHASHSEED: the record must
    not."""
    script = (
        "import sys; sys.path.insert(0, '.');"
        "from fi_compat._recorder.values import spell;"
        "print(spell({'fa2', 'fa3', 'cudnn', 'trtllm-gen', 'auto'}))"
    )
    spelled = set()
    for seed in ("0", "1", "2", "3"):
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        spelled.add(done.stdout.strip())
    assert spelled == {"{'auto', 'cudnn', 'fa2', 'fa3', 'trtllm-gen'}"}


def _nested(depth: int) -> list[Any]:
    value: list[Any] = [1]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "value",
    [object(), float("nan"), float("inf"), 1j, ..., frozenset({1}), _nested(200), {1: object()}],
)
def test_what_is_not_a_literal_is_not_spelled(value: Any) -> None:
    assert spell(value) is None


def test_the_longest_literal_kept(tmp_path: Path) -> None:
    kept = "x" * (MOST_CHARACTERS - 2)
    assert spell(kept) == repr(kept)
