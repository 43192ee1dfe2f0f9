"""The probe's steps, one section each, read by :mod:`fi_compat.capabilities`.

- guarded steps: any failure but Ctrl-C becomes text, never a crash (FlashInfer may throw
  anything at the probe, ``SystemExit`` included, and an exception's ``__str__`` may raise);
- the guarded import of ``flashinfer`` and ``flashinfer.comm``: whether the package is
  installed, whether it imports, which version it reports (or its distribution metadata
  says), and the directory it lives in;
- finding FlashInfer's symbols at the first home of a :mod:`fi_compat._surface` symbol, and
  reading a class member straight from the class namespaces without running its code;
- the answer tables: every keyword ``unknown`` or ``unsupported``, checked, frozen;
- whether ``TorchDistBackend.bcast`` maps a group-local root to a global rank, read from the
  syntax tree of its source as the recorder reads released sources.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from packaging.version import Version

from fi_compat._arguments import require_instance
from fi_compat._forwarding import calls_named
from fi_compat._signature import Status, Support, describe_error, exact_text, parse_def
from fi_compat._surface import COMM, DISTRIBUTIONS, FLASHINFER, TORCH_DIST_BACKEND, Home, Symbol

# ---------------------------------------------------------------------- guard
# Guarded steps: any failure but Ctrl-C becomes text, never a crash.


_T = TypeVar("_T")


def attempt(func: Callable[..., _T], *args: Any) -> tuple[_T | None, str | None]:
    """``(func(*args), None)``, or ``(None, description)`` for anything but Ctrl-C."""
    try:
        return func(*args), None
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # FlashInfer may throw anything at the probe
        return None, describe_error(error)


def guarded_getattr(obj: object, name: str) -> tuple[Any, str | None]:
    """``(value, None)``; ``(None, None)`` when absent; ``(None, description)`` when reading
    the attribute raised something other than ``AttributeError`` (a lazy ``__getattr__``
    raising ``ModuleNotFoundError``, a property raising ``SystemExit``, ...)."""
    try:
        return getattr(obj, name), None
    except KeyboardInterrupt:
        raise
    except AttributeError:
        return None, None
    except BaseException as error:
        return None, describe_error(error)


def member(obj: object, name: str, test: Callable[[Any], bool]) -> tuple[Any, bool, str | None]:
    """``(value, test(value), None)`` for ``obj.<name>``; ``(None, False, description)``
    when reading it or testing it raised; ``(None, False, None)`` when it is absent."""
    value, error = guarded_getattr(obj, name)
    if error is not None:
        return None, False, error
    passed, error = attempt(test, value)
    return value, bool(passed), error


# ---------------------------------------------------------------------- import
# The guarded import of flashinfer and what it says of itself.


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


# ---------------------------------------------------------------------- lookup
# Finding FlashInfer's symbols at their first home.


def _absent(module_name: str, error: BaseException) -> bool:
    """``error`` says that ``module_name`` itself does not exist."""
    name, failed = guarded_getattr(error, "name")
    return isinstance(error, ModuleNotFoundError) and failed is None and name == module_name


def find(
    symbol: Symbol, test: Callable[[Any], bool], imported: Mapping[str, Any]
) -> tuple[Any, Home | None, list[str]]:
    """``(value, home, failures)``: ``symbol`` at the first of its homes where it is present
    and passes ``test``; ``(None, None, failures)`` when no home has it.

    Modules in ``imported`` are used as they are; any other is imported, and one that
    does not exist is skipped. ``failures`` describes every import or attribute read
    that raised on the way.
    """
    failures: list[str] = []
    for home in symbol.homes:
        module = imported.get(home.module)
        if module is None:
            module = sys.modules.get(home.module)
        if module is None:
            module, import_error = import_module(home.module)
            if import_error is not None and not _absent(home.module, import_error):
                failures.append(f"import {home.module} failed: {describe_error(import_error)}")
        if module is None:
            continue
        value, passed, error = member(module, home.name, test)
        if error is not None:
            failures.append(f"reading {home.dotted} raised {error}")
        elif passed:
            return value, home, failures
    return None, None, failures


def nowhere(symbol: Symbol) -> str:
    """``"flashinfer.comm has no <name>"``: where ``symbol`` was looked for in vain."""
    modules = tuple(dict.fromkeys(home.module for home in symbol.homes))
    names = " or ".join(symbol.names)
    if len(modules) == 1:
        return f"{modules[0]} has no {names}"
    return f"{COMM if all(m.startswith(COMM) for m in modules) else FLASHINFER} has no {names}"


def _present(value: Any) -> bool:
    return value is not None


_MRO = type.__dict__["__mro__"]
_NAMESPACE = type.__dict__["__dict__"]


def static_member(cls: type, name: str) -> Any:
    """``name`` as defined on ``cls`` or a base, read from the class namespaces directly.

    Unlike ``inspect.getattr_static`` this never goes through ``cls.__dict__``, which a
    metaclass ``__getattribute__`` can intercept; None when no class defines ``name``.
    """
    for klass in _MRO.__get__(cls):
        namespace = _NAMESPACE.__get__(klass)
        if name in namespace:
            found = namespace[name]
            if isinstance(found, staticmethod | classmethod):
                found = found.__func__
            return found
    return None


def locate(symbol: Symbol) -> Any:
    """The installed FlashInfer's ``symbol`` from the first of its homes that has it.

    None when no home has it, or looking raised (every step is guarded, as in the probe).
    For use when a workspace is created or a call is bound, never per call.

    Raises
    ------
    InvalidArgumentError
        ``symbol`` is not a :class:`fi_compat._surface.Symbol`.
    """
    require_instance(
        "symbol", symbol, Symbol, "a Symbol of fi_compat._surface", fix="pass e.g. LEGACY_FACTORY"
    )
    value, home, _ = find(symbol, _present, {})
    return value if home is not None else None


# ---------------------------------------------------------------------- answers
# The answer tables.


def unknown(keywords: tuple[str, ...], reason: str) -> dict[str, Support]:
    return dict.fromkeys(keywords, Support(Status.UNKNOWN, reason))


def all_unknown(names: Mapping[str, tuple[str, ...]], reason: str) -> dict[str, dict[str, Support]]:
    return {owner: unknown(keywords, reason) for owner, keywords in names.items()}


def checked(support: Support) -> Support:
    """The answer as plain data: a real :class:`Status` and an exact ``str`` reason."""
    reason = exact_text(support.reason)
    if not isinstance(support.status, Status) or reason is None:
        raise TypeError(f"malformed answer from the signature reader: {support!r}")
    return Support(support.status, reason)


def unsupported(keywords: tuple[str, ...], reason: str) -> dict[str, Support]:
    return dict.fromkeys(keywords, Support(Status.UNSUPPORTED, reason))


def freeze(nested: Mapping[str, Mapping[str, Support]]) -> Mapping[str, Mapping[str, Support]]:
    return MappingProxyType({key: MappingProxyType(dict(value)) for key, value in nested.items()})


# ---------------------------------------------------------------------- bcast
# Whether TorchDistBackend.bcast maps a group-local root.


def _calls_get_global_rank(func: Any) -> bool:
    """Does the body of ``func`` call ``get_global_rank`` (a name or an attribute)?

    Read from the syntax tree (:func:`fi_compat._forwarding.calls_named`), so a mention in
    a comment, a string or a docstring does not count. Raises when the source cannot be
    read or parsed.
    """
    return calls_named(parse_def(func), "get_global_rank")


def probe_bcast_root(cls: type) -> Support:
    """Does ``cls.bcast(data, root)`` translate a group-local root into a global rank?"""
    bcast, error = attempt(getattr, cls, "bcast")
    calls = None
    if error is None:
        calls, error = attempt(_calls_get_global_rank, bcast)
    if error is not None or calls is None:
        return Support(Status.UNKNOWN, f"cannot read {TORCH_DIST_BACKEND.key}.bcast: {error}")
    if calls:
        return Support(Status.SUPPORTED, "bcast maps a group-local root with get_global_rank")
    return Support(
        Status.UNSUPPORTED,
        "bcast passes root to torch.distributed as a global rank; "
        "with a group whose ranks are not 0..n-1 it broadcasts from the wrong process",
    )
