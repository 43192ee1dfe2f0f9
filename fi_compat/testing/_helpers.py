"""The FlashInfer helpers the fake computes: plain arithmetic on their arguments.

A function of the fake returns None where the release's result comes from a kernel. A few
helpers whose results engines use are plain arithmetic on their arguments in every release
that has them, and the fake computes those as the release does:

* ``flashinfer.page.get_seq_lens`` (also ``flashinfer.get_seq_lens``): the sequence lengths
  of a paged KV cache, a tensor (vLLM 0.33.0's FlashInfer metadata builder pins it with
  ``.pin_memory()`` and hands it to ``plan``);
* ``flashinfer.utils._ceil_pow2`` and ``_get_range_buf``: the next power of two, and the
  cached ``arange`` buffer of that length, filled into the module's ``_cache_buf`` (vLLM
  0.33.0's ``pin_host_range_buf`` calls the one, then reads and pins the entry it left);
* ``flashinfer.utils._get_cache_buf``: the process-wide scratch buffer of a name and device
  in ``_cache_buf``, made anew (the old one kept in ``_cache_buf_retired`` where the release
  has that list, 0.7.0 on) when it is smaller than asked (from 0.4.1, the gate
  ``cache-buf-grows``); its bytes are zeros (the release's
  ``torch.empty`` leaves them unspecified);
* ``flashinfer.utils.get_device_sm_count``: the imitated GPU's streaming multiprocessors
  (``fake_flashinfer(sm_count=...)``; the release reads the device's properties, vLLM
  0.33.0's attention sizes its TRT-LLM-gen counter buffer with it);
* ``flashinfer.utils.get_trtllm_gen_multi_ctas_kv_counter_bytes`` (0.6.15 on): the bytes of
  the TRT-LLM-gen multi-CTA KV counter buffer (vLLM sizes that buffer with it);
* ``flashinfer.fused_moe.cute_dsl.moe_utils.get_max_num_tiles`` and
  ``get_max_num_permuted_tokens`` (0.6.4 on): the CuTe DSL MoE's buffer bounds (vLLM's
  ``moe_cute`` sizes its routing buffers with them), whose arithmetic changed at the gate
  :data:`~fi_compat.testing._gates.TIGHT_MOE_TILE_BOUND`.

Each is written here after the release's source and checked against the installed
FlashInfer (``tests/testing/test_fake_helpers.py``); the bodies were compared across every
recorded release's source. On tensors only their methods are used, so nothing here imports
torch: the caller's tensors (CPU tensors in a test) compute the result. A helper applies
where the release defines it under that name with the parameters it reads (:func:`helper`);
given a :class:`~fi_compat.testing.StandIn` (a value the fake made up) it returns a
:class:`~fi_compat.testing.StandIn`, since the fake cannot compute from a value it does not
have. The testing guide, ``docs/guide/testing.md``, lists what the fake computes and what it
does not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from fi_compat._records import FunctionRecord
from fi_compat.testing._gates import CACHE_BUF_GROWS, TIGHT_MOE_TILE_BOUND
from fi_compat.testing._objects import StandIn

__all__ = ["HELPERS", "Helper", "Imitated", "compute", "helper"]


@dataclass(frozen=True)
class Imitated:
    """What a helper computes with besides its arguments: the imitated release's version and
    the imitated GPU's streaming-multiprocessor count."""

    version: Version
    sm_count: int


@dataclass(frozen=True)
class Helper:
    """A FlashInfer helper the fake computes.

    Attributes
    ----------
    module, name
        Where the release defines it (``flashinfer.page``, ``get_seq_lens``).
    parameters
        The parameters it reads, in the release's order: a release whose recorded ``def``
        has others does not get the computed result.
    also
        Other parameter lists of releases whose body computes the same (a renamed or an
        added parameter, which the computation reads by position).
    arithmetic
        The computation: what is imitated and the call's arguments by parameter name ->
        result.
    """

    module: str
    name: str
    parameters: tuple[str, ...]
    arithmetic: Callable[[Imitated, Mapping[str, Any]], Any]
    also: tuple[tuple[str, ...], ...] = ()

    @property
    def key(self) -> str:
        """``module:name``, how generated code names the helper."""
        return f"{self.module}:{self.name}"


def _seq_lens(imitated: Imitated, arguments: Mapping[str, Any]) -> Any:
    """``get_seq_lens``, the same in every release (0.2.0.post1 .. 0.7.2.post1):
    ``torch.clamp(kv_indptr[1:] - kv_indptr[:-1] - 1, min=0) * page_size + kv_last_page_len``."""
    kv_indptr = arguments["kv_indptr"]
    pages = kv_indptr[1:] - kv_indptr[:-1] - 1
    return pages.clamp(min=0) * arguments["page_size"] + arguments["kv_last_page_len"]


def _ceil_pow2(imitated: Imitated, arguments: Mapping[str, Any]) -> int:
    """``flashinfer.utils._ceil_pow2``, the same in every release: the least power of two
    at least ``x`` (``1 << (x - 1).bit_length()``, so 2 for 0)."""
    return _pow2_at_least(arguments["x"])


def _pow2_at_least(value: int) -> int:
    return 1 << (value - 1).bit_length()


def _range_buf(imitated: Imitated, arguments: Mapping[str, Any]) -> Any:
    """``flashinfer.utils._get_range_buf``, the same in every release: ``arange`` of the
    next power of two (int32), cached in the module's ``_cache_buf`` under
    ``(f"range_{pow2}", device)``, sliced to ``seq_len``. vLLM pins the cached entry it finds
    there. torch is the caller's (a :class:`StandIn` where torch is not imported); a CUDA
    device's buffer is made on the CPU where CUDA is not available (the fake's GPUs)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return StandIn("_get_range_buf(...)")
    seq_len: int = arguments["seq_len"]
    device = arguments["device"]
    pow2 = _pow2_at_least(seq_len)
    key = (f"range_{pow2}", device)
    cache = getattr(sys.modules.get(_UTILS), "_cache_buf", None)
    found = cache.get(key) if isinstance(cache, dict) else None
    if found is None:
        found = torch.arange(pow2, device=_made_on(torch, device), dtype=torch.int32)
        if isinstance(cache, dict):
            cache[key] = found
    return found[:seq_len]


def _cache_buffer(imitated: Imitated, arguments: Mapping[str, Any]) -> Any:
    """``flashinfer.utils._get_cache_buf(name, bytes | num_bytes, device[, zero_init])``: the
    cached uint8 buffer under ``(name, device)``, made anew when absent or smaller than asked
    (the old one appended to ``_cache_buf_retired`` where the module has that list); up to
    0.4.0 only when absent (the gate :data:`~fi_compat.testing._gates.CACHE_BUF_GROWS`).
    Otherwise the same in every release but for the size's name (``num_bytes`` from 0.7.0),
    ``zero_init`` (0.6.x on) and the retired list (0.7.0 on); read by position."""
    torch = sys.modules.get("torch")
    if torch is None:
        return StandIn("_get_cache_buf(...)")
    name, size, device = list(arguments.values())[:3]
    utils = sys.modules.get(_UTILS)
    cache = getattr(utils, "_cache_buf", None)
    found = cache.get((name, device)) if isinstance(cache, dict) else None
    grows = imitated.version >= CACHE_BUF_GROWS.version
    if found is None or (grows and found.size(0) < size):
        retired = getattr(utils, "_cache_buf_retired", None)
        if found is not None and isinstance(retired, list):
            retired.append(found)
        found = torch.zeros(size, dtype=torch.uint8, device=_made_on(torch, device))
        if isinstance(cache, dict):
            cache[(name, device)] = found
    return found


def _made_on(torch: Any, device: Any) -> Any:
    """Where a buffer for ``device`` is made: there, or on the CPU for a CUDA device where
    CUDA is not available (the fake's GPUs)."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        return "cpu"
    return device


def _sm_count(imitated: Imitated, arguments: Mapping[str, Any]) -> int:
    """``get_device_sm_count``: the device's ``multi_processor_count``, here the imitated
    GPU's, whichever device is asked about."""
    return imitated.sm_count


def _round_up(value: int, multiple: int) -> int:
    """``flashinfer.utils.round_up``: ``ceil_div(x, y) * y``."""
    return (value + multiple - 1) // multiple * multiple


def _counter_bytes(imitated: Imitated, arguments: Mapping[str, Any]) -> int:
    """``get_trtllm_gen_multi_ctas_kv_counter_bytes``, the same in every release that has it
    (0.6.15 on): one 4-byte semaphore per (request, query head), at least one per SM,
    rounded up to a multiple of 8."""
    wanted = arguments["batch_size"] * arguments["num_qo_heads"]
    semaphores: int = _round_up(max(wanted, arguments["sm_count"]), 8)
    return semaphores * 4


def _max_num_tiles(imitated: Imitated, arguments: Mapping[str, Any]) -> int:
    """``get_max_num_tiles``: with E = num_tokens * top_k expanded tokens over L local
    experts and tiles of T tokens, E when E <= L, else ``L + ceil((E - L) / T)`` up to
    0.6.10.post1 and the tight bound ``(E + (T - 1) * L) // T`` from 0.6.11rc1."""
    expanded: int = arguments["num_tokens"] * arguments["top_k"]
    experts: int = arguments["num_local_experts"]
    tile: int = arguments["tile_size"]
    if expanded <= experts:
        return expanded
    if imitated.version >= TIGHT_MOE_TILE_BOUND.version:
        return (expanded + (tile - 1) * experts) // tile
    return experts + (expanded - experts + tile - 1) // tile


def _max_num_permuted_tokens(imitated: Imitated, arguments: Mapping[str, Any]) -> int:
    """``get_max_num_permuted_tokens``: ``get_max_num_tiles(...) * tile_size``."""
    tiles = _max_num_tiles(imitated, arguments)
    size: int = arguments["tile_size"]
    return tiles * size


_MOE_UTILS = "flashinfer.fused_moe.cute_dsl.moe_utils"
_UTILS = "flashinfer.utils"
_TILES = ("num_tokens", "top_k", "num_local_experts", "tile_size")

#: Every helper the fake computes, by :attr:`Helper.key`.
HELPERS: Mapping[str, Helper] = {
    helper.key: helper
    for helper in (
        Helper(
            "flashinfer.page",
            "get_seq_lens",
            ("kv_indptr", "kv_last_page_len", "page_size"),
            _seq_lens,
        ),
        Helper(_UTILS, "_ceil_pow2", ("x",), _ceil_pow2),
        Helper(_UTILS, "_get_range_buf", ("seq_len", "device"), _range_buf),
        Helper(_UTILS, "get_device_sm_count", ("device",), _sm_count),
        Helper(
            _UTILS,
            "_get_cache_buf",
            ("name", "num_bytes", "device", "zero_init"),
            _cache_buffer,
            also=(("name", "bytes", "device", "zero_init"), ("name", "bytes", "device")),
        ),
        Helper(
            _UTILS,
            "get_trtllm_gen_multi_ctas_kv_counter_bytes",
            ("batch_size", "num_qo_heads", "sm_count"),
            _counter_bytes,
        ),
        Helper(_MOE_UTILS, "get_max_num_tiles", _TILES, _max_num_tiles),
        Helper(_MOE_UTILS, "get_max_num_permuted_tokens", _TILES, _max_num_permuted_tokens),
    )
}


def helper(module: str, name: str, function: FunctionRecord | None) -> Helper | None:
    """The helper computing ``module.name`` when the release's recorded ``def`` takes the
    parameters it reads, else None (the fake's function returns None)."""
    found = HELPERS.get(f"{module}:{name}")
    if found is None or function is None:
        return None
    recorded = tuple(parameter.name for parameter in function.parameters)
    return found if recorded in (found.parameters, *found.also) else None


def compute(key: str, imitated: Imitated, arguments: Mapping[str, Any]) -> Any:
    """The result of helper ``key`` for a call's arguments (recorded defaults as their
    values): what the release computes, a :class:`StandIn` where an argument is one."""
    found = HELPERS[key]
    if any(isinstance(value, StandIn) for value in arguments.values()):
        return StandIn(f"{found.name}(...)")
    return found.arithmetic(imitated, arguments)
