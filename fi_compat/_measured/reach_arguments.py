"""What the reach probe builds each family's wrapper with, and plans it with.

The plan is two requests of 20 and 23 tokens, 4 query and 4 KV heads of dimension 64,
pages of 16, bf16, ``kv_layout="NHD"``; each family gets the values its ``__init__`` and
``plan`` parameters ask for by name (:func:`construct`, :func:`plan_call`), a wrapper
whose ``__init__`` refuses ``NHD`` for a backend is built with ``HND``
(:func:`construct_any_layout`), and every run gets fresh tensors (:func:`fresh`).
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

from .reach_names import DECODE_FAMILY, GRAPH_DECODE_FAMILY, NAMES, RAGGED_FAMILY
from .reach_recorders import Stub

__all__ = [
    "DECODE_LIKE",
    "LAYOUTS",
    "RAGGED",
    "construct",
    "construct_any_layout",
    "fresh",
    "plan_call",
]

#: Families whose ``kv_indptr`` counts tokens, not pages.
RAGGED = frozenset({RAGGED_FAMILY})
#: Families whose query rows are one token per request.
DECODE_LIKE = frozenset(
    {
        DECODE_FAMILY,
        GRAPH_DECODE_FAMILY,
        "PODWithPagedKVCacheWrapper",
        "BatchMLAPagedAttentionWrapper",
    }
)

#: KV layouts tried in turn: the second only when ``plan`` fails asking for it (trtllm-gen).
LAYOUTS = ("NHD", "HND")


def _tensors(torch: Any, family: str) -> dict[str, Any]:
    """Two requests of 20 and 23 tokens in pages of 16; 3 query rows each (1 for decode)."""
    i32 = torch.int32
    rows = 1 if family in DECODE_LIKE else 3
    paged = {
        "qo_indptr": torch.tensor([0, rows, 2 * rows], dtype=i32),
        "kv_indptr": torch.tensor([0, 2, 4], dtype=i32),
        "indices": torch.arange(4, dtype=i32),
        "last_page_len": torch.tensor([4, 7], dtype=i32),
        "kv_len_arr": torch.tensor([20, 23], dtype=i32),
    }
    if family in RAGGED:
        paged["kv_indptr"] = torch.tensor([0, 20, 43], dtype=i32)
    return paged


def _plan_values(torch: Any, family: str) -> dict[str, Any]:
    t = _tensors(torch, family)
    values: dict[str, Any] = {
        "qo_indptr": t["qo_indptr"],
        "paged_kv_indptr": t["kv_indptr"],
        "kv_indptr": t["kv_indptr"],
        "indptr": t["kv_indptr"],
        "paged_kv_indices": t["indices"],
        "kv_indices": t["indices"],
        "indices": t["indices"],
        "paged_kv_last_page_len": t["last_page_len"],
        "last_page_len": t["last_page_len"],
        "kv_len_arr": t["kv_len_arr"],
        "num_qo_heads": 4,
        "num_kv_heads": 4,
        "head_dim": 64,
        "head_dim_qk": 64,
        "head_dim_vo": 64,
        "page_size": 16,
        "batch_size": 2,
        "num_heads": 16,
        "head_dim_ckv": 512,
        "head_dim_kpe": 64,
        "causal": False,
        "sm_scale": 0.125,
        "q_data_type": torch.bfloat16,
        "kv_data_type": torch.bfloat16,
        "M": 32,
        "N": 32,
        "R": 16,
        "C": 16,
        "block_mask_map": torch.ones((4, 2, 2), dtype=torch.bool),
        "block_row_sz": torch.full((4, 2), 16, dtype=torch.int32),
        "block_col_sz": torch.full((4, 2), 16, dtype=torch.int32),
    }
    if family == "BlockSparseAttentionWrapper":
        values["indptr"] = torch.tensor([0, 2, 4], dtype=torch.int32)
        values["indices"] = torch.tensor([0, 1, 0, 1], dtype=torch.int32)
    if family == "MultiLevelCascadeAttentionWrapper":
        i32 = torch.int32
        shared = {
            "qo": torch.tensor([0, 6], dtype=i32),
            "kv": torch.tensor([0, 1], dtype=i32),
            "idx": torch.tensor([4], dtype=i32),
            "last": torch.tensor([16], dtype=i32),
        }
        t = _tensors(torch, family)
        values["qo_indptr_arr"] = [shared["qo"], t["qo_indptr"]]
        values["paged_kv_indptr_arr"] = [shared["kv"], t["kv_indptr"]]
        values["paged_kv_indices_arr"] = [shared["idx"], t["indices"]]
        values["paged_kv_last_page_len"] = [shared["last"], t["last_page_len"]]
    for name in list(values):
        for suffix in ("_p", "_d"):
            values.setdefault(name + suffix, values[name])
    return values


def _plan_parameters(cls: Any) -> tuple[list[inspect.Parameter], set[str]]:
    """``plan``'s parameters, and the keyword names it accepts through ``**kwargs`` forwards."""
    plan = inspect.signature(cls.plan)
    parameters = [p for name, p in plan.parameters.items() if name != "self"]
    forwarded: set[str] = set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        impl = getattr(cls, NAMES.get("plan_impl", ""), None)
        if impl is not None:
            forwarded = set(inspect.signature(impl).parameters) - {"self"}
    return parameters, forwarded


def plan_call(torch: Any, family: str, cls: Any) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments of ``cls.plan`` without the split settings;
    ``LookupError`` for a parameter without a default that the probe has no value for."""
    values = _plan_values(torch, family)
    parameters, forwarded = _plan_parameters(cls)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.name in values:
            if parameter.kind is parameter.POSITIONAL_ONLY:
                args.append(values[parameter.name])
            else:
                kwargs[parameter.name] = values[parameter.name]
        elif parameter.default is parameter.empty:
            raise LookupError(f"no probe value for plan's parameter {parameter.name!r}")
    for name in sorted(forwarded - set(kwargs)):
        if name in ("q_data_type", "kv_data_type"):
            kwargs[name] = values[name]
    return args, kwargs


def _init_values(torch: Any, family: str) -> dict[str, Any]:
    t = _tensors(torch, family)
    return {
        "float_workspace_buffer": torch.empty(1 << 22, dtype=torch.uint8),
        "workspace_buffer": torch.empty(1 << 22, dtype=torch.uint8),
        "kv_layout": "NHD",
        "use_tensor_cores": True,
        "num_levels": 2,
        "indptr_buffer": t["kv_indptr"].clone(),
        "indices_buffer": t["indices"].clone(),
        "last_page_len_buffer": t["last_page_len"].clone(),
        "device": "cpu",
    }


def construct(torch: Any, family: str, cls: Any, backend: str | None, layout: str = "NHD") -> Any:
    """A new wrapper of ``cls`` in ``layout``, with ``backend=`` unless it is None."""
    values = {**_init_values(torch, family), "kv_layout": layout}
    kwargs: dict[str, Any] = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name == "backend":
            if backend is not None:
                kwargs[name] = backend
        elif name in values:
            kwargs[name] = values[name]
        elif parameter.default is parameter.empty:
            raise LookupError(f"no probe value for __init__'s parameter {name!r}")
    return cls(**kwargs)


def construct_any_layout(torch: Any, family: str, cls: Any, backend: str | None) -> tuple[Any, str]:
    """A wrapper in the first KV layout its ``__init__`` accepts for this backend."""
    for layout in LAYOUTS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return construct(torch, family, cls, backend, layout), layout
        except Exception as caught:
            other = [item for item in LAYOUTS if item != layout]
            if layout != LAYOUTS[0] or not any(item in str(caught) for item in other):
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def fresh(value: Any) -> Any:
    """A copy of the plan arguments with new tensors: a plan may keep or change its inputs."""
    if isinstance(value, dict):
        return {key: fresh(item) for key, item in value.items()}
    if isinstance(value, list):
        return [fresh(item) for item in value]
    clone = getattr(value, "clone", None)
    return clone() if callable(clone) and not isinstance(value, Stub) else value
