"""The unfused reference path: torch.distributed all-reduce, residual add, RMSNorm.

It computes what FlashInfer's fused ``kARResidualRMSNorm`` kernel computes, step by step:

1. ``reduced = allreduce(input)`` over the group, in the input's dtype; with
   ``fp32_acc=True`` (or float32 input) the sum is taken in float32 and rounded once, as
   the kernel does with FP32 accumulation. (gloo in torch 2.13 all-reduces bfloat16 and
   float16 on CPU natively, so no float32 detour is needed for them.)
2. ``residual_out = reduced + residual``: added in float32, rounded to the input dtype.
3. ``norm_out = residual_out * rsqrt(mean(residual_out**2) + eps) * weight``: the mean is
   taken in float32 over the rounded ``residual_out``, the products in float32, and the
   result rounded once to the input dtype.

The input is never modified. With a single process (a group of one, or torch.distributed
not initialized) no communication happens at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fi_compat._arguments import describe
from fi_compat.comm._checks import Spec, output_mismatch, tensor_mismatch
from fi_compat.comm._fused import Launcher, positional_launcher
from fi_compat.comm._group import group_span
from fi_compat.errors import WorkspaceMismatchError, explain

if TYPE_CHECKING:
    import torch

__all__ = ["reference_launch", "unbound_reference"]


def compute(
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


def reference_launch(*, group: Any, world_size: int) -> Launcher:
    """The launch of a reference workspace (see ``_fused.bind_with_launch``)."""

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
        compute(input, residual, weight, eps, norm_out, residual_out, fp32_acc, group, world_size)

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

    ``input`` must be a 2-D float16, bfloat16 or float32 tensor of at least 1 token (what
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
        raise tensor_mismatch(spec, input, residual, weight)
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
    compute(input, residual, weight, eps, norm_out, residual_out, fp32_acc, group, size)
    return norm_out, residual_out


def _input_error(input: Any) -> WorkspaceMismatchError:
    """Why ``input`` cannot run the unfused path (it is not a 2-D half/float tensor)."""
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
    return WorkspaceMismatchError(
        explain(
            "at least 1 token",
            f"input of shape {tuple(input.shape)}",
            fix="skip the call for an empty batch",
        )
    )
