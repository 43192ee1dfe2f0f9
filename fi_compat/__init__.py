"""fi-compat: one stable, probed facade over FlashInfer's comm and attention APIs.

Importing this package imports neither torch nor FlashInfer; the public names below are
loaded on first use.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from fi_compat._lazy import attribute
from fi_compat._version import __version__

# typing is not imported at run time: every annotation here is a string, and the names
# below exist for type checkers only (mypy treats a TYPE_CHECKING constant specially).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from fi_compat.capabilities import Capabilities, Status, Support, get_capabilities
    from fi_compat.errors import (
        CapabilityMissingError,
        DeterminismUnavailableError,
        FiCompatError,
        FlashInferUnavailableError,
        FusionForbiddenError,
        GroupNotSupportedError,
        InvalidArgumentError,
        WorkspaceDestroyedError,
        WorkspaceMismatchError,
    )

__all__ = [
    "Capabilities",
    "CapabilityMissingError",
    "DeterminismUnavailableError",
    "FiCompatError",
    "FlashInferUnavailableError",
    "FusionForbiddenError",
    "GroupNotSupportedError",
    "InvalidArgumentError",
    "Status",
    "Support",
    "WorkspaceDestroyedError",
    "WorkspaceMismatchError",
    "__version__",
    "get_capabilities",
]

_LAZY: dict[str, str] = {
    "Capabilities": "fi_compat.capabilities",
    "Status": "fi_compat.capabilities",
    "Support": "fi_compat.capabilities",
    "get_capabilities": "fi_compat.capabilities",
    "CapabilityMissingError": "fi_compat.errors",
    "DeterminismUnavailableError": "fi_compat.errors",
    "FiCompatError": "fi_compat.errors",
    "FlashInferUnavailableError": "fi_compat.errors",
    "FusionForbiddenError": "fi_compat.errors",
    "GroupNotSupportedError": "fi_compat.errors",
    "InvalidArgumentError": "fi_compat.errors",
    "WorkspaceDestroyedError": "fi_compat.errors",
    "WorkspaceMismatchError": "fi_compat.errors",
}


def __getattr__(name: str) -> Any:
    return attribute(globals(), _LAZY, __name__, name)


def __dir__() -> list[str]:
    return list(__all__)
