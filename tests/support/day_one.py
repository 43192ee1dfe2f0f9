"""Fresh interpreters on the day-one path: a cache of the test's own, a release set aside."""

from __future__ import annotations

import gzip
import json
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


def shipped_model(release: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The record and the surface fi-compat ships for ``release`` (only that release's
    part of the store decoded: a second or two, where every release's takes four)."""
    from importlib import resources

    from fi_compat._recorder.store import unpack, unpack_records

    data = resources.files("fi_compat._records").joinpath("surface.zip").read_bytes()
    only = [release]
    return unpack_records(data, only=only)[release], unpack(data, only=only)[release]
