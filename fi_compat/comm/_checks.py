"""What a fused call needs from its arguments, and the errors that say what was wrong.

The per-call check is :func:`make_validator`'s closure, shared by every bound call (see
``_bound``): one boolean expression of cheap attribute reads. Only when it fails (or
raises, as it does for something that is not a tensor at all) is :func:`tensor_mismatch`
asked which condition failed, to build a message that names what was expected and what
was found.

The scalar arguments of a call (``eps`` and the boolean switches) are checked the same
way by the entry points themselves: one boolean expression of identity comparisons
(``eps.__class__ is float``, ``launch_with_pdl is True or launch_with_pdl is False``), and
only when it fails :func:`call_scalars`, which raises the precise error or accepts an
unusual but valid value (an ``int`` or a float subclass as ``eps``).

The arguments of ``create_workspace`` are checked here too, before anything reaches
FlashInfer (:func:`check_arguments`, :func:`check_factory_options`, :func:`workspace_spec`,
:func:`check_group`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from fi_compat._arguments import (
    describe,
    require_bool,
    require_choice,
    require_instance,
    require_int,
    require_real,
)
from fi_compat.errors import (
    InvalidArgumentError,
    WorkspaceDestroyedError,
    WorkspaceMismatchError,
    explain,
)

if TYPE_CHECKING:
    import torch

    from fi_compat.comm._bound import Values
    from fi_compat.comm._group import GroupSpan

__all__ = [
    "FLOAT_MAX",
    "Spec",
    "Validator",
    "call_scalars",
    "check_arguments",
    "check_factory_options",
    "check_group",
    "check_tensor",
    "destroyed_error",
    "device_name",
    "is_tensor",
    "make_validator",
    "not_a_workspace",
    "output_mismatch",
    "tensor_mismatch",
    "workspace_spec",
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
    spec: Spec, input: Any, residual: Any, weight: Any, *, only_input: bool = False
) -> WorkspaceMismatchError:
    """The error for inputs that failed the per-call check (called only on failure).

    ``only_input`` diagnoses ``input`` alone (``residual`` and ``weight`` are ignored).
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
    if hidden != spec.hidden_dim:
        return WorkspaceMismatchError(
            explain(
                f"hidden size {spec.hidden_dim} (the workspace's hidden_dim)",
                f"input of shape {tuple(shape)}",
                fix="create a workspace for this hidden size",
            )
        )
    if tokens < 1:
        return WorkspaceMismatchError(
            explain(
                "at least 1 token",
                f"input of shape {tuple(shape)}",
                fix="skip the call for an empty batch (FlashInfer's kernels require at "
                "least 1 token)",
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
    expected = {"input": (tokens, hidden), "residual": (tokens, hidden), "weight": (hidden,)}
    for name, tensor in named:
        message = check_tensor(name, tensor, spec, expected[name])
        if message is not None:
            return WorkspaceMismatchError(message)
    return WorkspaceMismatchError(
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

    A call's values -> ``(norm_out, residual_out, tokens)``, the outputs that were None
    allocated.
    """

    def __call__(self, call: Values, /) -> tuple[torch.Tensor, torch.Tensor, int]: ...


def make_validator(spec: Spec) -> Validator:
    """The per-call check of one workspace, with everything it compares against bound.

    The returned ``validate(call)`` is one boolean expression of cheap attribute reads per
    tensor of the call (at least 1 and at most ``max_token_num`` tokens; ``residual_out``
    not the very tensor object ``norm_out`` is); it allocates the outputs that are None and
    returns ``(norm_out, residual_out, tokens)``.
    Only when a check fails (or raises, for something that is not a tensor) are
    :func:`tensor_mismatch` / :func:`output_mismatch` asked which condition failed, to
    say what was expected and what was found. In-place outputs (``norm_out=input``,
    ``residual_out=residual``) are accepted.
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

    def validate(call: Values, /) -> tuple[torch.Tensor, torch.Tensor, int]:
        input, residual, weight, _, norm_out, residual_out, _, _, _, _ = call
        # Something that is not a tensor raises AttributeError or TypeError in here: the
        # except clauses cost nothing while nothing is raised, and make that the typed
        # error. (An ``if not (...)`` compiles to plain conditional jumps; assigning the
        # expression to a flag instead would keep every operand's value, which is slower.)
        try:
            shape = input.shape
            if not (
                input.dtype is dtype
                and residual.dtype is dtype
                and weight.dtype is dtype
                and len(shape) == 2
                and shape[1] == hidden
                and 0 < shape[0] <= max_tokens
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
        except WorkspaceMismatchError:
            raise
        except Exception:
            raise tensor_mismatch(spec, input, residual, weight) from None
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
        return norm_out, residual_out, shape[0]

    return validate


# ------------------------------------------------------------- create_workspace's arguments

_DTYPES = ("float16", "bfloat16", "float32")
#: FlashInfer's allreduce-fusion backends (``backend=`` of the unified factory, 0.6.0+).
_BACKENDS = ("auto", "trtllm", "mnnvl", "mnnvl-cutedsl")
_APIS = ("auto", "unified", "legacy", "reference")
#: Factory keywords fi-compat sets itself, from create_workspace's own arguments, and
#: checks every call against (or, for the legacy factory, that change what it returns):
#: factory_options may not hold them, so what FlashInfer allocates is what is checked.
_RESERVED_OPTIONS = frozenset(
    {
        "world_size",
        "rank",
        "max_token_num",
        "hidden_dim",
        "dtype",
        "backend",
        "group",
        "comm_backend",
        "gpus_per_node",
        "force_oneshot_support",
        "device",
        "api",
        "fallback",
        # the legacy factory's names
        "tp_rank",
        "tp_size",
        "use_fp32_lamport",
        "create_metadata",
        "use_symm_dev_mem",
    }
)
#: Value checks of the unified factory's keyword-only options (0.7.x, mnnvl-cutedsl).
_BOOL_OPTIONS = frozenset(
    {
        "include_shared_expert",
        "add_residual",
        "write_residual_output",
        "apply_rms_norm",
        "dynamic_fp8",
        "write_norm_output",
    }
)
_REAL_OPTIONS: dict[str, float | None] = {
    "rms_eps": 0.0,
    "weight_bias": None,
    "routed_scaling_factor": None,
}


def workspace_spec(
    world_size: int,
    rank: int,
    max_token_num: int,
    hidden_dim: int,
    dtype: Any,
    device: Any,
) -> Spec:
    """What ``create_workspace``'s sizes, dtype and device describe, checked."""
    import torch

    for label, value in (
        ("world_size", world_size),
        ("max_token_num", max_token_num),
        ("hidden_dim", hidden_dim),
    ):
        require_int(label, value, minimum=1, error=WorkspaceMismatchError)
    require_int(
        "rank",
        rank,
        minimum=0,
        maximum=world_size - 1,
        error=WorkspaceMismatchError,
        fix="pass this process's rank in the group",
    )
    allowed = tuple(getattr(torch, name) for name in _DTYPES)
    if not any(dtype is candidate for candidate in allowed):
        raise WorkspaceMismatchError(
            explain(
                f"dtype one of {', '.join(f'torch.{name}' for name in _DTYPES)}",
                f"{dtype!r}",
                fix="allreduce fusion runs on half, bfloat16 or float32 activations",
            )
        )
    return Spec(world_size, rank, max_token_num, hidden_dim, dtype, _device_index(device))


def _device_index(device: Any) -> int:
    """``Tensor.get_device()`` of tensors on ``device``: -1 for the CPU, else the index."""
    import torch

    if device is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else -1
    wrong = InvalidArgumentError(
        explain(
            "device to be None, 'cpu', 'cuda', 'cuda:<index>', a CUDA index or a "
            "torch.device of those",
            f"{device!r}",
            fix="pass the CUDA device the tensors live on",
        )
    )
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise wrong
    if isinstance(device, int):
        if device < 0:
            raise wrong
        return device  # a CUDA index, as torch.device(index) reads it on a CUDA machine
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{wrong} (torch: {error})") from None
    if resolved.type == "cpu":
        return -1
    if resolved.type != "cuda":
        raise wrong
    index: int | None = resolved.index  # None for a bare "cuda"
    if index is not None:
        return index
    if not torch.cuda.is_available():
        raise InvalidArgumentError(
            explain(
                "a CUDA device for device='cuda'",
                "no CUDA device in this process",
                fix="pass device='cuda:<index>' explicitly, or 'cpu'",
            )
        )
    return torch.cuda.current_device()


def check_group(span: GroupSpan, spec: Spec) -> None:
    """``world_size`` and ``rank`` describe ``group`` (when torch.distributed can tell)."""
    if span.size is None:
        return
    if span.size != spec.world_size or span.rank != spec.rank:
        raise WorkspaceMismatchError(
            explain(
                f"world_size={spec.world_size}, rank={spec.rank} to describe the group",
                f"a group of {span.size} processes in which this process is rank {span.rank}",
                fix="pass torch.distributed.get_world_size(group) and get_rank(group)",
            )
        )


def check_arguments(
    api: Any, backend: Any, gpus_per_node: Any, force_oneshot_support: Any, fallback: Any
) -> None:
    """The plain arguments of ``create_workspace`` (sizes and dtype: see :func:`workspace_spec`)."""
    require_choice("api", api, _APIS)
    require_choice(
        "backend",
        backend,
        _BACKENDS,
        fix="pass one of FlashInfer's allreduce-fusion backends ('auto' picks one)",
    )
    require_int("gpus_per_node", gpus_per_node, minimum=1, optional=True)
    require_bool("force_oneshot_support", force_oneshot_support)
    require_bool("fallback", fallback)


def check_factory_options(factory_options: Any) -> Mapping[str, Any]:
    """``factory_options`` as a mapping FlashInfer may take, or InvalidArgumentError.

    Keys must be strings and none that fi-compat sets itself (see ``_RESERVED_OPTIONS``):
    an option that changed what FlashInfer allocates would let through calls the buffers
    cannot hold. The values of the unified factory's known options are checked too.
    """
    if factory_options is None:
        return {}
    require_instance(
        "factory_options",
        factory_options,
        Mapping,
        "a mapping of keyword names to values",
        optional=True,
        fix="pass a dict, e.g. factory_options={'top_k': 8}",
    )
    options = dict(factory_options)
    for name, value in options.items():
        if not isinstance(name, str):
            raise InvalidArgumentError(
                explain(
                    "factory_options keys to be keyword names (str)",
                    f"the key {describe(name)}",
                )
            )
        if name in _RESERVED_OPTIONS:
            raise InvalidArgumentError(
                explain(
                    "factory_options without the keywords fi-compat sets itself",
                    f"factory_options[{name!r}]={value!r}",
                    fix=f"pass {name} as create_workspace's own argument (tp_rank, tp_size: "
                    "rank, world_size; use_fp32_lamport: dtype=torch.float32): fi-compat "
                    "checks every call against what the workspace was created with, so "
                    "FlashInfer must allocate exactly that",
                )
            )
        if value is None:
            continue
        if name in _BOOL_OPTIONS:
            require_bool(f"factory_options[{name!r}]", value)
        elif name in _REAL_OPTIONS:
            require_real(f"factory_options[{name!r}]", value, minimum=_REAL_OPTIONS[name])
        elif name == "top_k":
            require_int("factory_options['top_k']", value, minimum=1)
    return options
