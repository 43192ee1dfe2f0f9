"""What the planner plans: the layouts and their roles, the plan arguments, the targets.

Plain data shared by the planner's checks (:mod:`fi_compat.attention._planner_checks`) and
the planner itself; it imports neither.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fi_compat import _surface
from fi_compat.attention._settings import SPLIT_KEYWORDS
from fi_compat.errors import PlannerConfigError, explain

__all__ = ["DECODE", "PREFILL_PAGED", "PREFILL_RAGGED", "Layout", "PlanArgs", "PlanTarget"]

PREFILL_PAGED = _surface.PREFILL_PAGED.key
PREFILL_RAGGED = _surface.PREFILL_RAGGED.key
DECODE = _surface.DECODE.key


class Layout(str, enum.Enum):
    """How many paged wrappers a phase has, and what each one attends to.

    .. versionadded:: 0.2.0
    """

    #: One wrapper per phase.
    SINGLE = "single"
    #: Two wrappers per phase: the window wrapper first, the full-attention one second.
    SLIDING_WINDOW = "sliding_window"
    #: Two wrappers per phase: self-attention first, cross-attention (encoder) second.
    CROSS_ATTENTION = "cross_attention"

    def __str__(self) -> str:
        return self.value

    @property
    def roles(self) -> tuple[str, ...]:
        """The wrappers of one phase, in the order the planner takes and returns them."""
        return _ROLES[self]


_ROLES: Mapping[Layout, tuple[str, ...]] = {
    Layout.SINGLE: ("main",),
    Layout.SLIDING_WINDOW: ("window", "full"),
    Layout.CROSS_ATTENTION: ("self", "cross"),
}


class PlanArgs:
    """The arguments of one ``plan`` call, as the engine would pass them to FlashInfer.

    Everything except the split settings, which belong to the planner::

        PlanArgs(kv_indptr, kv_indices, last_page_len, num_qo_heads, num_kv_heads,
                 head_dim, page_size, q_data_type=torch.bfloat16)

    .. versionadded:: 0.2.0

    Raises
    ------
    PlannerConfigError
        ``fixed_split_size`` or ``disable_split_kv`` was passed.
    """

    __slots__ = ("args", "kwargs")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for keyword in SPLIT_KEYWORDS:
            if keyword in kwargs:
                raise PlannerConfigError(
                    explain(
                        "the split settings to come from the planner only",
                        f"{keyword}= in the arguments given to PlanArgs",
                        fix=f"drop {keyword}=; set Settings(prefill_split_size=..., "
                        "decode_split_size=..., cuda_graph=...) when building the planner",
                    )
                )
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        parts = [*map(repr, self.args), *(f"{k}={v!r}" for k, v in self.kwargs.items())]
        return f"PlanArgs({', '.join(parts)})"


@dataclass(frozen=True)
class PlanTarget:
    """One wrapper the planner drives, and the keyword arguments it adds to each of its plans.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    wrapper
        The FlashInfer wrapper (or anything with the same ``plan``).
    kind
        The FlashInfer class it stands for, e.g. ``"BatchDecodeWithPagedKVCacheWrapper"``.
    role
        Its place in the layout: ``"main"``, ``"window"``, ``"full"``, ``"self"``,
        ``"cross"`` or ``"ragged"``.
    split
        Added to every ``plan`` call: ``fixed_split_size`` and ``disable_split_kv`` when
        deterministic, nothing otherwise.
    """

    wrapper: Any
    kind: str
    role: str
    split: Mapping[str, object]
