"""Which KV positions each wrapper of a two-wrapper layout attends to, per request.

Plain tensor arithmetic on whatever device the inputs live on, using only tensor methods
(this module never imports torch). Every function returns a :class:`KvSpan` and checks its
arguments without reading their values. The deterministic-attention guide,
``docs/guide/attention.md`` ("Spans", "A step is checked whole"), gives each wrapper's span
and what is checked.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fi_compat._arguments import describe, require_bool, require_int
from fi_compat.errors import PlannerConfigError, explain

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "KvSpan",
    "cross_attention_decoder_span",
    "cross_attention_encoder_span",
    "full_span",
    "window_decode_span",
    "window_prefill_span",
]


@dataclass(frozen=True)
class KvSpan:
    """The KV slice one wrapper attends to, for each request of the batch.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    kv_lens
        Number of KV positions per request.
    kv_start
        First KV position per request; ``None`` means every request starts at 0.
    """

    kv_lens: Tensor
    kv_start: Tensor | None


# ---------------------------------------------------------------------------- checks


def _describe(value: object) -> str:
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", None)
    if dtype is not None and shape is not None:
        return f"a {type(value).__name__} of dtype {dtype} and shape {tuple(shape)}"
    return describe(value)


def check_lens(
    name: str, value: object, like: Tensor | None = None, like_name: str = "seq_lens"
) -> None:
    """Refuse anything but a 1-D integer torch tensor (shaped and placed like ``like``).

    Reads only metadata (type, dtype, shape, device): no device sync. torch is looked up in
    ``sys.modules``, never imported: a tensor cannot exist before torch is imported.
    """
    torch = sys.modules.get("torch")
    problem = None
    if torch is None or not isinstance(value, torch.Tensor):
        problem = "not a torch.Tensor"
    elif value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
        problem = "not an integer dtype"
    elif value.dim() != 1:
        problem = "not 1-D"
    elif like is not None and value.shape != like.shape:
        problem = f"not shaped like {like_name} {tuple(like.shape)}"
    elif like is not None and value.device != like.device:
        problem = f"not on the device of {like_name} ({like.device})"
    if problem is None:
        return
    raise PlannerConfigError(
        explain(
            f"{name} to be a 1-D integer torch.Tensor with one length per request"
            + (f", of the same shape and device as {like_name}" if like is not None else ""),
            f"{_describe(value)} ({problem})",
            fix=f"pass {name} as torch.tensor([...], dtype=torch.int32) on the device of "
            "the other lengths",
        )
    )


def check_window(value: object) -> None:
    """Refuse a ``window_left`` that is not an int ``>= 0`` (bools are not ints here)."""
    require_int(
        "window_left",
        value,
        minimum=0,
        detail="FlashInfer's window_left",
        error=PlannerConfigError,
        fix="pass the model's sliding window as an int",
    )


def check_ragged(value: object) -> None:
    """Refuse a ``ragged`` switch that is not a real bool."""
    require_bool("ragged", value, error=PlannerConfigError)


# ---------------------------------------------------------------------------- arithmetic
# The underscored functions do the arithmetic on checked inputs; the planner calls them
# after checking its own arguments once. The public ones check, then call them.


def whole_span(kv_lens: Tensor) -> KvSpan:
    return KvSpan(kv_lens, None)


def window_decode(seq_lens: Tensor, window_left: int) -> KvSpan:
    kv_lens = seq_lens.clamp(max=window_left + 1)
    return KvSpan(kv_lens, seq_lens - kv_lens)


def window_prefill(seq_lens: Tensor, prefix_lens: Tensor, window_left: int, ragged: bool) -> KvSpan:
    if ragged:
        kv_start = (prefix_lens - window_left).clamp(min=0)
        return KvSpan(prefix_lens - kv_start, kv_start)
    kv_lens = seq_lens.minimum(seq_lens - prefix_lens + window_left)
    return KvSpan(kv_lens, seq_lens - kv_lens)


def cross_decoder(kv_lens: Tensor, encoder_lens: Tensor) -> KvSpan:
    return KvSpan(kv_lens, encoder_lens)


def cross_encoder(encoder_lens: Tensor) -> KvSpan:
    return KvSpan(encoder_lens, None)


def full_span(kv_lens: Tensor) -> KvSpan:
    """Every request attends to its first ``kv_lens`` positions (full attention).

    .. versionadded:: 0.2.0

    Raises
    ------
    PlannerConfigError
        ``kv_lens`` is not a 1-D integer tensor.
    """
    check_lens("kv_lens", kv_lens)
    return whole_span(kv_lens)


def window_decode_span(seq_lens: Tensor, window_left: int) -> KvSpan:
    """The window wrapper's span in decode: the last ``window_left + 1`` positions.

    The new token at position ``seq_len - 1`` sees ``window_left`` positions to its left
    and itself, so the span is ``min(seq_len, window_left + 1)`` long and ends at
    ``seq_len``. This is :func:`window_prefill_span` with one new token.

    .. versionadded:: 0.2.0

    Raises
    ------
    PlannerConfigError
        ``seq_lens`` is not a 1-D integer tensor, or ``window_left`` is not an int >= 0.
    """
    check_lens("seq_lens", seq_lens)
    check_window(window_left)
    return window_decode(seq_lens, window_left)


def window_prefill_span(
    seq_lens: Tensor, prefix_lens: Tensor, window_left: int, *, ragged: bool
) -> KvSpan:
    """The window wrapper's span in prefill (extend).

    The new tokens sit at positions ``prefix_len .. seq_len - 1``; the first of them looks
    back ``window_left`` positions.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    seq_lens
        Tokens per request after this step (cached prefix plus new tokens).
    prefix_lens
        Tokens per request already in the KV cache.
    window_left
        The attention window, as FlashInfer's ``window_left`` (>= 0).
    ragged
        A ragged wrapper covers the new tokens, so the paged window wrapper covers only the
        cached prefix inside the window (the guide's "Spans", ``docs/guide/attention.md``).

    Raises
    ------
    PlannerConfigError
        A length is not a 1-D integer tensor, ``prefix_lens`` differs from ``seq_lens``
        in shape or device, ``window_left`` is not an int >= 0, or ``ragged`` is not a
        bool.
    """
    check_lens("seq_lens", seq_lens)
    check_lens("prefix_lens", prefix_lens, seq_lens)
    check_window(window_left)
    check_ragged(ragged)
    return window_prefill(seq_lens, prefix_lens, window_left, ragged)


def cross_attention_decoder_span(kv_lens: Tensor, encoder_lens: Tensor) -> KvSpan:
    """The self-attention wrapper's span in an encoder-decoder model.

    The decoder's tokens are stored after the encoder's in each request's row, so the span
    starts at ``encoder_len`` and is ``kv_lens`` long (``seq_lens``, or the cached prefix
    when a ragged wrapper covers the new tokens).

    .. versionadded:: 0.2.0

    Raises
    ------
    PlannerConfigError
        A length is not a 1-D integer tensor, or the two differ in shape or device.
    """
    check_lens("kv_lens", kv_lens)
    check_lens("encoder_lens", encoder_lens, kv_lens, "kv_lens")
    return cross_decoder(kv_lens, encoder_lens)


def cross_attention_encoder_span(encoder_lens: Tensor) -> KvSpan:
    """The cross-attention wrapper's span: the encoder's tokens, from position 0.

    .. versionadded:: 0.2.0

    Raises
    ------
    PlannerConfigError
        ``encoder_lens`` is not a 1-D integer tensor.
    """
    check_lens("encoder_lens", encoder_lens)
    return cross_encoder(encoder_lens)
