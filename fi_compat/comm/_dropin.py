"""Drop-in names with the newest FlashInfer signatures, adapted to the installed release.

``create_allreduce_fusion_workspace``, ``allreduce_fusion`` and ``AllReduceFusionPattern``
keep FlashInfer 0.7.2.post1's parameters and run on whatever release is installed. Their
arguments are checked by :mod:`fi_compat.comm._call_checks` and
:mod:`fi_compat.comm._create_checks`, as those of the per-layer call and of
``create_workspace`` are. The allreduce-fusion guide, ``docs/guide/comm.md`` ("Drop-in
names"), says what an argument the release cannot take does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fi_compat._arguments import describe
from fi_compat.comm._call_checks import (
    FLOAT_MAX,
    PATTERN_CLASS,
    PATTERN_FIX,
    call_scalars,
    check_input,
    check_native_input,
    check_options,
    check_pattern_code,
    check_tensors,
    destroyed_error,
)
from fi_compat.comm._factory import pattern_codes
from fi_compat.comm._legacy import call_legacy
from fi_compat.comm._names import PATTERN_NAMES, AllReduceFusionPattern
from fi_compat.comm._reference import call_reference
from fi_compat.comm._unified import call_unified
from fi_compat.comm._workspace import FusionWorkspace, create_workspace
from fi_compat.errors import InvalidArgumentError, WorkspaceMismatchError, explain

if TYPE_CHECKING:
    import torch

__all__ = [
    "DEFAULTS",
    "allreduce_fusion",
    "create_allreduce_fusion_workspace",
]

_RMSNORM = AllReduceFusionPattern.kARResidualRMSNorm
_ALLREDUCE = AllReduceFusionPattern.kAllReduce

#: Arguments of the newest ``allreduce_fusion`` after ``pattern``, with their defaults.
DEFAULTS: dict[str, Any] = {
    "launch_with_pdl": False,
    "trigger_completion_at_end": True,
    "output": None,
    "residual_out": None,
    "norm_out": None,
    "quant_out": None,
    "scale_out": None,
    "residual_in": None,
    "rms_gamma": None,
    "rms_eps": 1e-6,
    "scale_factor": None,
    "layout_code": None,
    "use_oneshot": None,
    "fp32_acc": False,
    "moe_reduction_device_num_experts": None,
    "moe_reduction_scale_input": None,
    "moe_reduction_active_experts_token_input": None,
    "moe_reduction_token_input": None,
    "expanded_idx_to_permuted_idx": None,
    "expert_scale_factor": None,
    "shared_expert_output": None,
    "block_quant_group_size": None,
    "weight_bias": 0.0,
    "moe_finalize_backend": "trtllm",
}


def create_allreduce_fusion_workspace(
    backend: str = "auto",
    world_size: int | None = None,
    rank: int | None = None,
    max_token_num: int | None = None,
    hidden_dim: int | None = None,
    dtype: torch.dtype | None = None,
    gpus_per_node: int | None = None,
    comm_backend: Any | None = None,
    force_oneshot_support: bool = False,
    group: Any | None = None,
    *,
    top_k: int | None = None,
    rms_eps: float | None = None,
    weight_bias: float | None = None,
    routed_scaling_factor: float | None = None,
    include_shared_expert: bool | None = None,
    add_residual: bool | None = None,
    write_residual_output: bool | None = None,
    apply_rms_norm: bool | None = None,
    output_dtype: torch.dtype | None = None,
    dynamic_fp8: bool | None = None,
    write_norm_output: bool | None = None,
    config: Any | None = None,
) -> FusionWorkspace:
    """FlashInfer's ``create_allreduce_fusion_workspace`` (0.7.2.post1 signature), any release.

    Runs :func:`~fi_compat.comm.create_workspace` with ``fallback=False``: the unified
    factory where present, else the legacy IPC workspace; ``group`` is honoured as
    described there. The keyword-only options exist only in the newest releases and raise
    :class:`~fi_compat.errors.CapabilityMissingError` elsewhere when set.

    .. versionadded:: 0.2.0

    Returns
    -------
    FusionWorkspace
        Also answers the attributes of FlashInfer's own workspace object.

    Raises
    ------
    WorkspaceMismatchError
        ``world_size``, ``rank``, ``max_token_num``, ``hidden_dim`` or ``dtype`` is
        missing or wrong.
    InvalidArgumentError
        Another argument has the wrong type or value (a ``backend`` the installed release
        does not list, a non-bool switch, a bad keyword-only option such as ``top_k="8"``
        or ``rms_eps=nan``), or the world size cannot run fused (see
        :func:`~fi_compat.comm.create_workspace`).
    CapabilityMissingError, FlashInferUnavailableError, GroupNotSupportedError
        As for :func:`~fi_compat.comm.create_workspace`.
    """
    options = {
        "top_k": top_k,
        "rms_eps": rms_eps,
        "weight_bias": weight_bias,
        "routed_scaling_factor": routed_scaling_factor,
        "include_shared_expert": include_shared_expert,
        "add_residual": add_residual,
        "write_residual_output": write_residual_output,
        "apply_rms_norm": apply_rms_norm,
        "output_dtype": output_dtype,
        "dynamic_fp8": dynamic_fp8,
        "write_norm_output": write_norm_output,
        "config": config,
    }
    if world_size is None or rank is None or max_token_num is None or hidden_dim is None:
        raise WorkspaceMismatchError(
            explain(
                "world_size, rank, max_token_num and hidden_dim",
                f"world_size={world_size}, rank={rank}, max_token_num={max_token_num}, "
                f"hidden_dim={hidden_dim}",
                fix="pass all four (FlashInfer needs them too)",
            )
        )
    return create_workspace(
        world_size,
        rank,
        max_token_num,
        hidden_dim,
        dtype,  # type: ignore[arg-type]  # None is refused there with the dtype message
        group=group,
        backend=backend,
        comm_backend=comm_backend,
        gpus_per_node=gpus_per_node,
        force_oneshot_support=force_oneshot_support,
        factory_options={name: value for name, value in options.items() if value is not None},
        fallback=False,
    )


def allreduce_fusion(
    input: torch.Tensor,
    workspace: Any,
    pattern: int,
    launch_with_pdl: bool = False,
    trigger_completion_at_end: bool = True,
    output: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    norm_out: torch.Tensor | None = None,
    quant_out: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
    residual_in: torch.Tensor | None = None,
    rms_gamma: torch.Tensor | None = None,
    rms_eps: float = 1e-6,
    scale_factor: float | torch.Tensor | None = None,
    layout_code: int | None = None,
    use_oneshot: bool | None = None,
    fp32_acc: bool = False,
    moe_reduction_device_num_experts: int | None = None,
    moe_reduction_scale_input: torch.Tensor | None = None,
    moe_reduction_active_experts_token_input: torch.Tensor | None = None,
    moe_reduction_token_input: torch.Tensor | None = None,
    expanded_idx_to_permuted_idx: torch.Tensor | None = None,
    expert_scale_factor: torch.Tensor | None = None,
    shared_expert_output: torch.Tensor | None = None,
    block_quant_group_size: int | None = None,
    weight_bias: float = 0.0,
    *,
    moe_finalize_backend: str = "trtllm",
) -> torch.Tensor:
    """FlashInfer's ``allreduce_fusion`` (0.7.2.post1 signature), on any release.

    With a :class:`~fi_compat.comm.FusionWorkspace` and the plain ``kARResidualRMSNorm``
    pattern, this is :func:`~fi_compat.comm.allreduce_residual_rmsnorm` (missing outputs
    are allocated); other patterns are mapped to the workspace's API, and a FlashInfer
    workspace object is passed to the installed ``allreduce_fusion`` as is. Every argument
    is checked first; the allreduce-fusion guide, ``docs/guide/comm.md`` ("Drop-in
    names"), says how.

    .. versionadded:: 0.2.0

    Returns
    -------
    torch.Tensor
        ``norm_out`` when given (or allocated), else ``quant_out``, else ``output``, as
        FlashInfer returns.

    Raises
    ------
    WorkspaceMismatchError
        A tensor does not fit the FusionWorkspace.
    InvalidArgumentError
        Another argument has the wrong type or value.
    WorkspaceDestroyedError
        The workspace was destroyed.
    CapabilityMissingError
        The installed release (or the unfused path) cannot run what was asked.
    """
    if not (
        rms_eps.__class__ is float
        and 0.0 <= rms_eps <= FLOAT_MAX
        and (launch_with_pdl is True or launch_with_pdl is False)
        and (trigger_completion_at_end is True or trigger_completion_at_end is False)
        and (fp32_acc is False or fp32_acc is True)
        and (use_oneshot is None or use_oneshot is True or use_oneshot is False)
        and pattern.__class__ is int
    ):
        rms_eps = call_scalars(
            rms_eps,
            use_oneshot,
            fp32_acc,
            trigger_completion_at_end,
            launch_with_pdl,
            eps_name="rms_eps",
        )
        check_pattern_code(pattern)
    if (
        isinstance(workspace, FusionWorkspace)
        and pattern == _RMSNORM
        and residual_in is not None
        and rms_gamma is not None
        and output is None
        and quant_out is None
        and scale_out is None
        and scale_factor is None
        and layout_code is None
        and moe_reduction_device_num_experts is None
        and moe_reduction_scale_input is None
        and moe_reduction_active_experts_token_input is None
        and moe_reduction_token_input is None
        and expanded_idx_to_permuted_idx is None
        and expert_scale_factor is None
        and shared_expert_output is None
        and block_quant_group_size is None
        and weight_bias == 0.0
        and moe_finalize_backend == "trtllm"
    ):
        return workspace._run(
            input,
            residual_in,
            rms_gamma,
            rms_eps,
            norm_out,
            residual_out,
            use_oneshot,
            fp32_acc,
            trigger_completion_at_end,
            launch_with_pdl,
        )[0]
    values = {
        "launch_with_pdl": launch_with_pdl,
        "trigger_completion_at_end": trigger_completion_at_end,
        "output": output,
        "residual_out": residual_out,
        "norm_out": norm_out,
        "quant_out": quant_out,
        "scale_out": scale_out,
        "residual_in": residual_in,
        "rms_gamma": rms_gamma,
        "rms_eps": rms_eps,
        "scale_factor": scale_factor,
        "layout_code": layout_code,
        "use_oneshot": use_oneshot,
        "fp32_acc": fp32_acc,
        "moe_reduction_device_num_experts": moe_reduction_device_num_experts,
        "moe_reduction_scale_input": moe_reduction_scale_input,
        "moe_reduction_active_experts_token_input": moe_reduction_active_experts_token_input,
        "moe_reduction_token_input": moe_reduction_token_input,
        "expanded_idx_to_permuted_idx": expanded_idx_to_permuted_idx,
        "expert_scale_factor": expert_scale_factor,
        "shared_expert_output": shared_expert_output,
        "block_quant_group_size": block_quant_group_size,
        "weight_bias": weight_bias,
        "moe_finalize_backend": moe_finalize_backend,
    }
    given = {name: value for name, value in values.items() if not _is_default(name, value)}
    check_options(given)
    result: torch.Tensor
    if not isinstance(workspace, FusionWorkspace):
        check_native_input(input, workspace)
        result = call_unified(input, workspace, pattern, given)
        return result
    if workspace.destroyed:
        raise destroyed_error(workspace.api)
    known = pattern in PATTERN_NAMES
    if not known:
        _passed_through(workspace, pattern)
    check_input(workspace.spec, workspace.fit, input, use_oneshot)
    check_tensors(workspace.spec, input, given)
    if (
        known
        and pattern != _ALLREDUCE
        and workspace.fused
        and workspace.backend != "mnnvl-cutedsl"  # may be compiled without residual or norm
        and ("residual_in" not in given or "rms_gamma" not in given)
    ):
        raise InvalidArgumentError(
            explain(
                f"residual_in and rms_gamma for pattern {PATTERN_NAMES[pattern]}",
                "residual_in=None" if "residual_in" not in given else "rms_gamma=None",
                fix="pass both (the kernel reads them)",
            )
        )
    if workspace.api == "unified":
        result = call_unified(input, workspace.native, pattern, given)
    elif workspace.api == "legacy":
        result = call_legacy(
            input,
            pattern,
            values,
            given,
            spec=workspace.spec,
            workspace_ptrs=workspace.workspace_tensor,
        )
    else:
        result = call_reference(
            input,
            pattern,
            values,
            given,
            spec=workspace.spec,
            group=workspace.group,
            run=workspace._run,
            reason=workspace.reason,
        )
    return result


# ------------------------------------------------------------------------- the mappings


def _is_default(name: str, value: Any) -> bool:
    default = DEFAULTS[name]
    return value is default or (
        default is not None and type(value) is type(default) and value == default
    )


def _passed_through(workspace: FusionWorkspace, pattern: int) -> None:
    """A pattern code fi-compat does not know goes to the release when its own
    ``AllReduceFusionPattern`` has it (said once in ``workspace.decisions``); one it lacks
    too is refused. What it computes is the release's: fi-compat checks ``input`` and the
    tensors it knows, and the unfused path refuses it (it cannot compute it)."""
    members = pattern_codes()
    if pattern not in members:
        raise InvalidArgumentError(
            explain(
                f"pattern to be a code of the installed {PATTERN_CLASS} (fi-compat's or "
                "FlashInfer's own)",
                describe(pattern),
                fix=PATTERN_FIX,
            )
        )
    decision = (
        f"pattern {pattern} ({PATTERN_CLASS}.{members[pattern]}), unknown to fi-compat, "
        "passed to FlashInfer as given"
    )
    if workspace.fused and decision not in workspace.decisions:
        workspace.decisions = (*workspace.decisions, decision)
