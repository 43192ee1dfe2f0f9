"""The per-call interface: the argument list every bound path takes, typed once.

A call on a workspace passes ten values, always by position and always in this order:
``(input, residual, weight, eps, norm_out, residual_out, use_oneshot, fp32_acc,
trigger_completion_at_end, launch_with_pdl)``; a launch (outputs already allocated) adds
the token count. Positions, because a keyword call of that many arguments is dearer on the
per-call path. The protocols below spell the list once, with positional-only parameters of
real types, so that ``mypy --strict`` checks the order at every definition (a closure with
two parameters swapped does not match its protocol) and at every call (two swapped
arguments of different types are refused).

Each API module binds its paths with them: a :class:`Launcher` (launch, and the same
launch frozen on fixed arguments) goes through :func:`bind` into a :class:`Bound` pair,
``run`` for :func:`~fi_compat.comm.allreduce_residual_rmsnorm` and ``prepare`` for
:meth:`~fi_compat.comm.FusionWorkspace.prepare`. Nothing here runs per call but the
closures themselves: one validation call, then the launch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from fi_compat.comm._checks import Spec, Validator, make_validator

if TYPE_CHECKING:
    import torch

__all__ = [
    "Bound",
    "Freeze",
    "Launch",
    "Launcher",
    "Preparer",
    "Runner",
    "bind",
    "positional_launcher",
    "preparer",
]


class Runner(Protocol):
    """One checked call: validate, allocate missing outputs, launch.

    Returns ``(norm_out, residual_out)``.
    """

    def __call__(
        self,
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        norm_out: torch.Tensor | None,
        residual_out: torch.Tensor | None,
        use_oneshot: bool | None,
        fp32_acc: bool,
        trigger_completion_at_end: bool,
        launch_with_pdl: bool,
        /,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


class Launch(Protocol):
    """One launch on validated tensors: :class:`Runner`'s arguments (outputs allocated)
    and the token count."""

    def __call__(
        self,
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        use_oneshot: bool | None,
        fp32_acc: bool,
        trigger_completion_at_end: bool,
        launch_with_pdl: bool,
        tokens: int,
        /,
    ) -> None: ...


class Freeze(Protocol):
    """:class:`Launch`'s arguments -> a zero-argument call that launches on them."""

    def __call__(
        self,
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        use_oneshot: bool | None,
        fp32_acc: bool,
        trigger_completion_at_end: bool,
        launch_with_pdl: bool,
        tokens: int,
        /,
    ) -> Callable[[], Any]: ...


class Preparer(Protocol):
    """:class:`Runner`'s arguments, validated once -> ``(call, norm_out, residual_out)``,
    ``call`` launching on them with no arguments."""

    def __call__(
        self,
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        norm_out: torch.Tensor | None,
        residual_out: torch.Tensor | None,
        use_oneshot: bool | None,
        fp32_acc: bool,
        trigger_completion_at_end: bool,
        launch_with_pdl: bool,
        /,
    ) -> tuple[Callable[[], Any], torch.Tensor, torch.Tensor]: ...


class Launcher(NamedTuple):
    """A launch for every call, and the same launch frozen on fixed arguments."""

    launch: Launch
    freeze: Freeze


class Bound(NamedTuple):
    """What a workspace runs: per call (:class:`Runner`) and prepared (:class:`Preparer`)."""

    run: Runner
    prepare: Preparer


def positional_launcher(launch: Launch) -> Launcher:
    """A :class:`Launcher` whose frozen call is ``launch`` with its arguments bound."""

    def freeze(
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        use_oneshot: bool | None,
        fp32_acc: bool,
        trigger_completion_at_end: bool,
        launch_with_pdl: bool,
        tokens: int,
        /,
    ) -> Callable[[], Any]:
        return functools.partial(
            launch,
            input,
            residual,
            weight,
            eps,
            norm_out,
            residual_out,
            use_oneshot,
            fp32_acc,
            trigger_completion_at_end,
            launch_with_pdl,
            tokens,
        )

    return Launcher(launch, freeze)


def bind(spec: Spec, launcher: Launcher) -> Bound:
    """The paths of a workspace whose every call goes to ``launcher`` (legacy, reference)."""
    validate = make_validator(spec)
    launch = launcher.launch

    def run(
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        norm_out: torch.Tensor | None,
        residual_out: torch.Tensor | None,
        use_oneshot: bool | None,
        fp32_acc: bool,
        trigger_completion_at_end: bool,
        launch_with_pdl: bool,
        /,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        norm_out, residual_out = validate(input, residual, weight, norm_out, residual_out)
        launch(
            input,
            residual,
            weight,
            eps,
            norm_out,
            residual_out,
            use_oneshot,
            fp32_acc,
            trigger_completion_at_end,
            launch_with_pdl,
            input.shape[0],
        )
        return norm_out, residual_out

    return Bound(run, preparer(validate, launcher.freeze))


def preparer(validate: Validator, freeze: Freeze) -> Preparer:
    """The prepare path: validate once (allocating missing outputs), then freeze."""

    def prepare(
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        norm_out: torch.Tensor | None,
        residual_out: torch.Tensor | None,
        use_oneshot: bool | None,
        fp32_acc: bool,
        trigger_completion_at_end: bool,
        launch_with_pdl: bool,
        /,
    ) -> tuple[Callable[[], Any], torch.Tensor, torch.Tensor]:
        norm_out, residual_out = validate(input, residual, weight, norm_out, residual_out)
        call = freeze(
            input,
            residual,
            weight,
            eps,
            norm_out,
            residual_out,
            use_oneshot,
            fp32_acc,
            trigger_completion_at_end,
            launch_with_pdl,
            input.shape[0],
        )
        return call, norm_out, residual_out

    return prepare
