"""``flashinfer.comm``'s names besides its calls: the pattern codes, the rest handed through.

:class:`AllReduceFusionPattern` is fi-compat's own copy of FlashInfer's fusion pattern codes.
FlashInfer keeps these as plain ``int`` class attributes (not an ``enum``), so a value
taken from here is interchangeable with one taken from ``flashinfer.comm``. Every recorded
release that has a member gives it the same value (a test checks that against the
recorded signatures). Whether the *installed* release can run a pattern is checked when the
pattern is used, not here.

Every other public name of ``flashinfer.comm`` (and of its submodules) is looked up in the
installed module, imported through the probe, on each access and returned as it is; a
submodule of the installed one is fi-compat's module of the same name
(:mod:`fi_compat.comm._submodules`). The allreduce-fusion guide, ``docs/guide/comm.md``
("Every other name is handed through"), says what a missing name raises.
"""

from __future__ import annotations

import importlib
import importlib.util
import keyword
import sys
from dataclasses import dataclass
from typing import Any

from fi_compat._signature import describe_error, exact_text
from fi_compat._surface import COMM, FLASHINFER
from fi_compat.capabilities import get_capabilities
from fi_compat.errors import (
    FlashInferUnavailableError,
    ModuleUnavailableError,
    NameUnavailableError,
    explain,
)

__all__ = [
    "PATTERN_NAMES",
    "AllReduceFusionPattern",
    "Installed",
    "hand_through",
    "import_installed",
    "installed_module",
    "module_unavailable",
    "public_part",
    "ships",
    "unavailable",
]

_ABSENT = object()


class AllReduceFusionPattern:
    """Fusion pattern codes of ``allreduce_fusion`` (FlashInfer 0.7.2.post1 names and values).

    ``kARResidualRMSNorm`` (all-reduce, residual add, RMSNorm) exists in every release with
    allreduce fusion (0.2.9+); the MoE patterns arrived in 0.6.8 and the dynamic and
    per-token-group FP8 patterns later.

    .. versionadded:: 0.2.0
    """

    kAllReduce = 0
    kARResidualRMSNorm = 1
    kARResidualRMSNormFP8Quant = 2
    kARResidualRMSNormFP4Quant = 3
    kARResidualRMSNormOutFP8Quant = 4
    kARResidualRMSNormOutFP4Quant = 5
    kMoEReductionARResidualRMSNorm = 6
    kMoEFinalizeARResidualRMSNorm = 7
    kARResidualRMSNormPerTokenGroupFP8PackedQuant = 8
    kARResidualRMSNormOutPerTokenGroupFP8PackedQuant = 9
    kARResidualRMSNormDynamicFP8Quant = 10
    kARResidualRMSNormOutDynamicFP8Quant = 11
    kMoEFinalizeARResidualRMSNormFP8Quant = 12


#: Member name -> value, for messages and checks.
PATTERN_NAMES: dict[int, str] = {
    value: name
    for name, value in vars(AllReduceFusionPattern).items()
    if name.startswith("k") and isinstance(value, int)
}


def public_part(name: str) -> bool:
    """``name`` can be one part of a public module's dotted name: an identifier, not a
    keyword, not starting with ``_``."""
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")


@dataclass(frozen=True)
class Installed:
    """What importing one FlashInfer module through the probe gave.

    Attributes
    ----------
    module
        The module, or None when it could not be imported.
    failed
        The module whose import failed (``flashinfer.comm`` itself, or the one asked for).
    why
        ``"ExceptionType: message"`` of that failure; None on success.
    missing
        The installed release has no such module (as opposed to one that raises).
    error
        The exception the import raised, for ``raise ... from``.
    """

    module: Any
    failed: str | None = None
    why: str | None = None
    missing: bool = False
    error: BaseException | None = None


def import_installed(module: str) -> Installed:
    """``module`` (``flashinfer.comm`` or one of its submodules) of the installed release.

    ``flashinfer.comm`` is imported through the probe, once; the submodule is taken from
    ``sys.modules`` or imported on each call, so a refreshed probe or another fake release
    is seen at once. Never raises but ``KeyboardInterrupt``: a module that is missing or
    raises on import is a finding.
    """
    caps = get_capabilities()
    if not caps.comm.available:
        return Installed(None, COMM, caps.comm.error or f"{COMM} is not importable")
    loaded = sys.modules.get(module)
    if loaded is not None:
        return Installed(loaded)
    try:
        return Installed(importlib.import_module(module))
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # the module is missing or raises on import: a finding
        return Installed(None, module, describe_error(error), _missing(error, module), error)


def _missing(error: BaseException, module: str) -> bool:
    """``error`` says that ``module`` (or a package above it, below ``flashinfer.comm``)
    does not exist, rather than that something it imports does not."""
    if not isinstance(error, ModuleNotFoundError):
        return False
    absent = exact_text(error.name)
    return (
        absent is not None
        and absent.startswith(f"{COMM}.")
        and (module == absent or module.startswith(f"{absent}."))
    )


def hand_through(module: str, name: str, owner: str) -> Any:
    """``<module>.<name>`` of the installed release, for ``owner``'s module ``__getattr__``.

    A submodule of the installed module is ``owner``'s submodule of that name
    (``fi_compat.comm.mapping`` for ``flashinfer.comm.mapping``), imported if need be.

    Parameters
    ----------
    module
        The FlashInfer module (``flashinfer.comm`` or one of its submodules).
    name
        The attribute asked for.
    owner
        The fi-compat module asked (for the message of a private name, and the home of
        its submodules).

    Raises
    ------
    NameUnavailableError
        The name is private, or the installed release lacks it or its module (or has the
        submodule but cannot import it).
    """
    if name.startswith("_"):
        # Dunder and private lookups (pickle, inspect, pytest) never import FlashInfer.
        raise NameUnavailableError(f"module {owner!r} has no attribute {name!r}", name=name)
    installed = installed_module(module, name)
    value = getattr(installed, name, _ABSENT)
    if public_part(name) and _is_submodule(value, f"{module}.{name}"):
        return _submodule(owner, name)
    if value is _ABSENT:
        raise unavailable(module, name, None)
    return value


def _is_submodule(value: Any, dotted: str) -> bool:
    """``value``, an attribute of ``dotted``'s parent (``_ABSENT`` when it has none), is its
    submodule ``dotted``, or the parent has not bound that submodule yet."""
    if value is not _ABSENT:
        return sys.modules.get(dotted, _ABSENT) is value
    return ships(dotted) is True


def ships(module: str) -> bool | None:
    """Whether the installed release has ``module`` (a submodule of ``flashinfer.comm``),
    found without importing it: None when that cannot be told (``flashinfer.comm`` or a
    package above ``module`` does not import, or a finder raises)."""
    if not get_capabilities().comm.available:
        return None
    if sys.modules.get(module) is not None:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # a parent that is no package, or raises on import
        return False if _missing(error, module) else None


def _submodule(owner: str, name: str) -> Any:
    """fi-compat's module ``<owner>.<name>``; its import error as the ``AttributeError`` an
    attribute lookup raises."""
    try:
        return importlib.import_module(f"{owner}.{name}")
    except FlashInferUnavailableError as error:
        first = error.introduced_in if isinstance(error, ModuleUnavailableError) else None
        raise NameUnavailableError(str(error), name=name, introduced_in=first) from error


def installed_module(module: str, name: str) -> Any:
    """``module`` of the installed release, for looking up ``name`` in it.

    Raises
    ------
    NameUnavailableError
        The module is missing from the installed release or cannot be imported.
    """
    found = import_installed(module)
    if found.module is None:
        raise unavailable(module, name, found.why, missing=found.missing) from found.error
    return found.module


def _version() -> str:
    version = get_capabilities().flashinfer.version
    return "of unknown version" if version is None else version


def unavailable(
    module: str, name: str, why: str | None, *, missing: bool = False
) -> NameUnavailableError:
    """The error for ``<module>.<name>`` missing from the installed release.

    ``why`` says why the module itself could not be read, or None when it was read and
    lacks the name; ``missing`` says that the installed release has no such module. The
    message names the first recorded release whose ``module`` has the name (or, for a
    submodule, that ships it), and where the module is missing, the first that ships it.
    """
    from fi_compat._records import introduced_in, module_introduced_in  # on failure only

    recorded = module.split(".")[0] == FLASHINFER and bool(name)
    first = introduced_in(module, name) if recorded else None
    if first is None and recorded and public_part(name):
        first = module_introduced_in(f"{module}.{name}")  # a submodule not bound (or absent)
    if why is None:
        found = f"flashinfer {_version()} without it"
    elif missing:
        shipped = module_introduced_in(module)
        since = f"first in {shipped}" if shipped else "in no recorded release"
        found = f"flashinfer {_version()} without {module} ({since})"
    else:
        found = f"{module} unusable ({why})"
    if first is not None:
        fix = f"install flashinfer-python >= {first}, or do without {name}"
    else:
        fix = f"no recorded FlashInfer release has {module}.{name}; check the name"
    return NameUnavailableError(
        explain(f"{module}.{name}", found, changed_in=first, fix=fix),
        name=name,
        introduced_in=first,
    )


def module_unavailable(module: str, owner: str, installed: Installed) -> FlashInferUnavailableError:
    """The error for ``import <owner>`` (``fi_compat.comm.mapping``) when ``installed``,
    the import of FlashInfer's ``module`` (``flashinfer.comm.mapping``), failed.

    A module the installed release lacks gives :class:`ModuleUnavailableError` (a
    ``ModuleNotFoundError``) naming the first recorded release that ships it; one that is
    there but raises on import (or whose ``flashinfer.comm`` does) gives
    :class:`FlashInferUnavailableError` saying why.
    """
    from fi_compat._records import module_introduced_in  # on failure only

    expected = f"{module} (for {owner})"
    if installed.missing:
        first = module_introduced_in(module)
        if first is not None:
            fix = f"install flashinfer-python >= {first}, or do without {owner}"
        else:
            fix = f"no recorded FlashInfer release has {module}; check the name"
        message = explain(
            expected, f"flashinfer {_version()} without it", changed_in=first, fix=fix
        )
        return ModuleUnavailableError(message, name=owner, introduced_in=first)
    failed = installed.failed or module
    message = explain(
        expected,
        f"{failed} unusable ({installed.why})",
        fix=f"make {failed} importable here (see the error above), or do without {owner}",
    )
    return FlashInferUnavailableError(message, name=owner)
