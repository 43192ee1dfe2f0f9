"""Per-plan cost of the deterministic wrapper over the wrapper's own ``plan``. Prints its figures.

Target (issue 13): under 1 us added per ``plan`` call, measured with a no-op ``plan`` so
only fi-compat's work is counted. The wrapped class stands for FlashInfer's paged prefill
wrapper on backend ``fa2`` of the release the measurements know (it is defined in a module
named ``flashinfer.prefill``, which is what fi-compat checks): its ``plan`` takes the real
0.7.2.post1 parameters and does nothing. Three calls are timed:

* ``direct``: the wrapper's own ``plan`` with the split settings passed by the engine;
* ``wrapped``: the deterministic wrapper's ``plan`` without them (it adds them);
* ``wrapped, engine passes agreeing settings``: the slow path, the engine passes its own
  pair and fi-compat checks it.

Run: ``.venv/bin/python bench/bench_deterministic_wrapper.py`` (``make bench`` runs every
script and writes their figures to ``bench/results.md``)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from _figures import Figure, best_ns, report

from fi_compat import determinism
from fi_compat.attention import deterministic_wrapper, measured_releases, split_reach
from fi_compat.capabilities import get_capabilities


class BatchPrefillWithPagedKVCacheWrapper:
    """A no-op stand-in with the parameters of FlashInfer 0.7.2.post1's paged prefill plan."""

    __module__ = "flashinfer.prefill"

    def __init__(self) -> None:
        self._backend = "fa2"
        self._use_cuda_graph = False

    def plan(
        self,
        qo_indptr: Any,
        paged_kv_indptr: Any,
        paged_kv_indices: Any,
        paged_kv_last_page_len: Any,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim_qk: int,
        page_size: int,
        head_dim_vo: int | None = None,
        custom_mask: Any = None,
        packed_custom_mask: Any = None,
        causal: bool = False,
        pos_encoding_mode: str = "NONE",
        use_fp16_qk_reduction: bool = False,
        sm_scale: float | None = None,
        window_left: int = -1,
        logits_soft_cap: float | None = None,
        rope_scale: float | None = None,
        rope_theta: float | None = None,
        q_data_type: Any = "float16",
        kv_data_type: Any = None,
        o_data_type: Any = None,
        non_blocking: bool = True,
        prefix_len_ptr: Any = None,
        token_pos_in_items_ptr: Any = None,
        token_pos_in_items_len: int = 0,
        max_item_len_ptr: Any = None,
        seq_lens: Any = None,
        seq_lens_q: Any = None,
        block_tables: Any = None,
        max_token_per_sequence: int | None = None,
        max_sequence_kv: int | None = None,
        fixed_split_size: int | None = None,
        disable_split_kv: bool = False,
    ) -> None:
        return None


def main() -> None:
    release = measured_releases()[-1]
    real = get_capabilities()
    caps = dataclasses.replace(
        real, flashinfer=dataclasses.replace(real.flashinfer, version=release)
    )
    assert split_reach(release, "BatchPrefillWithPagedKVCacheWrapper", "fa2").reaches
    inner = BatchPrefillWithPagedKVCacheWrapper()
    with determinism.deterministic(True):
        wrapped = deterministic_wrapper(inner, capabilities=caps)
    args = (1, 2, 3, 4, 32, 8, 128, 16)

    def direct() -> None:
        inner.plan(
            *args,
            causal=True,
            q_data_type="bfloat16",
            fixed_split_size=4096,
            disable_split_kv=False,
        )

    def through() -> None:
        wrapped.plan(*args, causal=True, q_data_type="bfloat16")

    def agreeing() -> None:
        wrapped.plan(
            *args,
            causal=True,
            q_data_type="bfloat16",
            fixed_split_size=4096,
            disable_split_kv=False,
        )

    best = best_ns({"direct": direct, "through": through, "agreeing": agreeing}, 200_000)
    base, ours, slow = best["direct"], best["through"], best["agreeing"]
    figures = [
        Figure("direct plan (the engine passes the settings)", base, "ns"),
        Figure("wrapped plan (fi-compat adds them)", ours, "ns"),
        Figure("  added per plan", ours - base, "ns", 1000),
        Figure("wrapped plan, the engine passes an agreeing pair", slow, "ns"),
        Figure("  added per plan (the slower path that checks the pair)", slow - base, "ns"),
    ]
    report(
        "bench_deterministic_wrapper.py",
        figures,
        [f"plan parameters and split reach of flashinfer {release}"],
    )


if __name__ == "__main__":
    main()
