"""The objects of a fake ``flashinfer``: the handle a test holds and what the fake hands out.

:class:`FakeFlashInfer` is the handle :func:`~fi_compat.testing.fake_flashinfer` yields, with
its log of :class:`Call` records; :class:`Default` stands in for a recorded default value
and :class:`StandIn` for a tensor or handle the real release would return. Generated code
finds the live handle by its token (:func:`_kit`). The testing guide,
``docs/guide/testing.md``, says what the fake does.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import sys
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from fi_compat._arguments import require_str
from fi_compat._records import NameRecord, ReleaseRecord
from fi_compat._surface import COMM, FLASHINFER, UNIFIED_FUSION
from fi_compat.errors import FakeUninstalledError, UnsupportedOperationError, explain
from fi_compat.testing._fake_kernel import KernelPlan

__all__ = [
    "CUDART_MESSAGE",
    "MISSING",
    "Call",
    "Default",
    "FakeFlashInfer",
    "StandIn",
    "inside",
    "outside_reason",
    "outside_value",
    "served",
    "unmodelled_reason",
]

CUDART_MESSAGE = "libcudart is not loaded in the current process"
"""The message releases up to 0.6.13 assert with when ``import flashinfer.comm`` runs in a
process without a loaded CUDA runtime.

.. versionadded:: 0.2.0
"""


#: Guards the call logs and the tables of live fakes and generated packages.
LOCK = threading.RLock()
#: Live fakes by token, so that generated modules can find their kit.
KITS: dict[str, FakeFlashInfer] = {}


class Default:
    """Sentinel standing in for a recorded default value (``source`` is its source text).

    .. versionadded:: 0.2.0
    """

    __slots__ = ("source",)

    def __init__(self, source: str) -> None:
        self.source = source

    def __repr__(self) -> str:
        return f"<default {self.source}>"

    def value(self) -> Any:
        """The default's value when its source is a literal (``'NHD'``, ``None``) or a torch
        attribute while torch is imported (``torch.float16``), else self."""
        try:
            return ast.literal_eval(self.source)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
        head, _, path = self.source.partition(".")
        found: Any = sys.modules.get(head) if head == "torch" and path else None
        for part in path.split(".") if found is not None else ():
            found = getattr(found, part, None)
        return self if found is None else found


#: Why the fake leaves a value unbound whose record does not say what it is (a record made
#: before values were recorded).
NOT_RECORDED = "not recorded"
#: Why the fake leaves a name unbound that the release binds in a way its source does not
#: show (a ``globals()`` update, a ``setattr`` on the module).
SOURCE_SILENT = "bound in a way the source does not show"


def served(found: NameRecord, served_names: tuple[str, ...] | str | None) -> bool:
    """``found`` is a value its module's ``__getattr__`` serves (``served_names``, as
    recorded): the fake serves it from the module that binds it, as the release's
    ``__getattr__`` does, rather than leave it unbound (0.7.4's
    ``flashinfer.fused_moe.prims_ts_bf16_moe``, listed in ``__all__`` and bound by a
    ``__getattr__`` on first use)."""
    return found.kind == "value" and isinstance(served_names, tuple) and found.name in served_names


#: What :func:`outside_value` gives for a name this process does not have.
MISSING: Any = object()


def inside(module: str | None) -> bool:
    """Whether ``module`` is ``flashinfer`` or one of its submodules: part of the release."""
    return module is not None and (module == FLASHINFER or module.startswith(FLASHINFER + "."))


def unmodelled_reason(found: NameRecord) -> str | None:
    """Why the fake leaves the name ``found`` records unbound: a value the release binds
    whose value its record does not tell; None where the fake binds it (a literal, a name
    from outside the release, anything that is not a value)."""
    if found.kind != "value" or found.literal is not None:
        return None
    if found.defined_in is None:
        return SOURCE_SILENT
    if not inside(found.defined_in):
        return None  # from outside the release
    return found.opaque or NOT_RECORDED


def outside_value(module: str | None, name: str, is_module: bool = False) -> Any:
    """A name the release imports from outside itself: the very object when its module is
    already imported or in the standard library (``typing.Any``, ``os``), else
    :data:`MISSING` (``torch`` is never imported by the fake). Reading it runs that module's
    ``__getattr__``, if any, quietly: a deprecation warning it gives (the CuTe DSL's
    ``tcgen05.OperandMajorMode``) or an error it raises is the real package's business, not
    the fake's, and the name is then missing."""
    if module is None:
        return MISSING
    found = sys.modules.get(module)
    if found is None and module.partition(".")[0] in sys.stdlib_module_names:
        with contextlib.suppress(ImportError):
            found = importlib.import_module(module)
    if found is None:
        return MISSING
    if is_module:
        return found
    value = vars(found).get(name, MISSING)
    if value is not MISSING:
        return value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return getattr(found, name)
        except Exception:  # AttributeError, or whatever a module __getattr__ raises
            return MISSING


def outside_reason(module: str | None, name: str) -> str | None:
    """Why the fake leaves a name the release imports from ``module`` unbound now, or None
    when it binds the very object (see :func:`outside_value`)."""
    if module is None:
        return "imported from a module its record does not name"
    found = sys.modules.get(module)
    if found is None and module.partition(".")[0] not in sys.stdlib_module_names:
        return (
            f"imported from {module}, which this process has not imported (the fake imports "
            "nothing beyond the standard library)"
        )
    return f"imported from {module}, which does not bind {name!r} in this process"


class StandIn:
    """An opaque object returned where the real function returns a tensor or handle.

    .. versionadded:: 0.2.0
    """

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"<fake {self.label}>"


@dataclass(frozen=True)
class Call:
    """One call into the fake.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    name
        ``"allreduce_fusion"`` for a function, ``"BatchDecodeWithPagedKVCacheWrapper.plan"``
        for a method.
    arguments
        The explicitly bound arguments by parameter name (like
        ``inspect.BoundArguments.arguments``: defaults not applied, ``self`` left out, an
        empty ``*args``/``**kwargs`` left out; an argument that is the very enum member the
        parameter defaults to counts as the default).
    instance
        ``self`` for a method call (and for ``fast_decode_plan``, which takes the wrapper
        as ``self``), ``cls`` for a class method, else None.
    """

    name: str
    arguments: Mapping[str, Any]
    instance: Any = None


@dataclass
class FakeFlashInfer:
    """A fake ``flashinfer`` installed in ``sys.modules`` (see
    :func:`~fi_compat.testing.fake_flashinfer`).

    .. versionadded:: 0.2.0

    Attributes
    ----------
    record
        The recorded release it imitates.
    calls
        Every call made into the fake, in order.
    kernel_plans
        What each attention ``plan`` call handed the kernel, in order, as the measured
        reach data says (:class:`KernelPlan`).
    directory
        Where the generated ``flashinfer`` package was written.
    multicast
        Whether the imitated GPUs support NVLink multicast.
    confidential_compute
        Whether the imitated GPUs run in Confidential Computing mode.
    sm_count
        The imitated GPUs' streaming multiprocessors (``get_device_sm_count``).
    """

    record: ReleaseRecord
    directory: Path
    token: str
    calls: list[Call] = field(default_factory=list)
    kernel_plans: list[KernelPlan] = field(default_factory=list)
    planned_errors: dict[str, BaseException] = field(default_factory=dict)
    multicast: bool = True
    confidential_compute: bool = False
    sm_count: int = 132
    _workspace_classes: dict[str, tuple[str, str]] = field(default_factory=dict, repr=False)
    _factory_options: tuple[str, ...] = field(default=(), repr=False)

    @property
    def version(self) -> str:
        """The imitated release, e.g. ``"0.6.5"``."""
        return self.record.release

    @property
    def flashinfer(self) -> ModuleType:
        """The fake top-level ``flashinfer`` module."""
        return importlib.import_module(FLASHINFER)

    @property
    def comm(self) -> ModuleType:
        """``flashinfer.comm`` (importing it raises in the failure modes)."""
        return importlib.import_module(COMM)

    def __copy__(self) -> FakeFlashInfer:
        """Another handle on the same fake: the log (``calls``, ``kernel_plans``) is shared."""
        return dataclasses.replace(self)

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise _not_copyable("copy.deepcopy")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise _not_copyable("pickle")

    def unmodelled_values(self) -> dict[str, str]:
        """The values of the imitated release that the fake leaves unbound, each
        (``"flashinfer.kda_decode._FUSED_KDA_DECODE_AVAILABLE"``) with why: ``"computed
        at import"``, ``"bound by several statements"``, ``"bound in an if, try or with"``,
        ``"changed at import after it is bound"``, ``"too large to keep"``, ``"bound in a
        way the source does not show"``. Every other value the release assigns is bound as
        the literal it has once imported (``flashinfer.utils._cache_buf`` is a ``dict``);
        reading one of these raises ``AttributeError`` saying why, so an engine's
        ``getattr(module, name, default)`` takes the default. Read from the record, every
        module of the release (a second or two for a recent one).

        .. versionadded:: 0.3.0
        """
        found: dict[str, str] = {}
        for module in sorted(self.record.names):
            recorded = self.record.module(module)
            if recorded is None or recorded.unreadable is not None:
                continue
            for name, entry in recorded.names.items():
                reason = unmodelled_reason(entry)
                if served(entry, recorded.served):
                    continue
                home = entry.defined_in
                outside = entry.kind == "value" and home is not None and not inside(home)
                if reason is None and outside and outside_value(home, name) is MISSING:
                    reason = outside_reason(home, name)
                if reason is not None and name != "__version__":
                    found[f"{module}.{name}"] = reason
        return found

    def calls_to(self, name: str) -> list[Call]:
        """The recorded calls whose :attr:`Call.name` is ``name``."""
        require_str("name", name, fix=f"pass a name such as {UNIFIED_FUSION.key!r}")
        return [call for call in self.calls if call.name == name]

    def clear_calls(self) -> None:
        """Forget the recorded calls and kernel plans."""
        with LOCK:
            self.calls.clear()
            self.kernel_plans.clear()

    # -- used by the generated modules -------------------------------------------------

    def _record(
        self,
        name: str,
        values: Mapping[str, Any],
        kinds: Mapping[str, str],
        bound: str | None = None,
        defaults: Mapping[str, Any] | None = None,
    ) -> Call:
        arguments: dict[str, Any] = {}
        instance = None
        for key, value in values.items():
            kind = kinds.get(key)
            if kind is None:
                continue
            if key == bound:
                instance = value
                continue
            if isinstance(value, Default):
                continue
            if defaults is not None and key in defaults and value is defaults[key]:
                continue
            if kind in ("VAR_POSITIONAL", "VAR_KEYWORD") and not value:
                continue
            arguments[key] = value
        call = Call(name, arguments, instance)
        with LOCK:
            self.calls.append(call)
        return call


def kit_for(token: str) -> FakeFlashInfer:
    """The live fake for ``token`` (called by generated code)."""
    kit = KITS.get(token)
    if kit is None:
        raise FakeUninstalledError(
            "expected a call into an installed fake flashinfer; found one into a fake whose "
            "fake_flashinfer() block has ended. Fix: keep the call inside the block (or the "
            "test that requested the fixture)."
        )
    return kit


def actual(value: Any) -> Any:
    """A recorded default as its literal value; anything else as is."""
    return value.value() if isinstance(value, Default) else value


def call_arguments(values: Mapping[str, Any], bound: str | None = "self") -> dict[str, Any]:
    """A call's parameters with recorded defaults as their values, ``self`` left out."""
    return {key: actual(value) for key, value in values.items() if key != bound}


def assign(obj: Any, values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        try:
            setattr(obj, name, value)
        except AttributeError:  # a read-only descriptor of the class
            continue


def _not_copyable(operation: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        explain(
            "a FakeFlashInfer to stay the log of the fake it installed (copy.copy shares it)",
            f"{operation} of one: the copy would stop seeing the calls made into the fake",
            fix="take a snapshot with list(fake.calls) and list(fake.kernel_plans)",
        )
    )
