"""FlashInfer's workspace interface, which engines ask of a workspace besides the call
(``is_buffer_size_sufficient``, ``metadata``, checkpointing).

Every ``FusionWorkspace`` answers it: ``is_buffer_size_sufficient`` (:func:`buffer_check`:
the release's own check where the workspace has one, answering False where fi-compat's
per-call checks would refuse), ``metadata`` of a legacy workspace (:func:`legacy_metadata`),
and the checkpointing methods of a workspace that cannot detach its buffers
(:func:`checkpoint_unsupported`). The allreduce-fusion guide, ``docs/guide/comm.md``, says
what each API answers.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fi_compat._arguments import require_instance, require_int
from fi_compat._requirements.names import checkpoint_feature
from fi_compat.comm._sizes import Fit, size_mismatch
from fi_compat.comm._types import Spec
from fi_compat.errors import CheckpointUnsupportedError, explain

if TYPE_CHECKING:
    import torch

__all__ = ["buffer_check", "checkpoint_unsupported", "legacy_metadata"]

#: The keys of the legacy factory's metadata that its own check reads.
_METADATA_KEYS = ("tp_rank", "tp_size", "max_token_num", "hidden_dim", "use_fp32_lamport")


def legacy_metadata(spec: Spec, created: Any) -> dict[str, Any]:
    """The legacy workspace's ``metadata``: the factory's own dict, else its five keys."""
    import torch

    own = created[-1] if isinstance(created, tuple) and len(created) >= 3 else None
    if isinstance(own, dict) and all(key in own for key in _METADATA_KEYS):
        return own
    computed = {
        "tp_rank": spec.rank,
        "tp_size": spec.world_size,
        "max_token_num": spec.max_token_num,
        "hidden_dim": spec.hidden_dim,
        "use_fp32_lamport": spec.dtype is torch.float32,
    }
    return computed if not isinstance(own, dict) else {**own, **computed}


def _accepted(
    spec: Spec, fit: Fit, tp_size: Any, num_tokens: Any, hidden_dim: Any, dtype: Any
) -> bool:
    """Would fi-compat's per-call checks take tensors of this size (arguments checked)?

    On a ``bytes`` workspace the size is left to the workspace's own check (with the
    strategy its caller asks about)."""
    import torch

    require_int("tp_size", tp_size, minimum=1)
    require_int("num_tokens", num_tokens, minimum=0)
    require_int("hidden_dim", hidden_dim, minimum=1)
    require_instance("dtype", dtype, torch.dtype, "a torch.dtype")
    if not (tp_size == spec.world_size and dtype == spec.dtype):
        return False
    if fit.rule == "bytes":
        return bool(num_tokens > 0)
    return size_mismatch(spec, fit, num_tokens, hidden_dim) is None


def buffer_check(spec: Spec, fit: Fit, native_check: Any, metadata: dict[str, Any] | None) -> Any:
    """The workspace's ``is_buffer_size_sufficient``.

    Parameters
    ----------
    spec
        What the workspace was created for.
    fit
        Which call sizes it serves.
    native_check
        FlashInfer's own bound method (unified), or None.
    metadata
        The legacy workspace's metadata, checked as FlashInfer checks it; None otherwise.
    """
    if callable(native_check):
        return _around(spec, fit, native_check)

    def is_buffer_size_sufficient(
        tp_size: int,
        num_tokens: int,
        hidden_dim: int,
        dtype: torch.dtype,
        use_oneshot: Any | None = None,
    ) -> bool:
        """Whether a call of ``num_tokens x hidden_dim`` of ``dtype`` on ``tp_size`` ranks
        fits this workspace (``use_oneshot`` does not change the answer, as in FlashInfer's
        TRT-LLM workspace)."""
        import torch

        if not _accepted(spec, fit, tp_size, num_tokens, hidden_dim, dtype):
            return False
        if metadata is None:
            return True
        return (
            tp_size == metadata["tp_size"]
            and num_tokens * hidden_dim <= metadata["max_token_num"] * metadata["hidden_dim"]
            and bool(metadata["use_fp32_lamport"]) == (dtype == torch.float32)
        )

    return is_buffer_size_sufficient


def _around(spec: Spec, fit: Fit, native_check: Callable[..., Any]) -> Callable[..., Any]:
    """FlashInfer's check with its signature, answering False where fi-compat would refuse."""
    try:
        signature: inspect.Signature | None = inspect.signature(native_check)
    except (TypeError, ValueError):
        signature = None
    if signature is None or not {"tp_size", "num_tokens", "hidden_dim", "dtype"} <= set(
        signature.parameters
    ):
        return native_check  # a shape fi-compat does not know: FlashInfer answers alone

    @functools.wraps(native_check)
    def is_buffer_size_sufficient(*args: Any, **kwargs: Any) -> Any:
        given = signature.bind(*args, **kwargs).arguments  # a TypeError, as FlashInfer's
        if not _accepted(
            spec,
            fit,
            given["tp_size"],
            given["num_tokens"],
            given["hidden_dim"],
            given["dtype"],
        ):
            return False
        return native_check(*args, **kwargs)

    return is_buffer_size_sufficient


def checkpoint_unsupported(api: str, kind: str, method: str) -> Callable[..., None]:
    """``checkpoint_prepare``/``checkpoint_restore`` of a workspace that cannot detach
    (``kind``: its backend, or ``"legacy"``)."""

    def unsupported(*_: Any, **__: Any) -> None:
        raise CheckpointUnsupportedError(
            explain(
                f"a workspace whose buffers can be detached for {method}",
                f"a {api} workspace ({kind}), whose buffers stay resident",
                fix="keep the workspace resident while suspended (catch NotImplementedError), "
                "or install a flashinfer-python release with checkpointing on this backend",
            ),
            feature=checkpoint_feature(kind),
        )

    unsupported.__name__ = unsupported.__qualname__ = method
    return unsupported
