"""Capability probing: what does the FlashInfer installed here actually accept?

:func:`get_capabilities` answers once per process and caches the answer. The probe imports
``flashinfer`` and ``flashinfer.comm`` and reads signatures; every import and every
inspection is guarded, so a broken or absent FlashInfer becomes a finding (an
``unavailable`` flag or an ``unknown`` answer carrying the error text), never a crash.

Releases before 0.6.14 raise ``AssertionError`` (not ``ImportError``) from
``import flashinfer.comm`` on a machine without a loaded CUDA runtime; other builds raise
``OSError`` or ``TypeError``; a C-extension callable without signature metadata makes
``inspect.signature`` raise ``ValueError``. All of those are caught here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any

from packaging.version import InvalidVersion, Version

from fi_compat._log import get_logger
from fi_compat._signature import Shape, Status, Support, inspect_callable, supports
from fi_compat._version import __version__

__all__ = [
    "ATTENTION_WRAPPERS",
    "COMM_PROBES",
    "Capabilities",
    "CommCapabilities",
    "FlashInferInfo",
    "Shape",
    "Status",
    "Support",
    "TorchInfo",
    "get_capabilities",
]

logger = get_logger(__name__)

#: Keyword arguments probed on each ``flashinfer.comm`` callable. The first two entries are
#: the unified API (0.6.0+), the last two the legacy TRT-LLM IPC API.
COMM_PROBES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "create_allreduce_fusion_workspace": ("group", "comm_backend"),
        "allreduce_fusion": ("trigger_completion_at_end",),
        "trtllm_create_ipc_workspace_for_all_reduce_fusion": ("group", "comm_backend"),
        "trtllm_allreduce_fusion": ("trigger_completion_at_end",),
    }
)

#: The attention wrappers whose ``plan`` must take the split-KV settings for determinism.
ATTENTION_WRAPPERS: tuple[str, ...] = (
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchDecodeWithPagedKVCacheWrapper",
)

#: Keyword arguments probed on each wrapper's ``plan`` (both 0.4.0+).
PLAN_KWARGS: tuple[str, ...] = ("fixed_split_size", "disable_split_kv")

#: Keyword arguments probed on each wrapper's ``__init__``.
INIT_KWARGS: tuple[str, ...] = ("use_tensor_cores", "backend")

#: Where ``TorchDistBackend`` has lived, newest first.
TORCH_DIST_BACKEND_MODULES: tuple[str, ...] = (
    "flashinfer.comm.comm_backend",
    "flashinfer.comm.mnnvl",
)

_SOURCE_BUILD_VERSION = Version("0.0.0")


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class FlashInferInfo:
    """Whether FlashInfer is here, which release, and why it does not import.

    Attributes
    ----------
    installed
        A ``flashinfer`` package is present (it may still fail to import).
    version
        The version string FlashInfer reports, or its distribution metadata says.
    parsed_version
        ``version`` parsed with :mod:`packaging`; None when it does not parse.
    source_build
        The version cannot be trusted (``0.0.0+unknown`` and other local builds): every
        decision is made from probed signatures anyway, this only affects what is shown.
    import_error
        ``"ExceptionType: message"`` when ``import flashinfer`` failed.
    location
        The directory the package was imported from.
    """

    installed: bool
    version: str | None
    parsed_version: Version | None
    source_build: bool
    import_error: str | None
    location: str | None

    @property
    def importable(self) -> bool:
        """``import flashinfer`` succeeded."""
        return self.installed and self.import_error is None


@dataclass(frozen=True)
class TorchInfo:
    """The torch next to FlashInfer, for bug reports. Never imported by the probe itself."""

    version: str | None
    cuda_available: bool | None
    cuda_version: str | None


@dataclass(frozen=True)
class CommCapabilities:
    """What ``flashinfer.comm`` offers.

    Attributes
    ----------
    available
        ``import flashinfer.comm`` succeeded.
    error
        Why it did not, as ``"ExceptionType: message"``.
    unified_api
        ``create_allreduce_fusion_workspace`` and ``allreduce_fusion`` exist (0.6.0+).
    legacy_api
        ``trtllm_create_ipc_workspace_for_all_reduce_fusion`` and ``trtllm_allreduce_fusion``
        exist (0.2.9+; still present next to the unified API).
    shapes
        For each name in :data:`COMM_PROBES` that exists, what it accepts by keyword.
    kwargs
        For each name in :data:`COMM_PROBES`, the answer for each probed keyword.
    torch_dist_backend
        Dotted path of FlashInfer's torch.distributed ``TorchDistBackend``, if any.
    bcast_root_is_group_local
        Whether that backend's ``bcast(data, root)`` maps a group-local ``root`` to a
        global rank itself (``supported``) or passes it on as a global rank
        (``unsupported``), read from its source.
    """

    available: bool
    error: str | None
    unified_api: bool
    legacy_api: bool
    shapes: Mapping[str, Shape]
    kwargs: Mapping[str, Mapping[str, Support]]
    torch_dist_backend: str | None
    bcast_root_is_group_local: Support


@dataclass(frozen=True)
class Capabilities:
    """Everything the probe found, frozen. Obtain it from :func:`get_capabilities`.

    Attributes
    ----------
    fi_compat_version
        fi-compat's own version.
    flashinfer
        The installed FlashInfer.
    torch
        The installed torch (only what can be read without importing it).
    comm
        ``flashinfer.comm``.
    attention
        ``"<Wrapper>.plan"`` to the answers for ``fixed_split_size`` and
        ``disable_split_kv``.
    attention_shapes
        ``"<Wrapper>.plan"`` and ``"<Wrapper>.__init__"`` to what each accepts.
    """

    fi_compat_version: str
    flashinfer: FlashInferInfo
    torch: TorchInfo
    comm: CommCapabilities
    attention: Mapping[str, Mapping[str, Support]]
    attention_shapes: Mapping[str, Shape] = field(repr=False)

    def plan_support(self, wrapper: str, keyword: str) -> Support:
        """The answer for ``keyword`` on ``<wrapper>.plan``."""
        return self.attention[f"{wrapper}.plan"][keyword]


# ---------------------------------------------------------------------------- the probe


def _import(name: str) -> tuple[ModuleType | None, str | None]:
    try:
        return importlib.import_module(name), None
    except Exception as error:  # any failure to import is a finding, not a crash
        return None, _describe(error)


def _parse_version(raw: str | None) -> tuple[Version | None, bool]:
    if raw is None:
        return None, False
    try:
        parsed = Version(raw)
    except InvalidVersion:
        return None, True
    return parsed, parsed.release == _SOURCE_BUILD_VERSION.release or parsed.local is not None


def _distribution_version() -> str | None:
    for dist in ("flashinfer-python", "flashinfer"):
        try:
            return importlib.metadata.version(dist)
        except Exception:  # PackageNotFoundError, or broken metadata
            continue
    return None


def _installed() -> bool:
    if "flashinfer" in sys.modules:
        # None there is the documented way to block an import: treat it as absent.
        return sys.modules["flashinfer"] is not None
    try:
        return importlib.util.find_spec("flashinfer") is not None
    except Exception:  # a broken finder or parent package: treat as absent
        return False


def _probe_flashinfer() -> tuple[FlashInferInfo, ModuleType | None]:
    installed = _installed()
    module, error = _import("flashinfer") if installed else (None, None)
    raw: Any = getattr(module, "__version__", None) if module is not None else None
    version = raw if isinstance(raw, str) else _distribution_version()
    parsed, source_build = _parse_version(version)
    location = None
    if module is not None:
        paths = list(getattr(module, "__path__", []) or [])
        location = str(paths[0]) if paths else getattr(module, "__file__", None)
    info = FlashInferInfo(
        installed=installed,
        version=version,
        parsed_version=parsed,
        source_build=source_build,
        import_error=error,
        location=location,
    )
    return info, module


def _probe_torch() -> TorchInfo:
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            version = importlib.metadata.version("torch")
        except Exception:
            version = None
        return TorchInfo(version=version, cuda_available=None, cuda_version=None)
    try:
        cuda_available: bool | None = bool(torch.cuda.is_available())
    except Exception:
        cuda_available = None
    cuda_version = getattr(getattr(torch, "version", None), "cuda", None)
    return TorchInfo(
        version=str(getattr(torch, "__version__", None) or "") or None,
        cuda_available=cuda_available,
        cuda_version=cuda_version if isinstance(cuda_version, str) else None,
    )


def _all_unknown(
    names: Mapping[str, tuple[str, ...]], reason: str
) -> dict[str, dict[str, Support]]:
    return {
        owner: {keyword: Support(Status.UNKNOWN, reason) for keyword in keywords}
        for owner, keywords in names.items()
    }


def _find_torch_dist_backend(comm: ModuleType) -> tuple[str | None, Support]:
    for module_name in TORCH_DIST_BACKEND_MODULES:
        module = sys.modules.get(module_name) or _import(module_name)[0]
        cls = getattr(module, "TorchDistBackend", None) if module is not None else None
        if inspect.isclass(cls):
            return f"{module_name}.TorchDistBackend", _bcast_root(cls)
    absent = Support(Status.UNSUPPORTED, "flashinfer.comm has no TorchDistBackend")
    return None, absent


def _bcast_root(cls: type) -> Support:
    """Does ``cls.bcast(data, root)`` translate a group-local root into a global rank?"""
    try:
        source = inspect.getsource(cls.bcast)  # type: ignore[attr-defined]
    except Exception as error:
        return Support(Status.UNKNOWN, f"cannot read TorchDistBackend.bcast: {_describe(error)}")
    if "get_global_rank" in source:
        return Support(Status.SUPPORTED, "bcast maps a group-local root with get_global_rank")
    return Support(
        Status.UNSUPPORTED,
        "bcast passes root to torch.distributed as a global rank; "
        "with a group whose ranks are not 0..n-1 it broadcasts from the wrong process",
    )


def _probe_comm(flashinfer: FlashInferInfo) -> CommCapabilities:
    if not flashinfer.importable:
        reason = flashinfer.import_error or "flashinfer is not installed"
        return CommCapabilities(
            available=False,
            error=f"flashinfer unavailable: {reason}",
            unified_api=False,
            legacy_api=False,
            shapes=MappingProxyType({}),
            kwargs=_freeze(_all_unknown(COMM_PROBES, f"flashinfer unavailable: {reason}")),
            torch_dist_backend=None,
            bcast_root_is_group_local=Support(Status.UNKNOWN, "flashinfer unavailable"),
        )
    comm, error = _import("flashinfer.comm")
    if comm is None:
        return CommCapabilities(
            available=False,
            error=error,
            unified_api=False,
            legacy_api=False,
            shapes=MappingProxyType({}),
            kwargs=_freeze(_all_unknown(COMM_PROBES, f"flashinfer.comm unavailable: {error}")),
            torch_dist_backend=None,
            bcast_root_is_group_local=Support(Status.UNKNOWN, "flashinfer.comm unavailable"),
        )
    shapes: dict[str, Shape] = {}
    kwargs: dict[str, dict[str, Support]] = {}
    for name, keywords in COMM_PROBES.items():
        func = getattr(comm, name, None)
        if not callable(func):
            missing = Support(Status.UNSUPPORTED, f"flashinfer.comm has no {name}")
            kwargs[name] = dict.fromkeys(keywords, missing)
            continue
        shape = inspect_callable(f"flashinfer.comm.{name}", func)
        shapes[name] = shape
        kwargs[name] = supports(shape, keywords)
    backend, bcast_root = _find_torch_dist_backend(comm)
    return CommCapabilities(
        available=True,
        error=None,
        unified_api=callable(getattr(comm, "create_allreduce_fusion_workspace", None))
        and callable(getattr(comm, "allreduce_fusion", None)),
        legacy_api=callable(
            getattr(comm, "trtllm_create_ipc_workspace_for_all_reduce_fusion", None)
        )
        and callable(getattr(comm, "trtllm_allreduce_fusion", None)),
        shapes=MappingProxyType(shapes),
        kwargs=_freeze(kwargs),
        torch_dist_backend=backend,
        bcast_root_is_group_local=bcast_root,
    )


def _probe_attention(
    flashinfer: FlashInferInfo, module: ModuleType | None
) -> tuple[dict[str, dict[str, Support]], dict[str, Shape]]:
    answers: dict[str, dict[str, Support]] = {}
    shapes: dict[str, Shape] = {}
    for wrapper in ATTENTION_WRAPPERS:
        key = f"{wrapper}.plan"
        if module is None:
            reason = f"flashinfer unavailable: {flashinfer.import_error or 'not installed'}"
            answers[key] = {keyword: Support(Status.UNKNOWN, reason) for keyword in PLAN_KWARGS}
            continue
        cls = getattr(module, wrapper, None)
        if not inspect.isclass(cls):
            missing = Support(Status.UNSUPPORTED, f"flashinfer has no {wrapper}")
            answers[key] = dict.fromkeys(PLAN_KWARGS, missing)
            continue
        for method, keywords in (("plan", PLAN_KWARGS), ("__init__", INIT_KWARGS)):
            name = f"{wrapper}.{method}"
            func = inspect.getattr_static(cls, method, None)
            if func is None:
                if method == "plan":
                    absent = Support(Status.UNSUPPORTED, f"{wrapper} has no plan")
                    answers[key] = dict.fromkeys(keywords, absent)
                continue
            if isinstance(func, staticmethod | classmethod):
                func = func.__func__
            shape = inspect_callable(name, func, owner=cls)
            shapes[name] = shape
            if method == "plan":
                answers[key] = supports(shape, keywords)
    return answers, shapes


def _freeze(nested: Mapping[str, Mapping[str, Support]]) -> Mapping[str, Mapping[str, Support]]:
    return MappingProxyType({key: MappingProxyType(dict(value)) for key, value in nested.items()})


def probe() -> Capabilities:
    """Run the probe now, uncached. Prefer :func:`get_capabilities`."""
    flashinfer, module = _probe_flashinfer()
    comm = _probe_comm(flashinfer)
    attention, attention_shapes = _probe_attention(flashinfer, module)
    capabilities = Capabilities(
        fi_compat_version=__version__,
        flashinfer=flashinfer,
        torch=_probe_torch(),
        comm=comm,
        attention=_freeze(attention),
        attention_shapes=MappingProxyType(attention_shapes),
    )
    logger.debug(
        "probed flashinfer %s (import error: %s; comm error: %s)",
        flashinfer.version,
        flashinfer.import_error,
        comm.error,
    )
    return capabilities


# ---------------------------------------------------------------------------- the cache

_lock = threading.Lock()
_cached: Capabilities | None = None


def get_capabilities(refresh: bool = False) -> Capabilities:
    """What the installed FlashInfer supports, probed once per process.

    Safe to call from many threads at once: exactly one thread probes, the others wait for
    its answer. Never raises because of FlashInfer.

    Parameters
    ----------
    refresh
        Probe again (for example after installing or faking another FlashInfer in
        ``sys.modules``) and replace the cached answer.
    """
    global _cached
    cached = _cached
    if cached is not None and not refresh:
        return cached
    with _lock:
        if _cached is None or refresh:
            _cached = probe()
        return _cached


def clear_cache() -> None:
    """Forget the cached answer; the next :func:`get_capabilities` probes again."""
    global _cached
    with _lock:
        _cached = None
