"""``flashinfer.comm``'s names besides its calls: the pattern codes, the rest handed through.

:class:`AllReduceFusionPattern` is fi-compat's own copy of FlashInfer's fusion pattern codes.
FlashInfer keeps these as plain ``int`` class attributes (not an ``enum``), so a value
taken from here is interchangeable with one taken from ``flashinfer.comm``. Every recorded
release that has a member gives it the same value (a test checks that against the
recorded signatures). Whether the *installed* release can run a pattern is checked when the
pattern is used, not here.

Every other public name of ``flashinfer.comm`` (and of ``flashinfer.comm.mnnvl``) is looked
up in the installed module, imported through the probe, on each access and returned as it
is. The allreduce-fusion guide, ``docs/guide/comm.md`` ("Every other name is handed
through"), says what a missing name raises.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from fi_compat._signature import describe_error
from fi_compat._surface import NAMED_MODULES
from fi_compat.capabilities import get_capabilities
from fi_compat.errors import NameUnavailableError, explain

__all__ = ["PATTERN_NAMES", "AllReduceFusionPattern", "hand_through", "unavailable"]

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


def hand_through(module: str, name: str, owner: str) -> Any:
    """``<module>.<name>`` of the installed release, for ``owner``'s module ``__getattr__``.

    Parameters
    ----------
    module
        The FlashInfer module (``flashinfer.comm`` or one of its submodules).
    name
        The attribute asked for.
    owner
        The fi-compat module asked (for the message of a private name).

    Raises
    ------
    NameUnavailableError
        The name is private, or the installed release lacks it or its module.
    """
    if name.startswith("_"):
        # Dunder and private lookups (pickle, inspect, pytest) never import FlashInfer.
        raise NameUnavailableError(f"module {owner!r} has no attribute {name!r}", name=name)
    installed = _module(module, name)
    value = getattr(installed, name, _ABSENT)
    if value is _ABSENT:
        raise unavailable(module, name, None)
    return value


def _module(module: str, name: str) -> Any:
    caps = get_capabilities()
    if not caps.comm.available:
        raise unavailable(module, name, caps.comm.error or "flashinfer.comm is not importable")
    loaded = sys.modules.get(module)
    if loaded is not None:
        return loaded
    try:
        return importlib.import_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # the module is missing or raises on import: a finding
        raise unavailable(module, name, describe_error(error)) from error


def unavailable(module: str, name: str, why: str | None) -> NameUnavailableError:
    """The error for ``<module>.<name>`` missing from the installed release.

    ``why`` says why the module itself could not be read, or None when it was read and
    lacks the name. The message names the first recorded release that has the name.
    """
    from fi_compat._records import introduced_in  # the recorded data, on failure only

    version = get_capabilities().flashinfer.version
    first = introduced_in(module, name) if module in NAMED_MODULES else None
    found = f"flashinfer {version} without it" if why is None else f"{module} unusable ({why})"
    if first is not None:
        fix = f"install flashinfer-python >= {first}, or do without {name}"
    elif module in NAMED_MODULES:
        fix = f"no recorded FlashInfer release has {module}.{name}; check the name"
    else:
        fix = f"install a flashinfer-python release whose {module} has {name}"
    return NameUnavailableError(
        explain(f"{module}.{name}", found, changed_in=first, fix=fix),
        name=name,
        introduced_in=first,
    )
