"""What a fused call needs from its arguments, and the errors that say what was wrong.

The per-call check is :func:`make_validator`'s closure, shared by every bound call (see
``_bound``): one boolean expression of cheap attribute reads, with the fast bounds of the
workspace's :class:`~fi_compat.comm._sizes.Fit`. Only when it fails (or raises, as it does
for something that is not a tensor at all) is :func:`tensor_mismatch` asked: the whole rule
of the fit (:func:`size_mismatch`) may still serve the call; otherwise it names what was
expected and what was found.

The scalar arguments of a call (``eps`` and the boolean switches) are checked the same
way by the entry points themselves: one boolean expression of identity comparisons
(``eps.__class__ is float``, ``launch_with_pdl is True or launch_with_pdl is False``), and
only when it fails :func:`call_scalars`, which raises the precise error or accepts an
unusual but valid value (an ``int`` or a float subclass as ``eps``).

The arguments of ``create_workspace`` are checked in ``_creation``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from fi_compat._arguments import (
    describe,
    require_bool,
    require_real,
)
from fi_compat.errors import (
    CallSizeUnsupportedError,
    InvalidArgumentError,
    WorkspaceDestroyedError,
    WorkspaceMismatchError,
    explain,
)

if TYPE_CHECKING:
    import torch

    from fi_compat.comm._bound import Values
    from fi_compat.comm._sizes import Fit

__all__ = [
    "FLOAT_MAX",
    "Spec",
    "Validator",
    "call_scalars",
    "check_tensor",
    "destroyed_error",
    "device_name",
    "is_tensor",
    "make_validator",
    "mismatch",
    "not_a_workspace",
    "output_mismatch",
    "size_mismatch",
    "tensor_mismatch",
]

#: The largest finite float: ``0.0 <= eps <= FLOAT_MAX`` is False for nan, inf and < 0.
FLOAT_MAX = sys.float_info.max


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


def is_tensor(value: Any) -> bool:
    """``value`` is a ``torch.Tensor`` (torch imported on first use)."""
    import torch

    return isinstance(value, torch.Tensor)


def _describe(tensor: Any) -> str:
    if not is_tensor(tensor):
        return f"{describe(tensor)}, not a torch.Tensor"
    return (
        f"shape {tuple(tensor.shape)}, dtype {tensor.dtype}, device "
        f"{device_name(tensor.get_device())}, contiguous={tensor.is_contiguous()}"
    )


def check_tensor(name: str, tensor: Any, spec: Spec, shape: tuple[int, ...]) -> str | None:
    """The first way ``tensor`` does not fit, as ``(expected, found)`` text, or None."""
    if not is_tensor(tensor):
        return explain(
            f"{name} to be a torch.Tensor",
            describe(tensor),
            fix=f"pass {name} as a torch.Tensor on {spec.device_name}",
        )
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


def tensor_mismatch(
    spec: Spec,
    fit: Fit,
    input: Any,
    residual: Any,
    weight: Any,
    *,
    use_oneshot: Any = None,
    only_input: bool = False,
) -> WorkspaceMismatchError | None:
    """What is wrong with a call's tensors, or None when they fit after all.

    Called when the per-call check's fast bounds did not hold: every tensor is checked
    against the call's own ``(tokens, hidden)``, then the whole rule of ``fit`` decides
    whether that size runs. ``only_input`` diagnoses ``input`` alone (``residual`` and
    ``weight`` are ignored).
    """
    named = (
        (("input", input),)
        if only_input
        else (
            ("input", input),
            ("residual", residual),
            ("weight", weight),
        )
    )
    for name, value in named:
        if not is_tensor(value):
            return WorkspaceMismatchError(
                explain(
                    f"{name} to be a torch.Tensor",
                    describe(value),
                    fix=f"pass {name} as a torch.Tensor on {spec.device_name}",
                )
            )
    shape = input.shape
    if len(shape) != 2:
        return WorkspaceMismatchError(
            explain(
                "input of shape (num_tokens, hidden_dim)",
                f"shape {tuple(shape)}",
                fix="reshape input to 2-D: input.view(-1, hidden_dim)",
            )
        )
    tokens, hidden = int(shape[0]), int(shape[1])
    expected = {"input": (tokens, hidden), "residual": (tokens, hidden), "weight": (hidden,)}
    for name, tensor in named:
        message = check_tensor(name, tensor, spec, expected[name])
        if message is not None:
            return WorkspaceMismatchError(message)
    # Last: the rule may ask the workspace's own check, which only valid tensors reach.
    return size_mismatch(spec, fit, tokens, hidden, use_oneshot)


def mismatch(
    spec: Spec, fit: Fit, input: Any, residual: Any, weight: Any, **options: Any
) -> WorkspaceMismatchError:
    """:func:`tensor_mismatch` where a check already failed: never None."""
    return tensor_mismatch(spec, fit, input, residual, weight, **options) or WorkspaceMismatchError(
        explain("tensors that fit the workspace", "a mismatch fi-compat could not name")
    )


def size_mismatch(
    spec: Spec, fit: Fit, tokens: int, hidden: int, use_oneshot: Any = None
) -> WorkspaceMismatchError | None:
    """Why a call of ``tokens`` x ``hidden`` cannot run on the workspace, or None."""
    found = f"input of shape ({tokens}, {hidden})"
    if hidden < 1:
        return WorkspaceMismatchError(
            explain(
                "a hidden size of at least 1",
                found,
                fix="skip the call: a zero-width tensor has nothing to all-reduce",
            )
        )
    if tokens < 1:
        return WorkspaceMismatchError(
            explain(
                "at least 1 token",
                found,
                fix="skip the call for an empty batch (FlashInfer's kernels require at "
                "least 1 token)",
            )
        )
    if fit.rule == "exact" and hidden != spec.hidden_dim and tokens * hidden <= fit.capacity:
        first = fit.relaxed_in
        return CallSizeUnsupportedError(
            explain(
                f"hidden size {spec.hidden_dim} (the workspace's hidden_dim: it serves only "
                f"its own, because {fit.why})",
                found,
                changed_in=first,
                fix="create a workspace for this hidden size, or a unified-API workspace of "
                f"flashinfer-python {first}, measured to serve any call that fits",
            ),
            feature=fit.feature,
            introduced_in=first,
        )
    if fit.admits(tokens, hidden, use_oneshot):
        return None
    if fit.rule == "exact" and hidden != spec.hidden_dim:
        expected = (
            f"hidden size {spec.hidden_dim} (the workspace's hidden_dim) and at most "
            f"{spec.max_token_num} tokens"
        )
    elif fit.rule == "exact":
        expected = f"at most {spec.max_token_num} tokens (the workspace's max_token_num)"
    elif fit.rule == "product":
        expected = (
            f"tokens x hidden at most {fit.capacity} (the workspace's max_token_num "
            f"{spec.max_token_num} x hidden_dim {spec.hidden_dim})"
        )
    else:
        oneshot = "" if use_oneshot is None else f" with use_oneshot={use_oneshot}"
        expected = (
            "a call whose bytes fit the workspace's buffer (its own is_buffer_size_sufficient"
            f"{oneshot}, as FlashInfer checks it)"
        )
    return WorkspaceMismatchError(
        explain(
            expected,
            found,
            fix="split the batch, or create the workspace with a larger max_token_num; "
            "a larger launch would overrun the workspace buffers",
        )
    )


def output_mismatch(
    spec: Spec, name: str, tensor: Any, input: Any, weight: Any = None, other: Any = None
) -> WorkspaceMismatchError:
    """The error for a preallocated output that does not fit (called only on failure).

    ``weight`` and ``other`` (the output checked before this one) are what the output
    must not be the very same tensor object as; ``input`` has passed its checks.
    """
    if tensor is weight:
        return WorkspaceMismatchError(
            explain(
                f"{name} to be a tensor of its own",
                "the RMSNorm weight itself",
                fix=f"pass a separate {name} buffer (or None to have one allocated)",
            )
        )
    if other is not None and tensor is other:
        return WorkspaceMismatchError(
            explain(
                "norm_out and residual_out to be different tensors",
                "the same tensor object for both",
                fix="pass two buffers: the kernel writes both outputs (in place is fine: "
                "norm_out=input, residual_out=residual)",
            )
        )
    message = check_tensor(name, tensor, spec, tuple(input.shape))
    return WorkspaceMismatchError(
        message or explain(f"{name} that fits input", f"{name} with {_describe(tensor)}")
    )


def not_a_workspace(workspace: Any) -> InvalidArgumentError:
    """The error for something passed as ``workspace`` that is not a FusionWorkspace."""
    return InvalidArgumentError(
        explain(
            "workspace to be a fi_compat.comm.FusionWorkspace or None",
            describe(workspace),
            fix="create one with fi_compat.comm.create_workspace() (a FlashInfer workspace "
            "object goes to fi_compat.comm.allreduce_fusion, the drop-in), or pass None for "
            "the unfused path",
        )
    )


def call_scalars(
    eps: Any,
    use_oneshot: Any,
    fp32_acc: Any,
    trigger_completion_at_end: Any,
    launch_with_pdl: Any,
    *,
    eps_name: str = "eps",
) -> float:
    """The slow check of a call's scalars: raises the precise error, or returns ``eps``.

    Called only when the entry point's one boolean expression of identity comparisons
    failed; an unusual but valid ``eps`` (an int, a float subclass) comes back as a float.

    Raises
    ------
    InvalidArgumentError
        A switch is not a bool (``use_oneshot``: not None or a bool), or ``eps`` is not a
        finite real number >= 0.
    """
    require_bool("use_oneshot", use_oneshot, optional=True)
    require_bool("fp32_acc", fp32_acc)
    require_bool("trigger_completion_at_end", trigger_completion_at_end)
    require_bool("launch_with_pdl", launch_with_pdl)
    return require_real(eps_name, eps, minimum=0.0)


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


class Validator(Protocol):
    """The per-call check of one workspace (see :func:`make_validator`).

    A call's values -> ``(norm_out, residual_out, tokens, hidden)``, the outputs that were
    None allocated, and the call's own sizes.
    """

    def __call__(self, call: Values, /) -> tuple[torch.Tensor, torch.Tensor, int, int]: ...


def make_validator(spec: Spec, fit: Fit) -> Validator:
    """The per-call check of one workspace, with everything it compares against bound.

    The returned ``validate(call)`` is one boolean expression of cheap attribute reads per
    tensor of the call: the workspace's own hidden size and at most its ``max_token_num``
    tokens, the dtype, device and contiguity, ``residual_out`` not the very tensor object
    ``norm_out`` is. It allocates the outputs that are None and returns ``(norm_out,
    residual_out, tokens, hidden)``. A call of another width tries the fast bounds of
    ``fit`` next, where they are its whole rule (``product``); only when those fail too (or
    raise, for something that is not a tensor) are :func:`tensor_mismatch` /
    :func:`output_mismatch` asked: the whole rule of ``fit`` (the release's own check, on
    ``bytes``), else which condition failed, to say what was expected and what was found.
    In-place outputs (``norm_out=input``, ``residual_out=residual``) are accepted.
    """
    import torch

    dtype, device, hidden, own_tokens = (
        spec.dtype,
        spec.device_index,
        spec.hidden_dim,
        spec.max_token_num,
    )
    weight_shape = (hidden,)
    oneshot_fast = fit.oneshot_fast
    other_widths = fit.rule == "product"  # whose whole rule is as cheap as the own width
    max_tokens, min_hidden, max_hidden, capacity = (
        fit.max_tokens,
        fit.min_hidden,
        fit.max_hidden,
        fit.capacity,
    )
    empty_like = torch.empty_like

    def another_width(
        input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, shape: Any
    ) -> bool:
        """A call of another width than the workspace's that its fast bounds serve."""
        return bool(
            input.dtype is dtype
            and residual.dtype is dtype
            and weight.dtype is dtype
            and len(shape) == 2
            and 0 < shape[0] <= max_tokens
            and min_hidden <= shape[1] <= max_hidden
            and shape[0] * shape[1] <= capacity
            and residual.shape == shape
            and len(weight.shape) == 1
            and weight.shape[0] == shape[1]
            and input.get_device() == device
            and residual.get_device() == device
            and weight.get_device() == device
            and input.is_contiguous()
            and residual.is_contiguous()
            and weight.is_contiguous()
        )

    def validate(call: Values, /) -> tuple[torch.Tensor, torch.Tensor, int, int]:
        input, residual, weight, _, norm_out, residual_out, use_oneshot, _, _, _ = call
        # Something that is not a tensor raises AttributeError or TypeError in here: the
        # except clauses cost nothing while nothing is raised, and make that the typed
        # error. (An ``if not (...)`` compiles to plain conditional jumps; assigning the
        # expression to a flag instead would keep every operand's value, which is slower.)
        # First the workspace's own width, the common call; then, on a workspace whose rule
        # is the product, any other width within it; then the whole rule, or the error.
        try:
            shape = input.shape
            if not (
                input.dtype is dtype
                and residual.dtype is dtype
                and weight.dtype is dtype
                and len(shape) == 2
                and shape[1] == hidden
                and 0 < shape[0] <= own_tokens
                and (oneshot_fast or use_oneshot is not True)
                and residual.shape == shape
                and weight.shape == weight_shape
                and input.get_device() == device
                and residual.get_device() == device
                and weight.get_device() == device
                and input.is_contiguous()
                and residual.is_contiguous()
                and weight.is_contiguous()
            ) and not (other_widths and another_width(input, residual, weight, shape)):
                error = tensor_mismatch(spec, fit, input, residual, weight, use_oneshot=use_oneshot)
                if error is not None:
                    raise error
        except WorkspaceMismatchError:
            raise
        except Exception:
            raise mismatch(spec, fit, input, residual, weight, use_oneshot=use_oneshot) from None
        if norm_out is None:
            norm_out = empty_like(input)
        else:
            try:
                if not (
                    norm_out.dtype is dtype
                    and norm_out.shape == shape
                    and norm_out.get_device() == device
                    and norm_out.is_contiguous()
                ):
                    raise output_mismatch(spec, "norm_out", norm_out, input, weight)
            except WorkspaceMismatchError:
                raise
            except Exception:
                raise output_mismatch(spec, "norm_out", norm_out, input, weight) from None
        if residual_out is None:
            residual_out = empty_like(input)
        else:
            try:
                if not (
                    residual_out is not norm_out
                    and residual_out.dtype is dtype
                    and residual_out.shape == shape
                    and residual_out.get_device() == device
                    and residual_out.is_contiguous()
                ):
                    raise output_mismatch(
                        spec, "residual_out", residual_out, input, weight, norm_out
                    )
            except WorkspaceMismatchError:
                raise
            except Exception:
                raise output_mismatch(
                    spec, "residual_out", residual_out, input, weight, norm_out
                ) from None
        return norm_out, residual_out, shape[0], shape[1]

    return validate
