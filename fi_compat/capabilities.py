"""Capability probing: what does the FlashInfer installed here actually accept?

:func:`get_capabilities` answers once per process and caches the answer. Every import,
attribute read and inspection of the probe is guarded, so a broken, absent or hostile
FlashInfer becomes a finding (an ``unavailable`` flag or an ``unknown`` answer carrying the
error text), never a crash. The report guide, ``docs/guide/report.md``, says how the probe
answers.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from packaging.version import Version

from fi_compat._arguments import require_bool
from fi_compat._deprecation import moved_attribute, renamed_attribute
from fi_compat._frozen import picklable
from fi_compat._log import get_logger

# The probe's steps, one module per job. Every helper the probe below calls is looked up in
# this module's namespace at call time, so tests patching ``capabilities.<name>`` (such as
# ``find``, ``distribution_version``, ``inspect_callable``) still patch the probe.
from fi_compat._probe import (
    all_unknown,
    attempt,
    checked,
    distribution_version,
    find,
    freeze,
    guarded_getattr,
    import_guarded,
    is_installed,
    location_of,
    nowhere,
    parse_version,
    probe_bcast_root,
    static_member,
    unknown,
    unsupported,
)
from fi_compat._signature import (
    Shape,
    Status,
    Support,
    acceptances,
    describe_error,
    exact_text,
    inspect_callable,
)
from fi_compat._surface import (
    COMM,
    COMM_SYMBOLS,
    FLASHINFER,
    GATES,
    PLAN,
    TORCH_DIST_BACKEND,
    WRAPPER_SYMBOLS,
    Symbol,
)
from fi_compat._version import __version__

__all__ = [
    "ATTENTION_PROBES",
    "ATTENTION_WRAPPERS",
    "COMM_PROBES",
    "Capabilities",
    "CommCapabilities",
    "FlashInferInfo",
    "Shape",
    "Status",
    "Support",
    "TorchInfo",
    "clear_cache",
    "get_capabilities",
    "probe",
]


def __dir__() -> list[str]:
    return list(__all__)


def __getattr__(name: str) -> Any:
    # fi-compat 0.2.0 exported locate(), whose argument is a private fi_compat._surface.Symbol.
    return moved_attribute(
        __name__,
        {"locate": ("it takes a private Symbol and is fi-compat's own lookup", _locate)},
        name,
        until="0.4.0",
    )


def _locate() -> Any:
    from fi_compat._probe import locate

    return locate


logger = get_logger(__name__)


COMM_PROBES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {symbol.key: symbol.keywords for symbol in COMM_SYMBOLS if symbol.keywords}
)
"""Keyword arguments probed on each ``flashinfer.comm`` callable (by symbol key): the
unified API (0.6.0+) and the legacy TRT-LLM IPC API (see :mod:`fi_compat._surface`).

.. versionadded:: 0.2.0
"""

#: The symbols that make up each API, from its gate.
_UNIFIED_API = tuple(owner for owner, _ in GATES["unified_api"].items)
_LEGACY_API = tuple(owner for owner, _ in GATES["legacy_api"].items)

ATTENTION_WRAPPERS: tuple[str, ...] = tuple(wrapper.key for wrapper in WRAPPER_SYMBOLS)
"""The attention wrappers whose ``plan`` must take the split-KV settings for determinism.

.. versionadded:: 0.2.0
"""

ATTENTION_PROBES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {f"{wrapper.key}.{PLAN}": wrapper.methods[PLAN] for wrapper in WRAPPER_SYMBOLS}
)
"""Keyword arguments probed on each ``<wrapper>.plan``: the keys of
:attr:`Capabilities.attention`, as :data:`COMM_PROBES` gives those of its ``kwargs``.

.. versionadded:: 0.2.0
"""

#: The reason every item carries in the answer given to a re-entrant call.
PROBE_IN_PROGRESS = (
    "fi-compat is still probing FlashInfer on this thread: get_capabilities() was called "
    "from code the probe runs (for example from flashinfer's __init__), so nothing can be "
    "known yet; this answer is not cached, ask again once import flashinfer has finished"
)


@picklable
@dataclass(frozen=True)
class FlashInferInfo:
    """Whether FlashInfer is here, which release, and why it does not import.

    .. versionadded:: 0.2.0

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
    probe_in_progress
        This is the placeholder answer given to a :func:`get_capabilities` call made while
        the probe itself was still importing FlashInfer: nothing is known yet.
    """

    installed: bool
    version: str | None
    parsed_version: Version | None
    source_build: bool
    import_error: str | None
    location: str | None
    probe_in_progress: bool = False

    @property
    def importable(self) -> bool:
        """``import flashinfer`` succeeded (and the probe has finished importing it)."""
        return self.installed and self.import_error is None and not self.probe_in_progress


@picklable
@dataclass(frozen=True)
class TorchInfo:
    """The torch next to FlashInfer, for bug reports. Never imported by the probe itself.

    .. versionadded:: 0.2.0
    """

    version: str | None
    cuda_available: bool | None
    cuda_version: str | None


@picklable
@dataclass(frozen=True)
class CommCapabilities:
    """What ``flashinfer.comm`` offers.

    .. versionadded:: 0.2.0

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


@picklable
@dataclass(frozen=True)
class Capabilities:
    """Everything the probe found, frozen. Obtain it from :func:`get_capabilities`.

    .. versionadded:: 0.2.0

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

    def plan_acceptance(self, wrapper: str, keyword: str) -> Support:
        """Whether ``<wrapper>.plan`` accepts the keyword argument ``keyword``, and why.

        Spelled ``plan_support`` before fi-compat 0.3.0 (still answers, with a
        ``DeprecationWarning``, until 0.4.0).

        .. versionadded:: 0.3.0
        """
        return self.attention[f"{wrapper}.plan"][keyword]

    plan_support = renamed_attribute("plan_acceptance", until="0.4.0")
    """Deprecated since fi-compat 0.3.0, goes in 0.4.0: :meth:`plan_acceptance`."""


# ---------------------------------------------------------------------------- the probe


def _probe_flashinfer() -> tuple[FlashInferInfo, Any]:
    installed = is_installed()
    module, error = import_guarded(FLASHINFER) if installed else (None, None)
    raw, _ = guarded_getattr(module, "__version__") if module is not None else (None, None)
    version = exact_text(raw)
    if version is None:
        version = distribution_version()
    parsed, source_build = parse_version(version)
    info = FlashInferInfo(
        installed=installed,
        version=version,
        parsed_version=parsed,
        source_build=source_build,
        import_error=error,
        location=location_of(module) if module is not None else None,
    )
    return info, module


def _cuda_available(torch: Any) -> bool:
    return bool(torch.cuda.is_available())


def _torch_cuda_version(torch: Any) -> str | None:
    return exact_text(torch.version.cuda)


def _torch_version(torch: Any) -> str | None:
    return exact_text(torch.__version__) or None


def _probe_torch() -> TorchInfo:
    torch = sys.modules.get("torch")
    if torch is None:
        version, _ = attempt(importlib.metadata.version, "torch")
        return TorchInfo(version=exact_text(version), cuda_available=None, cuda_version=None)
    return TorchInfo(
        version=attempt(_torch_version, torch)[0],
        cuda_available=attempt(_cuda_available, torch)[0],
        cuda_version=attempt(_torch_cuda_version, torch)[0],
    )


def _shape_and_answers(
    name: str, func: Any, keywords: tuple[str, ...], owner: type | None
) -> tuple[Shape, dict[str, Support]]:
    shape = inspect_callable(name, func, owner=owner)
    answers = {keyword: checked(answer) for keyword, answer in acceptances(shape, keywords).items()}
    return shape, answers


def _inspect(
    name: str, func: Any, keywords: tuple[str, ...], owner: type | None = None
) -> tuple[Shape, dict[str, Support]]:
    """What ``func`` accepts; whatever the signature reader raises becomes ``unknown``."""
    result, error = attempt(_shape_and_answers, name, func, keywords, owner)
    if result is not None:
        return result
    reason = f"cannot read the signature of {name}: {error}"
    shape = Shape(name=name, keywords=None, open_ended=True, via=(name,), error=error)
    return shape, unknown(keywords, reason)


def _find_torch_dist_backend(comm: Any) -> tuple[str | None, Support]:
    cls, home, failures = find(TORCH_DIST_BACKEND, inspect.isclass, {COMM: comm})
    if home is not None:
        return home.dotted, probe_bcast_root(cls)
    if failures:
        return None, Support(Status.UNKNOWN, "; ".join(failures))
    return None, Support(Status.UNSUPPORTED, nowhere(TORCH_DIST_BACKEND))


def _probe_comm_callable(
    comm: Any, symbol: Symbol
) -> tuple[bool, dict[str, Support], Shape | None]:
    """(present, answers, shape) for one symbol of :data:`COMM_PROBES`."""
    keywords = symbol.keywords
    func, home, failures = find(symbol, callable, {COMM: comm})
    if home is None:
        if failures:
            return False, unknown(keywords, "; ".join(failures)), None
        return False, unsupported(keywords, nowhere(symbol)), None
    shape, answers = _inspect(home.dotted, func, keywords)
    return True, answers, shape


def _unavailable_comm(error: str, reason: str, bcast: str) -> CommCapabilities:
    return CommCapabilities(
        available=False,
        error=error,
        unified_api=False,
        legacy_api=False,
        shapes=MappingProxyType({}),
        kwargs=freeze(all_unknown(COMM_PROBES, reason)),
        torch_dist_backend=None,
        bcast_root_is_group_local=Support(Status.UNKNOWN, bcast),
    )


def _probe_comm(flashinfer: FlashInferInfo) -> CommCapabilities:
    if not flashinfer.importable:
        reason = (
            f"flashinfer unavailable: {flashinfer.import_error or 'flashinfer is not installed'}"
        )
        return _unavailable_comm(reason, reason, "flashinfer unavailable")
    comm, error = import_guarded(COMM)
    if comm is None:
        error = error or "import flashinfer.comm failed"
        return _unavailable_comm(
            error, f"flashinfer.comm unavailable: {error}", "flashinfer.comm unavailable"
        )
    shapes: dict[str, Shape] = {}
    kwargs: dict[str, dict[str, Support]] = {}
    present: dict[str, bool] = {}
    for symbol in COMM_SYMBOLS:
        if symbol.keywords:
            name = symbol.key
            present[name], kwargs[name], shape = _probe_comm_callable(comm, symbol)
            if shape is not None:
                shapes[name] = shape
    backend, bcast_root = _find_torch_dist_backend(comm)
    return CommCapabilities(
        available=True,
        error=None,
        unified_api=all(present[name] for name in _UNIFIED_API),
        legacy_api=all(present[name] for name in _LEGACY_API),
        shapes=MappingProxyType(shapes),
        kwargs=freeze(kwargs),
        torch_dist_backend=backend,
        bcast_root_is_group_local=bcast_root,
    )


def _probe_wrapper(module: Any, wrapper: Symbol, shapes: dict[str, Shape]) -> dict[str, Support]:
    """The ``plan`` answers of one wrapper; adds its shapes to ``shapes``."""
    plan_keywords = wrapper.methods[PLAN]
    cls, home, failures = find(wrapper, inspect.isclass, {FLASHINFER: module})
    if home is None:
        if failures:
            return unknown(plan_keywords, "; ".join(failures))
        return unsupported(plan_keywords, nowhere(wrapper))
    answers: dict[str, Support] = {}
    for method, keywords in wrapper.methods.items():
        name = f"{wrapper.key}.{method}"
        func, error = attempt(static_member, cls, method)
        if error is not None or func is None:
            if method == PLAN:
                answers = (
                    unknown(keywords, f"reading {name} raised {error}")
                    if error is not None
                    else unsupported(keywords, f"{wrapper.key} has no {PLAN}")
                )
            continue
        shape, method_answers = _inspect(name, func, keywords, owner=cls)
        shapes[name] = shape
        if method == PLAN:
            answers = method_answers
    return answers


def _probe_attention(
    flashinfer: FlashInferInfo, module: Any
) -> tuple[dict[str, dict[str, Support]], dict[str, Shape]]:
    answers: dict[str, dict[str, Support]] = {}
    shapes: dict[str, Shape] = {}
    for wrapper in WRAPPER_SYMBOLS:
        key = f"{wrapper.key}.{PLAN}"
        if module is None:
            reason = f"flashinfer unavailable: {flashinfer.import_error or 'not installed'}"
            answers[key] = unknown(wrapper.methods[PLAN], reason)
        else:
            answers[key] = _probe_wrapper(module, wrapper, shapes)
    return answers, shapes


def _placeholder(reason: str, *, in_progress: bool) -> Capabilities:
    """An answer that knows nothing: every item ``unknown`` because of ``reason``."""
    attention = all_unknown(ATTENTION_PROBES, reason)
    return Capabilities(
        fi_compat_version=__version__,
        flashinfer=FlashInferInfo(
            installed=is_installed(),
            version=None,
            parsed_version=None,
            source_build=False,
            import_error=None if in_progress else reason,
            location=None,
            probe_in_progress=in_progress,
        ),
        torch=TorchInfo(version=None, cuda_available=None, cuda_version=None),
        comm=_unavailable_comm(reason, reason, reason),
        attention=freeze(attention),
        attention_shapes=MappingProxyType({}),
    )


def _probe() -> Capabilities:
    flashinfer, module = _probe_flashinfer()
    comm = _probe_comm(flashinfer)
    attention, attention_shapes = _probe_attention(flashinfer, module)
    return Capabilities(
        fi_compat_version=__version__,
        flashinfer=flashinfer,
        torch=_probe_torch(),
        comm=comm,
        attention=freeze(attention),
        attention_shapes=MappingProxyType(attention_shapes),
    )


def probe() -> Capabilities:
    """Run the probe now, uncached. Prefer :func:`get_capabilities`.

    Never raises, except ``KeyboardInterrupt``. Every step is guarded on its own; should
    one still fail, the answer is every item ``unknown`` with the error as the reason.

    .. versionadded:: 0.2.0
    """
    try:
        capabilities = _probe()
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # a last resort: the probe never crashes its caller
        logger.debug("the probe failed", exc_info=True)
        return _placeholder(f"the probe failed: {describe_error(error)}", in_progress=False)
    logger.debug(
        "probed flashinfer %s (import error: %s; comm error: %s)",
        capabilities.flashinfer.version,
        capabilities.flashinfer.import_error,
        capabilities.comm.error,
    )
    return capabilities


# ---------------------------------------------------------------------------- the cache

# Re-entrant, so that clear_cache() called from code the probe runs cannot deadlock.
_lock = threading.RLock()
_cached: Capabilities | None = None
#: ``threading.get_ident()`` of the thread running the probe, while it runs.
_probing_thread: int | None = None


def get_capabilities(refresh: bool = False) -> Capabilities:
    """What the installed FlashInfer supports, probed once per process.

    Safe to call from many threads at once: exactly one thread probes, the others wait for
    its answer. Never raises because of FlashInfer. A call made by the probing thread while
    it probes gets an uncached placeholder (:data:`PROBE_IN_PROGRESS`); the report guide,
    ``docs/guide/report.md``, says how the probe answers.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    refresh
        Probe again (for example after installing or faking another FlashInfer in
        ``sys.modules``) and replace the cached answer.

    Raises
    ------
    InvalidArgumentError
        ``refresh`` is not a bool.
    """
    global _cached, _probing_thread
    cached = _cached
    if cached is not None and refresh is False:
        return cached
    require_bool("refresh", refresh)
    me = threading.get_ident()
    if _probing_thread == me:  # only this thread ever writes its own ident there
        return _placeholder(PROBE_IN_PROGRESS, in_progress=True)
    with _lock:
        if _cached is None or refresh:
            _probing_thread = me
            try:
                _cached = probe()
            finally:
                _probing_thread = None
        return _cached


def clear_cache() -> None:
    """Forget the cached answer; the next :func:`get_capabilities` probes again.

    .. versionadded:: 0.2.0
    """
    global _cached
    with _lock:
        _cached = None
