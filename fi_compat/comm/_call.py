"""Calling a workspace: what a fused call needs, which sizes it serves, the bound call.

This module holds the call's data and the path every call on a workspace takes, in the
order a call meets them:

1. **What a call needs** (:class:`Spec`: the workspace's world, sizes, dtype and device)
   and the checks that say what was wrong. The per-call check is :func:`make_validator`'s
   closure, shared by every bound call: one boolean expression of cheap attribute reads,
   with the fast bounds of the workspace's :class:`Fit`. Only when it fails (or raises, as
   it does for something that is not a tensor at all) is :func:`tensor_mismatch` asked:
   the whole rule of the fit (:func:`size_mismatch`) may still serve the call; otherwise
   it names what was expected and what was found. The scalar arguments of a call (``eps``
   and the boolean switches) are checked the same way by the entry points themselves: one
   boolean expression of identity comparisons, and only when it fails
   :func:`call_scalars`, which raises the precise error or accepts an unusual but valid
   value (an ``int`` or a float subclass as ``eps``).
2. **Which call sizes a workspace serves** (:class:`Fit`, decided once at creation by
   :func:`fit_for`). A workspace is created for ``max_token_num`` x ``hidden_dim``;
   FlashInfer serves calls of other sizes that fit it, and engines rely on that (vLLM
   sizes one workspace for the wider of the target and the draft model; SGLang's compile
   branch sends narrower tensors). ``tools/sizes.py`` measured, per release from 0.6.0,
   what the release's own public ``allreduce_fusion`` admits and what reaches its kernel;
   ``sizes.json`` (:mod:`fi_compat._measured`) is what this module reads of it. The rules:

   ``product``
       TRT-LLM: any call with ``tokens * hidden <= max_token_num * hidden_dim``, the
       call's own sizes reaching the kernel (FlashInfer's workspace metadata check).
   ``bytes``
       MNNVL: any call whose bytes the workspace's lamport buffer holds, asked of the
       workspace's own ``is_buffer_size_sufficient`` as the release's call asks it.
   ``exact``
       Everything else (the legacy API, and backends or releases that were not
       measured): only the creation-time hidden size and at most ``max_token_num``
       tokens.
3. **The bound call.** :class:`Call` names the ten values a call on a workspace passes,
   always by position and in its order (the protocols take them as ``*call: *Call``, so
   ``mypy --strict`` refuses two swapped arguments of different types). Each API module
   makes a :class:`Launcher`, which :func:`bind` turns into the workspace's ``run`` and
   ``prepare`` paths; the launches are built by :func:`keyword_launch` and
   :func:`positional_launch`, with positions placed once from the callable's own
   signature (:func:`positional_layout`), and the prepared call by :func:`freeze_call`.

The allreduce-fusion guide, ``docs/guide/comm.md``, says the same for users ("Per-call
sizes"), and why arguments go by position and when by keyword.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, NoReturn, Protocol, cast

from packaging.version import InvalidVersion, Version

from fi_compat._arguments import describe, require_bool, require_real
from fi_compat._measured import releases, why_unmeasured
from fi_compat._requirements.names import size_feature
from fi_compat.errors import (
    CallSizeUnsupportedError,
    InvalidArgumentError,
    UnsupportedOperationError,
    WorkspaceDestroyedError,
    WorkspaceMismatchError,
    explain,
)

if TYPE_CHECKING:
    from typing import TypeAlias

    import torch
    from typing_extensions import Unpack

__all__ = [
    "FLOAT_MAX",
    "LAUNCH_VALUES",
    "Bound",
    "Call",
    "Fit",
    "Launcher",
    "Layout",
    "PreparedAllReduce",
    "Spec",
    "Values",
    "arguments",
    "bind",
    "call_scalars",
    "check_tensor",
    "destroyed_error",
    "device_name",
    "exact_fit",
    "fit_for",
    "freeze_call",
    "is_tensor",
    "keyword_launch",
    "measured",
    "mismatch",
    "not_a_workspace",
    "output_mismatch",
    "positional_launch",
    "positional_launcher",
    "positional_layout",
    "rule_of",
    "size_mismatch",
    "table_freeze",
    "tensor_mismatch",
]


# ------------------------------------------------- 1. what a call needs, and its checks

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


# ----------------------------------------------- 2. which call sizes a workspace serves

Rule = Literal["exact", "product", "bytes"]
#: The measured rule per backend that fi-compat follows (anything else: ``exact``).
_FOLLOWED = {"trtllm": "product", "mnnvl": "bytes"}


@functools.cache
def measured() -> Mapping[str, Any]:
    """``sizes.json``'s ``releases``: release -> backend -> its measured entry, the installed
    release's measured on this machine where fi-compat shipped none
    (:func:`fi_compat._measured.releases`)."""
    return releases("sizes")


def relaxed_in(after: str | None = None, backend: str = "trtllm") -> str | None:
    """The oldest measured release whose ``backend`` serves calls of other sizes; with
    ``after``, the oldest such release newer than it (else the oldest of all)."""
    serving = _serving(backend)
    if after is not None:
        try:
            newer = [release for release in serving if Version(release) > Version(after)]
        except InvalidVersion:
            newer = []
        if newer:
            return newer[0]
    return serving[0] if serving else None


@functools.cache
def _serving(backend: str) -> tuple[str, ...]:
    """The measured releases whose ``backend`` serves other sizes, oldest first."""
    followed = _FOLLOWED.get(backend)
    found = [
        release
        for release, entry in measured().items()
        if entry.get(backend, {}).get("check") == followed
    ]
    return tuple(sorted(found, key=Version))


def rule_of(release: str | None, kind: str) -> tuple[Rule, str]:
    """The rule fi-compat follows on ``kind`` of workspace of ``release``, and why."""
    if kind == "legacy":
        return "exact", (
            "the legacy API's call checks nothing against the workspace and was not "
            f"measured; the unified API serves calls that fit from {relaxed_in()}"
        )
    entry = measured().get(release) if release is not None else None
    if entry is None:
        hint = why_unmeasured(release)
        return "exact", f"flashinfer {release}'s per-call sizes were not measured" + (
            f" ({hint})" if hint else ""
        )
    facts = entry.get(kind)
    if facts is None:
        return "exact", f"the {kind!r} backend's per-call sizes were not measured"
    followed = _FOLLOWED.get(kind)
    if facts.get("check") != followed or facts.get("reaches") != "call":
        detail = facts.get("detail") or f"measured rule {facts.get('check')!r}"
        return "exact", f"flashinfer {release}'s {kind!r} backend: {detail}"
    assert followed is not None
    return followed, f"measured for flashinfer {release}'s {kind!r} backend"  # type: ignore[return-value]


@dataclass(frozen=True)
class Fit:
    """Which call sizes one workspace serves (decided at creation; read per call).

    The per-call check accepts at once a call with ``0 < tokens <= max_tokens``,
    ``min_hidden <= hidden <= max_hidden`` and ``tokens * hidden <= capacity`` (and, where
    ``oneshot_fast`` is False, ``use_oneshot`` not True); anything else goes to
    :meth:`admits`, the whole rule.

    Attributes
    ----------
    rule
        ``"exact"``, ``"product"`` or ``"bytes"``.
    max_tokens, min_hidden, max_hidden, capacity, oneshot_fast
        The bounds of the fast check.
    feature
        The ``--require`` name (``per_call_sizes:<kind>``).
    why
        Where the rule comes from (measured, or why only the creation size is served).
    relaxed_in
        ``exact`` only: the release to name in a refusal, the one that serves other sizes
        (the next measured one after the installed release, else the oldest).
    sufficient
        ``bytes`` only: ``(tokens, hidden, use_oneshot) -> bool``, the workspace's own
        ``is_buffer_size_sufficient`` asked as the release's call asks it.
    """

    rule: Rule
    max_tokens: int
    min_hidden: int
    max_hidden: int
    capacity: int
    oneshot_fast: bool
    feature: str
    why: str
    relaxed_in: str | None = None
    sufficient: Callable[[int, int, bool | None], bool] | None = None

    def admits(self, tokens: int, hidden: int, use_oneshot: bool | None = None) -> bool:
        """Whether a call of ``tokens`` x ``hidden`` (both >= 1) fits the workspace."""
        if tokens < 1 or hidden < 1:
            return False
        if self.sufficient is not None:
            return self.sufficient(tokens, hidden, use_oneshot)
        return (
            tokens <= self.max_tokens
            and self.min_hidden <= hidden <= self.max_hidden
            and tokens * hidden <= self.capacity
        )


def exact_fit(spec: Spec, kind: str, why: str, release: str | None = None) -> Fit:
    """Only the creation-time hidden size, at most ``max_token_num`` tokens (``release``:
    the installed one, for the release a refusal names)."""
    return Fit(
        "exact",
        spec.max_token_num,
        spec.hidden_dim,
        spec.hidden_dim,
        spec.max_token_num * spec.hidden_dim,
        True,
        size_feature(kind),
        why,
        relaxed_in(None if kind == "legacy" else release),
    )


def product_fit(spec: Spec, kind: str, why: str) -> Fit:
    """Any call whose ``tokens * hidden`` is at most ``max_token_num * hidden_dim``."""
    capacity = spec.max_token_num * spec.hidden_dim
    return Fit("product", capacity, 1, capacity, capacity, True, size_feature(kind), why)


def fit_for(spec: Spec, *, release: str | None, kind: str, native: Any) -> Fit:
    """The :class:`Fit` of a workspace of ``kind`` made by ``release`` (``native``: its
    FlashInfer object, asked on ``bytes`` workspaces). Whatever the release's objects do
    while they are read here falls back to ``exact``, with the reason."""
    rule, why = rule_of(release, kind)
    if rule == "product":
        return product_fit(spec, kind, why)
    if rule == "bytes":
        sufficient = _bytes_check(spec, native)
        if isinstance(sufficient, str):
            return exact_fit(spec, kind, f"{why}, but {sufficient}", release)
        fast = exact_fit(spec, kind, why, release)
        return Fit(
            "bytes",
            fast.max_tokens,
            fast.min_hidden,
            fast.max_hidden,
            fast.capacity,
            False,
            fast.feature,
            why,
            None,
            sufficient,
        )
    return exact_fit(spec, kind, why, release)


def _bytes_check(spec: Spec, native: Any) -> Callable[[int, int, bool | None], bool] | str:
    """The MNNVL workspace's own check, as ``(tokens, hidden, use_oneshot) -> bool``.

    ``use_oneshot=None`` asks with the default strategy (``AUTO``), as every release's call
    does; a forced strategy is asked too, and both must fit: some releases pass it to the
    kernel and some ignore it (0.6.x), so a call is served only where either would fit.
    """
    try:
        check = native.is_buffer_size_sufficient
        parameter = inspect.signature(check).parameters.get("strategy")
        default = parameter.default if parameter is not None else None
        members = getattr(type(default), "__members__", {})
        oneshot, twoshot = members.get("ONESHOT"), members.get("TWOSHOT")
    except Exception as error:  # FlashInfer's object, read: a finding, never a crash
        return f"its is_buffer_size_sufficient could not be read ({type(error).__name__})"
    if default is None or oneshot is None or twoshot is None:
        return "its is_buffer_size_sufficient has no strategy=AUTO/ONESHOT/TWOSHOT"
    world, dtype = spec.world_size, spec.dtype
    forced = {True: oneshot, False: twoshot}

    def sufficient(tokens: int, hidden: int, use_oneshot: bool | None) -> bool:
        try:
            if not check(world, tokens, hidden, dtype, default):
                return False
            return use_oneshot is None or bool(
                check(world, tokens, hidden, dtype, forced[use_oneshot])
            )
        except Exception:  # its own check cannot say: refused, never launched
            return False

    return sufficient


# -------------------------------------------------------------------- 3. the bound call


class Call(NamedTuple):
    """The arguments of one fused call, in the order every path passes them.

    Never built per call: the paths take these as positional arguments (``*call: *Call``)
    and pass them on as one plain tuple (:data:`Values`), unpacked in this order.
    """

    input: torch.Tensor
    residual: torch.Tensor
    weight: torch.Tensor
    eps: float
    norm_out: torch.Tensor | None
    residual_out: torch.Tensor | None
    use_oneshot: bool | None
    fp32_acc: bool
    trigger_completion_at_end: bool
    launch_with_pdl: bool


if TYPE_CHECKING:
    #: :class:`Call`'s values as the plain tuple the paths hand on (no field names at run
    #: time: unpacked in :class:`Call`'s order).
    Values: TypeAlias = tuple[Unpack[Call]]
else:
    Values = tuple

#: The names of what a launch has: :class:`Call`'s fields, then the outputs as allocated
#: (which stand for the call's own, None when the caller left them to be allocated) and the
#: token count and hidden size of the call; in the order of ``(*call, norm_out, residual_out,
#: tokens, hidden)``.
LAUNCH_VALUES: tuple[str, ...] = (*Call._fields, "norm_out", "residual_out", "tokens", "hidden")
#: Each name of :data:`LAUNCH_VALUES` -> its position (an output: the allocated one).
_POSITION = {name: position for position, name in enumerate(LAUNCH_VALUES)}


class Runner(Protocol):
    """One checked call: validate, allocate missing outputs, launch.

    Returns ``(norm_out, residual_out)``.
    """

    def __call__(self, *call: Unpack[Call]) -> tuple[torch.Tensor, torch.Tensor]: ...


class Preparer(Protocol):
    """:class:`Call`'s arguments, validated once -> ``(call, norm_out, residual_out)``,
    ``call`` launching on them with no arguments."""

    def __call__(
        self, *call: Unpack[Call]
    ) -> tuple[Callable[[], Any], torch.Tensor, torch.Tensor]: ...


class Launch(Protocol):
    """One launch on validated tensors: the call, its outputs as allocated, the call's token
    count and hidden size (its own, which may differ from the workspace's)."""

    def __call__(
        self,
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Any: ...


class Freeze(Protocol):
    """:class:`Launch`'s arguments -> a zero-argument call that launches on them."""

    def __call__(
        self,
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Callable[[], Any]: ...


class Launcher(NamedTuple):
    """A launch for every call, and the same launch frozen on fixed arguments."""

    launch: Launch
    freeze: Freeze


class Bound(NamedTuple):
    """What a workspace runs: per call (:class:`Runner`) and prepared (:class:`Preparer`)."""

    run: Runner
    prepare: Preparer


def bind(spec: Spec, fit: Fit, launcher: Launcher) -> Bound:
    """The paths of a workspace whose every call goes to ``launcher``; ``fit`` says which
    call sizes the workspace serves."""
    validate = make_validator(spec, fit)
    launch, freeze = launcher

    def run(*call: Unpack[Call]) -> tuple[torch.Tensor, torch.Tensor]:
        norm_out, residual_out, tokens, hidden = validate(call)
        launch(call, norm_out, residual_out, tokens, hidden)
        return norm_out, residual_out

    def prepare(*call: Unpack[Call]) -> tuple[Callable[[], Any], torch.Tensor, torch.Tensor]:
        norm_out, residual_out, tokens, hidden = validate(call)
        return freeze(call, norm_out, residual_out, tokens, hidden), norm_out, residual_out

    return Bound(run, prepare)


def positional_launcher(launch: Launch) -> Launcher:
    """A :class:`Launcher` whose frozen call is ``launch`` with its arguments bound."""

    def freeze(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Callable[[], Any]:
        return functools.partial(launch, call, norm_out, residual_out, tokens, hidden)

    return Launcher(launch, freeze)


# ------------------------------------------------------------------ FlashInfer's parameters
#
# A table maps each parameter of a FlashInfer function, in call order, to what it takes: a
# name of LAUNCH_VALUES, or the name of one of the constants given with the table.


def arguments(
    table: Mapping[str, str],
    constants: Mapping[str, Any],
    call: Values,
    norm_out: torch.Tensor,
    residual_out: torch.Tensor,
    tokens: int,
    hidden: int,
) -> dict[str, Any]:
    """Every parameter of ``table`` by name, with its value (off the per-call path)."""
    values = (*call, norm_out, residual_out, tokens, hidden)
    return {
        name: constants[source] if source in constants else values[_POSITION[source]]
        for name, source in table.items()
    }


def table_freeze(
    function: Callable[..., Any], table: Mapping[str, str], constants: Mapping[str, Any]
) -> Freeze:
    """A freeze of ``function`` with the parameters of ``table`` (see :func:`freeze_call`)."""

    def freeze(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Callable[[], Any]:
        values = arguments(table, constants, call, norm_out, residual_out, tokens, hidden)
        return freeze_call(function, values)

    return freeze


def keyword_launch(
    function: Callable[..., Any], table: Mapping[str, str], constants: Mapping[str, Any]
) -> Launch:
    """A launch that calls ``function`` with the keywords of ``table``, in its order.

    A literal call of up to 15 keywords builds no dict, where ``function(**arguments)``
    would build one per call; so the call is compiled once from the table, the way
    :func:`collections.namedtuple` compiles its ``__new__``. The constants are the
    function's globals; the code's module is this one.
    """
    reserved = set(_POSITION) | {"call", "function"}
    if (
        len(table) > 15
        or not set(table.values()) <= set(_POSITION) | set(constants)
        or set(constants) & reserved
        or not all(n.isidentifier() and not keyword.iskeyword(n) for n in (*table, *constants))
    ):
        raise ValueError(f"not a table keyword_launch can compile: {dict(table)}")
    unpacked = ", ".join(
        "_" if name in ("norm_out", "residual_out") else name for name in Call._fields
    )
    passed = ", ".join(f"{name}={source}" for name, source in table.items())
    source = (
        "def launch(call, norm_out, residual_out, tokens, hidden, /):\n"
        f"    {unpacked} = call\n"
        f"    return function({passed})\n"
    )
    namespace: dict[str, Any] = {**constants, "function": function, "__name__": __name__}
    exec(compile(source, f"<{__name__}.keyword_launch>", "exec"), namespace)
    return cast("Launch", namespace["launch"])


def positional_launch(
    function: Callable[..., Any],
    layout: Layout,
    table: Mapping[str, str],
    constants: Mapping[str, Any],
) -> Launch:
    """A launch that calls ``function`` by position, as ``layout`` places ``table``'s names.

    The constants and defaults are placed once; each call picks its arguments from them and
    ``(*call, norm_out, residual_out, tokens, hidden)`` with one :func:`operator.itemgetter`.
    """
    template, slots = layout
    fixed = list(template)
    where = list(range(len(template)))
    for slot, source in zip(slots, table.values(), strict=True):
        if source in constants:
            fixed[slot] = constants[source]
        else:
            where[slot] = len(template) + _POSITION[source]
    if len(where) < 2:  # itemgetter of one index returns the item, not a tuple
        raise ValueError("positional_launch needs at least two parameters")
    pick = operator.itemgetter(*where)
    placed = tuple(fixed)

    def launch(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Any:
        return function(*pick((*placed, *call, norm_out, residual_out, tokens, hidden)))

    return launch


# ------------------------------------------------------------------- placing arguments once

#: ``(template, slots)``: the positional arguments with the callable's defaults filled in
#: and None at the named positions, and the position of each name, in the given order.
Layout = tuple[list[Any], tuple[int, ...]]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def positional_layout(function: Callable[..., Any], names: Sequence[str]) -> Layout | None:
    """Where each of ``names`` goes in a positional call of ``function``, or None.

    Parameters left out before the last named one are filled with their defaults (the
    very objects the signature holds, so the call is the same as leaving them out). None
    when the callable's own signature is unreadable or is a forwarding ``(*args,
    **kwargs)``, or when a name is keyword-only or unknown, or a parameter without a
    default would be left out: call by keyword then.
    """
    try:
        parameters = inspect.signature(function, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return None
    wanted = set(names)
    template: list[Any] = []
    position: dict[str, int] = {}
    for parameter in parameters:
        if len(position) == len(wanted):
            break
        if parameter.kind not in _POSITIONAL:
            return None
        if parameter.name in wanted:
            position[parameter.name] = len(template)
            template.append(None)
        elif parameter.default is not inspect.Parameter.empty:
            template.append(parameter.default)
        else:
            return None
    if len(position) != len(wanted) or len(wanted) != len(names):
        return None
    return template, tuple(position[name] for name in names)


def freeze_call(function: Callable[..., Any], arguments: Mapping[str, Any]) -> Callable[[], Any]:
    """A zero-argument call that runs ``function(**arguments)``.

    Positional where :func:`positional_layout` allows (the cheapest call), by keyword
    otherwise; the result is a :func:`functools.partial` either way.
    """
    layout = positional_layout(function, tuple(arguments))
    if layout is None:
        return functools.partial(function, **arguments)
    template, slots = layout
    for slot, value in zip(slots, arguments.values(), strict=True):
        template[slot] = value
    return functools.partial(function, *template)


# ------------------------------------------------------------------------ the prepared call
#
# FusionWorkspace.prepare checks a set of tensors the way every allreduce_residual_rmsnorm
# call does and returns a PreparedAllReduce: a zero-argument call of the installed release's
# function with every argument already in place (freeze_call). It is meant for static
# buffers, the ones an engine fills before each step and captures in a CUDA graph. Calling
# it reads no tensor attribute, builds nothing and inspects nothing.


class PreparedAllReduce:
    """One allreduce + residual add + RMSNorm, checked once, ready to launch.

    Made by :meth:`FusionWorkspace.prepare <fi_compat.comm.FusionWorkspace.prepare>`.
    Calling it launches on the tensors it was prepared with, whatever they hold at that
    moment, and returns ``(norm_out, residual_out)``; it takes no arguments and does no
    per-call work besides the launch. After the workspace's ``destroy()`` a call raises
    :class:`~fi_compat.errors.WorkspaceDestroyedError`.

    The contract of static buffers: the tensors keep their shape, strides and storage.
    Writing new values into them is what they are for; ``resize_()``, ``set_()`` or
    ``as_strided_()`` on one of them after ``prepare`` is not detected.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    workspace
        The workspace the call runs on.
    tokens
        The token count the tensors were checked for.
    norm_out, residual_out
        The output buffers (preallocated by the caller, or allocated by ``prepare``).
    """

    __slots__ = ("__weakref__", "_launch", "_outputs", "tokens", "workspace")

    def __init__(
        self,
        workspace: Any,
        launch: Callable[[], Any],
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
    ) -> None:
        self.workspace = workspace
        self.tokens = tokens
        self._launch = launch
        self._outputs = (norm_out, residual_out)

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        self._launch()
        return self._outputs

    @property
    def norm_out(self) -> torch.Tensor:
        """The normalized output, ``rmsnorm(residual_out) * weight``."""
        return self._outputs[0]

    @property
    def residual_out(self) -> torch.Tensor:
        """The residual output, ``allreduce(input) + residual``."""
        return self._outputs[1]

    def __copy__(self) -> PreparedAllReduce:
        """Another call on the same tensors and workspace, revoked with it by ``destroy()``."""
        copy = PreparedAllReduce(self.workspace, self._launch, *self._outputs, self.tokens)
        self.workspace._prepared.add(copy)
        return copy

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise _not_copyable("copy.deepcopy")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise _not_copyable("pickle")

    def _revoke(self, refuse: Callable[[], Any]) -> None:
        """Called by the workspace's ``destroy()``: every later call runs ``refuse``."""
        self._launch = refuse

    def __repr__(self) -> str:
        return f"PreparedAllReduce(tokens={self.tokens}, workspace={self.workspace!r})"


def _not_copyable(operation: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        explain(
            "a PreparedAllReduce to be copied with copy.copy (the copy launches on the same "
            "tensors and workspace)",
            f"{operation} of one: it would need new tensors checked and a workspace copied",
            fix="prepare the call again with workspace.prepare(...) on the new tensors",
        )
    )
