"""The guarded import of ``flashinfer`` and ``flashinfer.comm``, and what it says of itself.

Whether the package is installed, whether it imports, which version it reports (or its
distribution metadata says), and the directory it lives in.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from typing import Any

from packaging.version import Version

from fi_compat._probe_guard import attempt, guarded_getattr
from fi_compat._signature import describe_error, exact_text
from fi_compat._surface import DISTRIBUTIONS, FLASHINFER

_SOURCE_BUILD_VERSION = Version("0.0.0")


def import_module(name: str) -> tuple[Any, BaseException | None]:
    try:
        module: Any = importlib.import_module(name)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit too: any failure to import is a finding
        return None, error
    if module is None:  # FlashInfer may put anything in sys.modules, None included
        return None, ImportError(f"import {name} gave None")
    return module, None


def import_guarded(name: str) -> tuple[Any, str | None]:
    module, error = import_module(name)
    return module, None if error is None else describe_error(error)


def parse_version(raw: str | None) -> tuple[Version | None, bool]:
    if raw is None:
        return None, False
    # InvalidVersion, and ValueError for a release number too long to convert to int.
    parsed, error = attempt(Version, raw)
    if parsed is None or error is not None:
        return None, True
    return parsed, parsed.release == _SOURCE_BUILD_VERSION.release or parsed.local is not None


def distribution_version() -> str | None:
    for dist in DISTRIBUTIONS:
        version, _ = attempt(importlib.metadata.version, dist)  # not found, or broken metadata
        if exact_text(version) is not None:
            return exact_text(version)
    return None


def is_installed() -> bool:
    try:
        if FLASHINFER in sys.modules:
            # None there is the documented way to block an import: treat it as absent.
            return sys.modules[FLASHINFER] is not None
        return importlib.util.find_spec(FLASHINFER) is not None
    except KeyboardInterrupt:
        raise
    except BaseException:  # a broken finder or parent package: treat as absent
        return False


def _first(items: Any) -> Any:
    return next(iter(items), None)  # never list(): __path__ may be endless


def location_of(module: Any) -> str | None:
    paths, error = guarded_getattr(module, "__path__")
    if paths is not None and error is None:
        entry, _ = attempt(_first, paths)
        path, _ = attempt(os.fspath, entry) if entry is not None else (None, None)
        if exact_text(path):
            return exact_text(path)
    file, _ = guarded_getattr(module, "__file__")
    return exact_text(file)
