"""What each FlashInfer release was measured to do: its own Python run on the CPU.

The recorded releases (:mod:`fi_compat._records`) say what a release has and takes, read
off its source. These files say what it does, measured by running the release's own Python
with its compiled-module loaders and devices replaced by recorders; each is written by its
tool and read by one module:

``reach.json``
    Whether the split settings reach each attention wrapper's kernel plan, per family and
    backend (``tools/reach.py``); read by :mod:`fi_compat.attention._reach`.
``layers.json``
    What the public ``allreduce_fusion`` calls below itself on a TRT-LLM workspace, and
    with which arguments (``tools/layers.py``); read by :mod:`fi_compat.comm._unified`.
``sizes.json``
    Which call sizes one fused workspace serves, per backend (``tools/sizes.py``); read by
    :mod:`fi_compat.comm._call`.

Nothing here imports FlashInfer; a reader caches what it takes of its file.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Literal

__all__ = ["Measurement", "load"]

#: The measurements this package holds, by file stem.
Measurement = Literal["reach", "layers", "sizes"]


def load(measurement: Measurement) -> Any:
    """The parsed ``<measurement>.json`` shipped with fi-compat, read anew on each call."""
    text = resources.files(__name__).joinpath(f"{measurement}.json").read_text("utf-8")
    return json.loads(text)
