"""Uses of ``flashinfer.comm`` judged as they run after the import swap to ``fi_compat.comm``.

With ``fi-compat scan --fi-compat`` an engine's ``flashinfer.comm`` is ``fi_compat.comm``:
its drop-ins (the unified factory and fused call, the pattern codes) take the newest
release's parameters on every release, and what the new release lacks fi-compat maps,
leaves out at its default or refuses with a typed error. :class:`Swap` gives the
:class:`SwapVerdict` on such a use; the judge (:mod:`fi_compat.upgrade._judge`) places it.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from fi_compat._engine_source import Use
from fi_compat._signature import Status
from fi_compat._surface import COMM, PATTERN, TORCH_DIST_BACKEND, UNIFIED_FACTORY, UNIFIED_FUSION
from fi_compat.upgrade._compare import Comparison
from fi_compat.upgrade._kinds import Category

__all__ = ["Swap", "SwapVerdict"]

#: fi_compat.comm's drop-ins: served on every release with 0.7.2.post1's parameters.
_DROPINS = (UNIFIED_FACTORY.key, UNIFIED_FUSION.key, PATTERN.key)
#: Keyword -> the mapping that says what fi-compat does where the release lacks it.
_MAPPED_KEYWORDS = {
    "group": "group",
    "trigger_completion_at_end": "early_completion",
    "weight_bias": "weight_bias",
}


class SwapVerdict(NamedTuple):
    """What a use meets: its category, the :data:`~fi_compat.upgrade.RULES` id behind it,
    one sentence for people and the release the verdict rests on."""

    category: Category
    rule: str
    message: str
    release: str | None = None


class Swap:
    """What ``fi_compat.comm`` serves on the new release of ``compare``."""

    def __init__(self, compare: Comparison) -> None:
        self.compare = compare
        self.new = compare.new

    def mapping_introduced_in(self, mapping: str) -> str | None:
        """The release from which fi-compat's answer for ``mapping`` is the new one's."""
        found = self.compare.about(("mapping", mapping))
        return found[0].release if found else None

    def dropin(self, use: Use) -> list[SwapVerdict] | None:
        """The verdicts on a use of a drop-in of ``fi_compat.comm``; None where ``use`` is
        no use of one."""
        parts = use.target.split(".")
        if len(parts) < 3 or ".".join(parts[:2]) != COMM or parts[2] not in _DROPINS:
            return None
        name, new = parts[2], self.new
        if name == UNIFIED_FACTORY.key and parts[3:4] in (
            ["checkpoint_prepare"],
            ["checkpoint_restore"],
        ):
            answer = new.get(("mapping", "checkpointing"))
            raises = answer is not None and answer.action == "raises"
            return [
                SwapVerdict(
                    Category.BEHAVIOUR if raises else Category.UNCHANGED,
                    "fi-compat-maps",
                    f"FusionWorkspace.{parts[3]} on {new.release}: {answer}",
                    self.mapping_introduced_in("checkpointing"),
                )
            ]
        if use.kind != "call" or len(parts) != 3 or name == PATTERN.key:
            served = (
                f"FusionWorkspace.{'.'.join(parts[3:])}: fi-compat's workspace"
                if name == UNIFIED_FACTORY.key and len(parts) > 3
                else f"fi_compat.comm.{'.'.join(parts[2:])}: fi-compat's drop-in"
            )
            return [
                SwapVerdict(Category.UNCHANGED, "fi-compat-maps", f"{served}, on every release")
            ]
        path = f"{COMM}.{name}"
        found = []
        for keyword in use.keywords:
            if keyword not in _dropin_parameters(name):
                found.append(
                    SwapVerdict(
                        Category.BREAKS,
                        "fi-compat-refuses",
                        f"fi_compat.comm.{name}({keyword}=...): the drop-in takes no such "
                        "keyword; the call raises TypeError",
                    )
                )
                continue
            if new.acceptance(path, keyword) is Status.SUPPORTED:
                continue
            mapping = _MAPPED_KEYWORDS.get(keyword)
            answer = new.get(("mapping", mapping)) if mapping else None
            if mapping is not None and answer is not None:
                found.append(
                    SwapVerdict(
                        Category.BEHAVIOUR,
                        "fi-compat-maps",
                        f"fi_compat.comm.{name}({keyword}=...) on {new.release}: {answer}",
                        self.mapping_introduced_in(mapping),
                    )
                )
            else:
                found.append(
                    SwapVerdict(
                        Category.BEHAVIOUR,
                        "fi-compat-refuses",
                        f"fi_compat.comm.{name}({keyword}=...): {new.release} has no "
                        "counterpart; fi-compat leaves it out at its default and raises "
                        "CapabilityMissingError for any other value",
                    )
                )
        if use.star:
            accepted = ", ".join(sorted(_dropin_parameters(name)))
            found.append(
                SwapVerdict(
                    Category.UNVERIFIED,
                    "unverified",
                    f"fi_compat.comm.{name}(**...): the keywords this call passes through * or "
                    f"** are not read; the drop-in takes {accepted}, and any other raises "
                    "TypeError",
                )
            )
        elif not found:
            found.append(
                SwapVerdict(
                    Category.UNCHANGED,
                    "fi-compat-maps",
                    f"fi_compat.comm.{name}: fi-compat's drop-in passes every keyword this call "
                    f"uses to {new.release}",
                )
            )
        return found

    def torch_dist_backend(self, use: Use) -> SwapVerdict | None:
        """The verdict on a use of ``fi_compat.comm.mnnvl.TorchDistBackend`` (how its
        ``bcast`` reads a group-local root); None where ``use`` is no use of it."""
        if use.target.rpartition(".")[2] != TORCH_DIST_BACKEND.key:
            return None
        answer = self.new.get(("mapping", "bcast_root"))
        if answer is None:
            return None
        return SwapVerdict(
            Category.BEHAVIOUR if answer.action == "maps" else Category.UNCHANGED,
            "fi-compat-maps",
            f"fi_compat.comm.mnnvl.{TORCH_DIST_BACKEND.key} on {self.new.release}: bcast's "
            f"group-local root: {answer}",
            self.mapping_introduced_in("bcast_root"),
        )


@functools.cache
def _dropin_parameters(name: str) -> frozenset[str]:
    """The keywords fi-compat's drop-in ``name`` takes, read from the drop-in itself."""
    import inspect

    from fi_compat.comm import _dropin

    return frozenset(inspect.signature(getattr(_dropin, name)).parameters)
