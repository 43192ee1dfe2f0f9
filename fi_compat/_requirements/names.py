"""Every ``--require`` name's spelling: the errors' ``feature`` and the report's names.

A refusal carries the ``--require`` name that foretells it as its ``feature``, so an engine
can ask ``fi-compat report --require <name>`` before it calls. Every such name is spelled
here, once: comm, attention and :mod:`fi_compat.errors` call these builders, and
:mod:`fi_compat._requirements.table` lists every name with them. This module imports only
:mod:`fi_compat._surface`, so anything may call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fi_compat._surface import (
    FAST_DECODE_PLAN,
    GATES,
    LEGACY_FUSION,
    PATTERN,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
    Symbol,
)

__all__ = [
    "BCAST",
    "CHECKPOINT_KINDS",
    "DROPIN_FACTORY",
    "DROPIN_FUSION",
    "FAST_PLAN",
    "FLAGS",
    "GATE_ITEMS",
    "LEGACY_API",
    "SIZE_KINDS",
    "TORCH_DISTRIBUTED",
    "UNIFIED_API",
    "api_feature",
    "checkpoint_feature",
    "deterministic_feature",
    "dropin_feature",
    "factory_feature",
    "gate_feature",
    "keyword_features",
    "pattern_feature",
    "reference_feature",
    "size_feature",
]

# ------------------------------------------------------------------------ one name each

#: The flags of the two allreduce-fusion APIs: present, with a fused call that takes what
#: fi-compat passes (each is also the gate of the release that brought the API).
UNIFIED_API = GATES["unified_api"].key
LEGACY_API = GATES["legacy_api"].key
#: Every flag: FlashInfer importable, ``flashinfer.comm`` importable, and the two APIs.
FLAGS = ("flashinfer", "comm", UNIFIED_API, LEGACY_API)
#: Whether ``flashinfer.comm``'s broadcast roots are group-local (``bcast`` section).
BCAST = "bcast_root_is_group_local"
#: torch.distributed (a reference workspace of several processes needs it).
TORCH_DISTRIBUTED = "torch.distributed"
#: The decode fast plan (``fast_decode_plan``), which the deterministic planner refuses.
FAST_PLAN = FAST_DECODE_PLAN.key


def gate_feature(keyword: str) -> str:
    """The ``--require`` name of the keyword gate of ``keyword`` (``group``,
    ``fixed_split_size``): the gate's key. A keyword without a gate raises ``KeyError``."""
    return GATES[keyword].key


def api_feature(symbol: Symbol) -> str:
    """The flag of the API whose fused call ``symbol`` is: ``legacy_api`` for
    :data:`~fi_compat._surface.LEGACY_FUSION`, ``unified_api`` otherwise."""
    return LEGACY_API if symbol.key == LEGACY_FUSION.key else UNIFIED_API


# ------------------------------------------------------------------------- the families

#: The prefix of the drop-in ``allreduce_fusion``'s arguments' names.
DROPIN_FUSION = f"dropin:{UNIFIED_FUSION.key}"
#: The prefix of the drop-in factory's options' names.
DROPIN_FACTORY = f"dropin:{UNIFIED_FACTORY.key}"
#: The kinds of fused workspace a ``per_call_sizes:<kind>`` name names: the unified API's
#: backends, and the legacy API.
SIZE_KINDS: tuple[str, ...] = ("trtllm", "mnnvl", "mnnvl-cutedsl", "legacy")
#: The kinds of workspace a ``checkpointing:<kind>`` name names: the unified API's
#: backends, the legacy API, and the unfused reference path.
CHECKPOINT_KINDS: tuple[str, ...] = (*SIZE_KINDS, "reference")


def dropin_feature(name: str) -> str:
    """``dropin:allreduce_fusion.<name>``: the drop-in call's argument ``name``."""
    return f"{DROPIN_FUSION}.{name}"


def factory_feature(name: str) -> str:
    """``dropin:create_allreduce_fusion_workspace.<name>``: the drop-in factory's option."""
    return f"{DROPIN_FACTORY}.{name}"


def pattern_feature(name: str) -> str:
    """``AllReduceFusionPattern.<name>``: the fused pattern ``name`` on a fused workspace."""
    return f"{PATTERN.key}.{name}"


def reference_feature(name: str) -> str:
    """``reference:AllReduceFusionPattern.<name>``: the pattern ``name`` on the unfused
    reference path."""
    return f"reference:{PATTERN.key}.{name}"


def size_feature(kind: str) -> str:
    """``per_call_sizes:<kind>``: calls of other sizes than the workspace's, on ``kind``."""
    return f"per_call_sizes:{kind}"


def checkpoint_feature(kind: str) -> str:
    """``checkpointing:<kind>``: detaching the buffers of a workspace of ``kind``."""
    return f"checkpointing:{kind}"


def deterministic_feature(family: str, backend: str) -> str:
    """``deterministic:<Family>:<backend>``: a deterministic run of ``family`` built with
    ``backend`` (``"default"`` for a class without ``backend=``)."""
    return f"deterministic:{family}:{backend}"


def keyword_features(prefix: str, owner: str, keyword: str) -> tuple[str, str]:
    """The two names of a probed keyword: ``<owner>.<keyword>`` and the same after the
    module ``prefix`` the report's signatures section prints (``flashinfer.comm.``)."""
    short = f"{owner}.{keyword}"
    return short, f"{prefix}{short}"


#: Every keyword gate's name -> the probed ``(owner, keyword)`` pairs it stands for.
GATE_ITEMS: Mapping[str, tuple[tuple[str, str], ...]] = MappingProxyType(
    {
        gate_feature(keyword): tuple((owner, str(kw)) for owner, kw in gate.items)
        for keyword, gate in GATES.items()
        if gate.keyword
    }
)
