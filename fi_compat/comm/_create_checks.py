"""The checks of creating a workspace: its switches, backend, factory options, sizes, dtype,
device and group, before anything reaches FlashInfer.

:func:`check_arguments` checks the plain switches and choices, :func:`check_factory_options`
the extra factory keywords (none of which fi-compat sets itself), :func:`workspace_spec` the
sizes, dtype and device (as the :class:`~fi_compat.comm._types.Spec` every call is checked
against) and :func:`check_group` that ``world_size``/``rank`` describe the group; once the
API is chosen, :func:`check_backend` refuses a backend the installed factory does not list.
``create_workspace`` runs them all, for itself and for the drop-in factory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fi_compat._arguments import (
    describe,
    require_bool,
    require_choice,
    require_instance,
    require_int,
    require_real,
)
from fi_compat._literal import literal_choices
from fi_compat._probe import locate
from fi_compat._surface import UNIFIED_FACTORY
from fi_compat.comm._types import Api, Spec
from fi_compat.errors import InvalidArgumentError, WorkspaceMismatchError, explain

if TYPE_CHECKING:
    from fi_compat.comm._group import GroupSpan

__all__ = [
    "BACKENDS",
    "check_arguments",
    "check_backend",
    "check_factory_options",
    "check_group",
    "workspace_spec",
]

_DTYPES = ("float16", "bfloat16", "float32")
#: The allreduce-fusion backends fi-compat knows (``backend=`` of the unified factory,
#: 0.6.0+). Not a limit: another name goes to a release whose factory takes it, as given.
BACKENDS = ("auto", "trtllm", "mnnvl", "mnnvl-cutedsl")
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
    if not isinstance(backend, str) or not backend:
        raise InvalidArgumentError(
            explain(
                "backend to be the name of one of FlashInfer's allreduce-fusion backends",
                describe(backend),
                fix=f"pass one of {', '.join(map(repr, BACKENDS))} ('auto' picks one), or a "
                "backend a newer release names",
            )
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


def check_backend(caps: Any, backend: str, chosen: Api) -> None:
    """Refuse a ``backend`` the installed unified factory's ``Literal`` annotation does not
    list; one it lists, or one it says nothing about, goes to FlashInfer as given. The
    legacy API has TRT-LLM only: a name fi-compat does not know is refused here, one of the
    unified API's backends by the legacy path (the release to upgrade to)."""
    if chosen == "legacy":
        if backend in BACKENDS:
            return  # 'auto'/'trtllm' run; the legacy path names the release for the others
        expected = (
            "backend='auto' or 'trtllm' (flashinfer "
            f"{caps.flashinfer.version} has only the legacy API, whose kernel is TRT-LLM's)"
        )
    else:
        factory = locate(UNIFIED_FACTORY)
        choices = literal_choices(factory, "backend") if callable(factory) else None
        if choices is None or backend in choices:
            return
        expected = (
            f"backend= one of {', '.join(map(repr, choices))} (what flashinfer "
            f"{caps.flashinfer.version}'s {UNIFIED_FACTORY.key} takes)"
        )
    raise InvalidArgumentError(
        explain(
            expected,
            f"backend={backend!r}",
            fix="pass one of those, or install a flashinfer-python release that has it",
        )
    )
