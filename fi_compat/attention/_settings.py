"""Settings of the deterministic attention planner: on or off, split sizes, CUDA-graph mode.

Units. FlashInfer's ``fixed_split_size`` counts *pages* of the paged KV cache (its ``plan``
docstrings say "in pages"; the scheduler multiplies the chunk by ``page_size``). For the
ragged wrapper, whose KV is not paged, one page is one token. SGLang plans with
``page_size=1``, so there its 4096 / 2048 are tokens as well; vLLM plans with its block
size, so there they are blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from fi_compat import _surface, determinism
from fi_compat._arguments import require_bool, require_choice, require_int
from fi_compat.errors import PlannerConfigError, explain

__all__ = [
    "DEFAULT_DECODE_SPLIT_SIZE",
    "DEFAULT_PREFILL_SPLIT_SIZE",
    "SPLIT_KEYWORDS",
    "Settings",
]

#: ``fixed_split_size`` for prefill plans, in pages: SGLang's
#: ``SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE`` default and vLLM's batch-invariant value.
DEFAULT_PREFILL_SPLIT_SIZE = 4096

#: ``fixed_split_size`` for decode plans, in pages: SGLang's
#: ``SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE`` default and vLLM's batch-invariant value.
DEFAULT_DECODE_SPLIT_SIZE = 2048

#: The keyword arguments the planner owns on every ``plan`` call (FlashInfer 0.4.0+).
SPLIT_KEYWORDS: tuple[str, ...] = _surface.SPLIT_KEYWORDS

_NOTHING: Mapping[str, object] = MappingProxyType({})


@dataclass(frozen=True)
class Settings:
    """How the planner fixes FlashInfer's split-KV reduction order.

    Attributes
    ----------
    deterministic
        ``None`` (the default): follow :func:`fi_compat.determinism.is_deterministic` when
        the planner is built. An explicit value must agree with that switch; it is an
        assertion, never a second switch (a deterministic planner next to an allowed
        allreduce fusion would not be deterministic).
    prefill_split_size
        ``fixed_split_size`` for prefill plans (paged and ragged), in pages.
    decode_split_size
        ``fixed_split_size`` for decode plans, in pages.
    cuda_graph
        The planner drives wrappers that are captured in and replayed from CUDA graphs:
        every plan gets ``fixed_split_size=None`` and ``disable_split_kv=True`` (a fixed
        split size can change the number of launched CTAs between replays).

    Raises
    ------
    PlannerConfigError
        ``deterministic`` is neither ``None`` nor a bool, ``cuda_graph`` is not a bool
        (``"false"`` would count as on), or a split size is not a positive int.
    """

    deterministic: bool | None = None
    prefill_split_size: int = DEFAULT_PREFILL_SPLIT_SIZE
    decode_split_size: int = DEFAULT_DECODE_SPLIT_SIZE
    cuda_graph: bool = False

    def __post_init__(self) -> None:
        require_bool("deterministic", self.deterministic, optional=True, error=PlannerConfigError)
        require_bool("cuda_graph", self.cuda_graph, error=PlannerConfigError)
        for name in ("prefill_split_size", "decode_split_size"):
            require_int(
                name,
                getattr(self, name),
                minimum=1,
                detail="pages of the KV cache",
                error=PlannerConfigError,
                fix="pass a positive page count, e.g. "
                f"{DEFAULT_PREFILL_SPLIT_SIZE} for prefill, "
                f"{DEFAULT_DECODE_SPLIT_SIZE} for decode",
            )

    def resolved(self) -> Settings:
        """These settings with ``deterministic`` read from the process-wide switch.

        Raises
        ------
        PlannerConfigError
            ``deterministic`` was given and disagrees with the switch.
        """
        switch = determinism.is_deterministic()
        if self.deterministic is None:
            return replace(self, deterministic=switch)
        if self.deterministic != switch:
            raise PlannerConfigError(
                explain(
                    f"Settings(deterministic={self.deterministic}) to agree with "
                    "fi_compat.determinism, the one switch the planner and the comm facade "
                    "both read",
                    f"fi_compat.determinism.is_deterministic() == {switch}",
                    fix=f"call fi_compat.determinism.set_deterministic({self.deterministic}) "
                    "at start-up, before building planners, and leave Settings.deterministic "
                    "at None",
                )
            )
        return self

    def split_kwargs(self, phase: str) -> Mapping[str, object]:
        """The keyword arguments every ``plan`` of ``phase`` gets; empty when not deterministic.

        Meant for :meth:`resolved` settings (``deterministic=None`` counts as off here).

        Parameters
        ----------
        phase
            ``"prefill"`` or ``"decode"``.
        """
        require_choice("phase", phase, ("prefill", "decode"), error=PlannerConfigError)
        if not self.deterministic:
            return _NOTHING
        if self.cuda_graph:
            return MappingProxyType({"fixed_split_size": None, "disable_split_kv": True})
        size = self.prefill_split_size if phase == "prefill" else self.decode_split_size
        return MappingProxyType({"fixed_split_size": size, "disable_split_kv": False})
