"""The FlashInfer names the reach probe looks up, handed over by its runner as JSON.

FlashInfer's names are spelled in ``fi_compat._surface`` alone, and the probe imports no
fi-compat: its runner puts :func:`fi_compat._measured.reach.probe_names` in the environment
variable ``FI_COMPAT_REACH_NAMES``, read here once, on import (empty when it is unset).
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = [
    "DECODE_FAMILY",
    "FAMILIES",
    "GRAPH_DECODE_FAMILY",
    "NAMES",
    "PAGED_FAMILY",
    "RAGGED_FAMILY",
]

#: The decode module, its fast plan's name, the families and ``plan``'s implementation.
NAMES: dict[str, Any] = json.loads(os.environ.get("FI_COMPAT_REACH_NAMES", "{}"))

#: The families to measure, as exported from top-level ``flashinfer``
#: (``fi_compat._surface.ATTENTION_FAMILIES``, in its order: paged prefill, ragged prefill,
#: decode, CUDA-graph decode, then the others).
FAMILIES: tuple[str, ...] = tuple(NAMES.get("families", ()))
PAGED_FAMILY, RAGGED_FAMILY, DECODE_FAMILY, GRAPH_DECODE_FAMILY = (*FAMILIES, "", "", "", "")[:4]
