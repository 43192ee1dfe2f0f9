"""The upgrade guide's table of kinds is :data:`fi_compat.upgrade.RULES`, and the JSON
schemas name exactly the kinds each command gives."""

from __future__ import annotations

import json
from importlib import resources

from fi_compat.upgrade import RULES, Category
from tests.support.kinds_table import GUIDE, render, table_in


def test_the_guide_lists_every_kind_as_rules_says() -> None:
    assert table_in(GUIDE.read_text(encoding="utf-8")) == render(), (
        "docs/guide/upgrade.md is stale: run python -m tests.support.kinds_table --write"
    )


def _schema(name: str) -> dict[str, object]:
    text = resources.files("fi_compat.upgrade").joinpath(name).read_text("utf-8")
    found: dict[str, object] = json.loads(text)
    return found


def test_the_schemas_name_the_kinds_each_command_gives() -> None:
    diff = _schema("diff.schema.json")["$defs"]["change"]["properties"]  # type: ignore[index]
    scan = _schema("scan.schema.json")["$defs"]["finding"]["properties"]  # type: ignore[index]
    assert diff["kind"]["enum"] == [k for k, r in RULES.items() if "diff" in r.commands]
    assert scan["rule"]["enum"] == [k for k, r in RULES.items() if "scan" in r.commands]
    diff_categories = {c for r in RULES.values() if "diff" in r.commands for c in r.categories}
    assert set(diff["category"]["enum"]) == {c.value for c in diff_categories}
    assert set(scan["category"]["enum"]) == {c.value for c in Category}
