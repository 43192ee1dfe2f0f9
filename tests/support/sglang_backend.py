"""SGLang 0.5.23's own ``FlashInferAttnBackend``, built and planned on every path.

:func:`sglang_backend` executes ``srt/layers/attention/flashinfer_backend.py`` from the
SGLang wheel (:mod:`tests.support.engine_modules`) under the installed fake, and builds
its ``FlashInferAttnBackend`` for a small model (one layer layout: full attention, sliding
window or cross attention) as SGLang's model runner would. What SGLang reads of its own
runtime (the model runner, the runtime context, the environment flags, the forward modes
and speculative inputs) is set here; everything the backend does with FlashInfer is
SGLang's own code against the fake.

:data:`PATHS` lists every planning path of ``init_forward_metadata`` and
``init_forward_metadata_out_graph`` (capture and replay), and of the multi-step draft
backend; :func:`plan_path` runs one. With ``integration=True`` the backend is integrated
as ``docs/migration/sglang.md`` says: every wrapper it builds is handed to
``fi_compat.attention.deterministic_wrapper`` where it is built (eager ones with SGLang's
tile sizes, CUDA-graph ones with none), and ``prefill_wrapper_ragged`` is built with
``backend="fa2"`` under deterministic inference.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fi_compat import determinism
from fi_compat.attention import Settings, deterministic_wrapper
from fi_compat.errors import FiCompatError
from tests.support.engine_modules import ENGINES, EngineModule, Envs, integrated

__all__ = [
    "DECODE_TILE",
    "DRAFT_STEPS",
    "PATHS",
    "PREFILL_TILE",
    "Layout",
    "Mode",
    "Path_",
    "describe",
    "outcome",
    "plan_path",
    "sglang_backend",
]

#: SGLang's default tile sizes under deterministic inference
#: (``SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE`` / ``..._DECODE_SPLIT_TILE_SIZE``).
PREFILL_TILE, DECODE_TILE = 4096, 2048
#: The wrapper classes SGLang builds, by the name its module binds them under.
WRAPPERS = (
    "BatchDecodeWithPagedKVCacheWrapper",
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
)


class Mode(enum.Enum):
    """SGLang's forward modes, as its backend asks them (``forward_mode.is_...()``)."""

    DECODE = "decode"
    EXTEND = "extend"
    TARGET_VERIFY = "target_verify"
    DLLM_EXTEND = "dllm_extend"
    DRAFT_EXTEND_V2 = "draft_extend_v2"

    def is_decode_or_idle(self) -> bool:
        return self is Mode.DECODE

    def is_decode(self) -> bool:
        return self is Mode.DECODE

    def is_target_verify(self) -> bool:
        return self is Mode.TARGET_VERIFY

    def is_dllm_extend(self) -> bool:
        return self is Mode.DLLM_EXTEND

    def is_draft_extend_v2(self) -> bool:
        return self is Mode.DRAFT_EXTEND_V2

    def is_extend(self) -> bool:
        return self is not Mode.DECODE


class SpecType(enum.Enum):
    """SGLang's ``SpecInputType`` members its backend compares with."""

    EAGLE_VERIFY = "eagle_verify"
    DFLASH_VERIFY = "dflash_verify"
    EAGLE_DRAFT = "eagle_draft"


class SpecInput(types.SimpleNamespace):
    """SGLang's ``SpecInput`` base class, which its backend checks speculative inputs
    against (``isinstance``)."""


class Layout(enum.Enum):
    """The wrapper layout ``FlashInferAttnBackend.__init__`` picks from the model."""

    FULL = "full"
    SLIDING_WINDOW = "sliding_window"
    CROSS_ATTENTION = "cross_attention"


BATCH = 2
SEQ = (5, 7)
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
CONTEXT = 64


def _model_runner(layout: Layout, *, dllm: bool) -> Any:
    model_config = types.SimpleNamespace(
        num_attention_heads=HEADS,
        get_num_kv_heads=lambda tp, dcp=1: KV_HEADS,
        get_max_num_attention_heads=lambda: HEADS,
        context_len=CONTEXT,
        is_multimodal=False,
        is_encoder_decoder=layout is Layout.CROSS_ATTENTION,
        hf_config=types.SimpleNamespace(architectures=["LlamaForCausalLM"]),
        head_dim=HEAD_DIM,
        v_head_dim=HEAD_DIM,
    )
    access = types.SimpleNamespace(kind="direct", scale_recipe=None)
    quant = types.SimpleNamespace(
        resolve_attention_access=lambda phase, backend: access, name="none"
    )
    translator = types.SimpleNamespace(
        reads_are_translated=False,
        pack_read_stream=lambda plan, **kwargs: None,
        write_ids=lambda batch, kind: None,
        read_source=lambda plan, **kwargs: types.SimpleNamespace(
            row_ids=None, ids=None, row_stride=CONTEXT, entry_page_size=1, v2p=None
        ),
    )
    return types.SimpleNamespace(
        req_to_token_pool=types.SimpleNamespace(
            size=16, req_to_token=torch.zeros(16, CONTEXT, dtype=torch.int32)
        ),
        token_to_kv_pool=types.SimpleNamespace(get_kv_cache_quant_method=lambda: quant),
        token_to_kv_pool_allocator=types.SimpleNamespace(get_kvcache=lambda: None),
        is_draft_worker=False,
        kv_index_translator=translator,
        server_args=types.SimpleNamespace(dllm=dllm),
        prefill_attention_backend_str="flashinfer",
        decode_attention_backend_str="flashinfer",
        model_config=model_config,
        kv_cache_dtype=torch.bfloat16,
        page_size=1,
        sliding_window_size=16 if layout is Layout.SLIDING_WINDOW else None,
        device="cpu",
        dtype=torch.bfloat16,
    )


def _dllm_config(server_args: Any) -> Any:
    return types.SimpleNamespace(block_size=2) if server_args.dllm else None


def _integrated(classes: Mapping[str, type], *, deterministic: bool) -> dict[str, type]:
    """The wrapper classes as the guide integrates them: each wrapper is handed to
    ``deterministic_wrapper`` where it is built (eager ones with SGLang's tile sizes,
    CUDA-graph ones with none), and the ragged one is built with ``fa2`` under
    deterministic inference (``auto`` may resolve to a backend that drops the settings)."""
    eager = Settings(prefill_split_size=PREFILL_TILE, decode_split_size=DECODE_TILE)

    def build(cls: type, *args: Any, **kwargs: Any) -> Any:
        if deterministic and cls.__name__ == WRAPPERS[2]:
            kwargs["backend"] = "fa2"
        settings = None if kwargs.get("use_cuda_graph") else eager
        return deterministic_wrapper(cls(*args, **kwargs), settings)

    return {name: integrated(cls, build) for name, cls in classes.items()}


@contextmanager
def sglang_backend(
    wheel: Path,
    *,
    deterministic: bool,
    integration: bool,
    layout: Layout = Layout.FULL,
    dllm: bool = False,
    sm100: bool = False,
    draft_steps: int = 0,
) -> Iterator[tuple[types.ModuleType, Any]]:
    """SGLang's module and a built ``FlashInferAttnBackend`` (with ``draft_steps``, its
    ``FlashInferMultiStepDraftBackend`` of that many speculative steps), inside the
    installed fake."""
    execution = types.SimpleNamespace(
        features=types.SimpleNamespace(enable_mis=False),
        deterministic=types.SimpleNamespace(enable_deterministic_inference=deterministic),
    )
    parallel = types.SimpleNamespace(attn_tp_size=1, attn_dcp_size=1)
    platform = types.SimpleNamespace(is_sm100=sm100)
    buffers: dict[str, Any] = {}
    overrides: dict[str, dict[str, Any]] = {
        "sglang.srt.runtime_context": {
            "get_exec": lambda: execution,
            "get_parallel": lambda: parallel,
            "get_platform": lambda: platform,
            "get_buffer": lambda name, make: buffers.setdefault(name, make()),
        },
        "sglang.srt.utils": {
            "is_flashinfer_available": lambda: True,
            "get_int_env_var": lambda name, default: default,
            "get_cuda_graph_max_batch_size": lambda size: 8,
        },
        "sglang.srt.environ": {
            "envs": Envs(
                SGLANG_ENABLE_TORCH_COMPILE=False,
                SGLANG_FLASHINFER_WORKSPACE_SIZE=1 << 16,
                SGLANG_FLASHINFER_USE_PAGED=False,
                SGLANG_OPT_FLASHINFER_VERIFY_HOST_PLAN=False,
            )
        },
        "sglang.srt.dllm.config": {
            "DllmConfig": types.SimpleNamespace(from_server_args=_dllm_config)
        },
        "sglang.srt.model_executor.forward_batch_info": {"ForwardMode": Mode},
        "sglang.srt.speculative.spec_info": {"SpecInputType": SpecType, "SpecInput": SpecInput},
        "sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph": {
            "is_in_tc_piecewise_cuda_graph": lambda: False
        },
        "sglang.srt.model_executor.cuda_graph_config": {
            "check_cuda_graph_backend": lambda phase, backend: False
        },
        "sglang.srt.speculative.spec_utils": {
            "draft_kv_indices_buffer_width": lambda bs, topk, context: bs * topk * context,
            "draft_kv_indices_used_len": lambda total, topk, bs, steps: total * topk * steps,
            "resolve_draft_decode_window": lambda runner: (0, 0),
        },
        "sglang.kernels.ops.attention.kv_indices": {
            "spec_kv_index_token_blocks": lambda **kwargs: 1
        },
    }
    overrides["sglang.srt.model_executor.forward_batch_info"]["build_inner_fb_view"] = _inner_view
    engine = EngineModule(ENGINES["sglang"], wheel, overrides)
    previous = determinism.is_deterministic()
    determinism.set_deterministic(deterministic)
    try:
        with engine as module:
            if integration:
                classes = {name: getattr(module, name) for name in WRAPPERS}
                for name, construct in _integrated(classes, deterministic=deterministic).items():
                    setattr(module, name, construct)
            runner = _model_runner(layout, dllm=dllm)
            if draft_steps:
                yield (
                    module,
                    module.FlashInferMultiStepDraftBackend(
                        runner, topk=1, speculative_num_steps=draft_steps
                    ),
                )
            else:
                yield module, module.FlashInferAttnBackend(runner)
    finally:
        determinism.set_deterministic(previous)


# ------------------------------------------------------------------------------ the paths


@dataclass(frozen=True)
class Path_:
    """One planning path of SGLang's backend: the method, the forward mode, and for the
    CUDA-graph ones whether it is the capture or a replay."""

    name: str
    method: str  # "eager", "capture", "replay", "draft_eager", "draft_capture"
    mode: Mode
    spec: SpecType | None = None
    dllm: bool = False


PATHS: tuple[Path_, ...] = (
    Path_("eager decode", "eager", Mode.DECODE),
    Path_("eager extend", "eager", Mode.EXTEND),
    Path_("eager target verify", "eager", Mode.TARGET_VERIFY, SpecType.EAGLE_VERIFY),
    Path_("CUDA-graph decode capture", "capture", Mode.DECODE),
    Path_("CUDA-graph decode replay", "replay", Mode.DECODE),
    Path_("CUDA-graph target verify capture", "capture", Mode.TARGET_VERIFY, SpecType.EAGLE_VERIFY),
    Path_("CUDA-graph target verify replay", "replay", Mode.TARGET_VERIFY, SpecType.EAGLE_VERIFY),
    Path_(
        "CUDA-graph DFlash verify capture", "capture", Mode.TARGET_VERIFY, SpecType.DFLASH_VERIFY
    ),
    Path_("CUDA-graph draft extend capture", "capture", Mode.DRAFT_EXTEND_V2, SpecType.EAGLE_DRAFT),
    Path_("CUDA-graph dLLM extend capture", "capture", Mode.DLLM_EXTEND, dllm=True),
    Path_("CUDA-graph dLLM extend replay", "replay", Mode.DLLM_EXTEND, dllm=True),
    Path_("CUDA-graph full extend capture", "capture", Mode.EXTEND),
    Path_("CUDA-graph full extend replay", "replay", Mode.EXTEND),
    Path_("multi-step draft decode", "draft_eager", Mode.DECODE, SpecType.EAGLE_DRAFT),
    Path_(
        "multi-step draft CUDA-graph capture", "draft_capture", Mode.DECODE, SpecType.EAGLE_DRAFT
    ),
    Path_("multi-step draft CUDA-graph replay", "draft_replay", Mode.DECODE, SpecType.EAGLE_DRAFT),
)
#: Speculative steps of the multi-step draft backend (one attention backend fewer).
DRAFT_STEPS = 3


def _inner_view(batch: Any, *, bs: int, forward_mode: Mode) -> Any:
    """``build_inner_fb_view``: the batch as one draft step's decode sees it."""
    return types.SimpleNamespace(**{**vars(batch), "batch_size": bs, "forward_mode": forward_mode})


def _spec_info(kind: SpecType | None, bs: int) -> Any:
    if kind is None:
        return None
    lengths = torch.tensor(SEQ[:bs], dtype=torch.int32)

    def prefill_arguments(**kwargs: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
        kv_indptr[1:] = torch.cumsum(lengths + 2, dim=0)
        qo_indptr = torch.arange(0, 2 * (bs + 1), 2, dtype=torch.int32)
        return torch.arange(int(kv_indptr[-1]), dtype=torch.int32), kv_indptr, qo_indptr, None

    return SpecInput(
        spec_input_type=kind,
        ragged_verify_layout=None,
        custom_mask=None,
        topk=1,
        num_tokens_per_req=2,
        generate_attn_arg_prefill=prefill_arguments,
        is_draft_input=lambda: kind is SpecType.EAGLE_DRAFT,
        kv_indptr=None,
        kv_indices=None,
    )


def _forward_batch(path: Path_, *, cross: bool = False) -> Any:
    bs = BATCH
    seq = torch.tensor(SEQ, dtype=torch.int32)
    prefix = seq - 2
    return types.SimpleNamespace(
        batch_size=bs,
        forward_mode=path.mode,
        req_pool_indices=torch.arange(bs, dtype=torch.int32),
        seq_lens=seq,
        seq_lens_cpu=seq.clone(),
        seq_lens_sum=int(seq.sum()),
        encoder_lens=torch.full((bs,), 3, dtype=torch.int32) if cross else None,
        spec_info=_spec_info(path.spec, bs),
        kv_loc_plan=None,
        out_cache_loc=None,
        extend_prefix_lens=prefix,
        extend_prefix_lens_cpu=prefix.tolist(),
        positions=torch.arange(int(seq.sum()), dtype=torch.int64),
        cross_attention_custom_mask=None,
    )


def plan_path(backend: Any, path: Path_, *, layout: Layout = Layout.FULL) -> None:
    """Plan ``path`` on SGLang's ``backend`` as SGLang's model runner does: eager paths
    through ``init_forward_metadata``; CUDA-graph paths set the graph state up, capture
    (``init_forward_metadata_out_graph(..., in_capture=True)``) and, for a replay,
    plan again as the runner does before each replay."""
    cross = layout is Layout.CROSS_ATTENTION
    batch = _forward_batch(path, cross=cross)
    if path.method in ("eager", "draft_eager"):
        backend.init_forward_metadata(batch)
        return
    backend.init_cuda_graph_state(8, 16)
    backend.init_forward_metadata_out_graph(batch, in_capture=True)
    if path.method in ("replay", "draft_replay"):
        backend.init_forward_metadata_out_graph(_forward_batch(path, cross=cross), in_capture=False)


# ------------------------------------------------------------------------------ outcomes

#: How a path's plans are named in ``docs/migration/sglang.md``, by family.
KINDS = {
    "BatchDecodeWithPagedKVCacheWrapper": "decode",
    "BatchPrefillWithPagedKVCacheWrapper": "paged",
    "BatchPrefillWithRaggedKVCacheWrapper": "ragged",
    "fast_decode_plan": "fast_decode_plan",
}


def describe(plans: Sequence[Any]) -> str:
    """The kernel plans of one path as the guide's table states them, each distinct one
    once in order: ``decode `2048, False`; fast_decode_plan `-1, True```, or
    ``ragged dropped`` where the settings did not reach the kernel."""
    seen: list[str] = []
    for plan in plans:
        kind = KINDS.get(plan.family, plan.family)
        if plan.dropped or plan.unmeasured:
            text = f"{kind} {'dropped' if plan.dropped else 'unmeasured'}"
        else:
            text = f"{kind} `{plan.fixed_split_size}, {plan.disable_split_kv}`"
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


def outcome(
    fake: Any,
    wheel: Path,
    path: Path_,
    *,
    deterministic: bool,
    integration: bool,
    layout: Layout = Layout.FULL,
) -> str:
    """Build SGLang's backend under the installed ``fake`` and plan ``path``: the plans
    that reached the fake's kernel boundary (:func:`describe`), or ``refused: `Error``` for
    the fi-compat error that stopped it."""
    draft = DRAFT_STEPS if path.method.startswith("draft") else 0
    with sglang_backend(
        wheel,
        deterministic=deterministic,
        integration=integration,
        layout=layout,
        dllm=path.dllm,
        draft_steps=draft,
    ) as (_, backend):
        start = len(fake.kernel_plans)
        try:
            plan_path(backend, path, layout=layout)
        except FiCompatError as error:
            return f"refused: `{type(error).__name__}`"
        return describe(fake.kernel_plans[start:])
