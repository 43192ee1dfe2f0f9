"""What each FlashInfer release was measured to do: its own Python run on the CPU.

The recorded releases (:mod:`fi_compat._records`) say what a release has and takes, read
off its source. These files say what it does, measured by running the release's own Python
with its compiled-module loaders and devices replaced by recorders; each is made by its
probe and classification here and read by one module:

``reach.json``
    Whether the split settings reach each attention wrapper's kernel plan, per family and
    backend (:mod:`fi_compat._measured.reach`); read by :mod:`fi_compat.attention._reach`.
``layers.json``
    What the public ``allreduce_fusion`` calls below itself on a TRT-LLM workspace, and
    with which arguments (:mod:`fi_compat._measured.layers`); read by
    :mod:`fi_compat.comm._layers`.
``sizes.json``
    Which call sizes one fused workspace serves, per backend
    (:mod:`fi_compat._measured.sizes`); read by :mod:`fi_compat.comm._sizes`.

The maintainers' ``tools/`` measure every release from the release cache into the shipped
files. A release fi-compat shipped nothing for (or one ``FI_COMPAT_UNRECORDED`` sets aside)
is measured on the user's machine when it is the installed one, the same way, and cached
(:mod:`fi_compat._measured.installed`): :func:`releases` is what every reader reads.

Nothing here imports FlashInfer; a reader caches what it takes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from fi_compat import _local
from fi_compat._measured.installed import Measurement, Releases, why_unmeasured

__all__ = ["Measurement", "load", "releases", "why_unmeasured"]


def load(measurement: Measurement) -> Any:
    """The parsed ``<measurement>.json`` shipped with fi-compat, read anew on each call."""
    text = resources.files(__name__).joinpath(f"{measurement}.json").read_text("utf-8")
    return json.loads(text)


def releases(measurement: Measurement) -> Mapping[str, Any]:
    """Release -> entry of ``measurement``: the shipped file's ``releases`` without the ones
    ``FI_COMPAT_UNRECORDED`` sets aside, and the installed release's entry measured on this
    machine when it is not among them (cached; measured on first use unless
    ``FI_COMPAT_AUTO_MEASURE=0``). Built anew on each call: a reader keeps what it takes."""
    shipped: Mapping[str, Any] = load(measurement)["releases"]
    kept = {release: entry for release, entry in shipped.items() if not _local.is_left_out(release)}
    return Releases(measurement, kept)
