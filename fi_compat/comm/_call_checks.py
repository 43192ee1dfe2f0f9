"""The checks of a call: its tensors, switches and sizes, for the per-layer, the prepared and
the drop-in call alike.

The per-call check is :func:`make_validator`'s closure, which every workspace's ``run`` and
``prepare`` path runs first (:func:`~fi_compat.comm._launch.bind`): one boolean expression
of cheap attribute reads, with the fast bounds of the workspace's
:class:`~fi_compat.comm._sizes.Fit`. Only when it fails (or raises, as it does for
something that is not a tensor at all) is :func:`tensor_mismatch` asked: the whole rule of
the fit (:func:`~fi_compat.comm._sizes.size_mismatch`) may still serve the call; otherwise
it names what was expected and what was found, with :func:`check_tensor`, the one rule of a
tensor against its workspace. The scalar arguments of a call (``eps`` and the boolean
switches) are checked the same way by the entry points themselves: one boolean expression
of identity comparisons, and only when it fails :func:`call_scalars`, which raises the
precise error or accepts an unusual but valid value (an ``int`` or a float subclass as
``eps``).

The drop-in ``allreduce_fusion`` runs the same checks off its fast path: its input against
the fit (:func:`check_input`), every other tensor it is given with :func:`check_tensor`
(:func:`check_tensors`), and its other arguments (:func:`check_pattern_code`,
:func:`check_options`, :func:`check_native_input`).
"""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any, Protocol

from fi_compat._arguments import (
    describe,
    require_bool,
    require_instance,
    require_int,
    require_real,
)
from fi_compat._literal import literal_choices
from fi_compat._probe import locate
from fi_compat._surface import UNIFIED_FUSION
from fi_compat.comm._names import PATTERN_NAMES, AllReduceFusionPattern
from fi_compat.comm._sizes import Fit, size_mismatch
from fi_compat.comm._types import Spec, Values, device_name
from fi_compat.errors import (
    InvalidArgumentError,
    WorkspaceDestroyedError,
    WorkspaceMismatchError,
    explain,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "FINALIZE_BACKENDS",
    "FLOAT_MAX",
    "PATTERN_CLASS",
    "PATTERN_FIX",
    "Validator",
    "call_scalars",
    "check_finalize_backend",
    "check_input",
    "check_native_input",
    "check_options",
    "check_pattern_code",
    "check_tensor",
    "check_tensors",
    "destroyed_error",
    "is_tensor",
    "make_validator",
    "mismatch",
    "not_a_workspace",
    "output_mismatch",
    "tensor_mismatch",
]


# ------------------------------------------------------------- the checks of every call

#: The largest finite float: ``0.0 <= eps <= FLOAT_MAX`` is False for nan, inf and < 0.
FLOAT_MAX = sys.float_info.max


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


# ------------------------------------------------ the drop-in's arguments, off its fast path

#: The name of the pattern codes' class: ours, the same as FlashInfer's.
PATTERN_CLASS = AllReduceFusionPattern.__name__
#: The fix of a refused pattern code: the codes fi-compat names.
PATTERN_FIX = f"pass one of fi_compat.comm.{PATTERN_CLASS}'s: " + ", ".join(
    f"{name}={value}" for value, name in PATTERN_NAMES.items()
)


def check_pattern_code(pattern: Any) -> None:
    """Refuse a ``pattern`` that is not an int (a bool included)."""
    require_int("pattern", pattern, detail=f"an {PATTERN_CLASS} code", fix=PATTERN_FIX)


#: Switches, sizes and scalars of the drop-in besides those of ``call_scalars``.
_INT_OPTIONS = ("layout_code", "block_quant_group_size", "moe_reduction_device_num_experts")
#: Tensor arguments checked against the workspace like ``input`` (``rms_gamma`` apart).
_LIKE_INPUT = ("residual_in", "residual_out", "norm_out", "output")
#: Tensor arguments that must only be tensors on the workspace's device.
_OTHER_TENSORS = (
    "quant_out",
    "scale_out",
    "moe_reduction_scale_input",
    "moe_reduction_active_experts_token_input",
    "moe_reduction_token_input",
    "expanded_idx_to_permuted_idx",
    "expert_scale_factor",
    "shared_expert_output",
)
#: Arguments FlashInfer writes: no two may be the same tensor, nor ``rms_gamma``.
_OUTPUTS = ("output", "residual_out", "norm_out", "quant_out", "scale_out")


def check_options(given: dict[str, Any]) -> None:
    """The non-tensor arguments that differ from their defaults (off the fast path)."""
    for name in _INT_OPTIONS:
        require_int(name, given.get(name), optional=True)
    if "weight_bias" in given:
        require_real("weight_bias", given["weight_bias"])
    scale = given.get("scale_factor")
    if scale is not None and not is_tensor(scale):
        require_real("scale_factor", scale)
    if "moe_finalize_backend" in given:
        check_finalize_backend(given["moe_finalize_backend"])


def check_finalize_backend(value: Any) -> None:
    """A name, refused where the installed ``allreduce_fusion``'s ``Literal`` lacks it. A
    name fi-compat does not know goes to a release whose call takes the parameter without
    listing its values, as given; where the call lacks the parameter, a name fi-compat
    knows is left for the release to refuse (naming the release that has it), another one
    is refused here."""
    fusion = locate(UNIFIED_FUSION)
    choices = literal_choices(fusion, "moe_finalize_backend") if callable(fusion) else None
    accepts = choices is not None or _has_parameter(fusion, "moe_finalize_backend")
    known = choices if choices is not None else FINALIZE_BACKENDS
    if isinstance(value, str) and value and (value in known or (accepts and choices is None)):
        return
    raise InvalidArgumentError(
        explain(
            f"moe_finalize_backend one of {', '.join(map(repr, known))}"
            + (f" (what the installed {UNIFIED_FUSION.key} takes)" if choices is not None else ""),
            describe(value),
            fix="pass one of those, or install a flashinfer-python release that has it",
        )
    )


#: The MoE finalize backends fi-compat knows (FlashInfer 0.7.1+).
FINALIZE_BACKENDS = ("trtllm", "cake")


def _has_parameter(function: Any, name: str) -> bool:
    try:
        return name in inspect.signature(function).parameters
    except Exception:  # unreadable: nothing says it takes it
        return False


def check_native_input(input: Any, workspace: Any) -> None:
    """On a FlashInfer workspace object, everything passes through but a non-tensor input."""
    import torch

    require_instance(
        "input", input, torch.Tensor, "a torch.Tensor", fix="pass the activations as a tensor"
    )
    if workspace is None or isinstance(workspace, _NOT_WORKSPACES) or is_tensor(workspace):
        raise InvalidArgumentError(
            explain(
                "workspace to be a FusionWorkspace or FlashInfer's own workspace object",
                describe(workspace),
                fix="create one with fi_compat.comm.create_allreduce_fusion_workspace()",
            )
        )


#: Types no FlashInfer workspace object is (the legacy pair is a tuple, and goes to
#: ``trtllm_allreduce_fusion``, not ``allreduce_fusion``).
_NOT_WORKSPACES = (str, bytes, int, float, complex, list, tuple, dict, set, frozenset)


def check_input(spec: Spec, fit: Fit, input: Any, use_oneshot: Any) -> None:
    """``input`` against the workspace: the fast bounds of ``fit``, else its whole rule."""
    try:
        shape = input.shape
        fits = (
            is_tensor(input)
            and len(shape) == 2
            and input.dtype is spec.dtype
            and 0 < shape[0] <= fit.max_tokens
            and fit.min_hidden <= shape[1] <= fit.max_hidden
            and shape[0] * shape[1] <= fit.capacity
            and (fit.oneshot_fast or use_oneshot is not True)
            and input.get_device() == spec.device_index
            and input.is_contiguous()
        )
    except Exception:  # not a tensor
        fits = False
    if not fits:
        error = tensor_mismatch(
            spec, fit, input, None, None, use_oneshot=use_oneshot, only_input=True
        )
        if error is not None:
            raise error


def check_tensors(spec: Spec, input: Any, given: dict[str, Any]) -> None:
    """Every tensor argument given besides ``input`` (which has passed), against ``spec``."""
    tokens, hidden = input.shape
    expected = dict.fromkeys(_LIKE_INPUT, (tokens, hidden)) | {"rms_gamma": (hidden,)}
    for name, shape in expected.items():
        if name in given:
            message = check_tensor(name, given[name], spec, shape)
            if message is not None:
                raise WorkspaceMismatchError(message)
    for name in _OTHER_TENSORS:
        value = given.get(name)
        if value is None:
            continue
        if not is_tensor(value) or value.get_device() != spec.device_index:
            found = (
                f"{name} on {device_name(value.get_device())}"
                if is_tensor(value)
                else describe(value)
            )
            raise WorkspaceMismatchError(
                explain(f"{name} to be a torch.Tensor on {spec.device_name}", found)
            )
    quant_out = given.get("quant_out")
    if quant_out is not None and not quant_out.is_contiguous():
        # FlashInfer writes it through a flat view (ValueError from 0.6.0's unified call;
        # the legacy call would write a copy and drop the result).
        raise WorkspaceMismatchError(
            explain(
                "quant_out to be contiguous",
                "a non-contiguous tensor",
                fix="pass quant_out.contiguous() or a fresh buffer",
            )
        )
    outputs = [(name, given[name]) for name in _OUTPUTS if given.get(name) is not None]
    for index, (name, value) in enumerate(outputs):
        if value is given.get("rms_gamma"):
            raise WorkspaceMismatchError(
                explain(f"{name} to be a tensor of its own", "rms_gamma itself")
            )
        for other, earlier in outputs[:index]:
            if value is earlier:
                raise WorkspaceMismatchError(
                    explain(
                        f"{other} and {name} to be different tensors",
                        "the same tensor object for both",
                        fix="pass a buffer for each output FlashInfer writes",
                    )
                )
