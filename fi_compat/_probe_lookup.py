"""Finding FlashInfer's symbols: the first home of a :mod:`fi_compat._surface` symbol.

Also reads a class member straight from the class namespaces, without running any of the
class's own code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from fi_compat._arguments import require_instance
from fi_compat._probe_guard import guarded_getattr, member
from fi_compat._probe_import import import_module
from fi_compat._signature import describe_error
from fi_compat._surface import COMM, FLASHINFER, Home, Symbol


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
