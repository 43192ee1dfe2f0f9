"""vLLM 0.33.0's own FlashInfer attention metadata builder, built and planned.

:func:`vllm_builder` executes ``v1/attention/backends/flashinfer.py`` from the vLLM wheel
(:mod:`tests.support.engine_modules`) under the installed fake and builds its
``FlashInferMetadataBuilder`` for a small model on a Hopper-class GPU, as vLLM's model
runner would; :func:`build` then runs the builder's own ``build()`` on a batch of decodes and
prefills, which plans the prefill wrapper (``plan``) and the decode wrapper (vLLM's
``fast_plan_decode``, which plans through ``plan`` first and ``fast_decode_plan`` after,
for a CUDA-graph wrapper). What vLLM reads of its own runtime (the config, the platform,
the batch metadata, its Triton kernels, which only move indices) is set here; what the
builder does with FlashInfer is vLLM's own code against the fake.

``batch_invariant=True`` is ``VLLM_BATCH_INVARIANT=1``: vLLM then plans decode with a fixed
split of 2048, prefill with 4096, and split-KV off.
"""

from __future__ import annotations

import contextlib
import enum
import math
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
import torch

from fi_compat import determinism
from fi_compat.attention import Settings, deterministic_wrapper
from tests.support.engine_modules import ENGINES, EngineModule, integrated

__all__ = ["WRAPPERS", "Batch", "build", "forward", "vllm_builder"]

#: The wrapper classes vLLM's builder makes, by the name its module binds them under.
WRAPPERS = (
    "BatchDecodeWithPagedKVCacheWrapper",
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchAttentionWithAttentionSinkWrapper",
)

HEADS, KV_HEADS, HEAD_DIM, PAGE = 32, 8, 128, 16
MAX_REQS, MAX_LEN = 8, 256

_T = TypeVar("_T")


class _MetadataBuilder(Generic[_T]):
    """vLLM's ``AttentionMetadataBuilder`` as the FlashInfer builder uses its base: it keeps
    what it is built with and sets the reorder threshold (decodes: one query token)."""

    def __init__(self, kv_cache_spec: Any, layer_names: Any, vllm_config: Any, device: Any):
        self.kv_cache_spec = kv_cache_spec
        self.layer_names = layer_names
        self.vllm_config = vllm_config
        self.device = device

    def _init_reorder_batch_threshold(self, threshold: int = 1, **kwargs: Any) -> None:
        self.reorder_batch_threshold = threshold


class _CudaGraphMode(enum.Enum):
    NONE = 0
    PIECEWISE = 1
    FULL = 2

    def decode_mode(self) -> _CudaGraphMode:
        return self


class _KVQuantMode(enum.Enum):
    NONE = 0


class _Layout(enum.Enum):
    """vLLM's ``KVCacheLayout`` as its forward reads it: the FlashInfer layout string (its
    name) and the order that views one layer's cache ``[blocks, page, kv_heads, 2 * head]``
    in it (NHD: as it is)."""

    NHD = (0, 1, 2, 3)

    @property
    def layer_view_order(self) -> tuple[int, ...]:
        return tuple(self.value)


class _AttentionImpl:
    """vLLM's ``AttentionImpl`` as its ``__new__`` sets an implementation up: no decode or
    prefill context parallelism."""

    dcp_world_size: int
    dcp_rank: int
    pcp_world_size: int
    pcp_rank: int
    total_cp_world_size: int
    total_cp_rank: int
    need_to_return_lse_for_decode: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> _AttentionImpl:
        self = super().__new__(cls)
        self.dcp_world_size, self.dcp_rank = 1, 0
        self.pcp_world_size, self.pcp_rank = 1, 0
        self.total_cp_world_size, self.total_cp_rank = 1, 0
        self.need_to_return_lse_for_decode = False
        return self


class _CpuGpuBuffer:
    """vLLM's ``CpuGpuBuffer``, with the "GPU" side on the CPU too."""

    def __init__(self, *size: int, dtype: torch.dtype, device: Any, pin_memory: bool) -> None:
        self.cpu = torch.zeros(*size, dtype=dtype)
        self.gpu = torch.zeros(*size, dtype=dtype)
        self.np = self.cpu.numpy()

    def copy_to_gpu(self, n: int | None = None) -> torch.Tensor:
        if n is None:
            self.gpu.copy_(self.cpu)
            return self.gpu
        self.gpu[:n].copy_(self.cpu[:n])
        return self.gpu[:n]


class _Kernel:
    """A ``@triton.jit`` kernel: launching it (``kernel[grid](...)``) does nothing here."""

    def __init__(self, function: Any) -> None:
        self.function = function

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: None


def _split_decodes_and_prefills(
    metadata: Any, decode_threshold: int = 1, require_uniform: bool = False
) -> tuple[int, int, int, int]:
    """vLLM's split of a batch whose decodes come first: requests with at most
    ``decode_threshold`` query tokens are decodes."""
    lengths = (metadata.query_start_loc_cpu[1:] - metadata.query_start_loc_cpu[:-1]).tolist()
    decodes = next((i for i, n in enumerate(lengths) if n > decode_threshold), len(lengths))
    decode_tokens = sum(lengths[:decodes])
    return decodes, len(lengths) - decodes, decode_tokens, sum(lengths) - decode_tokens


def _hyperparameters(scale: float) -> Any:
    return types.SimpleNamespace(
        sm_scale=scale,
        window_left=-1,
        logits_soft_cap=None,
        has_sinks=False,
        has_same_window_lefts=True,
        has_same_all_params=True,
    )


def _config(cudagraph: bool, *, trtllm: bool | None = None) -> Any:
    model = types.SimpleNamespace(
        max_model_len=MAX_LEN,
        dtype=torch.bfloat16,
        get_num_attention_heads=lambda parallel: HEADS,
    )
    return types.SimpleNamespace(
        cache_config=types.SimpleNamespace(
            cache_dtype="auto", get_resolved_kv_cache_layout=lambda: _Layout.NHD
        ),
        model_config=model,
        attention_config=types.SimpleNamespace(
            disable_flashinfer_q_quantization=False, use_trtllm_attention=trtllm
        ),
        num_speculative_tokens=0,
        compilation_config=types.SimpleNamespace(
            cudagraph_mode=_CudaGraphMode.FULL if cudagraph else _CudaGraphMode.NONE,
            max_cudagraph_capture_size=MAX_REQS,
        ),
        scheduler_config=types.SimpleNamespace(max_num_batched_tokens=1024, max_num_seqs=MAX_REQS),
        speculative_config=None,
        parallel_config=types.SimpleNamespace(
            cp_kv_cache_interleave_size=1,
            dcp_comm_backend="ag_rs",
            decode_context_parallel_size=1,
        ),
    )


def _build_integrated(cls: type, *args: Any, **kwargs: Any) -> Any:
    """A wrapper as ``docs/migration/vllm.md`` integrates it: built with ``fa2`` where vLLM
    asks for ``auto`` (or ``trtllm-gen``/``cutlass``), and wrapped with vLLM's
    batch-invariant pair (split-KV off), the CUDA-graph one for a CUDA-graph wrapper."""
    if kwargs.get("backend", "auto") != "fa2":
        kwargs["backend"] = "fa2"
    cuda_graph = bool(kwargs.get("use_cuda_graph", False))
    return deterministic_wrapper(
        cls(*args, **kwargs), Settings(cuda_graph=cuda_graph, disable_split_kv=True)
    )


@contextmanager
def pinning_host() -> Iterator[None]:
    """A host that pins memory, as every GPU host does, on this CPU machine: a tensor's
    ``pin_memory()`` is a copy that ``is_pinned()`` (its storage's, so a slice's too)
    answers True for; unpinned tensors answer False. CPU-only torch raises on
    ``pin_memory()`` ("Cannot access accelerator device"), which is not what an engine
    meets where it runs."""
    kept: list[torch.Tensor] = []
    storages: set[int] = set()
    pin_memory, is_pinned = torch.Tensor.pin_memory, torch.Tensor.is_pinned

    def pin(self: torch.Tensor, device: Any = None) -> torch.Tensor:
        copy = self.clone()
        kept.append(copy)  # kept alive, so that its storage's address is not reused
        storages.add(copy.untyped_storage().data_ptr())
        return copy

    def pinned(self: torch.Tensor, device: Any = None) -> bool:
        return self.untyped_storage().data_ptr() in storages

    torch.Tensor.pin_memory = pin  # type: ignore[method-assign,assignment]
    torch.Tensor.is_pinned = pinned  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.Tensor.pin_memory = pin_memory  # type: ignore[method-assign]
        torch.Tensor.is_pinned = is_pinned  # type: ignore[method-assign]


@contextmanager
def vllm_builder(
    wheel: Path,
    *,
    batch_invariant: bool,
    cudagraph: bool = False,
    integration: bool = False,
    pinned: bool = False,
    capability: int = 90,
) -> Iterator[tuple[types.ModuleType, Any]]:
    """vLLM's module and a built ``FlashInferMetadataBuilder``, inside the installed fake;
    with ``integration``, its wrappers integrated as the vLLM guide says and fi-compat's
    determinism switch following ``batch_invariant``.

    With ``pinned``, vLLM's own ``vllm/utils/flashinfer.py`` runs too, as it is (its
    ``pin_host_range_buf`` reads FlashInfer's ``_get_range_buf``, ``_ceil_pow2`` and
    ``_cache_buf`` from the fake and pins the entry), on a host that pins memory
    (:func:`pinning_host`) with ``PIN_MEMORY`` on, as on every GPU host; its TRT-LLM
    decisions follow the config (``--attention-config.use_trtllm_attention=0``, so that the
    FlashInfer wrappers are used on every GPU class) and the pre-downloaded cubins
    (``VLLM_HAS_FLASHINFER_CUBIN``: nothing is fetched). ``capability``: the GPU's (90:
    Hopper, 100: Blackwell)."""
    major, minor = divmod(capability, 10)
    platform = types.SimpleNamespace(
        fp8_dtype=lambda: torch.float8_e4m3fn,
        is_device_capability=lambda wanted: wanted == capability,
        is_device_capability_family=lambda family: (
            family // 10 == capability // 10 and capability >= 100
        ),
        has_device_capability=lambda wanted: wanted <= capability,
        get_device_capability=lambda: types.SimpleNamespace(major=major, minor=minor),
    )
    logger = types.SimpleNamespace(
        **dict.fromkeys(
            ("info", "info_once", "warning", "warning_once", "debug", "debug_once"),
            lambda *args, **kwargs: None,
        )
    )
    config = _config(cudagraph, trtllm=False if pinned else None)
    overrides: dict[str, dict[str, Any]] = {
        "vllm": {
            "envs": types.SimpleNamespace(
                VLLM_BATCH_INVARIANT=batch_invariant,
                VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=1 << 16,
                VLLM_HAS_FLASHINFER_CUBIN=True,
            ),
        },
        "vllm.config": {
            "CUDAGraphMode": _CudaGraphMode,
            "get_current_vllm_config": lambda: config,
            "get_current_vllm_config_or_none": lambda: config,
        },
        "vllm.distributed.parallel_state": {
            "get_dcp_world_size_and_rank": lambda sharded=False: (1, 0)
        },
        "vllm.logger": {"init_logger": lambda name: logger},
        "vllm.platforms": {"current_platform": platform},
        "vllm.triton_utils": {"triton": types.SimpleNamespace(jit=_Kernel)},
        # with ``pinned``, vLLM's own module (run from the wheel) decides all of this
        **(
            {}
            if pinned
            else {
                "vllm.utils.flashinfer": {
                    "can_use_trtllm_attention": lambda *args, **kwargs: False,
                    "use_trtllm_attention": lambda *args, **kwargs: False,
                    "force_use_trtllm_attention": lambda: None,
                    "supports_trtllm_attention": lambda **kwargs: False,
                    "pin_host_range_buf": lambda size: None,
                },
            }
        ),
        "vllm.utils.math_utils": {
            "cdiv": lambda a, b: -(-a // b),
            "round_up": lambda a, b: -(-a // b) * b,
        },
        "vllm.utils.torch_utils": {
            "PIN_MEMORY": pinned,
            "canonicalize_singleton_dim_strides": lambda tensor: tensor,
        },
        "vllm.v1.attention.backend": {
            "AttentionMetadataBuilder": _MetadataBuilder,
            "AttentionImpl": _AttentionImpl,
            "AttentionType": types.SimpleNamespace(DECODER="decoder"),
        },
        "vllm.v1.attention.backends.utils": {
            "get_flashinfer_layout_string": lambda layout: layout.name,
            "get_num_attention_heads_from_layers": lambda config, names: None,
            "get_per_layer_parameters": lambda config, names, impl: {},
            "infer_global_hyperparameters": lambda parameters: _hyperparameters(
                1 / math.sqrt(HEAD_DIM)
            ),
            "split_decodes_and_prefills": _split_decodes_and_prefills,
        },
        "vllm.v1.kv_cache_interface": {
            "KVQuantMode": _KVQuantMode,
            "is_quantized_kv_cache": lambda dtype: False,
        },
        "vllm.v1.utils": {"CpuGpuBuffer": _CpuGpuBuffer},
    }
    spec = types.SimpleNamespace(
        block_size=PAGE,
        num_kv_heads=KV_HEADS,
        head_size=HEAD_DIM,
        dtype=torch.bfloat16,
        kv_quant_mode=_KVQuantMode.NONE,
        dcp_sharded=False,
    )
    previous = determinism.is_deterministic()
    determinism.set_deterministic(integration and batch_invariant)
    try:
        real = ("vllm.utils.flashinfer",) if pinned else ()
        with (
            pinning_host() if pinned else contextlib.nullcontext(),
            EngineModule(ENGINES["vllm"], wheel, overrides, real=real) as module,
        ):
            if integration:
                for name in WRAPPERS:
                    setattr(module, name, integrated(getattr(module, name), _build_integrated))
            builder = module.FlashInferMetadataBuilder(
                spec, ["model.layers.0.attn"], config, torch.device("cpu")
            )
            yield module, builder
    finally:
        determinism.set_deterministic(previous)


class Batch:
    """A batch as vLLM's ``CommonAttentionMetadata`` hands it to the builder: decodes (one
    query token each) first, then prefills."""

    def __init__(self, decodes: int, prefills: int, *, causal: bool = True) -> None:
        query = [1] * decodes + [5] * prefills
        seq = [20 + 3 * i for i in range(decodes + prefills)]
        starts = np.concatenate([[0], np.cumsum(query)]).astype(np.int32)
        self.num_reqs = len(query)
        self.prefills = prefills
        self.num_actual_tokens = int(starts[-1])
        self.causal = causal
        self.max_seq_len = max(seq)
        self.seq_lens = torch.tensor(seq, dtype=torch.int32)
        self.seq_lens_cpu_upper_bound = self.seq_lens.clone()
        self.query_start_loc = torch.from_numpy(starts)
        self.query_start_loc_cpu = torch.from_numpy(starts.copy())
        self.block_table_tensor = torch.zeros(self.num_reqs, MAX_LEN // PAGE, dtype=torch.int32)
        self.slot_mapping = torch.zeros(self.num_actual_tokens, dtype=torch.int64)
        self.dcp_local_seq_lens = None


def build(builder: Any, batch: Batch) -> Any:
    """vLLM's ``FlashInferMetadataBuilder.build`` on ``batch`` (no common prefix)."""
    return builder.build(0, batch)


def forward(module: types.ModuleType, metadata: Any, batch: Batch) -> torch.Tensor:
    """vLLM's ``FlashInferImpl.forward`` for one attention layer on the metadata ``build``
    made for ``batch``: a layer of the builder's model (no sliding window, no soft cap,
    ``1/sqrt(head_dim)``), bf16 query, key and value for the batch's tokens and a
    ``[blocks, page, kv_heads, 2 * head]`` cache; the output it fills."""
    impl = module.FlashInferImpl(
        HEADS, HEAD_DIM, 1 / math.sqrt(HEAD_DIM), KV_HEADS, None, None, "auto"
    )
    layer = types.SimpleNamespace(
        _q_scale_float=1.0,
        _k_scale_float=1.0,
        _v_scale_float=1.0,
        _o_scale_float=None,
        _q_scale=torch.ones(()),
        _k_scale=torch.ones(()),
        _v_scale=torch.ones(()),
    )
    tokens = batch.num_actual_tokens
    query = torch.zeros(tokens, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    key = torch.zeros(tokens, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16)
    value = torch.zeros(tokens, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16)
    cache = torch.zeros(MAX_REQS * MAX_LEN // PAGE, PAGE, KV_HEADS, 2 * HEAD_DIM)
    output = torch.zeros(tokens, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    result: torch.Tensor = impl.forward(
        layer, query, key, value, cache.to(torch.bfloat16), metadata, output
    )
    return result
