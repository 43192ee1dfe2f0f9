"""What a fused call needs from its tensors, and the errors that say what was wrong.

The per-call check is :func:`make_validator`'s closure, shared by every bound call (see
``_fused``): one boolean expression of cheap attribute reads. Only when it fails is
:func:`tensor_mismatch` asked which condition failed, to build a message that names what
was expected and what was found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fi_compat.errors import WorkspaceDestroyedError, WorkspaceMismatchError, explain

if TYPE_CHECKING:
    import torch

__all__ = [
    "Spec",
    "Validator",
    "destroyed_error",
    "make_validator",
    "output_mismatch",
    "tensor_mismatch",
]


@dataclass(frozen=True)
class Spec:
    """What one workspace was created for.

    Attributes
    ----------
    world_size, rank
        Ranks in the group and this process's rank in it.
    max_token_num, hidden_dim, dtype
        The largest batch, the hidden size and the element type the workspace holds.
    device_index
        ``Tensor.get_device()`` of tensors that belong here: -1 for CPU, else the CUDA
        index.
    """

    world_size: int
    rank: int
    max_token_num: int
    hidden_dim: int
    dtype: torch.dtype
    device_index: int

    @property
    def device_name(self) -> str:
        """``"cpu"`` or ``"cuda:<index>"``."""
        return device_name(self.device_index)


def device_name(index: int) -> str:
    """The device of ``Tensor.get_device() == index``, for messages."""
    return "cpu" if index < 0 else f"cuda:{index}"


def _describe(tensor: Any) -> str:
    try:
        return (
            f"shape {tuple(tensor.shape)}, dtype {tensor.dtype}, device "
            f"{device_name(tensor.get_device())}, contiguous={tensor.is_contiguous()}"
        )
    except AttributeError:
        return f"a {type(tensor).__name__}, not a tensor"


def _check_one(name: str, tensor: Any, spec: Spec, shape: tuple[int, ...]) -> str | None:
    """The first way ``tensor`` does not fit, as ``(expected, found)`` text, or None."""
    if not hasattr(tensor, "shape"):
        return explain(f"{name} to be a torch.Tensor", f"a {type(tensor).__name__}")
    if tuple(tensor.shape) != shape:
        return explain(
            f"{name} of shape {shape}",
            f"shape {tuple(tensor.shape)}",
            fix=f"pass {name} with the same shape as input (weight: (hidden_dim,))",
        )
    if tensor.dtype != spec.dtype:
        return explain(
            f"{name} of dtype {spec.dtype} (the workspace's dtype)",
            f"dtype {tensor.dtype}",
            fix="cast the tensor, or create the workspace with this dtype",
        )
    if tensor.get_device() != spec.device_index:
        return explain(
            f"{name} on {spec.device_name} (the workspace's device)",
            f"{name} on {device_name(tensor.get_device())}",
            fix="move the tensor to the workspace's device",
        )
    if not tensor.is_contiguous():
        return explain(
            f"a contiguous {name} (the kernel reads and writes flat memory)",
            f"strides {tuple(tensor.stride())} for shape {tuple(tensor.shape)}",
            fix=f"pass {name}.contiguous()",
        )
    return None


def tensor_mismatch(spec: Spec, input: Any, residual: Any, weight: Any) -> WorkspaceMismatchError:
    """The error for inputs that failed the per-call check (called only on failure)."""
    shape = getattr(input, "shape", None)
    if shape is None or len(shape) != 2:
        found = f"shape {tuple(shape)}" if shape is not None else _describe(input)
        return WorkspaceMismatchError(
            explain(
                "input of shape (num_tokens, hidden_dim)",
                found,
                fix="reshape input to 2-D: input.view(-1, hidden_dim)",
            )
        )
    tokens, hidden = int(shape[0]), int(shape[1])
    if hidden != spec.hidden_dim:
        return WorkspaceMismatchError(
            explain(
                f"hidden size {spec.hidden_dim} (the workspace's hidden_dim)",
                f"input of shape {tuple(shape)}",
                fix="create a workspace for this hidden size",
            )
        )
    if tokens > spec.max_token_num:
        return WorkspaceMismatchError(
            explain(
                f"at most {spec.max_token_num} tokens (the workspace's max_token_num)",
                f"{tokens} tokens",
                fix="split the batch, or create the workspace with a larger max_token_num; "
                "a larger launch would overrun the workspace buffers",
            )
        )
    for name, tensor, expected in (
        ("input", input, (tokens, hidden)),
        ("residual", residual, (tokens, hidden)),
        ("weight", weight, (hidden,)),
    ):
        message = _check_one(name, tensor, spec, expected)
        if message is not None:
            return WorkspaceMismatchError(message)
    return WorkspaceMismatchError(
        explain("tensors that fit the workspace", "a mismatch fi-compat could not name")
    )


def output_mismatch(spec: Spec, name: str, tensor: Any, input: Any) -> WorkspaceMismatchError:
    """The error for a preallocated output that does not fit (called only on failure)."""
    message = _check_one(name, tensor, spec, tuple(input.shape))
    return WorkspaceMismatchError(
        message or explain(f"{name} that fits input", f"{name} with {_describe(tensor)}")
    )


def destroyed_error(api: str) -> WorkspaceDestroyedError:
    """The error for a call on a destroyed workspace."""
    return WorkspaceDestroyedError(
        explain(
            "a live allreduce-fusion workspace",
            f"a {api} workspace on which destroy() has already run",
            fix="create a new workspace with fi_compat.comm.create_workspace(); its "
            "buffers were freed, and a launch on them could corrupt memory",
        )
    )


Validator = Callable[..., "tuple[torch.Tensor, torch.Tensor]"]


def make_validator(spec: Spec) -> Validator:
    """The per-call check of one workspace, with everything it compares against bound.

    The returned ``validate(input, residual, weight, norm_out, residual_out)`` is one
    boolean expression of cheap attribute reads per tensor; it allocates the outputs that
    are None and returns ``(norm_out, residual_out)``. Only when a check fails are
    :func:`tensor_mismatch` / :func:`output_mismatch` asked which condition failed, to
    say what was expected and what was found.
    """
    import torch

    dtype, hidden, max_tokens, device = (
        spec.dtype,
        spec.hidden_dim,
        spec.max_token_num,
        spec.device_index,
    )
    weight_shape = (hidden,)
    empty_like = torch.empty_like

    def validate(
        input: torch.Tensor,
        residual: torch.Tensor,
        weight: torch.Tensor,
        norm_out: torch.Tensor | None,
        residual_out: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        shape = input.shape
        if not (
            input.dtype is dtype
            and residual.dtype is dtype
            and weight.dtype is dtype
            and len(shape) == 2
            and shape[1] == hidden
            and shape[0] <= max_tokens
            and residual.shape == shape
            and weight.shape == weight_shape
            and input.get_device() == device
            and residual.get_device() == device
            and weight.get_device() == device
            and input.is_contiguous()
            and residual.is_contiguous()
            and weight.is_contiguous()
        ):
            raise tensor_mismatch(spec, input, residual, weight)
        if norm_out is None:
            norm_out = empty_like(input)
        elif not (
            norm_out.dtype is dtype
            and norm_out.shape == shape
            and norm_out.get_device() == device
            and norm_out.is_contiguous()
        ):
            raise output_mismatch(spec, "norm_out", norm_out, input)
        if residual_out is None:
            residual_out = empty_like(input)
        elif not (
            residual_out.dtype is dtype
            and residual_out.shape == shape
            and residual_out.get_device() == device
            and residual_out.is_contiguous()
        ):
            raise output_mismatch(spec, "residual_out", residual_out, input)
        return norm_out, residual_out

    return validate
