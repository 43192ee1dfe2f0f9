"""``allreduce_residual_rmsnorm``: the one call engines make per layer per step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fi_compat.comm._reference import unbound_reference

if TYPE_CHECKING:
    import torch

    from fi_compat.comm._workspace import FusionWorkspace

__all__ = ["allreduce_residual_rmsnorm"]


def allreduce_residual_rmsnorm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    *,
    workspace: FusionWorkspace | None,
    eps: float = 1e-6,
    norm_out: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    use_oneshot: bool | None = None,
    fp32_acc: bool = False,
    trigger_completion_at_end: bool = True,
    launch_with_pdl: bool = True,
    group: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All-reduce ``input``, add ``residual``, apply RMSNorm with ``weight``.

    ``residual_out = allreduce(input) + residual`` and
    ``norm_out = rmsnorm(residual_out) * weight``, fused into one FlashInfer kernel
    (pattern ``kARResidualRMSNorm``) on whichever API the workspace was bound to, or
    computed step by step with torch.distributed when ``workspace`` is None or a reference
    workspace.

    Parameters
    ----------
    input, residual
        ``(num_tokens, hidden_dim)``, contiguous, of the workspace's dtype and device.
    weight
        The RMSNorm weight, ``(hidden_dim,)``.
    workspace
        From :func:`~fi_compat.comm.create_workspace`; None runs the unfused reference
        path over ``group``.
    eps
        RMSNorm epsilon.
    norm_out, residual_out
        Preallocated outputs (allocated when None).
    use_oneshot, fp32_acc, launch_with_pdl
        Passed to FlashInfer (the reference path honours ``fp32_acc``).
    trigger_completion_at_end
        Passed where the release takes it (0.6.8+); before that, see
        ``FusionWorkspace.decisions`` for how False is honoured.
    group
        The process group of the reference path when ``workspace`` is None (a workspace
        carries its own).

    Returns
    -------
    tuple of torch.Tensor
        ``(norm_out, residual_out)``.

    Raises
    ------
    WorkspaceMismatchError
        A tensor does not fit the workspace (checked before any launch).
    WorkspaceDestroyedError
        The workspace was destroyed.
    """
    if workspace is not None:
        return workspace._run(
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
        )
    return unbound_reference(
        input,
        residual,
        weight,
        eps=eps,
        norm_out=norm_out,
        residual_out=residual_out,
        fp32_acc=fp32_acc,
        group=group,
    )
