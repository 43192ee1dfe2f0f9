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
    "NO_FIXED_SIZE",
    "SPLIT_KEYWORDS",
    "Settings",
]

DEFAULT_PREFILL_SPLIT_SIZE = 4096
"""``fixed_split_size`` for prefill plans, in pages: SGLang's
``SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE`` default and vLLM's batch-invariant value.

.. versionadded:: 0.2.0
"""

DEFAULT_DECODE_SPLIT_SIZE = 2048
"""``fixed_split_size`` for decode plans, in pages: SGLang's
``SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE`` default and vLLM's batch-invariant value.

.. versionadded:: 0.2.0
"""

SPLIT_KEYWORDS: tuple[str, ...] = _surface.SPLIT_KEYWORDS
"""The keyword arguments the planner owns on every ``plan`` call (FlashInfer 0.4.0+).

.. versionadded:: 0.2.0
"""

_NOTHING: Mapping[str, object] = MappingProxyType({})


NO_FIXED_SIZE = -1
"""What FlashInfer's ``plan`` reads as "no fixed split size": ``None`` becomes ``-1``.

.. versionadded:: 0.2.0
"""


def _size(value: int | None) -> int | None:
    """``None`` and ``-1`` both mean "no fixed size" to FlashInfer; the planner says None."""
    return None if value is None or value == NO_FIXED_SIZE else value


@dataclass(frozen=True)
class Settings:
    """How the planner fixes FlashInfer's split-KV reduction order.

    Every ``plan`` of a deterministic planner or wrapper gets one pair
    ``(fixed_split_size, disable_split_kv)``; a pair is deterministic when it disables
    splitting or fixes the size. The deterministic-attention guide,
    ``docs/guide/attention.md``, gives the defaults and the engines' own pairs.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    deterministic
        ``None`` (the default): follow :func:`fi_compat.determinism.is_deterministic` when
        the planner is built; an explicit value must agree with it.
    prefill_split_size
        ``fixed_split_size`` for prefill plans (paged and ragged), in pages; ``None`` or
        ``-1`` for no fixed size.
    decode_split_size
        ``fixed_split_size`` for decode plans, in pages; ``None`` or ``-1`` as above.
    cuda_graph
        The wrappers are captured in and replayed from CUDA graphs: every plan gets
        ``fixed_split_size=None`` and ``disable_split_kv=True``.
    disable_split_kv
        ``None`` (the default): True in CUDA-graph mode, False otherwise.

    Raises
    ------
    PlannerConfigError
        A field of the wrong type or value (``cuda_graph="false"`` included), or
        ``cuda_graph=True`` with ``disable_split_kv=False``.
    """

    deterministic: bool | None = None
    prefill_split_size: int | None = DEFAULT_PREFILL_SPLIT_SIZE
    decode_split_size: int | None = DEFAULT_DECODE_SPLIT_SIZE
    cuda_graph: bool = False
    disable_split_kv: bool | None = None

    def __post_init__(self) -> None:
        require_bool("deterministic", self.deterministic, optional=True, error=PlannerConfigError)
        require_bool("cuda_graph", self.cuda_graph, error=PlannerConfigError)
        require_bool(
            "disable_split_kv", self.disable_split_kv, optional=True, error=PlannerConfigError
        )
        for name in ("prefill_split_size", "decode_split_size"):
            value = getattr(self, name)
            if value is None or (value == NO_FIXED_SIZE and type(value) is int):
                object.__setattr__(self, name, None)
                continue
            require_int(
                name,
                value,
                minimum=1,
                detail="pages of the KV cache; None or -1 for no fixed size",
                error=PlannerConfigError,
                fix="pass a positive page count, e.g. "
                f"{DEFAULT_PREFILL_SPLIT_SIZE} for prefill, "
                f"{DEFAULT_DECODE_SPLIT_SIZE} for decode, or None",
            )
        if self.cuda_graph and self.disable_split_kv is False:
            raise PlannerConfigError(
                explain(
                    "disable_split_kv=True (or None) in CUDA-graph mode: a split chosen per "
                    "batch can change the number of launched CTAs between replays",
                    "Settings(cuda_graph=True, disable_split_kv=False)",
                    fix="leave disable_split_kv at None, or use cuda_graph=False",
                )
            )

    @classmethod
    def from_split(
        cls,
        fixed_split_size: int | None,
        disable_split_kv: bool,
        *,
        cuda_graph: bool = False,
        deterministic: bool | None = None,
    ) -> Settings:
        """The settings an engine's own pair stands for, for both phases.

        ``Settings.from_split(4096, True)`` is vLLM's batch-invariant pair,
        ``Settings.from_split(None, True, cuda_graph=True)`` the CUDA-graph pair.

        Raises
        ------
        PlannerConfigError
            As the constructor.
        """
        return cls(
            deterministic=deterministic,
            prefill_split_size=fixed_split_size,
            decode_split_size=fixed_split_size,
            cuda_graph=cuda_graph,
            disable_split_kv=disable_split_kv,
        )

    def resolved(self) -> Settings:
        """These settings with ``deterministic`` read from the process-wide switch.

        Raises
        ------
        PlannerConfigError
            ``deterministic`` was given and disagrees with the switch, or deterministic
            with a phase whose pair lets FlashInfer choose the split (no fixed size and
            splitting not disabled).
        """
        switch = determinism.is_deterministic()
        if self.deterministic is not None and self.deterministic != switch:
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
        settings = self if self.deterministic is not None else replace(self, deterministic=switch)
        if switch and not self._disables():
            for phase in ("prefill", "decode"):
                if self._fixed(phase) is None:
                    raise PlannerConfigError(
                        explain(
                            f"a deterministic {phase} pair: a fixed split size, or "
                            "disable_split_kv=True",
                            f"{phase}_split_size=None with disable_split_kv=False, which lets "
                            "FlashInfer choose the split for each batch",
                            fix=f"set {phase}_split_size to a page count (e.g. "
                            f"{DEFAULT_PREFILL_SPLIT_SIZE}), or disable_split_kv=True",
                        )
                    )
        return settings

    def _disables(self) -> bool:
        return self.cuda_graph if self.disable_split_kv is None else self.disable_split_kv

    def _fixed(self, phase: str) -> int | None:
        return self.prefill_split_size if phase == "prefill" else self.decode_split_size

    def split_kwargs(self, phase: str) -> Mapping[str, object]:
        """The keyword arguments every ``plan`` of ``phase`` gets; empty when not deterministic.

        Meant for :meth:`resolved` settings (``deterministic=None`` counts as off here).
        CUDA-graph mode gives ``fixed_split_size=None, disable_split_kv=True``; otherwise the
        phase's size and ``disable_split_kv``.

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
        return MappingProxyType(
            {"fixed_split_size": self._fixed(phase), "disable_split_kv": self._disables()}
        )


def same_split(
    fixed_split_size: object, disable_split_kv: object, split: Mapping[str, object]
) -> bool:
    """True when an engine's pair makes FlashInfer's scheduler do what ``split`` does.

    The scheduler ignores the fixed size while splitting is disabled, so two pairs that both
    disable it agree whatever their sizes; otherwise the sizes must be equal, ``None`` and
    ``-1`` both meaning "none". A non-bool flag or a non-int size never agrees.
    """
    if type(disable_split_kv) is not bool:
        return False
    if fixed_split_size is not None and type(fixed_split_size) is not int:
        return False
    if disable_split_kv and split["disable_split_kv"] is True:
        return True
    return disable_split_kv == split["disable_split_kv"] and _size(fixed_split_size) == _size(
        split["fixed_split_size"]  # type: ignore[arg-type]
    )
