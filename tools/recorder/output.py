"""Records as JSON files: one deterministic text per record, so re-recording diffs cleanly."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["dump_record", "write_record"]


def dump_record(record: Mapping[str, Any]) -> str:
    """Serialize a record deterministically (sorted keys, two-space indent, final newline)."""
    return json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_record(record: Mapping[str, Any], directory: Path) -> Path:
    """Write ``<directory>/<release>.json`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{record['release']}.json"
    target.write_text(dump_record(record), encoding="utf-8", newline="\n")
    return target
