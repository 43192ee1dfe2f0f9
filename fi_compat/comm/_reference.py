"""The unfused reference path: torch.distributed all-reduce, residual add, RMSNorm.

It computes what FlashInfer's fused ``kARResidualRMSNorm`` kernel computes, step by step,
in the precision the allreduce-fusion guide, ``docs/guide/comm.md`` ("The reference
path"), gives.

Like the API modules it owns its whole path: the workspace (:func:`create_reference`, no
buffers, nothing to destroy), its launch, the call without a workspace
(:func:`unbound_reference`) and the drop-in's patterns (:func:`call_reference`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fi_compat._arguments import describe
from fi_compat._requirements.names import TORCH_DISTRIBUTED, reference_feature
from fi_compat.comm._call_checks import mismatch, output_mismatch
from fi_compat.comm._factory import Created, Request
from fi_compat.comm._group import group_span
from fi_compat.comm._launch import Launcher, Runner, bind, positional_launcher
from fi_compat.comm._names import PATTERN_NAMES, AllReduceFusionPattern
from fi_compat.comm._sizes import exact_fit, product_fit
from fi_compat.comm._types import Spec, Values
from fi_compat.errors import CapabilityMissingError, WorkspaceMismatchError, explain

if TYPE_CHECKING:
    import torch

__all__ = [
    "IGNORED",
    "READS",
    "call_reference",
    "create_reference",
    "unbound_reference",
]

_RMSNORM = AllReduceFusionPattern.kARResidualRMSNorm
_ALLREDUCE = AllReduceFusionPattern.kAllReduce


def _compute(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    norm_out: torch.Tensor,
    residual_out: torch.Tensor,
    fp32_acc: bool,
    group: Any,
    world_size: int,
) -> None:
    """Fill ``residual_out`` and ``norm_out`` (shapes and dtypes already checked)."""
    import torch
    import torch.distributed as dist

    if world_size > 1:
        if fp32_acc and input.dtype is not torch.float32:
            wide = input.to(torch.float32)
            dist.all_reduce(wide, group=group)
            reduced = wide.to(input.dtype)
        else:
            reduced = input.clone()
            dist.all_reduce(reduced, group=group)
    else:
        reduced = input
    torch.add(reduced, residual, out=residual_out)
    wide_residual = residual_out.to(torch.float32)
    scale = torch.rsqrt(wide_residual.square().mean(dim=-1, keepdim=True) + eps)
    norm_out.copy_(wide_residual * scale * weight.to(torch.float32))


def create_reference(request: Request, reason: str | None) -> Created:
    """An unfused workspace over the request's group (``reason`` says why it is unfused).

    Raises
    ------
    CapabilityMissingError
        It is for several processes and torch.distributed is not initialized.
    """
    spec = request.spec
    if request.span.size is None and spec.world_size > 1:
        raise CapabilityMissingError(
            explain(
                f"torch.distributed initialized for a reference workspace of "
                f"{spec.world_size} processes",
                "torch.distributed not initialized",
                fix="call torch.distributed.init_process_group() first",
            ),
            feature=TORCH_DISTRIBUTED,
        )
    fit = product_fit(
        spec,
        "reference",
        "no FlashInfer buffers: served as FlashInfer's TRT-LLM workspace serves it",
    )
    return Created(
        backend="reference",
        bound=bind(spec, fit, _launcher(request.group, spec.world_size)),
        destroy=None,
        fit=fit,
        decisions=(f"unfused reference path: {reason}",),
        reason=reason,
    )


def _launcher(group: Any, world_size: int) -> Launcher:
    """The launch of a reference workspace: :func:`_compute` on validated tensors."""

    def launch(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> None:
        input, residual, weight, eps, _, _, _, fp32_acc, _, _ = call
        _compute(input, residual, weight, eps, norm_out, residual_out, fp32_acc, group, world_size)

    return positional_launcher(launch)


def unbound_reference(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    *,
    eps: float,
    norm_out: torch.Tensor | None,
    residual_out: torch.Tensor | None,
    fp32_acc: bool,
    group: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference path without a workspace: checks the tensors against each other.

    ``input`` must be a 2-D float16, bfloat16 or float32 tensor of at least 1 token and a
    hidden size of at least 1 (what
    the fused kernels take); the other tensors must fit it. ``eps`` and ``fp32_acc`` were
    checked by the caller.
    """
    import torch

    shape = getattr(input, "shape", None)
    dtype = getattr(input, "dtype", None)
    if not (
        isinstance(input, torch.Tensor)
        and (dtype is torch.bfloat16 or dtype is torch.float16 or dtype is torch.float32)
        and shape is not None
        and len(shape) == 2
        and shape[0] > 0
        and shape[1] > 0
    ):
        raise _input_error(input)
    spec = Spec(
        world_size=1,
        rank=0,
        max_token_num=int(shape[0]),
        hidden_dim=int(shape[1]),
        dtype=input.dtype,
        device_index=input.get_device(),
    )
    try:
        fits = (
            residual.shape == shape
            and weight.shape == (shape[1],)
            and residual.dtype is input.dtype
            and weight.dtype is input.dtype
            and residual.get_device() == spec.device_index
            and weight.get_device() == spec.device_index
        )
    except Exception:  # not a tensor
        fits = False
    if not fits:
        raise mismatch(spec, exact_fit(spec, "reference", "its own input"), input, residual, weight)
    if norm_out is None:
        norm_out = torch.empty_like(input)
    elif not (
        isinstance(norm_out, torch.Tensor)
        and norm_out.shape == shape
        and norm_out.dtype is input.dtype
        and norm_out.get_device() == spec.device_index
    ):
        raise output_mismatch(spec, "norm_out", norm_out, input, weight)
    if residual_out is None:
        residual_out = torch.empty_like(input)
    elif not (
        isinstance(residual_out, torch.Tensor)
        and residual_out is not norm_out
        and residual_out.shape == shape
        and residual_out.dtype is input.dtype
        and residual_out.get_device() == spec.device_index
    ):
        raise output_mismatch(spec, "residual_out", residual_out, input, weight, norm_out)
    size = group_span(group).size or 1
    _compute(input, residual, weight, eps, norm_out, residual_out, fp32_acc, group, size)
    return norm_out, residual_out


def _input_error(input: Any) -> WorkspaceMismatchError:
    """Why ``input`` cannot run the unfused path (not a 2-D half/float tensor of at least
    one token and one element per token)."""
    import torch

    if not isinstance(input, torch.Tensor):
        return WorkspaceMismatchError(
            explain("input to be a torch.Tensor", describe(input), fix="pass input as a tensor")
        )
    if input.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return WorkspaceMismatchError(
            explain(
                "input of dtype torch.float16, torch.bfloat16 or torch.float32 (what the "
                "fused kernels take)",
                f"dtype {input.dtype}",
                fix="cast the activations",
            )
        )
    if input.dim() != 2:
        return WorkspaceMismatchError(
            explain(
                "input of shape (num_tokens, hidden_dim)",
                f"shape {tuple(input.shape)}",
                fix="reshape input to 2-D: input.view(-1, hidden_dim)",
            )
        )
    if input.shape[1] < 1:
        return WorkspaceMismatchError(
            explain(
                "a hidden size of at least 1",
                f"input of shape {tuple(input.shape)}",
                fix="skip the call: a zero-width tensor has nothing to all-reduce",
            )
        )
    return WorkspaceMismatchError(
        explain(
            "at least 1 token",
            f"input of shape {tuple(input.shape)}",
            fix="skip the call for an empty batch",
        )
    )


#: Per pattern the unfused path computes, the drop-in arguments it reads.
READS: dict[int, frozenset[str]] = {
    _RMSNORM: frozenset(
        {"residual_in", "rms_gamma", "rms_eps", "norm_out", "residual_out", "output"}
    ),
    _ALLREDUCE: frozenset({"output"}),
}
#: Drop-in arguments that change how the kernel runs, not what it computes.
IGNORED = frozenset({"launch_with_pdl", "trigger_completion_at_end", "use_oneshot", "fp32_acc"})


def call_reference(
    input: Any,
    pattern: int,
    values: Mapping[str, Any],
    given: Mapping[str, Any],
    *,
    spec: Spec,
    group: Any,
    run: Runner,
    reason: str | None,
) -> Any:
    """The drop-in's call on a reference workspace: ``kAllReduce``, or
    ``kARResidualRMSNorm`` through the workspace's own ``run``.

    ``values`` holds every drop-in argument after ``pattern``, ``given`` those that differ
    from their defaults. Any other pattern, or a quantization or MoE argument, raises
    :class:`~fi_compat.errors.CapabilityMissingError` (``reason`` says why the workspace
    is unfused) whose ``feature`` is :func:`reference_feature` of the pattern asked for.
    """
    import torch

    allowed = READS.get(pattern)
    if allowed is None or set(given) - allowed - IGNORED:
        extra = sorted(set(given) - (allowed or set()) - IGNORED)
        name = PATTERN_NAMES.get(pattern, pattern)
        raise CapabilityMissingError(
            explain(
                "kAllReduce or kARResidualRMSNorm without quantization or MoE arguments "
                "(what the unfused reference path computes)",
                f"pattern {name}" + (f" with {', '.join(extra)}" if extra else ""),
                fix=f"create a fused workspace (this one is unfused: {reason})",
            ),
            feature=reference_feature(str(name)),
        )
    output = values["output"]
    if pattern == _ALLREDUCE:
        if output is None:
            output = torch.empty_like(input)
        output.copy_(input)
        if spec.world_size > 1:
            import torch.distributed as dist

            if values["fp32_acc"] and input.dtype is not torch.float32:
                wide = input.to(torch.float32)
                dist.all_reduce(wide, group=group)
                output.copy_(wide)
            else:
                dist.all_reduce(output, group=group)
        return output
    residual, weight = values["residual_in"], values["rms_gamma"]
    if residual is None or weight is None:
        raise CapabilityMissingError(
            explain("residual_in and rms_gamma for kARResidualRMSNorm", "one of them None"),
            feature=reference_feature(PATTERN_NAMES[_RMSNORM]),
        )
    norm_out, _ = run(
        input,
        residual,
        weight,
        values["rms_eps"],
        values["norm_out"],
        values["residual_out"],
        None,
        bool(values["fp32_acc"]),
        True,
        False,
    )
    # Like the kernel, kARResidualRMSNorm leaves ``output`` (allreduce_out) unwritten.
    return norm_out
