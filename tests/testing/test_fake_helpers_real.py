"""The helpers the fake computes against the installed flashinfer-python 0.7.2.post1: the same
arguments through the fake and through the release's own Python (its pure-torch helpers run
on a CPU) give the same results."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import itertools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch (the helpers compute on tensors)")

import torch

from fi_compat._recorder.archive import read_release
from fi_compat.testing import fake_flashinfer
from tests.support import release_classes
from tests.support.installed import PINNED, import_installed
from tools.releases import RegistryUnreachableError, ReleaseCache

MOE_UTILS = "flashinfer.fused_moe.cute_dsl.moe_utils"
SEQ_LENS = [
    # (kv_indptr, kv_last_page_len, page_size): the page table of a batch
    ([0, 3, 4, 4, 8], [5, 16, 0, 1], 16),
    ([0, 1, 2], [1, 1], 1),
    ([0, 10, 25], [7, 64], 64),
    ([0], [], 16),
]


@pytest.fixture(scope="module")
def real() -> tuple[ModuleType, ...]:
    return import_installed("flashinfer", "flashinfer.page", "flashinfer.utils")


def _real_functions(module: str, names: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    """``names`` as the installed release's source defines them in ``module``, run from that
    source: ``flashinfer.fused_moe.cute_dsl`` imports triton, which this machine need not
    have, and these functions use nothing but each other."""
    spec = importlib.util.find_spec("flashinfer")
    assert spec is not None
    assert spec.submodule_search_locations
    path = Path(spec.submodule_search_locations[0], *module.split(".")[1:]).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    body: list[ast.stmt] = [
        node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names
    ]
    assert {node.name for node in body if isinstance(node, ast.FunctionDef)} == set(names)
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    return {name: namespace[name] for name in names}


def _pinned(tensor: torch.Tensor) -> tuple[str, object]:
    try:
        return "pinned", tensor.pin_memory().is_pinned()
    except RuntimeError as error:  # no accelerator on this host
        return "raised", str(error)


@pytest.mark.real_flashinfer
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_get_seq_lens_is_the_releases(real: tuple[ModuleType, ...], dtype: torch.dtype) -> None:
    real_flashinfer, real_page, _ = real
    assert real_flashinfer.__version__ == PINNED
    with fake_flashinfer(PINNED):
        fake = importlib.import_module("flashinfer")
        for indptr, last, page_size in SEQ_LENS:
            arguments = (torch.tensor(indptr, dtype=dtype), torch.tensor(last, dtype=dtype))
            got = fake.get_seq_lens(*arguments, page_size)
            want = real_page.get_seq_lens(*arguments, page_size)
            assert isinstance(got, torch.Tensor)
            assert (got.dtype, got.device, got.shape) == (want.dtype, want.device, want.shape)
            assert torch.equal(got, want), (indptr, last, page_size)
            assert _pinned(got) == _pinned(want)
            # keywords too, as vLLM passes them positionally and others by name
            named = fake.get_seq_lens(
                kv_indptr=arguments[0], kv_last_page_len=arguments[1], page_size=page_size
            )
            assert torch.equal(named, want)


@pytest.mark.real_flashinfer
def test_the_counter_bytes_are_the_releases(real: tuple[ModuleType, ...]) -> None:
    real_utils = real[2]
    with fake_flashinfer(PINNED):
        fake_utils = importlib.import_module("flashinfer.utils")
        for batch, heads, sms in itertools.product([1, 3, 64, 257], [1, 5, 32, 128], [1, 132]):
            got = fake_utils.get_trtllm_gen_multi_ctas_kv_counter_bytes(batch, heads, sms)
            want = real_utils.get_trtllm_gen_multi_ctas_kv_counter_bytes(batch, heads, sms)
            assert got == want, (batch, heads, sms)


@pytest.mark.real_flashinfer
def test_the_moe_bounds_are_the_releases(real: tuple[ModuleType, ...]) -> None:
    release = _real_functions(MOE_UTILS, ("get_max_num_tiles", "get_max_num_permuted_tokens"))
    with fake_flashinfer(PINNED):
        fake = importlib.import_module(MOE_UTILS)
        for tokens, top_k, experts, tile in itertools.product(
            [1, 7, 100, 4096], [1, 2, 8], [1, 8, 33, 256], [8, 128, 256]
        ):
            for name, function in release.items():
                arguments = (tokens, top_k, experts, tile)
                assert getattr(fake, name)(*arguments) == function(*arguments), (name, arguments)


@pytest.mark.real_flashinfer
def test_ceil_pow2_and_the_range_buffer_are_the_releases(real: tuple[ModuleType, ...]) -> None:
    """``_ceil_pow2`` on a table of sizes, and ``_get_range_buf`` as vLLM 0.33.0's
    ``pin_host_range_buf`` uses it: the slice it returns, and the entry it leaves in the
    module's ``_cache_buf`` under the key vLLM computes, which vLLM then indexes and pins."""
    _, _, real_utils = real
    sizes = [0, 1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 1000, 4096, 4097, 1 << 40]
    lengths = [1, 2, 3, 8, 9, 100, 128, 129, 1000]
    with fake_flashinfer(PINNED):
        fake_utils = importlib.import_module("flashinfer.utils")
        assert [fake_utils._ceil_pow2(x) for x in sizes] == [
            real_utils._ceil_pow2(x) for x in sizes
        ]
        assert fake_utils._cache_buf == {}  # a fresh dict of the fake's own
        for length in lengths:
            got = fake_utils._get_range_buf(length, "cpu")
            want = real_utils._get_range_buf(length, "cpu")
            assert (got.dtype, got.shape, got.device) == (want.dtype, want.shape, want.device)
            assert torch.equal(got, want), length
            key = (f"range_{fake_utils._ceil_pow2(length)}", "cpu")
            assert torch.equal(fake_utils._cache_buf[key], real_utils._cache_buf[key])
            assert _pinned(fake_utils._cache_buf[key]) == _pinned(real_utils._cache_buf[key])
        # the same cached buffer is handed out again, as in the release
        again = fake_utils._get_range_buf(100, "cpu")
        assert again.data_ptr() == fake_utils._cache_buf[("range_128", "cpu")].data_ptr()
        assert set(fake_utils._cache_buf) <= set(real_utils._cache_buf)
    with fake_flashinfer(PINNED):
        assert importlib.import_module("flashinfer.utils")._cache_buf == {}  # not the last one's


def _own_utils(release: str) -> dict[str, Any] | None:
    """``_ceil_pow2``, ``_get_range_buf``, ``_get_cache_buf`` (where defined) and a
    ``_cache_buf`` and ``_cache_buf_retired`` of their own, run from the release's published
    ``flashinfer/utils.py`` (None where it defines neither range helper)."""
    published = ReleaseCache().download(f"flashinfer-python=={release}", wheel_only=False)
    found = read_release(published).files.get("flashinfer.utils")  # a wheel or an sdist
    if found is None:
        return None
    tree = ast.parse(found[1])
    wanted = {"_ceil_pow2", "_get_range_buf"}
    body: list[ast.stmt] = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name in {*wanted, "_get_cache_buf"}
    ]
    if not wanted <= {node.name for node in body if isinstance(node, ast.FunctionDef)}:
        return None
    namespace: dict[str, Any] = {"torch": torch, "_cache_buf": {}, "_cache_buf_retired": []}
    exec(compile(ast.Module(body=body, type_ignores=[]), f"{release}/utils.py", "exec"), namespace)
    return namespace


#: ``_get_cache_buf`` calls as engines and FlashInfer make them: (name, bytes, zero_init);
#: the same name again, smaller (the cached one), then larger (made anew).
CACHE_CALLS = [("a", 64, False), ("a", 16, False), ("a", 256, True), ("b", 8, True)]


def _cache_outcome(get: Callable[..., Any], cache: dict[Any, Any], zero_init: bool) -> Any:
    """What each call of :data:`CACHE_CALLS` returns (size, dtype, whether it is the cached
    one, its bytes where they are zeros by request) and the cache's keys after."""
    seen = []
    for name, size, zero in CACHE_CALLS:
        buffer = get(name, size, "cpu", zero) if zero_init else get(name, size, "cpu")
        entry = cache[(name, "cpu")]
        zeros = bool((buffer == 0).all()) if zero and zero_init else None
        seen.append((tuple(buffer.shape), buffer.dtype, buffer is entry, zeros))
    return seen, sorted(cache)


@pytest.mark.release_matrix
@pytest.mark.parametrize("release", release_classes.releases("imports"))
def test_the_range_buffer_is_each_release_classs_own(release: str) -> None:
    """At each end of every release class (the day-one releases), the fake's
    ``_ceil_pow2``, ``_get_range_buf`` and ``_get_cache_buf`` give what that release's own
    source computes, and leave the same ``_cache_buf`` (and ``_cache_buf_retired``)
    entries."""
    try:
        own = _own_utils(release)
    except RegistryUnreachableError as error:
        pytest.skip(f"the registry is unreachable and the release is not cached: {error}")
    with fake_flashinfer(release):
        fake = importlib.import_module("flashinfer.utils")
        if own is None:
            assert not hasattr(fake, "_get_range_buf")
            return
        for x in [0, 1, 2, 3, 5, 8, 9, 1000, 1 << 33]:
            assert fake._ceil_pow2(x) == own["_ceil_pow2"](x), x
        for length in [1, 2, 5, 8, 17, 300]:
            got, want = fake._get_range_buf(length, "cpu"), own["_get_range_buf"](length, "cpu")
            assert (got.dtype, got.shape) == (want.dtype, want.shape)
            assert torch.equal(got, want), length
        assert set(fake._cache_buf) == set(own["_cache_buf"])
        if "_get_cache_buf" not in own:
            assert not hasattr(fake, "_get_cache_buf")
            return
        zero_init = "zero_init" in own["_get_cache_buf"].__code__.co_varnames
        assert _cache_outcome(fake._get_cache_buf, fake._cache_buf, zero_init) == _cache_outcome(
            own["_get_cache_buf"], own["_cache_buf"], zero_init
        )
        retired = getattr(fake, "_cache_buf_retired", [])
        own_retired = own["_cache_buf_retired"]
        assert [tuple(b.shape) for b in retired] == [tuple(b.shape) for b in own_retired]
