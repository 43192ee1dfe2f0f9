"""Records as the package ships them: compact JSON, gzip-compressed, one file per release.

``dump_record`` is the one canonical text of a record (sorted keys, no whitespace, final
newline): the same record always gives the same text, and the shipped file is that text
compressed (``<release>.json.gz``, 30 times smaller than indented JSON). Read one with
``gzip -dc fi_compat/_records/0.6.5.json.gz | python -m json.tool``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["SUFFIX", "dump_record", "encode_record", "write_record"]

#: The suffix of a shipped record file.
SUFFIX = ".json.gz"


def dump_record(record: Mapping[str, Any]) -> str:
    """Serialize a record deterministically (sorted keys, compact, final newline)."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"


def encode_record(record: Mapping[str, Any]) -> bytes:
    """The bytes of a shipped record file: :func:`dump_record` gzip-compressed, no timestamp."""
    return gzip.compress(dump_record(record).encode("utf-8"), compresslevel=9, mtime=0)


def write_record(record: Mapping[str, Any], directory: Path) -> Path:
    """Write ``<directory>/<release>.json.gz`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{record['release']}{SUFFIX}"
    target.write_bytes(encode_record(record))
    return target
