"""A fake ``flashinfer`` package built from the recorded signatures of a real release.

The fake is real Python source: for every recorded function, class and method a ``def``
(or ``class``) with the release's parameter names, kinds and annotations is generated
(defaults become sentinel objects, an enum member default becomes that member), written to
``.py`` files in a temporary directory and imported from there. So Python itself raises the
``TypeError`` the real release would raise for an unknown keyword, ``inspect.signature``
reports the recorded signature and ``inspect.getsource`` works on every function and method
(the probe follows ``plan(**kwargs)`` -> ``self._plan_impl(**kwargs)`` by parsing it).

Each object is generated in the module the release defines it in (its ``__module__``), and
each ``flashinfer`` module the release has (``flashinfer``, ``flashinfer.comm``,
``flashinfer.comm.mnnvl``, ``flashinfer.decode``, the defining modules, ...) binds the names
the release binds there, so a name the release lacks is absent (``AttributeError``,
``ImportError``) and a submodule it lacks does not import. Every call into the fake is
logged (:attr:`FakeFlashInfer.calls`). Nothing here imports torch or does GPU work (a name
the release imports from elsewhere is the very object when its module is already imported
or in the standard library, else a :class:`StandIn`). What the fake objects do:

* ``flashinfer.comm`` and ``flashinfer.comm.mnnvl``: every public name the release binds,
  with its recorded kind (:meth:`~fi_compat.testing.ReleaseRecord.public_names`): a
  function with its recorded signature (returns None unless listed below); a class with
  ``__init__`` and each recorded public method (properties, static and class methods
  included) and its base classes when those are in the fake; an enum (``enum.Enum``) with
  its members, a class that only holds constants (``AllReduceFusionPattern``,
  ``QuantizationSFLayout``) with them as class attributes; a module as a module; anything
  else as a :class:`StandIn`. Constructing a class stores each argument under the instance
  attribute the release assigns it to (``group`` -> ``_group``, ``paged_kv_indptr_buffer``
  -> ``_paged_kv_indptr_buf``, read from the recorded attribute names); the other recorded
  attributes start as None. The MNNVL strategy enum that the MNNVL workspace's
  ``strategy=`` defaults to is generated next to that workspace (``flashinfer.comm`` does
  not export it, so no recorded table lists it).
* ``create_allreduce_fusion_workspace(...)`` -> the class the release's factory builds for
  the backend: ``"auto"`` resolves as the release resolves it on one node (up to
  0.6.15.post1 always MNNVL; from 0.6.16 MNNVL when the GPUs have NVLink multicast, else
  TRT-LLM), ``"mnnvl-cutedsl"`` where the release has it. The workspace carries
  ``backend``, ``world_size``, ``rank`` and the release's own attributes: on TRT-LLM
  ``metadata`` (the keys and values the release computes, ``use_fp32_lamport`` included),
  ``workspace_tensor``, ``ipc_handles``, ``mem_handles``; on MNNVL ``mc_ptr`` (an int, 0
  where the release yields a null multicast pointer), ``buffer_size_bytes`` and the other
  pointers; on MNNVL CuTe DSL its configuration. ``is_buffer_size_sufficient`` answers with
  the release's arithmetic (TRT-LLM: the metadata check; MNNVL: one-shot/two-shot bytes
  against the Lamport buffer the release would allocate; CuTe DSL: the static shape);
  ``checkpoint_prepare()``/``checkpoint_restore(comm_backend)`` (where recorded) detach and
  re-attach, or raise ``NotImplementedError`` where the release's memory cannot be
  checkpointed; ``destroy()`` is idempotent and frees what the release frees. Constructing a
  workspace class directly works the same way. The ``multicast`` and
  ``confidential_compute`` options of :func:`fake_flashinfer` describe the imitated GPUs.
* ``trtllm_create_ipc_workspace_for_all_reduce_fusion(...)`` -> ``(ipc_handles,
  workspace_tensor)``: an empty list and a :class:`StandIn`; a third element ``{}`` when
  ``create_metadata=True`` was passed.
* ``allreduce_fusion(...)`` -> the ``output`` argument if given, else ``input``.
* Attention families (every class of ``fi_compat._surface.ATTENTION_FAMILIES`` the release
  exports, in ``flashinfer`` and in its defining module; a subclass such as the CUDA-graph
  decode wrapper derives from the fake of its recorded base): ``__init__``, ``plan``,
  ``begin_forward``, ``run``, ``forward`` and ``_plan_impl`` where recorded, an alias
  (``begin_forward = plan``) as the very same function. ``__init__`` keeps what it was
  given under the release's attribute names (``_backend``, ``_use_tensor_cores`` -- forced
  on for the backends the release forces it for --, ``_use_cuda_graph``, ``_kv_layout``,
  ``_float_workspace_buffer``, ``_paged_kv_indices_buf``, ..., ``device`` taken from the
  workspace buffer); a ``plan(**kwargs)`` that forwards to ``_plan_impl`` does so, as in
  the release; every method returns None.
* The kernel boundary: when a family's planning method (``plan``, a ``begin_forward`` of
  its own, or the method their ``**kwargs`` go to) has bound its arguments, the fake looks
  up what was measured for (release, family, requested backend) in
  ``fi_compat/attention/reach.json`` (the backend read from the measured backend attribute,
  ``"default"`` for a family without one) and appends a :class:`KernelPlan` to
  :attr:`FakeFlashInfer.kernel_plans`: the settings as the kernel gets them where they
  reach (``fixed_split_size`` None as -1, the ``plan``'s defaults -1 and False when not
  passed), ``dropped`` where they do not; where the measurement saw ``plan`` refuse them,
  passing one raises the same (``ValueError`` when the measured detail names it, else
  ``RuntimeError``, with the detail as message) and planning without them is ``dropped``;
  nothing measured (no ``reach.json``, a release, family or backend it lacks, a backend
  attribute that holds no str) gives an ``unmeasured`` record with the values as passed.
  Decode families were measured on tensor cores; a decode wrapper without them (where its
  backend does not force them on) raises FlashInfer's ``ValueError("fixed_split_size is
  only supported by tensor core decode for now.")`` for a ``fixed_split_size`` other than
  None and otherwise plans ``dropped``, as every release from 0.4.0 does.
* ``flashinfer.decode.fast_decode_plan`` (also ``flashinfer.fast_decode_plan``) where the
  release has it: its recorded signature, logged like a method of the wrapper it is given
  as ``self``; its kernel boundary as above, under the family key ``"fast_decode_plan"``
  (on a wrapper without tensor cores it plans ``dropped`` without raising, as the
  releases do); returns None.
* a function the release decorates with ``@deprecated("...")`` emits the same
  ``DeprecationWarning`` on every call, before binding its arguments, as the real one.
* ``TorchDistBackend.bcast(data, root)`` -> ``data``; every other function or method
  returns None, a property None (assignable, so a test can steer it).

Not modelled (what real wheels have that the fake does not):

* kernels, tensors and devices: nothing is computed, allocated or communicated; tensors,
  handles and pointers are :class:`StandIn` objects or made-up ints, and a function that
  returns a result in the release returns None (but the ones listed above);
* argument validation beyond Python's own binding: wrong types, shapes or dtypes reach no
  check (a workspace's size arithmetic needs a ``torch.dtype``, as in the release);
* the real allocation granularity: an MNNVL workspace's Lamport buffer is sized as a
  driver with a 2 MiB allocation and multicast granularity would size it (the real one
  depends on the GPU), so answers near the limit of ``is_buffer_size_sufficient`` can differ
  from a given machine; a torch symmetric-memory buffer (0.6.10 .. 0.6.14) is as requested;
* topology: all ranks are alike (one node, the same GPUs), so ``"auto"`` never sees ranks
  that disagree, ``gpus_per_node`` and the communication backend's size are not checked,
  and there is no MPI;
* ``TRTLLMAllReduceFusionWorkspace.__getattr__`` (its delegation to the internal tuple),
  the cache on MNNVL's ``is_buffer_size_sufficient``, warnings and log messages the release
  writes, and the MNNVL CuTe DSL's compile-time profile checks;
* state a method stores: ``plan()`` stores nothing on the wrapper (``_cached_module``,
  ``_window_left``, ``_sm_scale``, ... stay as constructed), and attributes the release's
  ``__init__`` computes rather than copies (``_fixed_batch_size``, ``_int_workspace_buffer``,
  ...) start as None; ``run`` computes nothing and checks no plan was made;
* the kernel beyond the measured boundary: what ``backend="auto"`` resolves to (the record
  is keyed by the requested backend, as measured), ``plan`` arguments other than the split
  settings, a split setting of the wrong type, the argument checks a real ``plan`` makes
  before its kernel (cuDNN, CUDA-graph batch size, ``q_len_per_req``, ...), the exception
  type of a measured refusal other than ``ValueError``, and what a family that plans
  through inner wrappers (the cascade wrappers) hands them;
* names the record does not list: wrapper methods and properties other than ``__init__``,
  ``plan``, ``begin_forward``, ``run``, ``forward`` and what ``plan`` forwards to
  (``run_return_lse``, ``is_cuda_graph_enabled``, ``reset_workspace_buffer``), the
  ``flashinfer`` submodules that re-export a family (``flashinfer.mla`` when the class is
  defined in a submodule of it), modules other than ``flashinfer.comm`` and
  ``flashinfer.comm.mnnvl`` beyond the objects above, class-level constants of classes the
  record does not list as enums, the MNNVL strategy enum's ``select_strategy``, the
  ``__init__`` a dataclass generates (construction takes keywords only), and a re-exported
  class's original name in its defining module (it is bound there under its public name);
* properties are read-only in the release; in the fake they accept assignment.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import dataclasses
import enum
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import itertools
import math
import shutil
import sys
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from packaging.version import Version

from fi_compat._arguments import require_bool, require_instance, require_str
from fi_compat._records import (
    ClassRecord,
    FunctionRecord,
    ParameterRecord,
    ReleaseRecord,
    load_release,
)
from fi_compat._surface import (
    COMM,
    CUDART_MODULE,
    DECODE,
    FAST_DECODE_PLAN,
    FLASHINFER,
    LEGACY_FACTORY,
    NAMED_MODULES,
    PLAN,
    SPLIT_KEYWORDS,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
    WORKSPACE,
    symbol_named,
)
from fi_compat.errors import FakeUninstalledError
from fi_compat.testing._fake_kernel import KernelPlan, kernel_plan, read_attribute, truth

__all__ = [
    "CUDART_MESSAGE",
    "Call",
    "Default",
    "FakeFlashInfer",
    "KernelPlan",
    "StandIn",
    "fake_flashinfer",
]

#: The message releases up to 0.6.13 assert with when ``import flashinfer.comm`` runs in a
#: process without a loaded CUDA runtime.
CUDART_MESSAGE = "libcudart is not loaded in the current process"

#: The older name of an attention wrapper's ``plan`` (an alias of it in most classes; the
#: planning method itself of the shared-prefix cascade wrapper).
_BEGIN_FORWARD = "begin_forward"
#: The planning methods of an attention family, where the kernel boundary is.
_PLANNING = (PLAN, _BEGIN_FORWARD)

_LOCK = threading.RLock()
#: Live fakes by token, so that generated modules can find their kit.
_KITS: dict[str, FakeFlashInfer] = {}


class Default:
    """Sentinel standing in for a recorded default value (``source`` is its source text)."""

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


class StandIn:
    """An opaque object returned where the real function returns a tensor or handle."""

    __slots__ = ("label",)

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"<fake {self.label}>"


@dataclass(frozen=True)
class Call:
    """One call into the fake.

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
    """A fake ``flashinfer`` installed in ``sys.modules`` (see :func:`fake_flashinfer`).

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
    """

    record: ReleaseRecord
    directory: Path
    token: str
    calls: list[Call] = field(default_factory=list)
    kernel_plans: list[KernelPlan] = field(default_factory=list)
    planned_errors: dict[str, BaseException] = field(default_factory=dict)
    multicast: bool = True
    confidential_compute: bool = False
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

    def calls_to(self, name: str) -> list[Call]:
        """The recorded calls whose :attr:`Call.name` is ``name``."""
        require_str("name", name, fix=f"pass a name such as {UNIFIED_FUSION.key!r}")
        return [call for call in self.calls if call.name == name]

    def clear_calls(self) -> None:
        """Forget the recorded calls and kernel plans."""
        with _LOCK:
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
        with _LOCK:
            self.calls.append(call)
        return call

    def _model(self) -> _Model:
        return _Model(self)


def _kit(token: str) -> FakeFlashInfer:
    """The live fake for ``token`` (called by generated code)."""
    kit = _KITS.get(token)
    if kit is None:
        raise FakeUninstalledError(
            "expected a call into an installed fake flashinfer; found one into a fake whose "
            "fake_flashinfer() block has ended. Fix: keep the call inside the block (or the "
            "test that requested the fixture)."
        )
    return kit


def _raise_planned(token: str, module: str) -> None:
    """Raise the import error planned for ``module`` (called by generated code)."""
    error = _KITS[token].planned_errors.get(module)
    if error is not None:
        raise error


def get_global_rank(arguments: Mapping[str, Any]) -> Any:
    """Stand-in for ``torch.distributed.get_global_rank`` (the group-local root as is)."""
    return arguments.get("root")


def _deprecated(message: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Like ``typing_extensions.deprecated``: warn on every call, keep the signature."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(message, category=DeprecationWarning, stacklevel=2)
            return func(*args, **kwargs)

        return wrapper

    return decorate


def _bases(*classes: type) -> tuple[type, ...]:
    """The recorded base classes a generated class can have (a consistent MRO, no enum
    with members), else the first alone, else none (called by generated code)."""
    for candidate in (classes, classes[:1]):
        try:
            type("_probe", candidate, {})
        except TypeError:
            continue
        return candidate
    return ()


def _actual(value: Any) -> Any:
    """A recorded default as its literal value; anything else as is."""
    return value.value() if isinstance(value, Default) else value


def _arguments(values: Mapping[str, Any], bound: str | None = "self") -> dict[str, Any]:
    """A call's parameters with recorded defaults as their values, ``self`` left out."""
    return {key: _actual(value) for key, value in values.items() if key != bound}


# ------------------------------------------------------------------ attributes of objects


def _attribute_for(parameter: str, attributes: Sequence[str] | None) -> list[str]:
    """The instance attributes the release stores ``parameter`` under.

    The releases store a constructor argument as ``_<name>`` (``backend`` -> ``_backend``),
    as ``<name>``, for a ``*_buffer`` argument as ``_<stem>_buf``
    (``paged_kv_indptr_buffer`` -> ``_paged_kv_indptr_buf``), and the decode wrapper of 0.7.2
    also keeps ``_requested_backend``: each of those the recorded attributes list. Without
    recorded attributes (files recorded before schema 2) the argument is stored under
    ``_<name>``, and also ``_<stem>_buf`` for a buffer.
    """
    candidates = [f"_{parameter}", parameter, f"_requested_{parameter}"]
    if parameter.endswith("_buffer"):
        candidates.append(f"_{parameter.removesuffix('_buffer')}_buf")
    if attributes is None:
        return [name for name in candidates if name != parameter and "_requested_" not in name]
    return [name for name in candidates if name in attributes]


def _tensor_core_backends(version: Version) -> tuple[str, ...]:
    """Backends for which the decode wrapper turns tensor cores on whatever
    ``use_tensor_cores`` says (``_use_tensor_cores = use_tensor_cores or backend in ...``)."""
    if version >= _V["0.7.1"]:  # 0.7.1 dropped prims-ts
        return ("trtllm-gen", "cute-dsl")
    if version >= _V["0.7.0"]:  # 0.7.0 added prims-ts
        return ("trtllm-gen", "cute-dsl", "prims-ts")
    if version >= _V["0.6.13"]:  # 0.6.13 added cute-dsl
        return ("trtllm-gen", "cute-dsl")
    return ("trtllm-gen",)


def _outside(module: str | None, name: str, is_module: bool = False) -> Any:
    """A name the release imports from outside itself (called by generated code): the very
    object when its module is already imported or in the standard library (``typing.Any``,
    ``os``), else a :class:`StandIn` (``torch`` is never imported by the fake)."""
    if module is None:
        return StandIn(name)
    found = sys.modules.get(module)
    if found is None and module.partition(".")[0] in sys.stdlib_module_names:
        with contextlib.suppress(ImportError):
            found = importlib.import_module(module)
    if found is None:
        return StandIn(name)
    if is_module:
        return found
    return getattr(found, name, StandIn(name))


def _init_object(
    token: str, obj: Any, attributes: tuple[str, ...] | None, values: Mapping[str, Any]
) -> None:
    """``__init__`` of a generated class (called by generated code): store the arguments
    under the release's attribute names, the other recorded attributes as None."""
    arguments = _arguments(values)
    stored: dict[str, Any] = dict.fromkeys(attributes or ())
    for parameter, value in arguments.items():
        for name in _attribute_for(parameter, attributes):
            stored[name] = value
    if attributes is not None and "device" in attributes and arguments:
        first = next(iter(arguments.values()))
        stored["device"] = getattr(first, "device", None)
    if "use_tensor_cores" in arguments and "backend" in arguments:
        # The decode wrapper: tensor cores forced on for some backends (see the releases).
        version = _kit(token).record.version
        for name in _attribute_for("use_tensor_cores", attributes):
            stored[name] = bool(arguments["use_tensor_cores"]) or (
                arguments["backend"] in _tensor_core_backends(version)
            )
    _assign(obj, stored)


def _plan_kernel(
    token: str,
    wrapper: Any,
    values: Mapping[str, Any],
    call: Call,
    var_keyword: str | None = None,
    family: str | None = None,
) -> None:
    """The kernel boundary of an attention family's planning method, and of
    ``fast_decode_plan`` (``family`` given), once its arguments are bound (called by
    generated code): appends a :class:`KernelPlan` to the kit, or raises what the release
    raises (see :func:`fi_compat.testing._fake_kernel.kernel_plan`)."""
    kit = _kit(token)
    cls = type(wrapper)
    fast = family is not None
    found = family if fast else read_attribute(cls, ("_fi_family",))
    name = found if isinstance(found, str) else call.name.partition(".")[0]
    passed = {key: call.arguments[key] for key in SPLIT_KEYWORDS if key in call.arguments}
    extra = call.arguments.get(var_keyword) if var_keyword is not None else None
    if isinstance(extra, Mapping):
        passed |= {key: extra[key] for key in SPLIT_KEYWORDS if key in extra}
    defaults = {
        key: value.value()
        for key, value in values.items()
        if key in SPLIT_KEYWORDS and isinstance(value, Default)
    }
    recorded = read_attribute(cls, ("_fi_attributes",))
    attributes = recorded if isinstance(recorded, tuple) else None
    tensor_cores = None
    if fast or read_attribute(cls, ("_fi_decode",)) is True:
        stored = read_attribute(wrapper, _attribute_for("use_tensor_cores", attributes))
        tensor_cores = None if stored is None else truth(stored)
    plan = kernel_plan(
        kit.record.release,
        wrapper,
        name,
        passed,
        defaults,
        fallback_backend=read_attribute(wrapper, _attribute_for("backend", attributes)),
        tensor_cores=tensor_cores,
        refuse_without_tensor_cores=not fast,
    )
    with _LOCK:
        kit.kernel_plans.append(plan)


def _assign(obj: Any, values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        try:
            setattr(obj, name, value)
        except AttributeError:  # a read-only descriptor of the class
            continue


def _property(obj: Any, name: str) -> Any:
    """A generated property's value (called by generated code)."""
    stored = vars(obj).get(f"_fi_property_{name}", _MISSING)
    if stored is not _MISSING:
        return stored
    state = vars(obj).get("_fi_state")
    if name == "backend" and isinstance(state, _WorkspaceState):
        return state.backend
    return None


def _set_property(obj: Any, name: str, value: Any) -> None:
    vars(obj)[f"_fi_property_{name}"] = value


_MISSING = object()


# ---------------------------------------------------------------------- the workspaces

_V = {
    release: Version(release)
    for release in ("0.6.10", "0.6.13", "0.6.15", "0.6.16", "0.6.18", "0.7.0", "0.7.1", "0.7.2")
}
#: ``BarrierFlagCount`` and ``MAX_COMM_SIZE`` of the TRT-LLM workspace (every release).
_BARRIER_FLAGS = 256
_MAX_COMM_SIZE = 2147483647 & ~((1 << 21) - 1)
#: The MNNVL workspace's one-shot threshold in bytes and its Lamport buffer count.
_ONE_SHOT_THRESHOLD = 64 * 1024 * 8 * 2
_LAMPORT_BUFFERS = 3
_UINT32_MAX = 2**32 - 1
#: The signal pad a ``SymmDeviceMemory`` allocation ends with, and the allocation and
#: multicast granularity the fake's driver rounds to (the real one depends on the GPU).
_SIGNAL_PAD = 2048
_GRANULARITY = 2 << 20
#: Made-up device pointers.
_POINTERS = itertools.count(0x7F00_0000_0000, 0x1000_0000)
_STRATEGIES = ("ONESHOT", "TWOSHOT", "AUTO")


class _Strategy(enum.Enum):
    """The fake's own names for the MNNVL strategies (the release's enum has the same)."""

    ONESHOT = 0
    TWOSHOT = 1
    AUTO = 99


def _round_up(value: int, granularity: int) -> int:
    return (value + granularity - 1) // granularity * granularity


def _is_float32(dtype: Any) -> bool:
    """``dtype == torch.float32`` without importing torch."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return bool(dtype == torch.float32)
    return repr(dtype) == "torch.float32"


def _itemsize(dtype: Any) -> int:
    """``torch.tensor([], dtype=dtype).element_size()`` without importing torch."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int) and not isinstance(size, bool) and type(dtype).__name__ == "dtype":
        return size
    raise TypeError(f"expected a torch.dtype; found {type(dtype).__name__} {dtype!r}")


def _strategy(value: Any) -> str | None:
    """The name of an MNNVL strategy member (``"ONESHOT"``, ...), else None."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, Default):
        name = value.source.rpartition(".")[2]
        return name if name in _STRATEGIES else None
    return None


def _mnnvl_required(
    tp_size: Any, num_tokens: Any, hidden_dim: Any, dtype: Any, strategy: Any
) -> Any:
    """Bytes the MNNVL workspace needs per Lamport buffer (every release from 0.6.0)."""
    elem_size = _itemsize(dtype)
    name = _strategy(strategy)
    if name == "AUTO":
        fits = num_tokens * hidden_dim * tp_size * elem_size <= _ONE_SHOT_THRESHOLD
        name = "ONESHOT" if fits else "TWOSHOT"
    if name == "ONESHOT":
        return num_tokens * hidden_dim * tp_size * elem_size
    return 2 * math.ceil(num_tokens / tp_size) * tp_size * hidden_dim * elem_size


def _trtllm_fits(
    num_tokens: Any, hidden_dim: Any, world_size: Any, dtype: Any, metadata: Mapping[str, Any]
) -> bool:
    """The TRT-LLM workspace's metadata check (the same in every release from 0.6.0)."""
    if any(key not in metadata for key in _TRTLLM_CHECKED):
        return False
    wrong_world = world_size != metadata["tp_size"]
    too_large = num_tokens * hidden_dim > metadata["max_token_num"] * metadata["hidden_dim"]
    wrong_lamport = metadata["use_fp32_lamport"] != _is_float32(dtype)
    return not (wrong_world or too_large or wrong_lamport)


_TRTLLM_CHECKED = ("max_token_num", "tp_size", "hidden_dim", "use_fp32_lamport")
#: What ``destroy()`` deletes, per backend (the rest stays readable, as in the release).
_FREED = {
    "trtllm": ("ipc_handles", "workspace_tensor", "mem_handles", "metadata"),
    "mnnvl": (
        "buffer_flags",
        "uc_ptrs_dev",
        "uc_ptr_local",
        "mc_ptr",
        "handle",
        "mcast_buffer_handle",
        "ptrs",
        "tensor",
    ),
}


@dataclass
class _WorkspaceState:
    """What the fake knows about a workspace beyond its attributes."""

    backend: str | None
    checkpointable: bool = False
    attached: bool = True
    destroyed: bool = False


class _Model:
    """The behaviour of the imitated release's allreduce-fusion workspaces.

    Each fact is gated on the release that brought it; the facts come from reading each
    release's ``flashinfer/comm`` sources (``allreduce.py``, ``trtllm_ar.py``,
    ``trtllm_mnnvl_ar.py``, ``mnnvl.py``, ``mnnvl_cutedsl_ar.py``).
    """

    def __init__(self, kit: FakeFlashInfer) -> None:
        self.kit = kit
        self.version = kit.record.version
        #: 0.6.16 made the MNNVL backend refuse Confidential Computing, and the TRT-LLM
        #: workspace fall back to torch symmetric memory under it.
        self.confidential = kit.confidential_compute and self.version >= _V["0.6.16"]
        #: Confidential Computing has no NVLink multicast.
        self.multicast = kit.multicast and not kit.confidential_compute

    # -- facts ---------------------------------------------------------------------------

    @property
    def torch_symmetric_memory(self) -> bool:
        """0.6.10 .. 0.6.14 allocate both workspaces with torch symmetric memory."""
        return _V["0.6.10"] <= self.version < _V["0.6.15"]

    @property
    def allocation_needs_multicast(self) -> bool:
        """Up to 0.6.15.post1 a ``SymmDeviceMemory`` refuses a GPU without multicast even
        when it was asked for no multicast buffer (0.6.16 checks only when asked)."""
        return self.version < _V["0.6.16"]

    def _no_multicast(self) -> RuntimeError:
        return RuntimeError(
            f"fake flashinfer {self.kit.version}: its SymmDeviceMemory needs NVLink multicast, "
            "which the imitated GPUs do not support (fake_flashinfer(multicast=False) or "
            "confidential_compute=True)"
        )

    # -- the factory ---------------------------------------------------------------------

    def create(self, values: Mapping[str, Any]) -> Any:
        """``create_allreduce_fusion_workspace`` of the release."""
        args = _arguments(values, bound=None)
        backend: Any = args.get("backend")
        world_size: Any = args.get("world_size")
        options = {
            name: args[name] for name in self.kit._factory_options if args.get(name) is not None
        }
        if "mnnvl-cutedsl" in self.kit._workspace_classes:  # 0.7.2.post1
            if backend == "mnnvl-cutedsl":
                ignored = [
                    name for name in ("gpus_per_node", "comm_backend") if args.get(name) is not None
                ]
                if args.get("force_oneshot_support"):
                    ignored.append("force_oneshot_support")
                if ignored:
                    raise ValueError(f"backend='mnnvl-cutedsl' takes none of {', '.join(ignored)}")
                return self.build(
                    "mnnvl-cutedsl",
                    {
                        "tp_size": world_size,
                        "tp_rank": args.get("rank"),
                        "max_token_num": args.get("max_token_num"),
                        "hidden_dim": args.get("hidden_dim"),
                        "dtype": args.get("dtype"),
                        "group": args.get("group"),
                        **options,
                    },
                )
            if options:
                raise ValueError(
                    f"only backend='mnnvl-cutedsl' takes {', '.join(options)}; found {backend!r}"
                )
        if backend == "auto":
            suitable = []
            if world_size <= 16:
                suitable.append("trtllm")
            if self.version < _V["0.6.16"] or self.multicast:
                # Up to 0.6.15.post1 MNNVL is always suitable; 0.6.16 asks every rank
                # whether its GPU supports multicast.
                suitable.append("mnnvl")
            if not suitable:
                raise ValueError(f"no backend suits world_size={world_size!r}")
            backend = "mnnvl" if "mnnvl" in suitable else suitable[0]
        common = {
            "max_token_num": args.get("max_token_num"),
            "hidden_dim": args.get("hidden_dim"),
            "dtype": args.get("dtype"),
        }
        if backend == "trtllm":
            return self.build(
                "trtllm",
                {"tp_size": world_size, "tp_rank": args.get("rank"), **common},
            )
        if backend == "mnnvl":
            if self.confidential:
                raise ValueError(
                    "the mnnvl backend needs NVLink multicast, which Confidential Computing "
                    "does not have; use backend='trtllm'"
                )
            buffer_size = None
            if args.get("force_oneshot_support"):
                buffer_size = _mnnvl_required(
                    world_size,
                    common["max_token_num"],
                    common["hidden_dim"],
                    common["dtype"],
                    _Strategy.ONESHOT,
                )
            return self.build(
                "mnnvl",
                {
                    "world_size": world_size,
                    "rank": args.get("rank"),
                    "tp_size": world_size,
                    "tp_rank": args.get("rank"),
                    "max_num_tokens": common["max_token_num"],
                    "hidden_dim": common["hidden_dim"],
                    "dtype": common["dtype"],
                    "buffer_size_in_bytes": buffer_size,
                },
            )
        raise RuntimeError(f"fake flashinfer {self.kit.version}: unknown backend {backend!r}")

    def build(self, backend: str, params: Mapping[str, Any]) -> Any:
        where = self.kit._workspace_classes.get(backend)
        cls: Any = _FallbackWorkspace
        if where is not None:
            cls = getattr(importlib.import_module(where[0]), where[1])
        workspace = object.__new__(cls)
        if backend == "mnnvl-cutedsl":
            params = {**_init_defaults(cls), **params}
        self.setup(workspace, backend, params)
        return workspace

    # -- construction --------------------------------------------------------------------

    def setup(self, workspace: Any, backend: str, params: Mapping[str, Any]) -> None:
        """Give ``workspace`` what the release's ``__init__`` for ``backend`` gives it."""
        state = _WorkspaceState(backend or None)
        if backend == "trtllm":
            values = self._trtllm(params, state)
        elif backend == "mnnvl":
            values = self._mnnvl(params, state)
        elif backend == "mnnvl-cutedsl":
            values = self._cutedsl(params)
        else:  # the base class
            values = {"world_size": params.get("world_size"), "rank": params.get("rank")}
        values.setdefault("_destroyed", False)
        recorded: tuple[str, ...] | None = getattr(type(workspace), "_fi_attributes", None)
        if recorded is not None:
            values = {name: values.get(name) for name in recorded} | {
                "_destroyed": values["_destroyed"]
            }
        vars(workspace)["_fi_state"] = state
        vars(workspace)["destroyed"] = False
        _assign(workspace, values)
        if backend and not hasattr(type(workspace), "backend"):
            vars(workspace)["backend"] = backend  # files recorded before schema 2

    def _trtllm(self, params: Mapping[str, Any], state: _WorkspaceState) -> dict[str, Any]:
        tp_size: Any = params.get("tp_size")
        tp_rank: Any = params.get("tp_rank")
        max_token_num: Any = params.get("max_token_num")
        hidden_dim: Any = params.get("hidden_dim")
        fp32 = _is_float32(params.get("dtype"))
        # 0.6.16: use_symm_dev_mem = not is_confidential_compute() (True before).
        symmetric = not self.confidential
        needs_multicast = self.allocation_needs_multicast and not self.torch_symmetric_memory
        if symmetric and needs_multicast and not self.multicast:
            raise self._no_multicast()
        # 0.7.2 sizes the two-shot buffer by the element size (fp16 before).
        elem_size = 4 if fp32 and self.version >= _V["0.7.2"] else 2
        buffer_size = tp_size * max_token_num * hidden_dim * elem_size
        flag_size = tp_size * _BARRIER_FLAGS * 4
        lamport_comm_size = tp_size * max_token_num * hidden_dim * (4 if fp32 else 2)
        lamport_comm_size = min(lamport_comm_size, _MAX_COMM_SIZE)
        metadata: dict[str, Any] = {
            "tp_rank": tp_rank,
            "tp_size": tp_size,
            "max_token_num": max_token_num,
            "hidden_dim": hidden_dim,
            "use_fp32_lamport": fp32,
            "buffer_size": buffer_size,
            "flag_size": flag_size,
            "lamport_comm_size": lamport_comm_size,
            "lamport_buffer_size": lamport_comm_size * 3,
        }
        if symmetric and self.version >= _V["0.6.15"]:
            metadata["control_flag_ptr"] = next(_POINTERS)  # 0.6.15+
        ipc_handles = [[next(_POINTERS) for _ in range(_count(tp_size))] for _ in range(3)]
        tensor = StandIn("workspace_tensor")
        mem_handles: list[Any] = [StandIn("mem_handle") for _ in range(3)] if symmetric else []
        internal: tuple[Any, ...] = (ipc_handles, tensor, mem_handles, metadata)
        if not symmetric:
            internal = (ipc_handles, tensor, metadata)
        # Checkpointing needs SymmDeviceMemory handles (not torch symmetric memory).
        state.checkpointable = symmetric and not self.torch_symmetric_memory
        return {
            "world_size": tp_size,
            "rank": tp_rank,
            "_internal_workspace": internal,
            "ipc_handles": ipc_handles,
            "workspace_tensor": tensor,
            "mem_handles": mem_handles,
            "metadata": metadata,
        }

    def _mnnvl(self, params: Mapping[str, Any], state: _WorkspaceState) -> dict[str, Any]:
        tp_size: Any = params.get("tp_size")
        tp_rank: Any = params.get("tp_rank")
        hidden_dim: Any = params.get("hidden_dim")
        dtype: Any = params.get("dtype")
        max_num_tokens: Any = params.get("max_num_tokens")
        requested: Any = params.get("buffer_size_in_bytes")
        if requested is None:
            if max_num_tokens is None or hidden_dim is None or dtype is None:
                raise AssertionError(
                    "max_num_tokens, hidden_dim and dtype are needed without buffer_size_in_bytes"
                )
            elem_size = _itemsize(dtype)
            oneshot_tokens = min(
                _ONE_SHOT_THRESHOLD // (tp_size * elem_size * hidden_dim), max_num_tokens
            )
            one_shot = _mnnvl_required(
                tp_size, oneshot_tokens, hidden_dim, dtype, _Strategy.ONESHOT
            )
            two_shot = _mnnvl_required(
                tp_size, max_num_tokens, hidden_dim, dtype, _Strategy.TWOSHOT
            )
            requested = max(one_shot, two_shot)
        # 0.6.18 aligns the buffer to the two-shot stages (2 x 16 bytes); 16 bytes before.
        alignment = 32 if self.version >= _V["0.6.18"] else 16
        if self.version >= _V["0.6.18"]:
            requested = _round_up(requested, alignment)
        if requested > _UINT32_MAX:
            raise ValueError(f"an MNNVL buffer of {requested} bytes exceeds UINT32_MAX")
        total = requested * _LAMPORT_BUFFERS
        mc_ptr = next(_POINTERS)
        if self.torch_symmetric_memory:
            allocated = total // 4 * 4  # float32 elements of torch symmetric memory
            if not self.multicast:
                mc_ptr = 0  # torch reports a null multicast pointer
        else:
            if not self.multicast:
                raise self._no_multicast()
            allocated = _round_up(total + _SIGNAL_PAD, _GRANULARITY) - _SIGNAL_PAD
        buffer_size_bytes = allocated // _LAMPORT_BUFFERS // alignment * alignment
        # Checkpointing is 0.6.15+, on SymmDeviceMemory.
        state.checkpointable = not self.torch_symmetric_memory
        values: dict[str, Any] = {
            "world_size": params.get("world_size", tp_size),
            "rank": tp_rank,
            "tp_size": tp_size,
            "buffer_size_bytes": buffer_size_bytes,
            "workspace_size_bytes": buffer_size_bytes * _LAMPORT_BUFFERS,
            "buffer_flags": StandIn("buffer_flags"),
            "uc_ptrs_dev": next(_POINTERS),
            "uc_ptr_local": next(_POINTERS),
            "mc_ptr": mc_ptr,
        }
        pointers = [next(_POINTERS) for _ in range(_count(tp_size))]
        if self.version < _V["0.6.10"]:
            values["mcast_buffer_handle"] = StandIn("mcast_buffer_handle")
        elif self.torch_symmetric_memory:
            values |= {"ptrs": pointers, "tensor": StandIn("tensor"), "handle": StandIn("handle")}
        else:
            values |= {"ptrs": pointers, "handle": StandIn("handle")}
        return values

    def _cutedsl(self, params: Mapping[str, Any]) -> dict[str, Any]:
        tp_size: Any = params.get("tp_size")
        tp_rank: Any = params.get("tp_rank")
        if not 0 <= tp_rank < tp_size:
            raise ValueError(f"tp_rank must be in [0, {tp_size}); found {tp_rank!r}")
        values = {key: value for key, value in params.items() if key not in ("tp_size", "tp_rank")}
        return {"world_size": tp_size, "rank": tp_rank, "_protocols": {}, **values}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and 0 <= value <= 1024 else 0


def _init_defaults(cls: Any) -> dict[str, Any]:
    """The literal defaults of a generated class's ``__init__``."""
    try:
        parameters = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: _actual(p.default) for p in parameters if p.default is not p.empty}


class _FallbackWorkspace:
    """Used only if a release returns a workspace class that was not recorded."""

    destroyed = False

    def destroy(self) -> None:
        self.destroyed = True


def _new_workspace(token: str, values: Mapping[str, Any]) -> Any:
    """``create_allreduce_fusion_workspace`` (called by generated code)."""
    return _kit(token)._model().create(values)


def _init_workspace(token: str, workspace: Any, backend: str, values: Mapping[str, Any]) -> None:
    """A workspace class's ``__init__`` (called by generated code)."""
    args = _arguments(values)
    mapping = args.pop("mapping", None)
    if mapping is not None:  # the MNNVL workspace takes a Mapping
        world_size = getattr(mapping, "world_size", None)
        rank = getattr(mapping, "rank", None)
        tp_size = getattr(mapping, "tp_size", None)
        tp_rank = getattr(mapping, "tp_rank", None)
        args |= {
            "world_size": world_size,
            "rank": rank,
            "tp_size": world_size if tp_size is None else tp_size,
            "tp_rank": rank if tp_rank is None else tp_rank,
        }
    _kit(token)._model().setup(workspace, backend, args)


def _state(workspace: Any) -> _WorkspaceState | None:
    state = vars(workspace).get("_fi_state")
    return state if isinstance(state, _WorkspaceState) else None


def _sufficient(workspace: Any, values: Mapping[str, Any]) -> Any:
    """``is_buffer_size_sufficient`` (called by generated code)."""
    state = _state(workspace)
    if state is None or state.backend is None:
        return None  # the abstract method of the base class
    args = _arguments(values)
    tp_size, num_tokens = args.get("tp_size"), args.get("num_tokens")
    hidden_dim, dtype = args.get("hidden_dim"), args.get("dtype")
    if state.backend == "trtllm":
        return _trtllm_fits(num_tokens, hidden_dim, tp_size, dtype, workspace.metadata)
    if state.backend == "mnnvl":
        strategy = values.get("strategy", _Strategy.AUTO)
        required = _mnnvl_required(tp_size, num_tokens, hidden_dim, dtype, strategy)
        return not required > workspace.buffer_size_bytes
    return (
        tp_size == workspace.world_size
        and num_tokens <= workspace.max_token_num
        and hidden_dim == workspace.hidden_dim
        and dtype == workspace.dtype
    )


def _required_bytes(values: Mapping[str, Any]) -> Any:
    """MNNVL's ``get_required_buffer_size_bytes`` (called by generated code)."""
    args = dict(values)
    return _mnnvl_required(
        args.get("tp_size"),
        args.get("num_tokens"),
        args.get("hidden_dim"),
        args.get("dtype"),
        args.get("strategy", _Strategy.AUTO),
    )


def _checkpoint(workspace: Any, action: str) -> None:
    """``checkpoint_prepare`` / ``checkpoint_restore`` (called by generated code)."""
    state = _state(workspace)
    if state is None:
        return
    if state.destroyed:
        raise AttributeError(f"{type(workspace).__name__!r} object was destroyed")
    if not state.checkpointable:
        raise NotImplementedError(
            "checkpointing needs SymmDeviceMemory handles; this workspace is backed by torch "
            "symmetric memory"
        )
    state.attached = action == "restore"


def _destroy_workspace(workspace: Any) -> None:
    """A workspace's idempotent ``destroy`` (called by generated code)."""
    state = _state(workspace)
    if vars(workspace).get("_destroyed") or (state is not None and state.destroyed):
        return
    if state is not None:
        for name in _FREED.get(state.backend or "", ()):
            vars(workspace).pop(name, None)
        state.destroyed = True
    vars(workspace)["_destroyed"] = True
    vars(workspace)["destroyed"] = True


# ----------------------------------------------------------------------- what to generate


@dataclass
class _Entry:
    """One object of the fake: what it is, where the release defines it, where it is bound."""

    handle: str
    name: str
    defined_in: str
    kind: str
    function: FunctionRecord | None = None
    cls: ClassRecord | None = None
    members: Mapping[str, Any] | None = None
    bindings: dict[str, set[str]] = field(default_factory=dict)
    #: For a workspace class: the backend it serves ("" for the base class).
    workspace: str | None = None
    #: A module-level function the release gives an object as ``self``.
    takes_self: bool = False
    #: For an attention family: its name, and whether it is (or derives from) the decode
    #: wrapper, whose ``plan`` checks tensor cores.
    family: str | None = None
    decode: bool = False
    #: For a name imported from outside the release: the module it comes from, and
    #: whether the name is that module itself (``import os``).
    outside: str | None = None
    outside_module: bool = False


_STRONGER = {"value": 0, "module": 1, "function": 2, "class": 3, "enum": 4}


def _merge_classes(old: ClassRecord | None, new: ClassRecord | None) -> ClassRecord | None:
    if old is None or new is None:
        return old or new
    methods = dict(old.methods)
    for name, method in new.methods.items():
        if methods.get(name) is None:
            methods[name] = method
    return dataclasses.replace(
        old,
        methods=methods,
        bases=old.bases or new.bases,
        module=old.module or new.module,
        plan_forwards_to=old.plan_forwards_to or new.plan_forwards_to,
        bcast_root_is_group_local=(
            new.bcast_root_is_group_local
            if old.bcast_root_is_group_local is None
            else old.bcast_root_is_group_local
        ),
        exported=old.exported if old.exported is not None else new.exported,
        attributes=old.attributes or new.attributes,
        family_bases=old.family_bases or new.family_bases,
        aliases=old.aliases or new.aliases,
    )


class _Registry:
    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], _Entry] = {}
        #: Modules a module-kind name binds: module -> {public name: target module}.
        self.module_names: dict[str, dict[str, str]] = {}

    def add(
        self,
        defined_in: str,
        name: str,
        kind: str,
        *,
        function: FunctionRecord | None = None,
        cls: ClassRecord | None = None,
        members: Mapping[str, Any] | None = None,
    ) -> _Entry:
        key = (defined_in, name)
        entry = self.entries.get(key)
        if entry is None:
            entry = _Entry(f"_fi_{len(self.entries)}", name, defined_in, kind)
            self.entries[key] = entry
            entry.bindings.setdefault(defined_in, set()).add(name)
        elif _STRONGER[kind] > _STRONGER[entry.kind]:
            entry.kind = kind
        entry.function = entry.function or function
        entry.cls = _merge_classes(entry.cls, cls)
        entry.members = entry.members if entry.members is not None else members
        return entry

    def bind(self, entry: _Entry, module: str, name: str) -> None:
        entry.bindings.setdefault(module, set()).add(name)

    def classes_by_name(self) -> dict[str, list[_Entry]]:
        """Each name a class or enum is defined or bound under -> those entries."""
        found: dict[str, list[_Entry]] = {}
        for entry in self.entries.values():
            if entry.kind in ("class", "enum"):
                for name in {entry.name} | {n for names in entry.bindings.values() for n in names}:
                    found.setdefault(name, []).append(entry)
        return found

    def enums_by_name(self) -> dict[str, _Entry]:
        """Each name an enum (``enum.Enum``) is defined or bound under -> its entry."""
        return {
            name: entries[0]
            for name, entries in self.classes_by_name().items()
            if _enum_base(entries[0]) is not None
        }


def _inside(module: str | None) -> bool:
    return module is not None and (module == FLASHINFER or module.startswith(FLASHINFER + "."))


def _workspace_backends(record: ReleaseRecord) -> dict[str, str]:
    """Workspace class name -> the backend the factory builds it for ("" for the base).

    Read from the record: the class the factory's return annotation names is the base;
    the concrete class defined next to the factory is TRT-LLM's, the one the factory
    builds but ``flashinfer.comm`` does not export is MNNVL CuTe DSL's (0.7.2.post1), and
    the other exported one is MNNVL's.
    """
    factory = record.comm_function(UNIFIED_FACTORY.key)
    if factory is None:
        return {}
    backends: dict[str, str] = {}
    for name in record.workspace_classes:
        cls = record.comm_class(name)
        if cls is None:
            continue
        if name in WORKSPACE.names:
            backends[name] = ""
        elif cls.exported is False:
            backends[name] = "mnnvl-cutedsl"
        elif cls.defined_in == factory.defined_in:
            backends[name] = "trtllm"
        else:
            backends[name] = "mnnvl"
    return backends


def _collect(record: ReleaseRecord) -> _Registry:
    """Every object of the fake, from the record."""
    registry = _Registry()
    decode = _decode_families(record)
    families = [(name, record.attention_family(name)) for name in record.attention_families]
    for name, wrapper in [*sorted(record.attention.items()), *families]:
        if wrapper is not None:
            entry = registry.add(wrapper.defined_in, name, "class", cls=wrapper)
            entry.family = name
            entry.decode = name in decode
            registry.bind(entry, FLASHINFER, name)
    if record.comm_exists:
        for name, func in sorted(record.comm_functions.items()):
            if func is not None:
                entry = registry.add(func.defined_in, func.name, "function", function=func)
                registry.bind(entry, COMM, name)
        for name, constants in sorted(record.comm_enums.items()):
            if constants is not None:
                entry = registry.add(constants.defined_in, name, "class", members=constants.members)
                registry.bind(entry, COMM, name)
        backends = _workspace_backends(record)
        for name, cls in sorted(record.comm_classes.items()):
            if cls is None:
                continue
            entry = registry.add(cls.defined_in, name, "class", cls=cls)
            entry.workspace = backends.get(name)
            if symbol_named(name) is TORCH_DIST_BACKEND:
                registry.bind(entry, cls.module or cls.defined_in, name)
            elif cls.exported is not False:
                registry.bind(entry, COMM, name)
        for module in NAMED_MODULES:
            for name, found in sorted(record.public_names(module).items()):
                _add_name(registry, module, name, found)
    _add_strategy_enum(registry)
    plan = record.fast_decode_plan
    if plan is not None:
        entry = registry.add(plan.defined_in, plan.name, "function", function=plan)
        entry.takes_self = True
        # Every release that has it (0.4.0+) also exports it from the top level.
        registry.bind(entry, FLASHINFER, plan.name)
    return registry


def _decode_families(record: ReleaseRecord) -> set[str]:
    """The decode wrapper and the attention families derived from it (``family_bases``)."""
    found = {DECODE.key}
    grown = True
    while grown:
        grown = False
        for name in record.attention_families:
            cls = record.attention_family(name)
            if name not in found and cls is not None and found & set(cls.family_bases):
                found.add(name)
                grown = True
    return found


def _planning_methods(owner: ClassRecord) -> set[str]:
    """The methods of an attention family where the kernel boundary is: ``plan`` and a
    ``begin_forward`` that is no alias of it, or the method their ``**kwargs`` go to."""
    found = set()
    for name in _PLANNING:
        method = owner.method(name)
        if method is None or name in owner.aliases:
            continue
        target = method.forwards_kwargs_to
        forwarded = _forward_source(owner, method) is not None and target is not None
        found.add(target if forwarded and target is not None else name)
    return found


def _add_strategy_enum(registry: _Registry) -> None:
    """The MNNVL strategy enum its workspace's ``strategy=`` defaults to, when no recorded
    module lists it (``flashinfer.comm`` does not export it): defined next to the
    workspace, with the members every release from 0.6.0 gives it."""
    known = {
        name
        for entry in registry.entries.values()
        if entry.kind in ("class", "enum")
        for name in {entry.name} | {n for names in entry.bindings.values() for n in names}
    }
    for entry in list(registry.entries.values()):
        if entry.workspace != "mnnvl" or entry.cls is None:
            continue
        for method in entry.cls.methods.values():
            parameter = None if method is None else method.parameter("strategy")
            if parameter is None or parameter.default is None:
                continue
            try:
                node = ast.parse(parameter.default, mode="eval").body
            except SyntaxError:
                continue
            if not isinstance(node, ast.Attribute) or not isinstance(node.value, ast.Name):
                continue
            name = node.value.id
            if name in known:
                continue
            record = ClassRecord(name, entry.defined_in, ("Enum",), {})
            members = {member.name: member.value for member in _Strategy}
            registry.add(entry.defined_in, name, "enum", cls=record, members=members)
            known.add(name)


def _add_name(registry: _Registry, module: str, name: str, found: Any) -> None:
    kind, defined_in = found.kind, found.defined_in
    if kind == "module" and _inside(defined_in):
        registry.module_names.setdefault(module, {})[name] = defined_in
        return
    if not _inside(defined_in):
        # From outside the release: the object itself where that imports nothing new.
        entry = registry.add(module, name, "value")
        entry.outside = defined_in
        entry.outside_module = kind == "module"
        registry.bind(entry, module, name)
        return
    if kind == "module":
        kind, defined_in = "value", module
    own = name
    if kind == "function" and found.function is not None:
        own = found.function.name
    members = found.enum.members if kind == "enum" and found.enum is not None else None
    entry = registry.add(
        defined_in, own, kind, function=found.function, cls=found.cls, members=members
    )
    registry.bind(entry, module, name)


# -------------------------------------------------------------------------- generation


def _kinds(func: FunctionRecord) -> str:
    return repr({p.name: p.kind for p in func.parameters})


def _forward_source(owner: ClassRecord, func: FunctionRecord) -> list[str] | None:
    """The body of a method whose ``**kwargs`` is forwarded to ``self.<target>(...)``.

    Written in the shape real releases use (0.7.2.post1's ``_merge_deprecated_plan_kwargs``)
    so that the probe's forwarding analysis can prove it: the keywords are copied with
    ``dict(kwargs)``, extra positionals are added by name to the target's parameters
    after the named ones (only if absent: the add-only idiom), and recorded drops are
    reproduced with ``pop`` (or ``clear`` for any keyword).
    """
    target_name = func.forwards_kwargs_to
    if target_name is None or func.var_keyword is None:
        return None
    target = owner.method(target_name)
    if target is None:
        return None
    target_keywords = set(target.keyword_names)
    named = [p.name for p in func.parameters[1:] if p.accepts_keyword and p.name in target_keywords]
    var_positional = next((p.name for p in func.parameters if p.kind == "VAR_POSITIONAL"), None)
    lines = [f"_fi_merged = dict({func.var_keyword})"]
    if var_positional is not None:
        extra = tuple(target.keyword_names[1:])[len(named) :]
        lines += [
            f"for _fi_name, _fi_value in zip({extra!r}, {var_positional}):",
            "    if _fi_name in _fi_merged:",
            f"        raise TypeError(f'{func.qualname}() got multiple values for {{_fi_name!r}}')",
            "    _fi_merged[_fi_name] = _fi_value",
        ]
    if "*" in func.forwards_kwargs_drops:
        lines.append("_fi_merged.clear()")
    else:
        lines += [f"_fi_merged.pop({name!r}, None)" for name in func.forwards_kwargs_drops]
    arguments = ", ".join([*(f"{name}={name}" for name in named), "**_fi_merged"])
    return [*lines, f"return self.{target_name}({arguments})"]


def _values_source(func: FunctionRecord) -> str:
    """``dict(locals())`` spelled out, with ``**kwargs`` copied (a forwarder's analysis
    must see that nothing but the forwarding call can change the keywords)."""
    items = [
        f"{p.name!r}: dict({p.name})" if p.kind == "VAR_KEYWORD" else f"{p.name!r}: {p.name}"
        for p in func.parameters
    ]
    return "{" + ", ".join(items) + "}"


def _deprecation_message(decorators: Sequence[str]) -> str | None:
    """The message of a ``@deprecated("...")`` decorator (typing_extensions/warnings)."""
    for text in decorators:
        try:
            node = ast.parse(text, mode="eval").body
        except SyntaxError:
            continue
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = ast.unparse(node.func).rpartition(".")[2]
        if name != "deprecated":
            continue
        try:
            message = ast.literal_eval(node.args[0])
        except ValueError:
            return "deprecated"
        return message if isinstance(message, str) else "deprecated"
    return None


def _method_kind(func: FunctionRecord) -> str:
    """``"property"``, ``"static"``, ``"class"`` or ``"method"``, from the decorators."""
    for text in func.decorators:
        name = text.partition("(")[0].rpartition(".")[2]
        if name in ("property", "cached_property"):
            return "property"
        if name == "staticmethod":
            return "static"
        if name == "classmethod":
            return "class"
    return "method"


_ENUM_BASES = {
    "Enum": "_enum.Enum",
    "IntEnum": "_enum.IntEnum",
    "IntFlag": "_enum.IntFlag",
    "Flag": "_enum.Flag",
}
_INT_ENUMS = ("_enum.IntEnum", "_enum.IntFlag", "_enum.Flag")


_OPERATORS: Mapping[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.LShift: lambda a, b: a << b if 0 <= b < 256 else None,
    ast.RShift: lambda a, b: a >> b,
    ast.BitOr: lambda a, b: a | b,
    ast.BitAnd: lambda a, b: a & b,
    ast.BitXor: lambda a, b: a ^ b,
}


def _arithmetic(node: ast.expr) -> Any:
    """The value of an integer expression of literals (``1 << 4``), else None."""
    if isinstance(node, ast.Constant):
        value = node.value
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Invert):
        operand = _arithmetic(node.operand)
        if operand is None:
            return None
        return -operand if isinstance(node.op, ast.USub) else ~operand
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        if left is None or right is None:
            return None
        try:
            return _OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError:
            return None
    return None


def _member_value(recorded: Any) -> Any:
    """A recorded member value: the record keeps a value that is not a literal as source
    text (``"1 << 1"``); an integer expression of literals is computed, as Python would."""
    if not isinstance(recorded, str):
        return recorded
    try:
        node = ast.parse(recorded, mode="eval").body
    except SyntaxError:
        return recorded
    if not isinstance(node, ast.BinOp | ast.UnaryOp):
        return recorded
    value = _arithmetic(node)
    return recorded if value is None else value


def _enum_base(entry: _Entry) -> str | None:
    """The :mod:`enum` class a recorded enum derives from; None for a class that only
    holds constants (``AllReduceFusionPattern``: the record calls both kinds "enum")."""
    if entry.kind != "enum" or entry.cls is None:
        return None
    for base in entry.cls.bases:
        name = base.rpartition(".")[2]
        if name in _ENUM_BASES:
            return _ENUM_BASES[name]
        if name == "StrEnum":
            return "str, _enum.Enum"
    return None


class _Writer:
    """Writes one generated module: the objects the release defines there, then the names
    it binds there that are defined elsewhere."""

    def __init__(self, registry: _Registry, module: str) -> None:
        self.registry = registry
        self.module = module
        self.defaults: list[str] = []
        self.lines: list[str] = []
        self.imports: dict[str, str] = {}
        self.written: set[str] = set()
        self.by_name = registry.classes_by_name()
        self.enums = registry.enums_by_name()

    def _reference(self, entry: _Entry) -> str:
        """How this module's code names ``entry``: its name, or an import of it."""
        if entry.defined_in == self.module:
            return entry.name
        alias = entry.handle
        self.imports[alias] = f"from {entry.defined_in} import {entry.name} as {alias}"
        return alias

    # -- signatures ----------------------------------------------------------------------

    def _default(self, source: str) -> str:
        """The expression a recorded default becomes: an enum member, else a sentinel."""
        try:
            node = ast.parse(source, mode="eval").body
        except SyntaxError:
            node = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found = self.enums.get(node.value.id)
            if found is not None and node.attr in (found.members or {}):
                return f"{self._reference(found)}.{node.attr}"
        return f"_fake.Default({source!r})"

    def _signature(self, params: Sequence[ParameterRecord]) -> tuple[str, dict[str, str]]:
        """Parameter list source (each default ``_D[<index>]``) and the resolved defaults."""
        parts: list[str] = []
        resolved: dict[str, str] = {}
        positional_only_done = False
        star_written = False
        for index, param in enumerate(params):
            if param.kind != "POSITIONAL_ONLY" and not positional_only_done:
                if index > 0 and params[index - 1].kind == "POSITIONAL_ONLY":
                    parts.append("/")
                positional_only_done = True
            text = param.name
            if param.annotation is not None:
                text += f": {param.annotation}"
            if param.kind == "VAR_POSITIONAL":
                text = "*" + text
                star_written = True
            elif param.kind == "VAR_KEYWORD":
                text = "**" + text
            elif param.kind == "KEYWORD_ONLY" and not star_written:
                parts.append("*")
                star_written = True
            if param.default is not None:
                expression = self._default(param.default)
                self.defaults.append(expression)
                slot = f"_D[{len(self.defaults) - 1}]"
                if not expression.startswith("_fake.Default("):
                    resolved[param.name] = slot
                text += f" = {slot}"
            parts.append(text)
        if params and params[-1].kind == "POSITIONAL_ONLY":
            parts.append("/")
        return ", ".join(parts), resolved

    def function(
        self,
        func: FunctionRecord,
        call_name: str,
        body: list[str],
        indent: str,
        *,
        name: str | None = None,
        values: str = "dict(locals())",
        bound: str | None = None,
        decorator: str | None = None,
    ) -> list[str]:
        params, resolved = self._signature(func.parameters)
        lines = []
        if decorator is not None:
            lines.append(f"{indent}@{decorator}")
        message = _deprecation_message(func.decorators)
        if message is not None:
            # The real release warns before binding the arguments; so does the fake.
            lines.append(f"{indent}@_fake._deprecated({message!r})")
        lines.append(f"{indent}def {name or func.name}({params}):")
        inner = indent + "    "
        defaults = "{" + ", ".join(f"{k!r}: {v}" for k, v in resolved.items()) + "}"
        lines.append(f"{inner}__values = {values}")
        lines.append(
            f"{inner}__call = _fake._kit(_TOKEN)._record({call_name!r}, __values, "
            f"{_kinds(func)}, {bound!r}, {defaults})"
        )
        lines += [f"{inner}{line}" for line in body]
        return lines

    # -- objects -------------------------------------------------------------------------

    def _function_body(self, entry: _Entry, func: FunctionRecord) -> list[str]:
        names = {entry.name} | {n for names in entry.bindings.values() for n in names}
        symbols = [symbol_named(name) for name in sorted(names)]

        def named(symbol: Any) -> bool:
            return any(found is symbol for found in symbols)

        if named(UNIFIED_FACTORY):
            return ["return _fake._new_workspace(_TOKEN, __values)"]
        if named(LEGACY_FACTORY):
            return [
                "if __call.arguments.get('create_metadata'):",
                "    return [], _fake.StandIn('workspace_tensor'), {}",
                "return [], _fake.StandIn('workspace_tensor')",
            ]
        if named(UNIFIED_FUSION):
            return ["return __call.arguments.get('output', __call.arguments.get('input'))"]
        if entry.takes_self and func.parameters:
            wrapper = func.parameters[0].name
            return [
                f"return _fake._plan_kernel(_TOKEN, {wrapper}, __values, __call, "
                f"{func.var_keyword!r}, {FAST_DECODE_PLAN.key!r})"
            ]
        return ["return None"]

    def _method_body(self, entry: _Entry, owner: ClassRecord, func: FunctionRecord) -> list[str]:
        forward = _forward_source(owner, func)
        if forward is not None:
            return forward
        name = func.name
        if entry.family is not None and name in _planning_methods(owner) and func.parameters:
            this = func.parameters[0].name
            return [
                f"return _fake._plan_kernel(_TOKEN, {this}, __values, __call, {func.var_keyword!r})"
            ]
        if entry.workspace is not None:
            workspace = {
                "__init__": [f"_fake._init_workspace(_TOKEN, self, {entry.workspace!r}, __values)"],
                "is_buffer_size_sufficient": ["return _fake._sufficient(self, __values)"],
                "get_required_buffer_size_bytes": ["return _fake._required_bytes(__values)"],
                "checkpoint_prepare": ["return _fake._checkpoint(self, 'prepare')"],
                "checkpoint_restore": ["return _fake._checkpoint(self, 'restore')"],
                "destroy": ["return _fake._destroy_workspace(self)"],
            }.get(name)
            if workspace is not None:
                return workspace
        if symbol_named(entry.name) is TORCH_DIST_BACKEND and name == "bcast":
            lines = []
            if owner.bcast_root_is_group_local:
                # Mirrors the recorded fact: this release maps a group-local root.
                lines.append("_global_root = _fake.get_global_rank(__call.arguments)")
            data = func.parameters[1].name if len(func.parameters) > 1 else "None"
            return [*lines, f"return {data}"]
        if name == "__init__":
            attributes = tuple(owner.attributes) or None
            return [f"_fake._init_object(_TOKEN, self, {attributes!r}, __values)"]
        if name == "destroy":
            return [
                "if self.destroyed:",
                "    return None",
                "self.destroyed = True",
                "return None",
            ]
        return ["return None"]

    def _class(self, entry: _Entry) -> list[str]:
        owner = entry.cls or ClassRecord(entry.name, entry.defined_in, (), {})
        enum_base = _enum_base(entry)
        if enum_base is not None:
            lines = [f"class {entry.name}({enum_base}):"]
        else:
            handles = [self._reference(base) for base in self._bases(entry, owner)]
            bases = f"(*_fake._bases({', '.join(handles)}))" if handles else ""
            lines = [f"class {entry.name}{bases}:"]
            lines.append("    destroyed = False")
            attributes = tuple(owner.attributes) or None
            lines.append(f"    _fi_attributes = {attributes!r}")
            if entry.family is not None:
                lines.append(f"    _fi_family = {entry.family!r}")
                lines.append(f"    _fi_decode = {entry.decode!r}")
        members = entry.members or {}
        aliases = owner.aliases
        int_valued = enum_base in _INT_ENUMS
        for index, (member, recorded) in enumerate(members.items()):
            if not member.isidentifier() or member.startswith("_"):
                continue
            value = _member_value(recorded)
            if int_valued and (not isinstance(value, int) or isinstance(value, bool)):
                value = 1 << (index + 16)
            lines.append(f"    {member} = {value!r}")
        for method_name in sorted(owner.methods):
            method = owner.methods[method_name]
            if method is None or method_name in members or method_name in aliases:
                continue
            if enum_base is not None and method_name.startswith("__"):
                continue
            lines += ["", *self._method(entry, owner, method_name, method)]
        for alias, target in sorted(aliases.items()):
            if alias not in members and enum_base is None:
                lines += ["", f"    {alias} = {target}"]
        if enum_base is None and owner.methods.get("__init__") is None and owner.attributes:
            # A class without a recorded __init__ (a dataclass): construction by keyword.
            lines += [
                "",
                "    def __init__(self, *args, **kwargs):",
                f"        _fake._kit(_TOKEN)._record({entry.name + '.__init__'!r}, "
                "{'self': self, 'args': args, 'kwargs': kwargs}, "
                "{'self': 'POSITIONAL_OR_KEYWORD', 'args': 'VAR_POSITIONAL', "
                "'kwargs': 'VAR_KEYWORD'}, 'self')",
                f"        _fake._init_object(_TOKEN, self, {tuple(owner.attributes)!r}, kwargs)",
            ]
        if len(lines) == 1:
            lines.append("    pass")
        return lines

    def _method(
        self, entry: _Entry, owner: ClassRecord, method_name: str, method: FunctionRecord
    ) -> list[str]:
        kind = _method_kind(method)
        call_name = f"{entry.name}.{method_name}"
        if kind == "property":
            return [
                "    @property",
                f"    def {method_name}(self):",
                f"        return _fake._property(self, {method_name!r})",
                "",
                f"    @{method_name}.setter",
                f"    def {method_name}(self, value):",
                f"        _fake._set_property(self, {method_name!r}, value)",
            ]
        body = self._method_body(entry, owner, method)
        values = "dict(locals())"
        if _forward_source(owner, method) is not None:
            values = _values_source(method)
        first = method.parameters[0].name if method.parameters else None
        bound = None if kind == "static" else first
        decorator = {"static": "staticmethod", "class": "classmethod"}.get(kind)
        return self.function(
            method,
            call_name,
            body,
            "    ",
            name=method_name,
            values=values,
            bound=bound,
            decorator=decorator,
        )

    def _bases(self, entry: _Entry, owner: ClassRecord) -> list[_Entry]:
        """The recorded base classes of ``entry`` that the fake has."""
        found: list[_Entry] = []
        for base in owner.bases:
            name = base.rpartition(".")[2].partition("[")[0]
            candidates = [c for c in self.by_name.get(name, []) if c is not entry]
            if not candidates:
                continue
            same_module = [c for c in candidates if c.defined_in == entry.defined_in]
            chosen = (same_module or candidates)[0]
            if chosen not in found:
                found.append(chosen)
        return found

    def _emit(self, entry: _Entry, chunk: list[str], start: int) -> None:
        if len(self.defaults) > start:
            self.lines.append(f"_D.extend(({', '.join(self.defaults[start:])},))")
        self.lines += [*chunk, ""]
        self.written.add(entry.handle)

    def _write_class(self, entry: _Entry, visiting: set[str]) -> None:
        if entry.handle in self.written or entry.handle in visiting:
            return
        visiting.add(entry.handle)
        owner = entry.cls or ClassRecord(entry.name, entry.defined_in, (), {})
        for base in self._bases(entry, owner):
            if base.defined_in == self.module:
                self._write_class(base, visiting)
        start = len(self.defaults)
        self._emit(entry, self._class(entry), start)

    def _write_function(self, entry: _Entry) -> None:
        start = len(self.defaults)
        func = entry.function
        if func is None:
            chunk = [
                f"def {entry.name}(*args, **kwargs):",
                f"    _fake._kit(_TOKEN)._record({entry.name!r}, "
                "{'args': args, 'kwargs': kwargs}, "
                "{'args': 'VAR_POSITIONAL', 'kwargs': 'VAR_KEYWORD'})",
                "    return None",
            ]
        else:
            body = self._function_body(entry, func)
            first = func.parameters[0].name if func.parameters else None
            bound = first if entry.takes_self else None
            chunk = self.function(func, entry.name, body, "", name=entry.name, bound=bound)
        self._emit(entry, chunk, start)

    def source(self, head: Sequence[str]) -> str:
        """The module's source: ``head`` (header lines), then its objects and bindings."""
        here = [e for e in self.registry.entries.values() if e.defined_in == self.module]
        for entry in here:  # enums first: defaults may name their members
            if _enum_base(entry) is not None:
                self._emit(entry, self._class(entry), len(self.defaults))
        for entry in here:
            if entry.kind in ("class", "enum") and _enum_base(entry) is None:
                self._write_class(entry, set())
        for entry in here:
            if entry.kind == "function":
                self._write_function(entry)
            elif entry.kind == "value":
                self.lines += [
                    f"{entry.name} = _fake._outside("
                    f"{entry.outside!r}, {entry.name!r}, {entry.outside_module!r})",
                    "",
                ]
        bindings: list[str] = []
        for entry in self.registry.entries.values():
            for public in sorted(entry.bindings.get(self.module, ())):
                if entry.defined_in == self.module:
                    if public != entry.name:
                        bindings.append(f"{public} = {entry.name}")
                else:
                    # Bound once the defining module has run (import cycles are fine).
                    bindings.append(
                        f"_fake._bind(_TOKEN, globals(), {entry.defined_in!r}, "
                        f"{entry.name!r}, {public!r})"
                    )
        for name, target in sorted(self.registry.module_names.get(self.module, {}).items()):
            if not self.module.startswith(target):  # not the module itself or a parent
                bindings.append(f"import {target} as {name}")
        lines = [*head, "import enum as _enum", "", "_D = []"]
        lines += [*self.imports.values(), "", *self.lines, *bindings]
        # The __future__ import binds "annotations": no release module has that name.
        lines += ["del annotations", "_fake._loaded(_TOKEN, __name__, globals())"]
        return "\n".join(lines) + "\n"


def _header(directory: str) -> list[str]:
    return [
        "# Generated by fi_compat.testing from recorded flashinfer-python signatures.",
        "from __future__ import annotations",
        "",
        "import fi_compat.testing._fake as _fake",
        "",
        f"_TOKEN = _fake._token({directory!r})",
    ]


def _token(directory: str) -> str:
    """The token of the fake whose package in ``directory`` is being imported (called by
    generated code: a package is written once and reused by later fakes of its kind). A
    module imported outside any fake gets no token, so its calls raise FakeUninstalledError."""
    with _LOCK:
        return _INSTALLED.get(directory, "")


def _generate(
    record: ReleaseRecord,
    directory: str,
    *,
    cuda_runtime: bool,
    planned: frozenset[str] = frozenset(),
    registry: _Registry | None = None,
) -> dict[str, str]:
    """Module name -> source text of the whole fake package."""
    if registry is None:
        registry = _collect(record)
    modules = {FLASHINFER} | ({COMM} if record.comm_exists else set())
    for entry in registry.entries.values():
        modules |= {entry.defined_in, *entry.bindings}
    for module, names in registry.module_names.items():
        modules |= {module, *names.values()}
    sources: dict[str, str] = {}
    for name in sorted(modules):
        head = _header(directory)
        if name in planned:
            head.append(f"_fake._raise_planned(_TOKEN, {name!r})")
        if name == COMM and not cuda_runtime:
            head.append(f"from {CUDART_MODULE} import cudart as cudart")
        if name == FLASHINFER:
            head.append(f"__version__ = {record.release!r}")
        sources[name] = _Writer(registry, name).source(head)
    if not record.comm_exists:
        for name in [n for n in sources if n == COMM or n.startswith(COMM + ".")]:
            del sources[name]
    elif not cuda_runtime:
        sources[CUDART_MODULE] = sources.get(
            CUDART_MODULE, "\n".join(_header(directory)) + "\n"
        ) + (
            "\n".join(
                [
                    "",
                    "",
                    "class CudaRTLibrary:",
                    "    def __init__(self, so_file=None):",
                    "        if so_file is None:",
                    "            so_file = None  # no libcudart mapped into this process",
                    f"            assert so_file is not None, {CUDART_MESSAGE!r}",
                    "",
                    "",
                    "cudart = CudaRTLibrary()",
                ]
            )
            + "\n"
        )
    # Parent packages of every generated module must exist.
    for name in list(sources):
        parts = name.split(".")
        for index in range(1, len(parts)):
            parent = ".".join(parts[:index])
            sources.setdefault(parent, "\n".join(_header(directory)) + "\n")
    return sources


@dataclass
class _Build:
    """A generated fake package on disk, written once and imported by each fake of its kind
    (Python caches its bytecode beside it), one live fake at a time."""

    record: ReleaseRecord
    directory: Path
    paths: dict[str, Path]
    packages: set[str]
    workspace_classes: dict[str, tuple[str, str]]
    in_use: bool = False
    code: dict[str, CodeType] = field(default_factory=dict)


#: Generated packages by (release, CUDA runtime loaded, modules with a planned import error),
#: kept for the process: generating and compiling a fake costs tens of milliseconds, a test
#: suite makes thousands of fakes, and what a fake holds per test lives in its kit.
_BUILDS: dict[tuple[str, bool, frozenset[str]], list[_Build]] = {}
#: The token of the live fake by the directory of its package.
_INSTALLED: dict[str, str] = {}


def _take_build(record: ReleaseRecord, *, cuda_runtime: bool, planned: frozenset[str]) -> _Build:
    """A package for ``record`` that no live fake uses, written now if there is none."""
    key = (record.release, cuda_runtime, planned)
    with _LOCK:
        builds = _BUILDS.setdefault(key, [])
        for build in builds:
            if not build.in_use and build.record is record:
                build.in_use = True
                return build
    registry = _collect(record)
    directory = Path(tempfile.mkdtemp(prefix=f"fake-flashinfer-{record.release}-"))
    if not _BUILDS_DIRECTORIES:
        atexit.register(_remove_builds)
    _BUILDS_DIRECTORIES.append(directory)
    sources = _generate(
        record, str(directory), cuda_runtime=cuda_runtime, planned=planned, registry=registry
    )
    build = _Build(
        record,
        directory,
        _write(directory, sources),
        {name.rpartition(".")[0] for name in sources if "." in name} | {FLASHINFER},
        _workspace_classes(registry),
        in_use=True,
    )
    with _LOCK:
        builds.append(build)
    return build


_BUILDS_DIRECTORIES: list[Path] = []


def _remove_builds() -> None:
    """Remove every generated package (at interpreter exit)."""
    for directory in _BUILDS_DIRECTORIES:
        shutil.rmtree(directory, ignore_errors=True)


def _workspace_classes(registry: _Registry) -> dict[str, tuple[str, str]]:
    """Backend -> (module, name) of its workspace class."""
    return {
        entry.workspace: (entry.defined_in, entry.name)
        for entry in registry.entries.values()
        if entry.workspace and entry.kind == "class"
    }


#: Bindings waiting for their defining module to finish: (token, module) -> targets.
_PENDING: dict[tuple[str, str], list[tuple[dict[str, Any], str, str]]] = {}


def _bind(token: str, namespace: dict[str, Any], source: str, own: str, public: str) -> None:
    """Bind ``source.own`` as ``public`` in ``namespace`` (called by generated code); if
    ``source`` is still being imported (an import cycle), once it has run."""
    module = sys.modules.get(source) or importlib.import_module(source)
    found = vars(module).get(own, _MISSING)
    if found is not _MISSING:
        namespace[public] = found
        return
    with _LOCK:
        _PENDING.setdefault((token, source), []).append((namespace, own, public))


def _loaded(token: str, name: str, namespace: Mapping[str, Any]) -> None:
    """A generated module has run (called by generated code): complete its bindings."""
    with _LOCK:
        waiting = _PENDING.pop((token, name), [])
    for target, own, public in waiting:
        if own in namespace:
            target[public] = namespace[own]


def _write(directory: Path, sources: Mapping[str, str]) -> dict[str, Path]:
    packages = {name.rpartition(".")[0] for name in sources if "." in name}
    paths: dict[str, Path] = {}
    for name, text in sources.items():
        parts = name.split(".")
        if name in packages or name == FLASHINFER:
            path = directory.joinpath(*parts, "__init__.py")
        else:
            path = directory.joinpath(*parts[:-1], parts[-1] + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        paths[name] = path
    return paths


class _Loader(importlib.machinery.SourceFileLoader):
    """Loads a generated module from its file, compiled once per build (bytecode files may
    be disabled, and a build is imported by many fakes)."""

    def __init__(self, fullname: str, path: str, code: dict[str, CodeType]) -> None:
        super().__init__(fullname, path)
        self._code = code

    def get_code(self, fullname: str) -> CodeType:
        code = self._code.get(fullname)
        if code is None:
            code = compile(self.get_data(self.path), self.path, "exec", dont_inherit=True)
            self._code[fullname] = code
        return code


class _Finder(importlib.abc.MetaPathFinder):
    """Serves ``flashinfer`` and its submodules from the generated files only."""

    def __init__(self, build: _Build) -> None:
        self.build = build

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != FLASHINFER and not fullname.startswith(FLASHINFER + "."):
            return None
        file = self.build.paths.get(fullname)
        if file is None:
            # A submodule the fake lacks: the path finder then searches the fake package's
            # own directory (its __path__) and finds nothing, as for a real missing module.
            return None
        locations = [str(file.parent)] if fullname in self.build.packages else None
        return importlib.util.spec_from_file_location(
            fullname,
            file,
            loader=_Loader(fullname, str(file), self.build.code),
            submodule_search_locations=locations,
        )


def _clear_capabilities() -> None:
    """Reset fi_compat.capabilities' process-wide cache, if that module exists."""
    try:
        capabilities = importlib.import_module("fi_compat.capabilities")
    except ImportError:
        return
    clear = getattr(capabilities, "clear_cache", None)
    if callable(clear):
        clear()


def _ours(name: str) -> bool:
    return name == FLASHINFER or name.startswith(FLASHINFER + ".")


def _factory_options(record: ReleaseRecord) -> tuple[str, ...]:
    """The factory's keyword-only parameters (0.7.2.post1: the MNNVL CuTe DSL options)."""
    factory = record.comm_function(UNIFIED_FACTORY.key)
    if factory is None:
        return ()
    return tuple(p.name for p in factory.parameters if p.kind == "KEYWORD_ONLY")


@contextlib.contextmanager
def fake_flashinfer(
    version: str,
    *,
    cuda_runtime: bool = True,
    installed: bool = True,
    import_error: BaseException | type[BaseException] | None = None,
    comm_import_error: BaseException | type[BaseException] | None = None,
    multicast: bool = True,
    confidential_compute: bool = False,
) -> Iterator[FakeFlashInfer]:
    """Install a fake ``flashinfer`` imitating a recorded release, for the ``with`` block.

    On enter, every ``flashinfer`` module in ``sys.modules`` (the real one included) is
    set aside, the fake is generated, ``flashinfer`` and ``flashinfer.comm`` are imported
    from it (unless a failure mode says otherwise) and ``fi_compat.capabilities``' cache is
    cleared. On exit the fake modules are removed, the set-aside modules restored and the
    cache cleared again.

    Parameters
    ----------
    version
        A recorded release (see :func:`available_releases`), e.g. ``"0.6.5"``.
    cuda_runtime
        False imitates a process without a loaded CUDA runtime: ``import flashinfer.comm``
        raises ``AssertionError("libcudart is not loaded in the current process")`` the way
        releases up to 0.6.13 do (whatever the release).
    installed
        False imitates "flashinfer is not installed": ``import flashinfer`` raises
        ``ModuleNotFoundError`` (``sys.modules["flashinfer"]`` is set to None).
    import_error
        An exception (or class) that ``import flashinfer`` raises, e.g. ``OSError``.
    comm_import_error
        An exception (or class) that ``import flashinfer.comm`` raises, e.g. ``TypeError``.
    multicast
        Whether the imitated GPUs support NVLink multicast (True: one NVSwitch node such
        as H100 or B200 SXM). False: ``backend="auto"`` resolves to TRT-LLM from 0.6.16
        on, and a workspace whose release needs multicast raises ``RuntimeError`` (an MNNVL
        workspace of 0.6.10 .. 0.6.14 gets ``mc_ptr == 0`` instead).
    confidential_compute
        Whether the imitated GPUs run in NVIDIA Confidential Computing mode (no multicast;
        from 0.6.16 the MNNVL backend refuses it and a TRT-LLM workspace is backed by
        torch symmetric memory, so its ``checkpoint_prepare`` raises
        ``NotImplementedError``).

    Yields
    ------
    FakeFlashInfer
        The handle with the call log.

    Raises
    ------
    UnknownReleaseError
        ``version`` is not a recorded release.
    InvalidArgumentError
        ``cuda_runtime``, ``installed``, ``multicast`` or ``confidential_compute`` is not a
        bool, or an import error is neither an exception nor an exception class.
    """
    require_bool("cuda_runtime", cuda_runtime)
    require_bool("installed", installed)
    require_bool("multicast", multicast)
    require_bool("confidential_compute", confidential_compute)
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
    record = load_release(version)
    token = uuid.uuid4().hex
    build = _take_build(record, cuda_runtime=cuda_runtime, planned=frozenset(errors))
    kit = FakeFlashInfer(
        record,
        build.directory,
        token,
        planned_errors=errors,
        multicast=multicast,
        confidential_compute=confidential_compute,
        _workspace_classes=build.workspace_classes,
        _factory_options=_factory_options(record),
    )
    paths = build.paths
    finder = _Finder(build)
    with _LOCK:
        _INSTALLED[str(build.directory)] = token
        displaced = {name: module for name, module in sys.modules.items() if _ours(name)}
        for name in displaced:
            del sys.modules[name]
        _KITS[token] = kit
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
                for name in sorted(paths):
                    importlib.import_module(name)
        _clear_capabilities()
        yield kit
    finally:
        with _LOCK:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(finder)
            for name in [name for name in sys.modules if _ours(name)]:
                del sys.modules[name]
            sys.modules.update(displaced)
            _KITS.pop(token, None)
            for key in [key for key in _PENDING if key[0] == token]:
                del _PENDING[key]
            del _INSTALLED[str(build.directory)]
            build.in_use = False
        _clear_capabilities()
