"""Fresh interpreters on the day-one path: a cache of the test's own, a release set aside."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.fresh import fresh_python

__all__ = ["model_in", "run_python", "shipped_model"]


def run_python(argv: list[str], cache: Path, left_out: str | None) -> str:
    """The standard output of ``python ARGV`` with ``cache`` as fi-compat's cache and
    ``left_out`` set aside (``FI_COMPAT_UNRECORDED``; None: nothing), which must succeed
    (made once per input: :func:`tests.support.fresh.fresh_python`)."""
    done = fresh_python(argv, cache=cache, left_out=left_out, timeout=1800)
    assert done.returncode == 0, done.stderr
    return done.stdout


def model_in(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The record and the surface of the release modelled into ``folder``."""
    return (
        json.loads(gzip.decompress((folder / "record.json.gz").read_bytes())),
        json.loads(gzip.decompress((folder / "surface.json.gz").read_bytes())),
    )


#: Shipped models decoded ahead of their test (:func:`shipped_model`), each handed out once.
_DECODED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}


def shipped_model(
    release: str, together: Sequence[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The record and the surface fi-compat ships for ``release`` (only that release's
    part of the store decoded: a second or two, where every release's takes four).

    ``together``: releases the caller asks for next, decoded in the same pass and kept
    until asked for (reading every shard is most of what decoding one release costs: 16
    releases take about as long as the newest alone). Each is handed out once, so nothing
    is held longer than its test needs."""
    if release not in _DECODED:
        from importlib import resources

        from fi_compat._recorder.store import unpack, unpack_records

        data = resources.files("fi_compat._records").joinpath("surface.zip").read_bytes()
        only = sorted({release, *together} - set(_DECODED))
        records, surfaces = unpack_records(data, only=only), unpack(data, only=only)
        _DECODED.update({each: (records[each], surfaces[each]) for each in only})
    return _DECODED.pop(release)
