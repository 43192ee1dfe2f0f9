"""The upgrade guide's tables of rules and change kinds list every one, with its categories."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from fi_compat.upgrade import RULES

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "upgrade.md"


def _rows(name: str) -> dict[str, list[str]]:
    text = GUIDE.read_text(encoding="utf-8")
    block = text.split(f"<!-- {name}: start -->", 1)[1].split(f"<!-- {name}: end -->", 1)[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[re.sub(r"`", "", cells[0])] = cells[1:]
    return rows


def test_the_guide_lists_every_rule_with_its_categories() -> None:
    rows = _rows("scan-rules")
    assert set(rows) == set(RULES)
    for rule_id, rule in RULES.items():
        listed = [part.strip() for part in rows[rule_id][0].split(",")]
        assert listed == [category.value for category in rule.categories], rule_id


def test_the_guide_lists_every_change_kind() -> None:
    schema = json.loads(
        resources.files("fi_compat.upgrade").joinpath("diff.schema.json").read_text("utf-8")
    )
    kinds = schema["$defs"]["change"]["properties"]["kind"]["enum"]
    severities = schema["$defs"]["change"]["properties"]["severity"]["enum"]
    rows = _rows("diff-kinds")
    assert set(rows) == set(kinds)
    for kind, cells in rows.items():
        assert {part.strip() for part in cells[0].split(",")} <= set(severities), kind
