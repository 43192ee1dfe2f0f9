"""Which KV positions each wrapper of a two-wrapper layout attends to, per request.

Plain tensor arithmetic on whatever device the inputs live on (tests run it on the CPU).
Only tensor methods are used, so this module never imports torch itself. Every function
returns a :class:`KvSpan`: request ``i`` attends to KV positions
``kv_start[i] .. kv_start[i] + kv_lens[i] - 1`` of its row in the engine's
request-to-token table. Engines build their indptr / indices from that span.

Preconditions (not checked per call, that would cost a device sync):
``0 <= prefix_lens <= seq_lens`` element-wise, ``encoder_lens >= 0``, integer dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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

    Attributes
    ----------
    kv_lens
        Number of KV positions per request.
    kv_start
        First KV position per request; ``None`` means every request starts at 0.
    """

    kv_lens: Tensor
    kv_start: Tensor | None


def full_span(kv_lens: Tensor) -> KvSpan:
    """Every request attends to its first ``kv_lens`` positions (full attention)."""
    return KvSpan(kv_lens, None)


def window_decode_span(seq_lens: Tensor, window_left: int) -> KvSpan:
    """The window wrapper's span in decode: the last ``window_left + 1`` positions.

    The new token at position ``seq_len - 1`` sees ``window_left`` positions to its left
    and itself, so the span is ``min(seq_len, window_left + 1)`` long and ends at
    ``seq_len``. This is :func:`window_prefill_span` with one new token.
    """
    kv_lens = seq_lens.clamp(max=window_left + 1)
    return KvSpan(kv_lens, seq_lens - kv_lens)


def window_prefill_span(
    seq_lens: Tensor, prefix_lens: Tensor, window_left: int, *, ragged: bool
) -> KvSpan:
    """The window wrapper's span in prefill (extend).

    The new tokens sit at positions ``prefix_len .. seq_len - 1``; the first of them looks
    back ``window_left`` positions.

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
        part of the cached prefix inside the window: ``min(prefix_len, window_left)``
        positions ending at ``prefix_len``. Without one, the paged wrapper covers the
        window and the new tokens: ``min(seq_len, window_left + new tokens)`` positions
        ending at ``seq_len``.
    """
    if ragged:
        kv_start = (prefix_lens - window_left).clamp(min=0)
        return KvSpan(prefix_lens - kv_start, kv_start)
    kv_lens = seq_lens.minimum(seq_lens - prefix_lens + window_left)
    return KvSpan(kv_lens, seq_lens - kv_lens)


def cross_attention_decoder_span(kv_lens: Tensor, encoder_lens: Tensor) -> KvSpan:
    """The self-attention wrapper's span in an encoder-decoder model.

    The decoder's tokens are stored after the encoder's in each request's row, so the span
    starts at ``encoder_len`` and is ``kv_lens`` long (``seq_lens``, or the cached prefix
    when a ragged wrapper covers the new tokens).
    """
    return KvSpan(kv_lens, encoder_lens)


def cross_attention_encoder_span(encoder_lens: Tensor) -> KvSpan:
    """The cross-attention wrapper's span: the encoder's tokens, from position 0."""
    return KvSpan(encoder_lens, None)
