"""The per-layer fusion check and the alignment of warm-up (dummy run) batches.

These run once the deployment-level decision (:func:`fi_compat.policy.decide_fusion`) is
known: :func:`should_fuse_mlp_allreduce_with_next_layer` on every forward pass,
:func:`align_dummy_run_num_tokens` and :func:`align_dummy_run_shape` on warm-up.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from fi_compat._arguments import require_bool, require_instance, require_int
from fi_compat.errors import PolicyInputError
from fi_compat.policy._rules import FusionDecision

__all__ = [
    "DEFAULT_MAX_FUSION_TOKENS",
    "DummyRunShape",
    "ScatterMode",
    "align_dummy_run_num_tokens",
    "align_dummy_run_shape",
    "should_fuse_mlp_allreduce_with_next_layer",
]

DEFAULT_MAX_FUSION_TOKENS = 2048
"""SGLang's FUSE_ALLREDUCE_MAX_BATCH_SIZE in layers/communicator.py: fusion applies
to forward passes of 1..2048 tokens.

.. versionadded:: 0.2.0
"""


class ScatterMode(enum.Enum):
    """How tokens are spread over ranks where the MLP runs (SGLang's ``ScatterMode``).

    .. versionadded:: 0.2.0
    """

    SCATTERED = "scattered"
    """Each rank holds its own tokens (e.g. ``--moe-dense-tp-size 1``): no TP all-reduce."""
    TP_ATTN_FULL = "tp_attn_full"
    """Every rank of an attention-TP group holds that group's tokens."""
    FULL = "full"
    """Every rank holds every token."""
    MOE_FULL = "moe_full"
    """Full within the MoE group under MoE context-parallel all-gather (newer SGLang)."""


# Modes whose MLP output ends in a plain TP all-reduce that can be fused into the next
# layer's residual + RMSNorm. SCATTERED has no all-reduce at all (SGLang PR #19918:
# fusing there made up an all-reduce and produced garbage). MOE_FULL only occurs with
# MoE context-parallel all-gather, under which SGLang turns fusion off because the fused
# path skips the post-layer slice.
_FUSIBLE_MLP_MODES: frozenset[ScatterMode] = frozenset({ScatterMode.TP_ATTN_FULL, ScatterMode.FULL})


def should_fuse_mlp_allreduce_with_next_layer(
    *,
    fusion_enabled: bool | FusionDecision,
    mlp_mode: ScatterMode,
    is_last_layer: bool,
    tp_size: int,
    num_tokens: int,
    max_fusion_tokens: int = DEFAULT_MAX_FUSION_TOKENS,
) -> bool:
    """Whether this layer's MLP allreduce should be fused into the next layer's norm.

    The fusion policy guide, ``docs/guide/policy.md`` ("Per layer and warm-up"), says when
    a layer fuses.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    fusion_enabled
        The deployment-level decision (or just its ``enabled`` flag).
    mlp_mode
        How tokens are spread where this layer's MLP runs.
    is_last_layer
        Whether this is the model's last layer (there is no next layer to fuse into).
    tp_size
        Tensor-parallel size.
    num_tokens
        Tokens in this forward pass.
    max_fusion_tokens
        Largest token count the fused kernel takes.

    Returns
    -------
    bool

    Raises
    ------
    PolicyInputError
        A size below 1 (``num_tokens``: negative), or an argument of the wrong type.
    """
    require_instance(
        "mlp_mode",
        mlp_mode,
        ScatterMode,
        "a ScatterMode",
        error=PolicyInputError,
        fix="pass a ScatterMode member",
    )
    require_instance(
        "fusion_enabled",
        fusion_enabled,
        (bool, FusionDecision),
        "a bool or a FusionDecision",
        error=PolicyInputError,
        fix="pass decide_fusion(...) or its enabled flag",
    )
    require_bool("is_last_layer", is_last_layer, error=PolicyInputError)
    require_int("tp_size", tp_size, minimum=1, error=PolicyInputError)
    require_int("num_tokens", num_tokens, minimum=0, error=PolicyInputError)
    require_int("max_fusion_tokens", max_fusion_tokens, minimum=1, error=PolicyInputError)
    enabled = (
        fusion_enabled.enabled if isinstance(fusion_enabled, FusionDecision) else fusion_enabled
    )
    return (
        enabled
        and mlp_mode in _FUSIBLE_MLP_MODES
        and not is_last_layer
        and tp_size > 1
        and 0 < num_tokens <= max_fusion_tokens
    )


def align_dummy_run_num_tokens(num_tokens: int, attn_tp_size: int, require_mlp_sync: bool) -> int:
    """Round a warm-up (dummy run) token count the way the scheduler pads real batches.

    The fusion policy guide, ``docs/guide/policy.md`` ("Per layer and warm-up"), says why.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    num_tokens
        Tokens the warm-up would run.
    attn_tp_size
        Attention tensor-parallel size.
    require_mlp_sync
        Whether the deployment requires MLP sync.

    Returns
    -------
    int
        ``num_tokens`` rounded up to a multiple of ``attn_tp_size`` when
        ``require_mlp_sync``; ``num_tokens`` unchanged otherwise.

    Raises
    ------
    PolicyInputError
        If ``num_tokens`` is negative or ``attn_tp_size`` is below 1 (or either is not an
        int), or ``require_mlp_sync`` is not a bool.
    """
    require_int("num_tokens", num_tokens, minimum=0, error=PolicyInputError)
    require_int("attn_tp_size", attn_tp_size, minimum=1, error=PolicyInputError)
    require_bool("require_mlp_sync", require_mlp_sync, error=PolicyInputError)
    if not require_mlp_sync:
        return num_tokens
    return -(-num_tokens // attn_tp_size) * attn_tp_size


@dataclass(frozen=True)
class DummyRunShape:
    """Batch size and token count of a warm-up forward pass after alignment.

    .. versionadded:: 0.2.0
    """

    batch_size: int
    num_tokens: int


def align_dummy_run_shape(
    batch_size: int,
    num_tokens_per_request: int,
    attn_tp_size: int,
    require_mlp_sync: bool,
) -> DummyRunShape:
    """Align a warm-up batch: pad its tokens, then derive the batch size back.

    The token count is :func:`align_dummy_run_num_tokens` of
    ``batch_size * num_tokens_per_request``; the batch size is that count floor-divided
    by ``num_tokens_per_request``, as SGLang's ``_dummy_run`` does. The token count is
    authoritative: it need not equal ``batch_size * num_tokens_per_request``.

    .. versionadded:: 0.2.0

    Raises
    ------
    PolicyInputError
        If ``batch_size`` is negative or ``num_tokens_per_request`` or ``attn_tp_size``
        is below 1 (or any of them is not an int), or ``require_mlp_sync`` is not a bool.
    """
    require_int("batch_size", batch_size, minimum=0, error=PolicyInputError)
    require_int("num_tokens_per_request", num_tokens_per_request, minimum=1, error=PolicyInputError)
    require_int("attn_tp_size", attn_tp_size, minimum=1, error=PolicyInputError)
    require_bool("require_mlp_sync", require_mlp_sync, error=PolicyInputError)
    num_tokens = align_dummy_run_num_tokens(
        batch_size * num_tokens_per_request, attn_tp_size, require_mlp_sync
    )
    return DummyRunShape(batch_size=num_tokens // num_tokens_per_request, num_tokens=num_tokens)
