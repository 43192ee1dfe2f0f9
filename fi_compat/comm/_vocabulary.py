"""The values the installed release takes that fi-compat does not know: passed as given.

fi-compat adapts the backends, finalize backends and pattern codes it knows; a value a newer
release adds goes to that release unchanged (``create_workspace`` says so in
``workspace.decisions``, the drop-in once per pattern). This module lists, for the report,
what the installed release's own ``Literal`` annotations and ``AllReduceFusionPattern``
hold beyond what fi-compat knows, so that an engine sees in advance which values it will
run unadapted.
"""

from __future__ import annotations

from fi_compat._literal import literal_choices
from fi_compat._probe import locate
from fi_compat._surface import UNIFIED_FACTORY, UNIFIED_FUSION
from fi_compat.capabilities import Capabilities
from fi_compat.comm._creation import BACKENDS
from fi_compat.comm._dropin import FINALIZE_BACKENDS
from fi_compat.comm._factory import pattern_codes
from fi_compat.comm._names import PATTERN_NAMES

__all__ = ["passed_through"]


def passed_through(caps: Capabilities) -> dict[str, list[str]]:
    """Per parameter (``backend``, ``moe_finalize_backend``, ``pattern``), the values the
    installed release takes that fi-compat passes as given; empty lists where there are none
    (or the release says nothing it can read)."""
    found: dict[str, list[str]] = {"backend": [], "moe_finalize_backend": [], "pattern": []}
    if not caps.comm.available or not caps.comm.unified_api:
        return found
    for key, symbol, parameter, known in (
        ("backend", UNIFIED_FACTORY, "backend", BACKENDS),
        ("moe_finalize_backend", UNIFIED_FUSION, "moe_finalize_backend", FINALIZE_BACKENDS),
    ):
        function = locate(symbol)
        choices = literal_choices(function, parameter) if callable(function) else None
        found[key] = [str(value) for value in choices or () if value not in known]
    found["pattern"] = [
        f"{name}={value}" for value, name in pattern_codes().items() if value not in PATTERN_NAMES
    ]
    return found
