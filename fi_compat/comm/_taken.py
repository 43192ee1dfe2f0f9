"""Which arguments of the drop-in ``allreduce_fusion`` the installed release takes.

The drop-in keeps FlashInfer 0.7.2.post1's signature on every release; an argument the
installed release has no counterpart for is refused (``CapabilityMissingError``) unless it
holds its default. This module answers, per argument and without calling anything, what
that call would do, so that ``fi-compat report --require dropin:allreduce_fusion.<name>``
and the JSON report can say it in advance. Its answers follow the same tables as the call
(:func:`fi_compat.comm._unified.call_unified`, :func:`fi_compat.comm._legacy.call_legacy`).
"""

from __future__ import annotations

from collections.abc import Mapping

from fi_compat._signature import Status, Support
from fi_compat._surface import LEGACY_FUSION, UNIFIED_FUSION
from fi_compat.capabilities import Capabilities
from fi_compat.comm._dropin import DEFAULTS
from fi_compat.comm._factory import dropin_feature
from fi_compat.comm._legacy import MAPPED, WHERE_TAKEN

#: The drop-in ``allreduce_fusion``'s arguments after ``pattern``: FlashInfer 0.7.2.post1's.
DROPIN_ARGUMENTS: tuple[str, ...] = tuple(DEFAULTS)


def _unified(caps: Capabilities, name: str) -> Support:
    shape = caps.comm.shapes.get(UNIFIED_FUSION.key)
    if shape is None:
        return Support(Status.UNKNOWN, f"{UNIFIED_FUSION.dotted} was not read")
    if shape.keywords is not None and name in shape.keywords:
        return Support(Status.SUPPORTED, f"passed to {UNIFIED_FUSION.dotted}")
    if name == "trigger_completion_at_end":
        return Support(
            Status.SUPPORTED,
            f"{UNIFIED_FUSION.dotted} lacks it; False completes at the end (same result)",
        )
    answer = shape.support(name)
    if answer.status is Status.SUPPORTED:  # reached through **kwargs: the call passes names only
        return Support(Status.UNKNOWN, f"{answer.reason}, which the drop-in does not follow")
    return answer


def _legacy(caps: Capabilities, name: str) -> Support:
    if name not in MAPPED:
        return Support(
            Status.UNSUPPORTED,
            f"the legacy {LEGACY_FUSION.dotted} has no counterpart for it",
        )
    if name not in WHERE_TAKEN:
        return Support(Status.SUPPORTED, f"mapped to {LEGACY_FUSION.dotted}")
    shape = caps.comm.shapes.get(LEGACY_FUSION.key)
    if shape is None or shape.keywords is None:
        return Support(Status.UNKNOWN, f"{LEGACY_FUSION.dotted} could not be read")
    if name in shape.keywords:
        return Support(Status.SUPPORTED, f"passed to {LEGACY_FUSION.dotted}")
    return Support(Status.UNSUPPORTED, f"not a keyword parameter of {LEGACY_FUSION.dotted}")


def dropin_support(caps: Capabilities) -> Mapping[str, Support]:
    """For each drop-in argument's requirement name, whether a non-default value runs.

    On a fused workspace of the API the drop-in factory picks: the unified API where the
    release has it, else the legacy one. Without either, every argument is refused with
    the reason fusion is unavailable.
    """
    comm = caps.comm
    if comm.unified_api:
        return {dropin_feature(name): _unified(caps, name) for name in DROPIN_ARGUMENTS}
    if comm.legacy_api:
        return {dropin_feature(name): _legacy(caps, name) for name in DROPIN_ARGUMENTS}
    why = comm.error or "the installed flashinfer.comm has neither allreduce-fusion API"
    status = Status.UNKNOWN if caps.flashinfer.probe_in_progress else Status.UNSUPPORTED
    return {dropin_feature(name): Support(status, why) for name in DROPIN_ARGUMENTS}
