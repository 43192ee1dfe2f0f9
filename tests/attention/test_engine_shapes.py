"""The call shapes SGLang's and vLLM's FlashInfer attention backends make, under the fake.

Written here after SGLang 0.5.23's ``srt/layers/attention/flashinfer_backend.py`` and vLLM
0.33.0's ``v1/attention/backends/flashinfer.py`` (not copied): the same constructors,
keywords, attribute reads and fast-plan installs, against ``flashinfer`` as the fake of each
release serves it, checking the kernel-plan log. They need no engine wheel, so they run
everywhere; ``test_engine_backends.py`` runs the engines' own modules.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

from fi_compat.testing import FakeFlashInfer, fake_flashinfer, load_release

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
#: Releases of each series engines ran on, from the first with ``fast_decode_plan``.
RELEASES = ("0.4.0", "0.5.3", "0.6.5", "0.6.13", "0.7.0", "0.7.2", "0.7.2.post1")
DECODE_PLAN = "BatchDecodeWithPagedKVCacheWrapper.plan"
PREFILL_PLAN = "BatchPrefillWithPagedKVCacheWrapper.plan"


def _takes(release: str, method: str, *keywords: str) -> bool:
    record = load_release(release)
    return all(record.accepts(method, keyword) for keyword in keywords)


def _indices(batch: int = 2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    kv_indptr = torch.tensor([0, 5, 12][: batch + 1], dtype=torch.int32)
    kv_indices = torch.arange(int(kv_indptr[-1]), dtype=torch.int32)
    last_page_len = torch.ones(batch, dtype=torch.int32)
    qo_indptr = torch.tensor([0, 2, 4][: batch + 1], dtype=torch.int32)
    return qo_indptr, kv_indptr, kv_indices, last_page_len


def _last(fake: FakeFlashInfer) -> tuple[str, int | None, bool | None, bool]:
    plan = fake.kernel_plans[-1]
    return plan.family, plan.fixed_split_size, plan.disable_split_kv, plan.dropped


# --------------------------------------------------------------------------- SGLang


class SGLangShape:
    """SGLang's backend as it builds and plans its wrappers (one full-attention layer)."""

    def __init__(self, flashinfer: Any, *, deterministic: bool) -> None:
        self.fi = flashinfer
        self.buffer = torch.empty(1 << 16, dtype=torch.uint8)
        self.split = (4096, 2048) if deterministic else (None, None)
        self.ragged = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
            self.buffer, "NHD", backend="auto"
        )
        self.paged = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self.buffer, "NHD", backend="fa2"
        )
        self.decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.buffer, "NHD", backend="fa2", use_tensor_cores=True
        )
        self.graph_indices = torch.zeros(64, dtype=torch.int32)

    def plan_decode(
        self, wrapper: Any, fixed: int | None, disable: bool | None, override: Any = None
    ) -> None:
        _, kv_indptr, kv_indices, last_page_len = _indices()
        if wrapper.is_cuda_graph_enabled:
            kv_indices = wrapper._paged_kv_indices_buf  # written in place, as SGLang does
        keywords: dict[str, Any] = {
            "data_type": torch.bfloat16,
            "q_data_type": torch.bfloat16,
            "non_blocking": True,
            "fixed_split_size": fixed,
            "disable_split_kv": disable if disable is not None else False,
        }
        fast = getattr(wrapper.begin_forward, "func", None) == self.fi.fast_decode_plan
        if fast:
            keywords["global_override_indptr_cpu"] = override
        wrapper.begin_forward(
            kv_indptr, kv_indices, last_page_len, HEADS, KV_HEADS, HEAD_DIM, 1, **keywords
        )

    def plan_extend(self, wrapper: Any, fixed: int | None, *, ragged: bool) -> None:
        qo_indptr, kv_indptr, kv_indices, last_page_len = _indices()
        if ragged:
            self.ragged.begin_forward(
                qo_indptr, qo_indptr, HEADS, KV_HEADS, HEAD_DIM, q_data_type=torch.bfloat16
            )
        if wrapper.is_cuda_graph_enabled and wrapper._custom_mask_buf is not None:
            raise AssertionError("SGLang plans a masked graph wrapper with its mask")
        wrapper.begin_forward(
            qo_indptr,
            kv_indptr,
            kv_indices,
            last_page_len,
            HEADS,
            KV_HEADS,
            HEAD_DIM,
            1,
            q_data_type=torch.bfloat16,
            kv_data_type=torch.bfloat16,
            custom_mask=None,
            non_blocking=True,
            fixed_split_size=fixed,
            prefix_len_ptr=None,
            token_pos_in_items_ptr=None,
            token_pos_in_items_len=0,
            max_item_len_ptr=None,
        )

    def graph_decode_wrapper(self) -> Any:
        _, kv_indptr, _, last_page_len = _indices()
        return self.fi.BatchDecodeWithPagedKVCacheWrapper(
            self.buffer,
            "NHD",
            backend="fa2",
            use_cuda_graph=True,
            use_tensor_cores=True,
            paged_kv_indptr_buffer=kv_indptr,
            paged_kv_indices_buffer=self.graph_indices,
            paged_kv_last_page_len_buffer=last_page_len,
        )

    def graph_prefill_wrapper(self) -> Any:
        qo_indptr, kv_indptr, _, last_page_len = _indices()
        return self.fi.BatchPrefillWithPagedKVCacheWrapper(
            self.buffer,
            "NHD",
            use_cuda_graph=True,
            backend="fa2",
            qo_indptr_buf=qo_indptr,
            paged_kv_indptr_buf=kv_indptr,
            paged_kv_indices_buf=self.graph_indices,
            paged_kv_last_page_len_buf=last_page_len,
        )


SGLANG_RELEASES = [
    release
    for release in RELEASES
    if _takes(release, PREFILL_PLAN, "fixed_split_size", "prefix_len_ptr")
    and _takes(release, DECODE_PLAN, "fixed_split_size", "disable_split_kv")
]


def test_the_sglang_shape_covers_several_release_series() -> None:
    assert {release.rsplit(".", 1)[0] for release in SGLANG_RELEASES} >= {"0.6", "0.7"}


@pytest.mark.parametrize("release", SGLANG_RELEASES)
@pytest.mark.parametrize("deterministic", [False, True], ids=["default", "deterministic"])
def test_sglang_eager_decode_and_extend(release: str, deterministic: bool) -> None:
    with fake_flashinfer(release) as fake:
        import flashinfer

        shape = SGLangShape(flashinfer, deterministic=deterministic)
        prefill, decode = shape.split
        assert shape.decode.is_cuda_graph_enabled is False
        shape.plan_decode(shape.decode, decode, False)
        assert _last(fake) == (
            "BatchDecodeWithPagedKVCacheWrapper",
            -1 if decode is None else decode,
            False,
            False,
        )
        shape.plan_extend(shape.paged, prefill, ragged=not deterministic)
        assert _last(fake)[:3] == (
            "BatchPrefillWithPagedKVCacheWrapper",
            -1 if prefill is None else prefill,
            False,
        )
        if not deterministic:
            ragged = [
                plan
                for plan in fake.kernel_plans
                if plan.family == "BatchPrefillWithRaggedKVCacheWrapper"
            ]
            assert ragged
            assert ragged[-1].backend == "auto"


@pytest.mark.parametrize("release", SGLANG_RELEASES)
def test_sglang_cuda_graph_decode_capture_and_replay(release: str) -> None:
    """Capture plans through ``plan``; SGLang then installs ``fast_decode_plan`` and
    recognises it by ``begin_forward.func`` on every replay."""
    with fake_flashinfer(release) as fake:
        import flashinfer

        shape = SGLangShape(flashinfer, deterministic=True)
        wrapper = shape.graph_decode_wrapper()
        assert wrapper.is_cuda_graph_enabled is True
        assert wrapper._paged_kv_indices_buf is shape.graph_indices
        shape.plan_decode(wrapper, None, True)
        assert _last(fake)[1:] == (-1, True, False)
        wrapper.begin_forward = functools.partial(flashinfer.fast_decode_plan, wrapper)
        override = torch.tensor([0, 5, 12], dtype=torch.int32)
        shape.plan_decode(wrapper, None, True, override)
        assert fake.calls[-1].name == "fast_decode_plan"
        assert fake.kernel_plans[-1].family == "fast_decode_plan"
        assert _last(fake)[1:] == (-1, True, False)


@pytest.mark.parametrize("release", SGLANG_RELEASES)
def test_sglang_cuda_graph_prefill_capture(release: str) -> None:
    """Target verify, draft extend and full-graph extend capture: a CUDA-graph paged
    wrapper without a custom-mask buffer, planned with no split size."""
    with fake_flashinfer(release) as fake:
        import flashinfer

        shape = SGLangShape(flashinfer, deterministic=False)
        wrapper = shape.graph_prefill_wrapper()
        assert wrapper.is_cuda_graph_enabled is True
        assert wrapper._custom_mask_buf is None
        shape.plan_extend(wrapper, None, ragged=False)
        assert _last(fake) == ("BatchPrefillWithPagedKVCacheWrapper", -1, False, False)


# --------------------------------------------------------------------------- vLLM


def fast_plan_decode_shape(wrapper: Any, flashinfer: Any, fixed: int, disable: bool) -> None:
    """vLLM's ``fast_plan_decode``: ``plan`` on the first call or an eager wrapper, then
    ``fast_decode_plan`` on a CUDA-graph wrapper, with keyword arguments throughout."""
    _, kv_indptr, kv_indices, last_page_len = _indices()
    keywords: dict[str, Any] = {
        "indptr": kv_indptr,
        "indices": kv_indices,
        "last_page_len": last_page_len,
        "num_qo_heads": HEADS,
        "num_kv_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "page_size": 16,
        "pos_encoding_mode": "NONE",
        "window_left": -1,
        "logits_soft_cap": None,
        "q_data_type": torch.bfloat16,
        "kv_data_type": torch.bfloat16,
        "data_type": torch.bfloat16,
        "sm_scale": HEAD_DIM**-0.5,
        "rope_scale": None,
        "rope_theta": None,
        "non_blocking": True,
        "fixed_split_size": fixed,
        "disable_split_kv": disable,
        "q_len_per_req": 1,
    }
    if not wrapper.is_cuda_graph_enabled or getattr(wrapper, "vllm_first_call", True):
        wrapper.plan(**keywords, o_data_type=torch.bfloat16, block_tables=None, seq_lens=None)
        wrapper.vllm_first_call = False
        return
    flashinfer.fast_decode_plan(wrapper, **keywords)


def _fast_plan_takes(release: str, keyword: str) -> bool:
    plan = load_release(release).fast_decode_plan
    return plan is not None and plan.parameter(keyword) is not None


VLLM_RELEASES = [
    release
    for release in RELEASES
    if _takes(release, DECODE_PLAN, "q_len_per_req", "o_data_type", "seq_lens")
    and _takes(release, PREFILL_PLAN, "o_data_type", "seq_lens", "fixed_split_size")
    and _fast_plan_takes(release, "q_len_per_req")
]


def test_the_vllm_shape_covers_the_releases_vllm_pins() -> None:
    assert {"0.7.2", "0.7.2.post1"} <= set(VLLM_RELEASES)
    assert len(VLLM_RELEASES) >= 3


@pytest.mark.parametrize("release", VLLM_RELEASES)
@pytest.mark.parametrize("invariant", [False, True], ids=["default", "batch-invariant"])
def test_vllm_metadata_build_plans_prefill_and_decode(release: str, invariant: bool) -> None:
    decode_split, prefill_split, disable = (2048, 4096, True) if invariant else (-1, -1, False)
    with fake_flashinfer(release) as fake:
        import flashinfer

        buffer = torch.zeros(1 << 16, dtype=torch.uint8)
        prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(buffer, "NHD", backend="fa2")
        qo_indptr, kv_indptr, kv_indices, last_page_len = _indices()
        prefill.plan(
            qo_indptr=qo_indptr,
            paged_kv_indptr=kv_indptr,
            paged_kv_indices=kv_indices,
            paged_kv_last_page_len=last_page_len,
            seq_lens=None,
            num_qo_heads=HEADS,
            num_kv_heads=KV_HEADS,
            head_dim_qk=HEAD_DIM,
            page_size=16,
            causal=True,
            sm_scale=HEAD_DIM**-0.5,
            window_left=-1,
            logits_soft_cap=None,
            q_data_type=torch.bfloat16,
            kv_data_type=torch.bfloat16,
            o_data_type=torch.bfloat16,
            fixed_split_size=prefill_split,
            disable_split_kv=disable,
        )
        assert _last(fake) == ("BatchPrefillWithPagedKVCacheWrapper", prefill_split, disable, False)
        graph = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            buffer,
            "NHD",
            use_cuda_graph=True,
            paged_kv_indptr_buffer=kv_indptr,
            paged_kv_indices_buffer=kv_indices,
            paged_kv_last_page_len_buffer=last_page_len,
            use_tensor_cores=True,
            backend="fa2",
        )
        fast_plan_decode_shape(graph, flashinfer, decode_split, disable)
        assert fake.calls[-1].name.endswith("._plan_impl") or fake.calls[-1].name == DECODE_PLAN
        assert _last(fake)[1:] == (decode_split, disable, False)
        fast_plan_decode_shape(graph, flashinfer, decode_split, disable)
        assert fake.kernel_plans[-1].family == "fast_decode_plan"
        assert _last(fake)[1:] == (decode_split, disable, False)


def test_vllm_keywords_an_older_release_lacks_raise_as_there() -> None:
    """vLLM 0.33.0's decode ``plan`` keywords on a release before ``q_len_per_req``: the
    fake raises the ``TypeError`` the release's own signature raises."""
    older = next(release for release in RELEASES if release not in VLLM_RELEASES)
    with fake_flashinfer(older):
        import flashinfer

        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            torch.zeros(64, dtype=torch.uint8), "NHD", use_tensor_cores=True
        )
        with pytest.raises(TypeError, match="unexpected keyword"):
            fast_plan_decode_shape(wrapper, flashinfer, -1, False)
