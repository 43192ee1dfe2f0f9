"""The planner's own checks: its wrappers and layout when built, a step's arguments per step.

Every check raises :class:`~fi_compat.errors.PlannerConfigError` before a wrapper is
stored or planned. Whether a wrapper may be planned deterministically on the installed
release is :mod:`fi_compat.attention._vouch`'s question, shared with the wrapper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

from fi_compat._arguments import describe
from fi_compat._surface import PLAN
from fi_compat.attention._layout import (
    DECODE,
    PREFILL_PAGED,
    PREFILL_RAGGED,
    Layout,
    PlanArgs,
    PlanTarget,
)
from fi_compat.attention._vouch import flag
from fi_compat.errors import PlannerConfigError, explain

if TYPE_CHECKING:
    from fi_compat.attention._settings import Settings

__all__ = [
    "check_distinct",
    "check_graph_mode",
    "check_kind",
    "check_requests",
    "check_wrapper",
    "is_container",
    "layout_of",
    "wrappers_of",
]

# ---------------------------------------------------------------------------- argument checks
# Everything here raises PlannerConfigError before a wrapper is stored or planned.

#: Sequences that are never a list of wrappers or of PlanArgs.
_NOT_CONTAINERS = (str, bytes, bytearray, memoryview)


def is_container(value: object) -> TypeGuard[Sequence[Any]]:
    """A list, a tuple or another ``Sequence``, but not text and not bytes."""
    return isinstance(value, list | tuple) or (
        isinstance(value, Sequence) and not isinstance(value, _NOT_CONTAINERS)
    )


def layout_of(value: object) -> Layout:
    if isinstance(value, Layout):
        return value
    names = ", ".join(repr(member.value) for member in Layout)
    if isinstance(value, str):
        try:
            return Layout(value)
        except ValueError:
            pass
    raise PlannerConfigError(
        explain(
            f"a Layout or one of its values ({names})",
            describe(value),
            fix="pass Layout.SINGLE, Layout.SLIDING_WINDOW or Layout.CROSS_ATTENTION",
        )
    )


def check_wrapper(kind: str, role: str, wrapper: object) -> None:
    """Refuse what cannot be planned: ``None``, a class, anything without a callable ``plan``."""
    if wrapper is None:
        problem = "None"
    elif isinstance(wrapper, type):
        problem = f"the class {wrapper.__name__} itself, not an instance of it"
    elif not callable(getattr(wrapper, PLAN, None)):
        problem = f"{describe(wrapper)}, which has no callable plan"
    else:
        return
    raise PlannerConfigError(
        explain(
            f"a {kind} (an object with a callable plan) as the {role} wrapper",
            problem,
            fix="pass the FlashInfer wrapper object itself; the constructor takes a list of "
            "wrappers per phase, AttentionPlanner.single() one wrapper per phase",
        )
    )


def wrappers_of(phase: str, value: object, kind: str, layout: Layout) -> tuple[Any, ...]:
    """``value`` as the wrappers of ``phase``: none (``None`` or empty), or one per role."""
    roles = layout.roles
    if value is None:
        return ()
    if not is_container(value):
        raise PlannerConfigError(
            explain(
                f"a list or tuple of {phase} wrappers for layout {layout} ({', '.join(roles)})",
                describe(value),
                fix=f"pass {phase}=[wrapper, ...] in role order, or leave it out",
            )
        )
    wrappers = tuple(value)
    if len(wrappers) not in (0, len(roles)):
        raise PlannerConfigError(
            explain(
                f"{len(roles)} {phase} wrapper(s) for layout {layout} "
                f"({', '.join(roles)}), or none",
                f"{len(wrappers)}",
                fix=f"pass one {phase} wrapper per role, in that order",
            )
        )
    for wrapper, role in zip(wrappers, roles, strict=False):
        check_wrapper(kind, role, wrapper)
    return wrappers


def check_requests(
    phase: str, slots: tuple[PlanTarget, ...], requests: object, layout: Layout
) -> None:
    """A step's arguments, whole: a list or tuple holding one :class:`PlanArgs` per wrapper.

    A type test, a len and one type test per element; runs before the first ``plan`` of
    the step, so a malformed step plans nothing.
    """
    if (type(requests) is list or type(requests) is tuple) and len(requests) == len(slots):
        for request in requests:  # the common case: exact types, no ABC machinery
            if type(request) is not PlanArgs:
                break
        else:
            return
    if not is_container(requests):
        found = describe(requests)
    elif len(requests) == len(slots) and all(isinstance(r, PlanArgs) for r in requests):
        return  # another Sequence, or PlanArgs subclasses
    else:
        kinds = ", ".join(type(request).__name__ for request in requests)
        found = f"a {type(requests).__name__} of {len(requests)}: [{kinds}]"
    roles = ", ".join(slot.role for slot in slots) or f"this planner has no {phase} wrapper"
    raise PlannerConfigError(
        explain(
            f"a list or tuple of exactly {len(slots)} PlanArgs for the {phase} wrappers of "
            f"layout {layout} ({roles})",
            found,
            fix="pass one PlanArgs(...) per wrapper, in Layout.roles order; nothing was planned",
        )
    )


# ---------------------------------------------------------------------------- build-time checks


def check_kind(slot: PlanTarget) -> None:
    """Refuse a FlashInfer wrapper handed over in another wrapper's place."""
    names = {cls.__name__ for cls in type(slot.wrapper).__mro__}
    others = (names & {PREFILL_PAGED, PREFILL_RAGGED, DECODE}) - {slot.kind}
    if others and slot.kind not in names:
        raise PlannerConfigError(
            explain(
                f"a {slot.kind} as the {slot.role} wrapper",
                f"a {sorted(others)[0]}",
                fix="pass paged prefill wrappers as prefill=, the ragged one as ragged= and "
                "decode wrappers as decode=",
            )
        )


def check_distinct(slots: tuple[PlanTarget, ...]) -> None:
    """Refuse one wrapper object in two places: its second plan would replace the first."""
    seen: dict[int, PlanTarget] = {}
    for slot in slots:
        first = seen.setdefault(id(slot.wrapper), slot)
        if first is not slot:
            raise PlannerConfigError(
                explain(
                    "a distinct wrapper object for every slot",
                    f"the same {type(slot.wrapper).__name__} as the {first.role} "
                    f"{first.kind} and as the {slot.role} {slot.kind}",
                    fix="build one FlashInfer wrapper per slot; a wrapper keeps only its last plan",
                )
            )


def check_graph_mode(slot: PlanTarget, settings: Settings) -> None:
    if settings.cuda_graph:
        return
    if flag(slot.wrapper, ("is_cuda_graph_enabled", "_use_cuda_graph")):
        raise PlannerConfigError(
            explain(
                "an eager planner to drive eager wrappers; a CUDA-graph wrapper needs "
                "fixed_split_size unset and disable_split_kv=True",
                f"the {slot.role} {slot.kind} was built with use_cuda_graph=True and the "
                "planner with Settings(cuda_graph=False)",
                fix="build a separate planner for the CUDA-graph wrappers with "
                "Settings(cuda_graph=True)",
            )
        )
