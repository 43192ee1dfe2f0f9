"""The bound per-call paths: one validation call, then one call into FlashInfer.

Everything that depends on the installed release (which function, which keyword names,
whether ``trigger_completion_at_end`` can be passed, the pattern code) is decided when a
workspace is created; the closures built here only read tensor attributes and call. No
signature inspection, dict building or logging happens per call.

Each binder returns a :class:`Bound` pair: ``run`` validates and launches (the path of
:func:`~fi_compat.comm.allreduce_residual_rmsnorm`); ``prepare`` validates once and
freezes the launch into a zero-argument call (the path of
:meth:`~fi_compat.comm.FusionWorkspace.prepare`).

The argument names used below are exported as :data:`UNIFIED_CALL` and
:data:`LEGACY_CALL` so that workspace creation can check them against the installed
release, and tests against every recorded release.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from fi_compat.comm._binding import freeze_call, positional_layout
from fi_compat.comm._checks import Spec, Validator, make_validator

if TYPE_CHECKING:
    import torch

__all__ = [
    "LEGACY_CALL",
    "UNIFIED_CALL",
    "Bound",
    "Freeze",
    "Launch",
    "Launcher",
    "Preparer",
    "Runner",
    "bind_unified",
    "bind_with_launch",
    "legacy_launch",
    "positional_launcher",
]

#: ``(input, residual, weight, eps, norm_out, residual_out, use_oneshot, fp32_acc,
#: trigger_completion_at_end, launch_with_pdl) -> (norm_out, residual_out)``
Runner = Callable[..., "tuple[torch.Tensor, torch.Tensor]"]
#: Same arguments as :data:`Runner` (outputs already allocated) plus the token count.
Launch = Callable[..., None]
#: Same arguments as :data:`Launch` -> a zero-argument call that launches on them.
Freeze = Callable[..., Callable[[], Any]]
#: Same arguments as :data:`Runner` -> ``(call, norm_out, residual_out)``, validated.
Preparer = Callable[..., "tuple[Callable[[], Any], torch.Tensor, torch.Tensor]"]


class Launcher(NamedTuple):
    """A launch for every call, and the same launch frozen on fixed arguments."""

    launch: Launch
    freeze: Freeze


class Bound(NamedTuple):
    """What a workspace runs: per call (:data:`Runner`) and prepared (:data:`Preparer`)."""

    run: Runner
    prepare: Preparer


def positional_launcher(launch: Launch) -> Launcher:
    """A :class:`Launcher` whose frozen call is ``launch`` with its arguments bound."""

    def freeze(*arguments: Any) -> Callable[[], Any]:
        return functools.partial(launch, *arguments)

    return Launcher(launch, freeze)


#: Keywords the facade passes to the unified ``allreduce_fusion`` (0.6.0+), besides
#: ``trigger_completion_at_end`` (0.6.8+), which is passed only where accepted.
UNIFIED_CALL: tuple[str, ...] = (
    "input",
    "workspace",
    "pattern",
    "launch_with_pdl",
    "residual_out",
    "norm_out",
    "residual_in",
    "rms_gamma",
    "rms_eps",
    "use_oneshot",
    "fp32_acc",
)

#: Keywords the facade passes to the legacy ``trtllm_allreduce_fusion`` (0.2.9+), where
#: every one of them is a required parameter.
LEGACY_CALL: tuple[str, ...] = (
    "allreduce_in",
    "world_size",
    "world_rank",
    "token_num",
    "hidden_dim",
    "workspace_ptrs",
    "launch_with_pdl",
    "trigger_completion_at_end",
    "fp32_acc",
    "pattern_code",
    "use_oneshot",
    "allreduce_out",
    "residual_in",
    "residual_out",
    "norm_out",
    "quant_out",
    "scale_out",
    "rms_gamma",
    "rms_eps",
    "scale_factor",
    "layout_code",
)


def bind_unified(
    spec: Spec,
    *,
    function: Callable[..., Any],
    native: Any,
    pattern: int,
    pass_trigger: bool,
    early_trigger: Launcher | None,
) -> Bound:
    """The paths into the unified ``allreduce_fusion``.

    Parameters
    ----------
    spec
        What the workspace holds.
    function
        ``flashinfer.comm.allreduce_fusion``.
    native
        The FlashInfer workspace object.
    pattern
        The installed release's ``kARResidualRMSNorm`` code.
    pass_trigger
        The release takes ``trigger_completion_at_end`` (0.6.8+).
    early_trigger
        Only where it does not: what runs a call with ``launch_with_pdl=True`` and
        ``trigger_completion_at_end=False`` (the release itself would signal completion
        at the end). None means the release's behaviour is the same either way.
    """
    validate = make_validator(spec)

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
    ) -> tuple[torch.Tensor, torch.Tensor]:
        norm_out, residual_out = validate(input, residual, weight, norm_out, residual_out)
        if pass_trigger:
            function(
                input=input,
                workspace=native,
                pattern=pattern,
                launch_with_pdl=launch_with_pdl,
                trigger_completion_at_end=trigger_completion_at_end,
                residual_out=residual_out,
                norm_out=norm_out,
                residual_in=residual,
                rms_gamma=weight,
                rms_eps=eps,
                use_oneshot=use_oneshot,
                fp32_acc=fp32_acc,
            )
        elif early_trigger is not None and launch_with_pdl and not trigger_completion_at_end:
            early_trigger.launch(
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
        else:
            function(
                input=input,
                workspace=native,
                pattern=pattern,
                launch_with_pdl=launch_with_pdl,
                residual_out=residual_out,
                norm_out=norm_out,
                residual_in=residual,
                rms_gamma=weight,
                rms_eps=eps,
                use_oneshot=use_oneshot,
                fp32_acc=fp32_acc,
            )
        return norm_out, residual_out

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
    ) -> Callable[[], Any]:
        if (
            not pass_trigger
            and early_trigger is not None
            and launch_with_pdl
            and not trigger_completion_at_end
        ):
            return early_trigger.freeze(
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
        values = (
            input,
            native,
            pattern,
            launch_with_pdl,
            residual_out,
            norm_out,
            residual,
            weight,
            eps,
            use_oneshot,
            fp32_acc,
        )
        arguments = dict(zip(UNIFIED_CALL, values, strict=True))
        if pass_trigger:
            arguments["trigger_completion_at_end"] = trigger_completion_at_end
        return freeze_call(function, arguments)

    return Bound(run, _preparer(validate, freeze))


def legacy_launch(
    spec: Spec, *, function: Callable[..., Any], workspace_ptrs: Any, pattern: int
) -> Launcher:
    """A launch of the legacy ``trtllm_allreduce_fusion`` on ``workspace_ptrs``.

    Used for legacy workspaces, and on 0.6.0 to 0.6.7 to honour
    ``trigger_completion_at_end=False`` on a unified TRT-LLM workspace (the unified call
    of those releases runs this same kernel with the flag tied to ``launch_with_pdl``).

    The function takes 21 arguments, too many to pass by keyword without CPython building
    a dict per call, so where its signature allows they are passed by position: the
    constants are placed once in a template, and each call copies it and fills the
    per-call slots. Behind a forwarding wrapper (the ``deprecated`` legacy entry points of
    0.6.0+), which builds its own ``**kwargs`` dict anyway, they are passed by keyword.
    """
    constants: dict[str, Any] = {
        "world_size": spec.world_size,
        "world_rank": spec.rank,
        "hidden_dim": spec.hidden_dim,
        "workspace_ptrs": workspace_ptrs,
        "pattern_code": pattern,
        "allreduce_out": None,
        "quant_out": None,
        "scale_out": None,
        "scale_factor": None,
        "layout_code": None,
    }

    def by_name(
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
    ) -> dict[str, Any]:
        """Every argument of :data:`LEGACY_CALL` by name (off the per-call path)."""
        return {
            "allreduce_in": input,
            "token_num": tokens,
            "launch_with_pdl": launch_with_pdl,
            "trigger_completion_at_end": trigger_completion_at_end,
            "fp32_acc": fp32_acc,
            "use_oneshot": use_oneshot,
            "residual_in": residual,
            "residual_out": residual_out,
            "norm_out": norm_out,
            "rms_gamma": weight,
            "rms_eps": eps,
            **constants,
        }

    def freeze(*arguments: Any) -> Callable[[], Any]:
        return freeze_call(function, by_name(*arguments))

    layout = positional_layout(function, LEGACY_CALL)
    if layout is None:

        def by_keyword(*arguments: Any) -> None:
            function(**by_name(*arguments))

        return Launcher(by_keyword, freeze)

    template, slots = layout
    slot = dict(zip(LEGACY_CALL, slots, strict=True))
    for name, value in constants.items():
        template[slot[name]] = value
    s_input = slot["allreduce_in"]
    s_tokens = slot["token_num"]
    s_pdl = slot["launch_with_pdl"]
    s_trigger = slot["trigger_completion_at_end"]
    s_fp32_acc = slot["fp32_acc"]
    s_oneshot = slot["use_oneshot"]
    s_residual = slot["residual_in"]
    s_residual_out = slot["residual_out"]
    s_norm_out = slot["norm_out"]
    s_weight = slot["rms_gamma"]
    s_eps = slot["rms_eps"]

    def launch(
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
    ) -> None:
        arguments = template.copy()
        arguments[s_input] = input
        arguments[s_tokens] = tokens
        arguments[s_pdl] = launch_with_pdl
        arguments[s_trigger] = trigger_completion_at_end
        arguments[s_fp32_acc] = fp32_acc
        arguments[s_oneshot] = use_oneshot
        arguments[s_residual] = residual
        arguments[s_residual_out] = residual_out
        arguments[s_norm_out] = norm_out
        arguments[s_weight] = weight
        arguments[s_eps] = eps
        function(*arguments)

    return Launcher(launch, freeze)


def bind_with_launch(spec: Spec, launcher: Launcher) -> Bound:
    """The paths for a launch that takes positional arguments (legacy, reference)."""
    validate = make_validator(spec)
    launch, freeze = launcher

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

    return Bound(run, _preparer(validate, freeze))


def _preparer(validate: Validator, freeze: Freeze) -> Preparer:
    """The prepare path: validate once (allocating missing outputs), then freeze."""

    def prepare(
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        norm_out: torch.Tensor | None,
        residual_out: torch.Tensor | None,
        *flags: Any,
    ) -> tuple[Callable[[], Any], torch.Tensor, torch.Tensor]:
        # flags: use_oneshot, fp32_acc, trigger_completion_at_end, launch_with_pdl
        norm_out, residual_out = validate(input, residual, weight, norm_out, residual_out)
        call = freeze(input, residual, weight, eps, norm_out, residual_out, *flags, input.shape[0])
        return call, norm_out, residual_out

    return prepare
