"""What a release does beyond its record, joined to its facts: split reach and fi-compat's mappings.

The release model (:mod:`fi_compat._records._facts`) answers what a release has and takes;
:func:`release_facts` joins to it the release-wide facts the upgrade preview compares too:

``("backend", family, backend)`` / ``("default_backend", family)``
    The measured split-reach verdict of one attention backend, and the family's default
    backend, for measured releases (``("reach_measured",)``: whether the release is).
``("mapping", key)``
    What fi-compat does on this release where the release alone is not enough
    (:data:`MAPPINGS`), as an :class:`Answer`; ``("sizes_measured",)``: whether the
    per-call sizes its ``per_call_sizes`` answer rests on were measured.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

from fi_compat._records._facts import Facts, Key, facts_of
from fi_compat._records._history import History
from fi_compat._records._history import history as _history
from fi_compat._surface import (
    COMM,
    LEGACY_FACTORY,
    LEGACY_FUSION,
    MNNVL_MODULE,
    TORCH_DIST_BACKEND,
    TRTLLM_WORKSPACE,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
    WORKSPACE,
)

__all__ = ["MAPPINGS", "Answer", "history", "measured_families", "release_facts"]

#: fi-compat's per-release behaviour that the diff follows: key -> what it describes.
MAPPINGS: Mapping[str, str] = {
    "api": "which allreduce-fusion API fi-compat's factory builds on",
    "group": f"how {UNIFIED_FACTORY.key}'s group= reaches FlashInfer",
    "early_completion": f"what {UNIFIED_FUSION.key}(trigger_completion_at_end=False) does",
    "weight_bias": f"what {UNIFIED_FUSION.key}(weight_bias=...) does",
    "bcast_root": f"how {TORCH_DIST_BACKEND.key}.bcast reads a group-local root",
    "checkpointing": "what FusionWorkspace.checkpoint_prepare() does",
    "per_call_sizes": "whether a TRT-LLM workspace serves calls of other sizes that fit",
}


class Answer(NamedTuple):
    """What fi-compat does for one of :data:`MAPPINGS` on one release.

    ``action`` is what the scan compares: ``"passes"`` (FlashInfer takes it as it is),
    ``"maps"`` (fi-compat carries it another way), ``"omits"`` (left out at its default;
    any other value raises :class:`~fi_compat.errors.CapabilityMissingError`), ``"raises"``
    (fi-compat raises a typed error); ``text`` says it for people (the diff prints it)."""

    action: str
    text: str

    def __str__(self) -> str:
        return self.text


#: What fi-compat does with a keyword the release lacks and leaves at its default.
_OMITTED = Answer("omits", "left out at 0.0; any other value raises CapabilityMissingError")


def _mappings(facts: Facts) -> dict[Key, Any]:
    """fi-compat's answers (:data:`MAPPINGS`) on the release ``facts`` describe."""
    table: dict[Key, Any] = {}

    def accepts(path: str, keyword: str) -> bool:
        return facts.parameter(path, keyword) is not None

    factory = f"{COMM}.{UNIFIED_FACTORY.key}"
    fusion = f"{COMM}.{UNIFIED_FUSION.key}"
    unified = facts.has(COMM, UNIFIED_FACTORY.key) and facts.has(COMM, UNIFIED_FUSION.key)
    legacy = facts.has(COMM, LEGACY_FACTORY.key) and facts.has(COMM, LEGACY_FUSION.key)
    api = "unified" if unified else "legacy" if legacy else "none"
    table["mapping", "api"] = Answer("passes" if api != "none" else "raises", api)
    if unified:
        table["mapping", "group"] = (
            Answer("passes", "passed to the factory")
            if accepts(factory, "group")
            else Answer("maps", "carried by comm_backend (the factory takes no group=)")
        )
        table["mapping", "early_completion"] = (
            Answer("passes", f"passed to {UNIFIED_FUSION.key}")
            if accepts(fusion, "trigger_completion_at_end")
            else Answer(
                "maps",
                f"honoured on TRT-LLM workspaces through {LEGACY_FUSION.key}; "
                "MNNVL completes at the end",
            )
        )
        table["mapping", "weight_bias"] = (
            Answer("passes", f"passed to {UNIFIED_FUSION.key}")
            if accepts(fusion, "weight_bias")
            else _OMITTED
        )
    elif legacy:
        table["mapping", "group"] = Answer("maps", "passed to the legacy factory's group=")
        table["mapping", "early_completion"] = Answer("maps", f"passed to {LEGACY_FUSION.key}")
        table["mapping", "weight_bias"] = _OMITTED
    home = next(
        (
            facts.get(("defined", module, TORCH_DIST_BACKEND.key))
            for module in (MNNVL_MODULE, COMM)
            if facts.has(module, TORCH_DIST_BACKEND.key)
        ),
        None,
    )
    if home is not None:
        backend = facts.record.torch_dist_backend
        table["mapping", "bcast_root"] = (
            Answer("passes", "FlashInfer maps it to a global rank")
            if backend is not None and backend.bcast_root_is_group_local
            else Answer("maps", f"fi-compat's {TORCH_DIST_BACKEND.key} maps it to a global rank")
        )
    if unified:
        checkpointing = any(
            facts.get(("method", f"{COMM}.{name}", "checkpoint_prepare"))
            for name in (WORKSPACE.key, TRTLLM_WORKSPACE)
        )
        table["mapping", "checkpointing"] = (
            Answer("passes", "FlashInfer's checkpoint_prepare")
            if checkpointing
            else Answer("raises", "raises NotImplementedError (CheckpointUnsupportedError)")
        )
        from fi_compat._measured import releases as measured_releases
        from fi_compat.comm._sizes import rule_of

        # Without a measurement the rule is the honest refusal, not a change of the release's.
        table["sizes_measured",] = facts.release in measured_releases("sizes")
        rule, _ = rule_of(facts.release, "trtllm")
        table["mapping", "per_call_sizes"] = (
            Answer("passes", "served when tokens x hidden size fit")
            if rule == "product"
            else Answer(
                "raises", "only the workspace's own sizes (CallSizeUnsupportedError otherwise)"
            )
        )
    return table


def _reach(release: str) -> dict[Key, Any]:
    """The measured split reach of the release's attention backends (none unmeasured)."""
    from fi_compat.attention._reach import reach_data

    entry = reach_data().get(release)
    table: dict[Key, Any] = {("reach_measured",): entry is not None}
    for family, data in (entry or {}).items():
        for backend, measured in data.get("backends", {}).items():
            table["backend", family, backend] = measured["verdict"]
        table["default_backend", family] = data.get("default_backend")
    return table


@functools.cache
def release_facts(release: str) -> Facts:
    """The facts of a recorded release, with what it does beyond its record (cached).

    Raises
    ------
    UnknownReleaseError
        No record ships for ``release``.
    """
    facts = facts_of(release)
    return facts.joined({**_reach(facts.release), **_mappings(facts)})


def history(old: str, new: str) -> History:
    """The :class:`~fi_compat._records._history.History` from ``old`` to ``new``, each
    release read by :func:`release_facts`."""
    return _history(old, new, release_facts)


def measured_families(facts: Facts) -> frozenset[str]:
    """The attention families whose split reach was measured on the release."""
    return frozenset(key[1] for key in facts.table if key[0] == "default_backend")
