"""The kv-length / start-offset arithmetic of the sliding-window and cross-attention paths."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch
from hypothesis import given
from hypothesis import strategies as st

from fi_compat import determinism
from fi_compat.attention import (
    AttentionPlanner,
    KvSpan,
    Layout,
    cross_attention_decoder_span,
    cross_attention_encoder_span,
    full_span,
    window_decode_span,
    window_prefill_span,
)

DTYPES = st.sampled_from([torch.int32, torch.int64])
WINDOWS = st.integers(min_value=0, max_value=64)
REQUESTS = st.lists(
    st.tuples(st.integers(0, 300), st.integers(0, 80)),  # (cached prefix, new tokens)
    min_size=1,
    max_size=12,
)


class Wrapper:
    """Stands in for a FlashInfer wrapper: the planner needs a callable ``plan``."""

    def plan(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("never planned here")


def tensor(values: list[int], dtype: torch.dtype = torch.int32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def as_lists(span: KvSpan) -> tuple[list[int], list[int] | None]:
    start = None if span.kv_start is None else span.kv_start.tolist()
    return span.kv_lens.tolist(), start


# ---------------------------------------------------------------------------- examples


def test_window_decode_examples() -> None:
    # window_left=4: the new token sees 4 to its left and itself, so at most 5 positions
    span = window_decode_span(tensor([10, 3, 5, 6, 1]), 4)
    assert as_lists(span) == ([5, 3, 5, 5, 1], [5, 0, 0, 1, 0])


def test_window_prefill_examples() -> None:
    seq = tensor([10, 3, 20, 8])
    prefix = tensor([7, 0, 2, 8])  # the last request has no new token
    # paged only: window + new tokens, capped at the sequence, ending at seq_len
    assert as_lists(window_prefill_span(seq, prefix, 4, ragged=False)) == (
        [7, 3, 20, 4],
        [3, 0, 0, 4],
    )
    # with a ragged wrapper: the cached part inside the window, ending at prefix_len
    assert as_lists(window_prefill_span(seq, prefix, 4, ragged=True)) == (
        [4, 0, 2, 4],
        [3, 0, 0, 4],
    )


def test_window_zero_sees_only_the_token_itself() -> None:
    assert as_lists(window_decode_span(tensor([7, 1]), 0)) == ([1, 1], [6, 0])


def test_cross_attention_examples() -> None:
    seq, encoder = tensor([5, 1]), tensor([12, 3])
    assert as_lists(cross_attention_decoder_span(seq, encoder)) == ([5, 1], [12, 3])
    assert as_lists(cross_attention_encoder_span(encoder)) == ([12, 3], None)
    assert as_lists(full_span(seq)) == ([5, 1], None)


def test_spans_keep_dtype_and_device() -> None:
    seq = torch.tensor([9, 2], dtype=torch.int64)
    span = window_prefill_span(seq, torch.tensor([4, 1], dtype=torch.int64), 3, ragged=False)
    assert span.kv_lens.dtype == torch.int64
    assert span.kv_start is not None
    assert span.kv_start.dtype == torch.int64
    assert span.kv_lens.device.type == "cpu"


# ---------------------------------------------------------------------------- properties


@given(REQUESTS, WINDOWS, DTYPES)
def test_window_prefill_covers_exactly_what_the_new_tokens_need(
    requests: list[tuple[int, int]], window: int, dtype: torch.dtype
) -> None:
    prefix = [p for p, _ in requests]
    seq = [p + n for p, n in requests]
    span = window_prefill_span(tensor(seq, dtype), tensor(prefix, dtype), window, ragged=False)
    lens, start = as_lists(span)
    assert start is not None
    for i, (p, s) in enumerate(zip(prefix, seq, strict=True)):
        # the first new token (position p) looks back to p - window; the last one is s - 1
        earliest = max(0, p - window) if s > p else max(0, s - window)
        assert start[i] == min(earliest, s)
        assert start[i] + lens[i] == s
        assert 0 <= lens[i] <= min(s, window + (s - p))


@given(REQUESTS, WINDOWS, DTYPES)
def test_window_prefill_with_ragged_covers_the_cached_part_of_the_window(
    requests: list[tuple[int, int]], window: int, dtype: torch.dtype
) -> None:
    prefix = [p for p, _ in requests]
    seq = [p + n for p, n in requests]
    span = window_prefill_span(tensor(seq, dtype), tensor(prefix, dtype), window, ragged=True)
    lens, start = as_lists(span)
    assert start is not None
    for i, p in enumerate(prefix):
        assert start[i] == max(0, p - window)
        assert start[i] + lens[i] == p
        assert lens[i] == min(p, window)


@given(st.lists(st.integers(1, 500), min_size=1, max_size=12), WINDOWS)
def test_decode_is_prefill_with_one_new_token(seq: list[int], window: int) -> None:
    decode = window_decode_span(tensor(seq), window)
    prefill = window_prefill_span(tensor(seq), tensor([s - 1 for s in seq]), window, ragged=False)
    assert as_lists(decode) == as_lists(prefill)
    lens, start = as_lists(decode)
    assert lens == [min(s, window + 1) for s in seq]
    assert start == [s - min(s, window + 1) for s in seq]


@given(REQUESTS, st.lists(st.integers(0, 100), min_size=12, max_size=12))
def test_cross_attention_self_and_encoder_spans(
    requests: list[tuple[int, int]], encoder_pool: list[int]
) -> None:
    seq = [p + n for p, n in requests]
    encoder = encoder_pool[: len(seq)]
    with determinism.deterministic(False):
        planner = AttentionPlanner.cross_attention(decode=(Wrapper(), Wrapper()))
    own, cross = planner.decode_spans(tensor(seq), tensor(encoder))
    # decoder tokens sit after the encoder tokens in each request's row
    assert as_lists(own) == (seq, encoder)
    assert as_lists(cross) == (encoder, None)


# ---------------------------------------------------------------------------- per layout


def test_planner_spans_per_layout() -> None:
    seq, prefix, encoder = tensor([10, 3]), tensor([7, 0]), tensor([4, 6])
    with determinism.deterministic(False):
        single = AttentionPlanner.single(decode=Wrapper())
        swa = AttentionPlanner.sliding_window(4, decode=(Wrapper(), Wrapper()))
        cross = AttentionPlanner.cross_attention(decode=(Wrapper(), Wrapper()))

    assert [as_lists(s) for s in single.decode_spans(seq)] == [([10, 3], None)]
    assert [as_lists(s) for s in single.prefill_spans(seq, prefix)] == [([10, 3], None)]
    assert [as_lists(s) for s in single.prefill_spans(seq, prefix, ragged=True)] == [([7, 0], None)]

    assert [as_lists(s) for s in swa.decode_spans(seq)] == [([5, 3], [5, 0]), ([10, 3], None)]
    assert [as_lists(s) for s in swa.prefill_spans(seq, prefix)] == [
        ([7, 3], [3, 0]),
        ([10, 3], None),
    ]
    assert [as_lists(s) for s in swa.prefill_spans(seq, prefix, ragged=True)] == [
        ([4, 0], [3, 0]),
        ([7, 0], None),
    ]

    assert [as_lists(s) for s in cross.prefill_spans(seq, prefix, encoder)] == [
        ([10, 3], [4, 6]),
        ([4, 6], None),
    ]
    assert [as_lists(s) for s in cross.prefill_spans(seq, prefix, encoder, ragged=True)] == [
        ([7, 0], [4, 6]),
        ([4, 6], None),
    ]
    assert len(swa.decode_spans(seq)) == len(Layout.SLIDING_WINDOW.roles)


@pytest.mark.parametrize("window", [0, 1, 7])
def test_window_never_exceeds_the_sequence(window: int) -> None:
    seq = tensor([0, 1, 2, 50])
    lens, start = as_lists(window_decode_span(seq, window))
    assert all(0 <= n <= s for n, s in zip(lens, seq.tolist(), strict=True))
    assert start is not None
    assert all(st_ >= 0 for st_ in start)
