"""Source text of hand-written fake FlashInfer releases, for the probe's unit tests.

These are deliberately small and deliberately odd (import failures, signature-less
callables, ``**kwargs`` forwarders); the faithful per-release fakes built from recorded
signatures live in :mod:`fi_compat.testing`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

#: The ``fake_package`` fixture (``tests/conftest.py``): writes ``{relative path: source}``
#: into a fresh site directory, puts it first on ``sys.path`` and returns it.
FakePackage = Callable[[Mapping[str, str]], Path]

NEW_COMM = """
class AllReduceFusionPattern:
    kARResidualRMSNorm = 1

def create_allreduce_fusion_workspace(backend="auto", world_size=None, rank=None,
        max_token_num=None, hidden_dim=None, dtype=None, gpus_per_node=None,
        comm_backend=None, force_oneshot_support=False, group=None):
    return None

def allreduce_fusion(input, workspace, pattern, launch_with_pdl=False,
        trigger_completion_at_end=True, output=None, residual_out=None, norm_out=None,
        residual_in=None, rms_gamma=None, rms_eps=1e-6, use_oneshot=None, fp32_acc=False):
    return None

def trtllm_create_ipc_workspace_for_all_reduce_fusion(tp_rank, tp_size, max_token_num,
        hidden_dim, use_fp32_lamport=False, group=None, create_metadata=False, comm_backend=None):
    return None

def trtllm_allreduce_fusion(allreduce_in, world_size, world_rank, token_num, hidden_dim,
        workspace_ptrs, launch_with_pdl, trigger_completion_at_end, fp32_acc, pattern_code,
        use_oneshot, allreduce_out, residual_in, residual_out, norm_out, quant_out, scale_out,
        rms_gamma, rms_eps, scale_factor, layout_code, metadata=None):
    return None
"""

# 0.6.5-like: unified API without group= and without trigger_completion_at_end=.
OLD_COMM = """
def create_allreduce_fusion_workspace(backend="auto", world_size=None, rank=None,
        max_token_num=None, hidden_dim=None, dtype=None, gpus_per_node=None,
        comm_backend=None, force_oneshot_support=False):
    return None

def allreduce_fusion(input, workspace, pattern, launch_with_pdl=False, output=None,
        residual_out=None, norm_out=None, residual_in=None, rms_gamma=None, rms_eps=1e-6):
    return None

def trtllm_create_ipc_workspace_for_all_reduce_fusion(tp_rank, tp_size, max_token_num,
        hidden_dim, use_fp32_lamport=False, group=None):
    return None

def trtllm_allreduce_fusion(allreduce_in, world_size, world_rank, token_num, hidden_dim,
        workspace_ptrs, launch_with_pdl, trigger_completion_at_end, fp32_acc, pattern_code,
        use_oneshot, allreduce_out, residual_in, residual_out, norm_out, quant_out, scale_out,
        rms_gamma, rms_eps, scale_factor, layout_code):
    return None
"""

# 0.5-like: only the legacy API.
LEGACY_COMM = """
def trtllm_create_ipc_workspace_for_all_reduce_fusion(tp_rank, tp_size, max_token_num,
        hidden_dim, use_fp32_lamport=False, group=None):
    return None

def trtllm_allreduce_fusion(allreduce_in, world_size, world_rank, token_num, hidden_dim,
        workspace_ptrs, launch_with_pdl, trigger_completion_at_end, fp32_acc, pattern_code,
        use_oneshot, allreduce_out, residual_in, residual_out, norm_out, quant_out, scale_out,
        rms_gamma, rms_eps, scale_factor, layout_code):
    return None
"""

# Wrappers whose plan declares the split settings directly (0.4.0 to 0.6.14).
DIRECT_WRAPPERS = """
class BatchPrefillWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False):
        pass
    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len,
             num_qo_heads, num_kv_heads, head_dim_qk, page_size, causal=False,
             fixed_split_size=None, disable_split_kv=False):
        pass

class BatchPrefillWithRaggedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False):
        pass
    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk,
             causal=False, fixed_split_size=None, disable_split_kv=False):
        pass

class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
                 use_tensor_cores=False):
        pass
    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, fixed_split_size=None, disable_split_kv=False):
        pass
"""

# Wrappers from before the split settings (before 0.4.0).
OLD_WRAPPERS = """
class BatchPrefillWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD"):
        pass
    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len,
             num_qo_heads, num_kv_heads, head_dim_qk, page_size, causal=False):
        pass

class BatchPrefillWithRaggedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD"):
        pass
    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk,
             causal=False):
        pass

class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_tensor_cores=False):
        pass
    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size):
        pass
"""

# 0.6.15+-like decode wrapper: plan(**kwargs) merged and forwarded to _plan_impl.
FORWARDING_DECODE = """
def _merge(kwargs, extra):
    merged = dict(kwargs)
    for name, value in extra.items():
        if name in merged:
            raise TypeError(f"got multiple values for {name!r}")
        merged[name] = value
    return merged

class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_tensor_cores=False):
        pass

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, *deprecated_positional_args, **kwargs):
        if not deprecated_positional_args:
            return self._plan_impl(indptr, indices, last_page_len, num_qo_heads,
                                   num_kv_heads, head_dim, page_size, **kwargs)
        plan_kwargs = _merge(kwargs, {})
        return self._plan_impl(indptr, indices, last_page_len, num_qo_heads,
                               num_kv_heads, head_dim, page_size, **plan_kwargs)

    def _plan_impl(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads,
                   head_dim, page_size, *, window_left=-1, fixed_split_size=None,
                   disable_split_kv=False):
        pass
"""

# A bare **kwargs that goes nowhere a probe can follow.
OPAQUE_DECODE = """
class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_tensor_cores=False):
        pass

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, **kwargs):
        self._saved = kwargs
"""

# **kwargs forwarded to a name the probe cannot resolve (a module-level registry lookup).
UNRESOLVABLE_DECODE = """
_IMPLS = {}

class BatchDecodeWithPagedKVCacheWrapper:
    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_tensor_cores=False):
        pass

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim,
             page_size, **kwargs):
        return _IMPLS["decode"](indptr, **kwargs)
"""

# A comm callable that, like some C-extension functions, has no signature metadata.
SIGNATURELESS_COMM = """
class _NoSignature:
    @property
    def __signature__(self):
        raise ValueError("no signature found for builtin <built-in function allreduce_fusion>")

    def __call__(self, *args, **kwargs):
        return None

def create_allreduce_fusion_workspace(backend="auto", world_size=None, rank=None,
        max_token_num=None, hidden_dim=None, dtype=None, comm_backend=None, group=None):
    return None

allreduce_fusion = _NoSignature()
"""


def package(
    *,
    version: str = "0.7.2",
    comm: str | None = NEW_COMM,
    wrappers: str = DIRECT_WRAPPERS,
    extra: str = "",
    init_raises: str | None = None,
    comm_raises: str | None = None,
    prelude: str = "",
) -> dict[str, str]:
    """Files of one fake ``flashinfer`` package.

    ``prelude`` is put first in ``flashinfer/__init__.py`` and in a raising
    ``flashinfer/comm/__init__.py`` (for example the classes ``init_raises`` names).
    """
    init = f"__version__ = {version!r}\n"
    if init_raises:
        init = f"raise {init_raises}\n"
    init = prelude + init + "from .wrappers import *\n" + extra
    files = {"flashinfer/__init__.py": init, "flashinfer/wrappers.py": wrappers}
    if comm_raises:
        files["flashinfer/comm/__init__.py"] = f"{prelude}raise {comm_raises}\n"
    elif comm is not None:
        files["flashinfer/comm/__init__.py"] = comm
    return files
