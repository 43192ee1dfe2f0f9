"""A fake ``flashinfer`` package built from the recorded signatures of a real release.

:func:`fake_flashinfer` installs it for a ``with`` block and yields the
:class:`FakeFlashInfer` handle with the call log. What the fake does and does not model,
and how it is built, is the testing guide's page ``docs/guide/testing.md`` ("How the fake
is built", "What the fake does", "Not modelled"). The work is split by job:

* :mod:`fi_compat.testing._objects`: the handle and the objects the fake hands out;
* :mod:`fi_compat.testing._registry`: what the record says lives where;
* :mod:`fi_compat.testing._modules`: what every other recorded module binds, read on first
  import;
* :mod:`fi_compat.testing._generator`: the Python source of the fake package;
* :mod:`fi_compat.testing._install`: the build cache and the import hook;
* :mod:`fi_compat.testing._runtime`: what generated code calls, with the workspace model
  of :mod:`fi_compat.testing._workspaces`, gated on the releases of
  :mod:`fi_compat.testing._gates`, the kernel boundary of
  :mod:`fi_compat.testing._fake_kernel` and the helpers :mod:`fi_compat.testing._helpers`
  computes.
"""

from __future__ import annotations

import contextlib
import importlib
import re
import sys
import uuid
from collections.abc import Iterator

from fi_compat._arguments import require_bool, require_instance, require_int
from fi_compat._deprecation import renamed_keyword
from fi_compat._records import load_release
from fi_compat._surface import COMM, FLASHINFER
from fi_compat.testing._fake_kernel import KernelPlan
from fi_compat.testing._install import Finder, take_build
from fi_compat.testing._objects import (
    CUDART_MESSAGE,
    KITS,
    LOCK,
    Call,
    Default,
    FakeFlashInfer,
    StandIn,
)
from fi_compat.testing._runtime import INSTALLED, PENDING, SERVING

__all__ = [
    "CUDART_MESSAGE",
    "Call",
    "Default",
    "FakeFlashInfer",
    "KernelPlan",
    "StandIn",
    "fake_flashinfer",
]


def _clear_capabilities() -> None:
    """Reset fi_compat.capabilities' process-wide cache, if that module exists."""
    try:
        capabilities = importlib.import_module("fi_compat.capabilities")
    except ImportError:
        return
    clear = getattr(capabilities, "clear_cache", None)
    if callable(clear):
        clear()


#: ``flashinfer`` and its submodules, matched in C: a fake's entry and exit each pick them out
#: of ``sys.modules`` (thousands of names once torch is loaded). A Python call per name cost
#: 0.3 to 0.6 ms of a 4 to 6 ms entry, and 4 ms of a 10 to 14 ms one under a tracer
#: (``coverage``), which engines' test suites often run under.
_OURS = re.compile(re.escape(FLASHINFER) + r"(?:\.|\Z)").match


def _our_modules() -> list[str]:
    """The names of ``flashinfer`` and its submodules in ``sys.modules``."""
    return list(filter(_OURS, list(sys.modules)))


@renamed_keyword("version", "release", until="0.4.0")
@contextlib.contextmanager
def fake_flashinfer(
    release: str,
    *,
    cuda_runtime: bool = True,
    installed: bool = True,
    import_error: BaseException | type[BaseException] | None = None,
    comm_import_error: BaseException | type[BaseException] | None = None,
    multicast: bool = True,
    confidential_compute: bool = False,
    sm_count: int = 132,
) -> Iterator[FakeFlashInfer]:
    """Install a fake ``flashinfer`` imitating a recorded release, for the ``with`` block.

    The real ``flashinfer`` modules are set aside and restored on exit; the capability
    cache is cleared on entry and exit. The testing guide, ``docs/guide/testing.md``, says
    what the fake does and how each option shows.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    release
        A recorded release (see :func:`available_releases`), e.g. ``"0.6.5"``. Spelled
        ``version=`` before fi-compat 0.3.0 (still taken, with a ``DeprecationWarning``).
    cuda_runtime
        False imitates a process without a loaded CUDA runtime.
    installed
        False imitates "flashinfer is not installed".
    import_error
        An exception (or class) that ``import flashinfer`` raises, e.g. ``OSError``.
    comm_import_error
        An exception (or class) that ``import flashinfer.comm`` raises, e.g. ``TypeError``.
    multicast
        Whether the imitated GPUs support NVLink multicast.
    confidential_compute
        Whether the imitated GPUs run in NVIDIA Confidential Computing mode.
    sm_count
        The imitated GPUs' streaming multiprocessors, what ``flashinfer.utils``'s
        ``get_device_sm_count`` answers for any device (132: an H100 SXM); new in
        fi-compat 0.3.0.

    Yields
    ------
    FakeFlashInfer
        The handle with the call log.

    Raises
    ------
    UnknownReleaseError
        ``release`` is not a recorded release.
    InvalidArgumentError
        A switch is not a bool, an import error is neither an exception nor its class, or
        ``sm_count`` is not a positive int.
    """
    require_bool("cuda_runtime", cuda_runtime)
    require_bool("installed", installed)
    require_bool("multicast", multicast)
    require_bool("confidential_compute", confidential_compute)
    require_int("sm_count", sm_count, minimum=1, maximum=1 << 20)
    errors: dict[str, BaseException] = {}
    for module, planned in ((FLASHINFER, import_error), (COMM, comm_import_error)):
        if isinstance(planned, type) and issubclass(planned, BaseException):
            errors[module] = planned()
        elif planned is not None:
            require_instance(
                f"the error planned for import {module}",
                planned,
                BaseException,
                "an exception or an exception class",
            )
            errors[module] = planned
    record = load_release(release)
    token = uuid.uuid4().hex
    build = take_build(record, cuda_runtime=cuda_runtime, planned=frozenset(errors))
    kit = FakeFlashInfer(
        record,
        build.directory,
        token,
        planned_errors=errors,
        multicast=multicast,
        confidential_compute=confidential_compute,
        sm_count=sm_count,
        _workspace_classes=build.workspace_classes,
        _factory_options=build.factory_options,
    )
    finder = Finder(build)
    with LOCK:
        INSTALLED[str(build.directory)] = token
        if build.modules is not None:
            SERVING[token] = build.modules.serving
        displaced = {name: sys.modules[name] for name in _our_modules()}
        for name in displaced:
            del sys.modules[name]
        KITS[token] = kit
        if installed:
            sys.meta_path.insert(0, finder)
        else:
            sys.modules[FLASHINFER] = None  # type: ignore[assignment]
    try:
        importlib.invalidate_caches()
        if installed and FLASHINFER not in errors:
            importlib.import_module(FLASHINFER)
            if record.comm_exists and cuda_runtime and COMM not in errors:
                importlib.import_module(COMM)
                for name in build.eager:
                    importlib.import_module(name)
        _clear_capabilities()
        yield kit
    finally:
        with LOCK:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(finder)
            for name in _our_modules():
                del sys.modules[name]
            sys.modules.update(displaced)
            KITS.pop(token, None)
            SERVING.pop(token, None)
            for key in [key for key in PENDING if key[0] == token]:
                del PENDING[key]
            del INSTALLED[str(build.directory)]
            build.in_use = False
        _clear_capabilities()
