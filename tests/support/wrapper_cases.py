"""Attention-wrapper calls run on a real release and on the fake, described as plain data.

A case constructs one wrapper, plans it and runs it, with the arguments an engine uses
(vLLM 0.33.0's: ``fa2``, ``NHD``, sliding window or not, soft cap or none, causal or not).
Tensors are described (``{"int32": [0, 1]}``, ``{"zeros": [3, 4, 64], "dtype":
"bfloat16"}``) so that one description runs in the real release's subprocess
(``tests/support/wrapper_probe.py``) and in the test's process under the fake, and
:func:`outcome` pictures what each left: the plain attributes of the wrapper after ``plan``
and what ``run`` returned (shape, dtype, device, whether it is the ``out`` it was given).

Imports torch lazily and nothing of fi-compat, so that the probe runs with the release
alone on its path (and the repository root for this module).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CASES", "build", "describe", "outcome", "tensor"]

PAGED = "BatchPrefillWithPagedKVCacheWrapper"
RAGGED = "BatchPrefillWithRaggedKVCacheWrapper"
DECODE = "BatchDecodeWithPagedKVCacheWrapper"

_HEADS, _KV_HEADS, _DIM, _PAGE = 4, 2, 64, 16
_PAGES = 5


def _paged_plan(rows: int, **settings: Any) -> dict[str, Any]:
    """Two requests of 20 and 23 KV tokens in pages of 16, ``rows`` query tokens each."""
    return {
        "qo_indptr": {"int32": [0, rows, 2 * rows]},
        "paged_kv_indptr": {"int32": [0, 2, 4]},
        "paged_kv_indices": {"int32": [0, 1, 2, 3]},
        "paged_kv_last_page_len": {"int32": [4, 7]},
        "num_qo_heads": _HEADS,
        "num_kv_heads": _KV_HEADS,
        "head_dim_qk": _DIM,
        "page_size": _PAGE,
        "q_data_type": "bfloat16",
        "kv_data_type": "bfloat16",
        **settings,
    }


def _decode_plan(**settings: Any) -> dict[str, Any]:
    return {
        "indptr": {"int32": [0, 2, 4]},
        "indices": {"int32": [0, 1, 2, 3]},
        "last_page_len": {"int32": [4, 7]},
        "num_qo_heads": _HEADS,
        "num_kv_heads": _KV_HEADS,
        "head_dim": _DIM,
        "page_size": _PAGE,
        "q_data_type": "bfloat16",
        "kv_data_type": "bfloat16",
        **settings,
    }


def _ragged_plan(**settings: Any) -> dict[str, Any]:
    return {
        "qo_indptr": {"int32": [0, 3, 6]},
        "kv_indptr": {"int32": [0, 20, 43]},
        "num_qo_heads": _HEADS,
        "num_kv_heads": _KV_HEADS,
        "head_dim_qk": _DIM,
        "q_data_type": "bfloat16",
        "kv_data_type": "bfloat16",
        **settings,
    }


def _paged_kv() -> list[Any]:
    shape = [_PAGES, _PAGE, _KV_HEADS, _DIM]
    return [{"zeros": shape, "dtype": "bfloat16"}, {"zeros": shape, "dtype": "bfloat16"}]


def _q(rows: int) -> dict[str, Any]:
    return {"zeros": [rows, _HEADS, _DIM], "dtype": "bfloat16"}


#: vLLM's window, soft cap and scale settings, as its builder plans them.
_VLLM = {"sm_scale": 0.125, "window_left": -1, "logits_soft_cap": None}
_WINDOWED = {"sm_scale": 0.0625, "window_left": 127, "logits_soft_cap": 30.0}

#: name -> case: the family, ``plan``'s keywords, and ``run``'s positionals and keywords.
CASES: dict[str, dict[str, Any]] = {
    "decode": {
        "family": DECODE,
        "plan": _decode_plan(**_VLLM),
        "run": [[_q(2), _paged_kv()], {"out": {"zeros": [2, _HEADS, _DIM], "dtype": "bfloat16"}}],
    },
    "decode-windowed-lse": {
        "family": DECODE,
        "plan": _decode_plan(**_WINDOWED),
        "run": [[_q(2), _paged_kv()], {"return_lse": True}],
    },
    "decode-defaults": {
        "family": DECODE,
        "plan": _decode_plan(),
        "run": [[_q(2), _paged_kv()], {}],
    },
    "paged-causal": {
        "family": PAGED,
        "plan": _paged_plan(3, causal=True, **_VLLM),
        "run": [[_q(6), _paged_kv()], {"out": {"zeros": [6, _HEADS, _DIM], "dtype": "bfloat16"}}],
    },
    "paged-windowed-lse": {
        "family": PAGED,
        "plan": _paged_plan(3, causal=False, **_WINDOWED),
        "run": [[_q(6), _paged_kv()], {"return_lse": True}],
    },
    "paged-defaults": {
        "family": PAGED,
        "plan": _paged_plan(3),
        "run": [[_q(6), _paged_kv()], {}],
    },
    "ragged-causal": {
        "family": RAGGED,
        "plan": _ragged_plan(causal=True, **_VLLM),
        "run": [
            [
                _q(6),
                {"zeros": [43, _KV_HEADS, _DIM], "dtype": "bfloat16"},
                {"zeros": [43, _KV_HEADS, _DIM], "dtype": "bfloat16"},
            ],
            {},
        ],
    },
}


def tensor(torch: Any, description: Any) -> Any:
    """The value a description stands for (lists and dicts of descriptions too)."""
    if isinstance(description, dict) and "int32" in description:
        return torch.tensor(description["int32"], dtype=torch.int32)
    if isinstance(description, dict) and "zeros" in description:
        return torch.zeros(description["zeros"], dtype=getattr(torch, description["dtype"]))
    if isinstance(description, list):
        return tuple(tensor(torch, item) for item in description)
    if isinstance(description, str) and description in ("bfloat16", "float16"):
        return getattr(torch, description)
    return description


def build(torch: Any, flashinfer: Any, case: dict[str, Any]) -> Any:
    """The case's wrapper: ``fa2``, ``NHD``, a 4 MiB workspace."""
    workspace = torch.empty(1 << 22, dtype=torch.uint8)
    return getattr(flashinfer, case["family"])(workspace, "NHD", backend="fa2")


def describe(value: Any, out: Any = None) -> Any:
    """A JSON-able picture of what ``run`` returned."""
    if isinstance(value, tuple):
        return [describe(item, out) for item in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return {
            "shape": list(value.shape),
            "dtype": str(value.dtype),
            "device": str(value.device),
            "is_out": value is out,
        }
    return repr(value)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def outcome(torch: Any, flashinfer: Any, case: dict[str, Any]) -> dict[str, Any]:
    """Construct, plan and run the case; the plain attributes after ``plan`` and ``run``'s
    result (or the error either raised, as ``Type: message``)."""
    wrapper = build(torch, flashinfer, case)
    plan = {key: tensor(torch, value) for key, value in case["plan"].items()}
    try:
        wrapper.plan(**plan)
    except Exception as error:
        return {"plan_error": f"{type(error).__name__}: {error}"}
    attributes = {name: value for name, value in sorted(vars(wrapper).items()) if _plain(value)}
    args, kwargs = case["run"]
    positional = [tensor(torch, item) for item in args]
    keywords = {key: tensor(torch, value) for key, value in kwargs.items()}
    out = keywords.get("out")
    try:
        returned = describe(wrapper.run(*positional, **keywords), out)
    except Exception as error:
        returned = f"{type(error).__name__}: {error}"
    return {"attributes": attributes, "run": returned}
