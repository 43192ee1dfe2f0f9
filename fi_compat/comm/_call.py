"""The per-layer call engines make: :func:`allreduce_residual_rmsnorm`, fused on a
workspace, or unfused without one.

The call checks its scalars with one boolean expression of identity comparisons (anything
unusual goes to :func:`~fi_compat.comm._call_checks.call_scalars`) and hands the tensors to
the workspace's bound ``run`` (:func:`~fi_compat.comm._launch.bind`), which checks them
(:func:`~fi_compat.comm._call_checks.make_validator`) and launches; without a workspace,
the reference path checks them against each other
(:func:`~fi_compat.comm._reference.unbound_reference`). The allreduce-fusion guide,
``docs/guide/comm.md``, says what is checked before the launch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fi_compat.comm._call_checks import FLOAT_MAX, call_scalars, not_a_workspace
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
    ``norm_out = rmsnorm(residual_out) * weight``, in one fused FlashInfer kernel on the
    workspace's API, or step by step (the reference path) when ``workspace`` is None or a
    reference workspace. The allreduce-fusion guide, ``docs/guide/comm.md``, says what is
    checked before the launch.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    input, residual
        ``(num_tokens, hidden_dim)``, contiguous, of the workspace's dtype and device.
    weight
        The RMSNorm weight, ``(hidden_dim,)``.
    workspace
        From :func:`~fi_compat.comm.create_workspace`; None runs the reference path over
        ``group``.
    eps
        RMSNorm epsilon: a finite real number >= 0.
    norm_out, residual_out
        Preallocated outputs (allocated when None); may be ``input`` and ``residual``.
    use_oneshot, fp32_acc, launch_with_pdl
        Bools passed to FlashInfer (``use_oneshot`` may be None).
    trigger_completion_at_end
        A bool, passed where the release takes it (0.6.8+).
    group
        The reference path's process group when ``workspace`` is None.

    Returns
    -------
    tuple of torch.Tensor
        ``(norm_out, residual_out)``.

    Raises
    ------
    WorkspaceMismatchError
        A tensor does not fit the workspace (without one: the other tensors).
    InvalidArgumentError
        A wrong ``workspace``, switch or ``eps``.
    WorkspaceDestroyedError
        The workspace was destroyed.
    """
    # The common call passes only identity comparisons here; anything unusual is either
    # refused or normalized (an int eps) by call_scalars, off the common path.
    if not (
        eps.__class__ is float
        and 0.0 <= eps <= FLOAT_MAX
        and (launch_with_pdl is True or launch_with_pdl is False)
        and (trigger_completion_at_end is True or trigger_completion_at_end is False)
        and (fp32_acc is False or fp32_acc is True)
        and (use_oneshot is None or use_oneshot is True or use_oneshot is False)
    ):
        eps = call_scalars(eps, use_oneshot, fp32_acc, trigger_completion_at_end, launch_with_pdl)
    if workspace is not None:
        try:
            run = workspace._run
        except AttributeError:
            raise not_a_workspace(workspace) from None
        return run(
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
