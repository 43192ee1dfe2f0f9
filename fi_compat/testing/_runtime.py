"""What the generated ``flashinfer`` package calls: the one module its code imports.

Every generated module starts with ``import fi_compat.testing._runtime as _fi_runtime``
and calls only the names of this module's ``__all__``: those defined here (recording a call,
storing constructor arguments under the release's attribute names, the attention kernel
boundary, properties, names from outside the release, binding names across modules while
the package imports) and those it re-exports from :mod:`fi_compat.testing._objects` (the
live handle, :class:`~fi_compat.testing.Default`, :class:`~fi_compat.testing.StandIn`) and
:mod:`fi_compat.testing._workspaces` (the workspace entry points). The testing guide,
``docs/guide/testing.md``, says what the generated objects do.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from packaging.version import Version

from fi_compat._surface import SPLIT_KEYWORDS
from fi_compat.errors import explain
from fi_compat.testing._fake_kernel import inherited_backend, kernel_plan, read_attribute, truth
from fi_compat.testing._gates import (
    CUTE_DSL_TENSOR_CORES,
    PRIMS_TS_REMOVED,
    PRIMS_TS_TENSOR_CORES,
)
from fi_compat.testing._helpers import Imitated, compute

# What generated code calls keeps the runtime's underscored spelling (``_fi_runtime._kit``):
# a generated module reads these names, never a user.
from fi_compat.testing._objects import KITS as _KITS
from fi_compat.testing._objects import LOCK as _LOCK
from fi_compat.testing._objects import (
    MISSING,
    Call,
    Default,
    StandIn,
    outside_reason,
    outside_value,
)
from fi_compat.testing._objects import assign as _assign
from fi_compat.testing._objects import call_arguments as _arguments
from fi_compat.testing._objects import kit_for as _kit
from fi_compat.testing._workspaces import WorkspaceState as _WorkspaceState
from fi_compat.testing._workspaces import checkpoint as _checkpoint
from fi_compat.testing._workspaces import destroy_workspace as _destroy_workspace
from fi_compat.testing._workspaces import init_workspace as _init_workspace
from fi_compat.testing._workspaces import new_workspace as _new_workspace
from fi_compat.testing._workspaces import required_bytes as _required_bytes
from fi_compat.testing._workspaces import sufficient as _sufficient

#: The names generated code calls (see the module docstring).
__all__ = [
    "Default",
    "StandIn",
    "_bases",
    "_bind",
    "_bind_outside",
    "_checkpoint",
    "_compute",
    "_deprecated",
    "_destroy_workspace",
    "_init_object",
    "_init_workspace",
    "_kit",
    "_lazy",
    "_loaded",
    "_new_workspace",
    "_package",
    "_plan_kernel",
    "_property",
    "_raise_planned",
    "_required_bytes",
    "_run_result",
    "_set_property",
    "_sufficient",
    "_token",
    "get_global_rank",
]


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
    if version >= PRIMS_TS_REMOVED.version:
        return ("trtllm-gen", "cute-dsl")
    if version >= PRIMS_TS_TENSOR_CORES.version:
        return ("trtllm-gen", "cute-dsl", "prims-ts")
    if version >= CUTE_DSL_TENSOR_CORES.version:
        return ("trtllm-gen", "cute-dsl")
    return ("trtllm-gen",)


def _bind_outside(
    namespace: dict[str, Any], name: str, module: str | None, is_module: bool = False
) -> None:
    """Bind ``name``, which the release imports from ``module`` outside itself (called by
    generated code): the very object where this process has it (see
    :func:`~fi_compat.testing._objects.outside_value`); else leave it unbound, never a
    stand-in, and keep where it comes from in the module's ``_fi_outside``, so that reading
    it later binds it once its module is imported, or raises an ``AttributeError`` saying
    why (:func:`_lazy`)."""
    value = outside_value(module, name, is_module)
    if value is MISSING:
        namespace.setdefault("_fi_outside", {})[name] = (module, is_module, name)
        namespace.pop(name, None)
    else:
        namespace[name] = value


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
    if "backend" not in arguments:
        # A family without backend= whose real __init__ hands its base one (the CUDA-graph
        # decode wrapper: "auto"), as reach.json measured it.
        inherited = inherited_backend(_kit(token).record.release, type(obj))
        if inherited is not None:
            for name in _attribute_for("backend", attributes):
                stored[name] = inherited
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
    keeps: Sequence[tuple[str, str, str, Any]] = (),
) -> None:
    """The kernel boundary of an attention family's planning method, and of
    ``fast_decode_plan`` (``family`` given), once its arguments are bound (called by
    generated code): appends a :class:`KernelPlan` to the kit, or raises what the release
    raises (see :func:`fi_compat.testing._fake_kernel.kernel_plan`); then keeps on the
    wrapper what the release's method keeps (``keeps``, from its recorded
    :attr:`~fi_compat._records.FunctionRecord.keeps`: ``_window_left``, ``_sm_scale``, ...)."""
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
    if keeps:
        _assign(wrapper, _kept(keeps, _arguments(values, None)))


def _kept(
    keeps: Sequence[tuple[str, str, str, Any]], arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """What a planning method keeps on its object, by attribute: each kept argument as
    passed, or for None the literal the release puts in its place; an argument the release
    computes from others when it is None (``is_causal``), or one the call does not have, is
    not kept."""
    kept: dict[str, Any] = {}
    for attribute, parameter, kind, literal in keeps:
        if parameter not in arguments:
            continue
        value = arguments[parameter]
        if value is None and kind == "computed":
            continue
        kept[attribute] = literal if value is None and kind == "literal" else value
    return kept


def _run_result(values: Mapping[str, Any], query: str) -> Any:
    """What an attention wrapper's ``run`` returns (called by generated code), as the
    release's Python allocates it before its kernel: the ``out`` it was given, else zeros of
    the query's rows by V's head dimension (the last dimension of the last of the tensor
    arguments following the query: V of a ``(K, V)`` pair, of a ragged call's ``k, v``, of
    a paged cache), of the query's dtype, on its device; with ``return_lse``, also the
    ``lse`` it was given or float32 zeros of (rows, heads) (``lse_layout="HN"``: (heads,
    rows)). None where the query is no tensor (the fake has nothing to shape a result by).
    Checked against the release's own ``run`` (``tests/attention/test_wrapper_state.py``)."""
    arguments = _arguments(values, None)
    q = arguments.get(query)
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(q, torch.Tensor):
        return None
    out = arguments.get("out")
    if out is None:
        width = q.shape[-1]
        names = list(arguments)
        for name in names[names.index(query) + 1 :]:
            value = arguments[name]
            items = value if isinstance(value, (tuple, list)) else (value,)
            if not items or not all(isinstance(item, torch.Tensor) for item in items):
                break  # the KV arguments end where the first non-tensor one is
            width = items[-1].shape[-1]
        out = torch.zeros((*q.shape[:-1], width), dtype=q.dtype, device=q.device)
    if not arguments.get("return_lse"):
        return out
    lse = arguments.get("lse")
    if lse is None:
        rows, heads = q.shape[0], q.shape[1] if q.dim() > 2 else 1
        shape = (heads, rows) if arguments.get("lse_layout") == "HN" else (rows, heads)
        lse = torch.zeros(shape, dtype=torch.float32, device=q.device)
    return out, lse


def _compute(token: str, key: str, values: Mapping[str, Any]) -> Any:
    """A helper the fake computes, as the release does (called by generated code; see
    :mod:`fi_compat.testing._helpers`)."""
    kit = _kit(token)
    imitated = Imitated(kit.record.version, kit.sm_count)
    return compute(key, imitated, _arguments(values, None))


def _property(obj: Any, name: str, returns_attribute: str | None = None) -> Any:
    """A generated property's value (called by generated code): what a test assigned, else
    the attribute the release's property returns (``is_cuda_graph_enabled`` ->
    ``_use_cuda_graph``, as the constructor stored it), else None."""
    stored = vars(obj).get(f"_fi_property_{name}", MISSING)
    if stored is not MISSING:
        return stored
    state = vars(obj).get("_fi_state")
    if name == "backend" and isinstance(state, _WorkspaceState):
        return state.backend
    if returns_attribute is not None:
        return getattr(obj, returns_attribute, None)
    return None


def _set_property(obj: Any, name: str, value: Any) -> None:
    vars(obj)[f"_fi_property_{name}"] = value


# ------------------------------------------------------------------ importing the package


def _token(directory: str) -> str:
    """The token of the fake whose package in ``directory`` is being imported (called by
    generated code: a package is written once and reused by later fakes of its kind). A
    module imported outside any fake gets no token, so its calls raise FakeUninstalledError."""
    with _LOCK:
        return INSTALLED.get(directory, "")


#: The token of the live fake by the directory of its package.
INSTALLED: dict[str, str] = {}


#: Bindings waiting for their defining module to finish: (token, module) -> targets.
PENDING: dict[tuple[str, str], list[tuple[dict[str, Any], str, str]]] = {}


def _bind(token: str, namespace: dict[str, Any], source: str, own: str, public: str) -> None:
    """Bind ``source.own`` as ``public`` in ``namespace`` (called by generated code); if
    ``source`` is still being imported (an import cycle), once it has run."""
    module = sys.modules.get(source) or importlib.import_module(source)
    found = vars(module).get(own, MISSING)
    if found is not MISSING:
        namespace[public] = found
        return
    outside = vars(module).get("_fi_outside", {}).get(own)
    if outside is not None:  # left unbound there: so it is here, for the same reason
        namespace.setdefault("_fi_outside", {})[public] = outside  # under its own name
        return
    with _LOCK:
        PENDING.setdefault((token, source), []).append((namespace, own, public))


def _lazy(
    module: str,
    namespace: dict[str, Any],
    lazy: Mapping[str, tuple[str, str | None]],
    name: str,
    token: str = "",
    served: tuple[str, ...] | str | None = None,
    unreadable: str | None = None,
) -> Any:
    """A generated module's ``__getattr__`` (called by generated code): ``name`` bound on
    first access from the module holding it (a module itself when the name is None); a
    submodule of the fake package, imported (``import flashinfer`` imports the release's
    submodules, which binds them on the package); a name the release's own ``__getattr__``
    serves (``served``, the names), from the module that binds it (see :func:`_serve`); for
    a module the recorder could not read (``unreadable``, the reason), an ``ImportError``
    saying so; for a value the fake leaves unbound (the module's ``_fi_unmodelled``, or
    ``_fi_outside`` for a name from outside the release whose module is still not
    imported), an ``AttributeError`` saying why; else the ``AttributeError`` Python raises
    for a name the release's module lacks (saying, where ``served`` is ``"*"``, that the
    record cannot tell the names that module's ``__getattr__`` serves: the fake serves
    none)."""
    outside = namespace.get("_fi_outside", {}).get(name)
    if outside is not None:
        home, is_module, own = outside  # ``own``: its name there, for a re-export too
        value = outside_value(home, own, is_module)
        if value is MISSING:
            raise AttributeError(_outside_message(token, module, name, (home, own), namespace))
        namespace[name] = value  # its module is imported by now
        del namespace["_fi_outside"][name]
        return value
    found = lazy.get(name)
    if found is None and name in namespace.get("_fi_later", ()):
        _run_later(namespace)
        if name in namespace:
            return namespace[name]
        found = lazy.get(name)  # the later part adds its names' lazy bindings
    if found is None and isinstance(served, tuple) and name in served:
        value = _serve(token, module, name)
        namespace[name] = value
        return value
    if found is None and name in namespace.get("_fi_unmodelled", ()):
        raise AttributeError(_unmodelled_message(token, module, name, namespace))
    if found is None:
        dunder = name.startswith("__")
        if not dunder:
            with contextlib.suppress(ModuleNotFoundError):
                return importlib.import_module(f"{module}.{name}")
        if unreadable is not None and not dunder:
            raise ImportError(_unreadable_message(token, module, name, unreadable), name=module)
        message = f"module {module!r} has no attribute {name!r}"
        if served == _ANY and not dunder:
            message += (
                " (in the fake: the release's module __getattr__ serves names its source "
                "does not list, which fi-compat's records cannot tell)"
            )
        raise AttributeError(message)
    source, own = found
    target = sys.modules.get(source) or importlib.import_module(source)
    value = target if own is None else getattr(target, own)
    namespace[name] = value
    return value


def later_path(path: str) -> str:
    """The file of the later part of the generated module in ``path`` (``x/y.py`` ->
    ``x/y.later.py``): what it binds beyond the registry, for a module written with
    ``defer`` (see :func:`fi_compat.testing._generator._module_source`)."""
    return path.removesuffix(".py") + ".later.py"


def _run_later(namespace: dict[str, Any]) -> None:
    """Run the later part of the generated module whose namespace this is, once (its loader
    writes and compiles it on first use)."""
    with _LOCK:
        if namespace.get("_fi_later_done"):
            return
        namespace["_fi_later_done"] = True
        later_code = getattr(namespace.get("__loader__"), "later_code", None)
        code = later_code(namespace["__name__"]) if callable(later_code) else None
        if code is not None:
            exec(code, namespace)


#: What a module ``__getattr__`` whose names its source does not list serves, as recorded.
_ANY = "*"

#: How each live fake finds the module binding a name a module ``__getattr__`` serves (by
#: token; :meth:`fi_compat.testing._modules._Modules.serving` of its build).
SERVING: dict[str, Callable[[str, str], tuple[str, str | None] | None]] = {}


def _serve(token: str, module: str, name: str) -> Any:
    """What ``module``'s ``__getattr__`` hands out for ``name``: the object the module that
    binds it holds (a module itself for a submodule); where no recorded module binds it, a
    function taking anything that logs its calls and returns None."""
    with _LOCK:
        search = SERVING.get(token)
    found = search(module, name) if search is not None else None
    if found is None:
        return _served_function(token, module, name)
    source, own = found
    target = sys.modules.get(source) or importlib.import_module(source)
    return target if own is None else getattr(target, own)


def _served_function(token: str, module: str, name: str) -> Callable[..., None]:
    def served(*args: Any, **kwargs: Any) -> None:
        kinds = {"args": "VAR_POSITIONAL", "kwargs": "VAR_KEYWORD"}
        _kit(token)._record(name, {"args": args, "kwargs": kwargs}, kinds)

    served.__name__ = served.__qualname__ = name
    served.__module__ = module
    return served


def _unmodelled_message(token: str, module: str, name: str, namespace: dict[str, Any]) -> str:
    kit = _KITS.get(namespace.get("_fi_token", token))
    release = f"flashinfer-python {kit.record.release}" if kit is not None else "the release"
    reason = namespace["_fi_unmodelled"][name]
    return (
        f"module {module!r} has no attribute {name!r} in the fake: {release} binds it, to a "
        f"value its source does not tell ({reason}), so the fake leaves it unbound and "
        "getattr(module, name, default) gives the default; test code that reads the value "
        "against the real release"
    )


def _outside_message(
    token: str,
    module: str,
    name: str,
    source: tuple[str | None, str],
    namespace: dict[str, Any],
) -> str:
    """Why ``module.name`` is unbound: its ``source`` (home module, own name) is missing."""
    kit = _KITS.get(namespace.get("_fi_token", token))
    release = f"flashinfer-python {kit.record.release}" if kit is not None else "the release"
    return (
        f"module {module!r} has no attribute {name!r} in the fake: {release} binds it "
        f"({outside_reason(*source)}), so the fake leaves it unbound and "
        "getattr(module, name, default) gives the default; import that module first, or "
        "test code that reads the value against the real release"
    )


def _unreadable_message(token: str, module: str, name: str, reason: str) -> str:
    kit = _KITS.get(token)
    release = f"flashinfer-python {kit.record.release}" if kit is not None else "this release"
    return explain(
        f"{module}.{name} of the fake {release}",
        f"a module fi-compat's recorder could not read ({reason}), so the fake does not "
        "know the names it binds",
        fix="test this import against the real release, or under the fake of a release "
        "whose record of the module could be read",
    )


class _Package(ModuleType):
    """A generated package that binds a name to something other than its submodule of that
    name (``flashinfer.cute_dsl.add_rmsnorm_fp4quant`` is the function): importing the
    submodule later does not rebind the name to it. The release's ``from .x import x`` runs
    when the package is imported, after which Python does not bind the submodule again; the
    fake binds the name on first access, so it keeps Python from doing so later."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            isinstance(value, ModuleType)
            and value.__name__ == f"{self.__name__}.{name}"
            and name in vars(self).get("_fi_shadowed", ())
        ):
            return
        super().__setattr__(name, value)


def _package(name: str, shadowed: Sequence[str]) -> None:
    """Make generated package ``name`` a :class:`_Package` keeping ``shadowed`` (called by
    generated code)."""
    module = sys.modules.get(name)
    if module is None:  # run outside the import system
        return
    vars(module)["_fi_shadowed"] = frozenset(shadowed)
    module.__class__ = _Package


def _loaded(token: str, name: str, namespace: Mapping[str, Any]) -> None:
    """A generated module has run (called by generated code): complete its bindings."""
    with _LOCK:
        waiting = PENDING.pop((token, name), [])
    for target, own, public in waiting:
        if own in namespace:
            target[public] = namespace[own]
