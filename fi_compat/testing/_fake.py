"""A fake ``flashinfer`` package built from the recorded signatures of a real release.

The fake is real Python source: for every recorded function and method a ``def`` with the
release's parameter names, kinds and annotations is generated (defaults become sentinel
objects), written to ``.py`` files in a temporary directory and imported from there. So
Python itself raises the ``TypeError`` the real release would raise for an unknown keyword,
``inspect.signature`` reports the recorded signature and ``inspect.getsource`` works (the
probe follows ``plan(**kwargs)`` -> ``self._plan_impl(**kwargs)`` by parsing the source).

Nothing here imports torch or does GPU work. What each fake callable returns:

* ``create_allreduce_fusion_workspace(...)`` -> an instance of the fake workspace class
  (the first class its annotation names, e.g. ``AllReduceFusionWorkspace``) with
  ``world_size``/``rank`` attributes when passed, ``destroyed`` (bool) and an idempotent
  ``destroy()``.
* ``trtllm_create_ipc_workspace_for_all_reduce_fusion(...)`` -> ``(ipc_handles,
  workspace_tensor)``: an empty list and a :class:`StandIn`; a third element ``{}`` when
  ``create_metadata=True`` was passed.
* ``allreduce_fusion(...)`` -> the ``output`` argument if given, else ``input``.
* a function the release decorates with ``@deprecated("...")`` emits the same
  ``DeprecationWarning`` on every call, before binding its arguments, as the real one.
* everything else (``trtllm_allreduce_fusion``, destroy functions, wrapper ``__init__``,
  ``plan``, ``_plan_impl``) -> ``None``; ``TorchDistBackend.bcast(data, root)`` -> ``data``.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import shutil
import sys
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from fi_compat._arguments import require_bool, require_instance, require_str
from fi_compat._surface import (
    COMM,
    CUDART_MODULE,
    FLASHINFER,
    LEGACY_FACTORY,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
    WORKSPACE,
    symbol_named,
)
from fi_compat.errors import FakeUninstalledError
from fi_compat.testing._releases import (
    ClassRecord,
    EnumRecord,
    FunctionRecord,
    ParameterRecord,
    ReleaseRecord,
    load_release,
)

__all__ = [
    "CUDART_MESSAGE",
    "Call",
    "Default",
    "FakeFlashInfer",
    "StandIn",
    "fake_flashinfer",
]

#: The message releases up to 0.6.13 assert with when ``import flashinfer.comm`` runs in a
#: process without a loaded CUDA runtime.
CUDART_MESSAGE = "libcudart is not loaded in the current process"

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
        ``"allreduce_fusion"`` for a ``flashinfer.comm`` function,
        ``"BatchDecodeWithPagedKVCacheWrapper.plan"`` for a method.
    arguments
        The explicitly bound arguments by parameter name (like
        ``inspect.BoundArguments.arguments``: defaults not applied, ``self`` left out, an
        empty ``*args``/``**kwargs`` left out).
    instance
        ``self`` for a method call, else None.
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
    directory
        Where the generated ``flashinfer`` package was written.
    """

    record: ReleaseRecord
    directory: Path
    token: str
    calls: list[Call] = field(default_factory=list)
    planned_errors: dict[str, BaseException] = field(default_factory=dict)

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
        """Forget the recorded calls."""
        self.calls.clear()

    # -- used by the generated modules -------------------------------------------------

    def _record(self, name: str, values: Mapping[str, Any], kinds: Mapping[str, str]) -> Call:
        arguments: dict[str, Any] = {}
        instance = None
        for key, value in values.items():
            kind = kinds.get(key)
            if kind is None:
                continue
            if key == "self" and "." in name:
                instance = value
                continue
            if isinstance(value, Default):
                continue
            if kind in ("VAR_POSITIONAL", "VAR_KEYWORD") and not value:
                continue
            arguments[key] = value
        call = Call(name, arguments, instance)
        with _LOCK:
            self.calls.append(call)
        return call


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


# ----------------------------------------------------------------------- generation


def _signature_source(params: Sequence[ParameterRecord], defaults: list[str]) -> str:
    """Parameter list source; each default becomes ``_D[<index>]``."""
    parts: list[str] = []
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
            defaults.append(param.default)
            text += f" = _D[{len(defaults) - 1}]"
        parts.append(text)
    if params and params[-1].kind == "POSITIONAL_ONLY":
        parts.append("/")
    return ", ".join(parts)


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


def _deprecated(message: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Like ``typing_extensions.deprecated``: warn on every call, keep the signature."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            warnings.warn(message, category=DeprecationWarning, stacklevel=2)
            return func(*args, **kwargs)

        return wrapper

    return decorate


def _function_source(
    func: FunctionRecord,
    call_name: str,
    body: list[str],
    defaults: list[str],
    indent: str,
    values: str = "dict(locals())",
) -> list[str]:
    params = _signature_source(func.parameters, defaults)
    lines = []
    message = _deprecation_message(func.decorators)
    if message is not None:
        # The real release warns before binding the arguments; so does the fake.
        lines.append(f"{indent}@_fake._deprecated({message!r})")
    lines.append(f"{indent}def {func.name}({params}):")
    inner = indent + "    "
    lines.append(f"{inner}__values = {values}")
    lines.append(
        f"{inner}__call = _fake._kit(_TOKEN)._record({call_name!r}, __values, {_kinds(func)})"
    )
    lines += [f"{inner}{line}" for line in body]
    return lines


def _comm_function_body(name: str, func: FunctionRecord) -> list[str]:
    symbol = symbol_named(name)
    if symbol is UNIFIED_FACTORY:
        return ["return _fake._new_workspace(_TOKEN, __call.arguments)"]
    if symbol is LEGACY_FACTORY:
        return [
            "if __call.arguments.get('create_metadata'):",
            "    return [], _fake.StandIn('workspace_tensor'), {}",
            "return [], _fake.StandIn('workspace_tensor')",
        ]
    if symbol is UNIFIED_FUSION:
        return ["return __call.arguments.get('output', __call.arguments.get('input'))"]
    return ["return None"]


def _method_body(owner: ClassRecord, func: FunctionRecord) -> list[str]:
    forward = _forward_source(owner, func)
    if forward is not None:
        return forward
    if symbol_named(owner.name) is TORCH_DIST_BACKEND and func.name == "bcast":
        lines = []
        if owner.bcast_root_is_group_local:
            # Mirrors the recorded fact: this release maps a group-local root.
            lines.append("_global_root = _fake.get_global_rank(__call.arguments)")
        data = func.parameters[1].name if len(func.parameters) > 1 else "None"
        return [*lines, f"return {data}"]
    if func.name == "destroy":
        return ["self.destroyed = True", "return None"]
    return ["return None"]


def get_global_rank(arguments: Mapping[str, Any]) -> Any:
    """Stand-in for ``torch.distributed.get_global_rank`` (the group-local root as is)."""
    return arguments.get("root")


def _new_workspace(token: str, arguments: Mapping[str, Any]) -> Any:
    module = importlib.import_module(COMM)
    record = _KITS[token].record
    names = [*record.workspace_classes, *WORKSPACE.names]
    cls: Any = None
    for name in names:
        cls = getattr(module, name, None) or _workspace_from_record(record, name)
        if cls is not None:
            break
    if cls is None:
        cls = _FallbackWorkspace
    workspace = object.__new__(cls)
    workspace.destroyed = False
    for key in ("world_size", "rank", "backend"):
        if key in arguments:
            setattr(workspace, key, arguments[key])
    return workspace


def _workspace_from_record(record: ReleaseRecord, name: str) -> Any:
    found = record.comm_class(name)
    if found is None:
        return None
    return getattr(importlib.import_module(found.defined_in), name, None)


class _FallbackWorkspace:
    """Used only if a release returns a workspace class that was not recorded."""

    destroyed = False

    def destroy(self) -> None:
        self.destroyed = True


def _class_source(owner: ClassRecord, defaults: list[str]) -> list[str]:
    lines = [f"class {owner.name}:"]
    lines.append("    destroyed = False")
    for method_name in sorted(owner.methods):
        method = owner.methods[method_name]
        if method is None:
            continue
        body = _method_body(owner, method)
        if method.name == "destroy":
            body = ["if self.destroyed:", "    return None", *body]
        values = "dict(locals())"
        if _forward_source(owner, method) is not None:
            values = _values_source(method)
        source = _function_source(
            method, f"{owner.name}.{method_name}", body, defaults, "    ", values
        )
        lines += ["", *source]
    return lines


def _enum_source(enum: EnumRecord) -> list[str]:
    lines = [f"class {enum.name}:"]
    if not enum.members:
        lines.append("    pass")
    for member, value in enum.members.items():
        lines.append(f"    {member} = {value!r}")
    return lines


@dataclass
class _ModuleText:
    lines: list[str] = field(default_factory=list)
    defaults: list[str] = field(default_factory=list)


def _generate(
    record: ReleaseRecord,
    token: str,
    *,
    cuda_runtime: bool,
    errors: Mapping[str, BaseException],
) -> dict[str, str]:
    """Module name -> source text of the whole fake package."""
    modules: dict[str, _ModuleText] = {}

    def module(name: str) -> _ModuleText:
        return modules.setdefault(name, _ModuleText())

    top = module(FLASHINFER)
    comm = module(COMM)
    for name, wrapper in sorted(record.attention.items()):
        if wrapper is None:
            continue
        target = module(wrapper.defined_in)
        target.lines += ["", "", *_class_source(wrapper, target.defaults)]
        top.lines.append(f"from {wrapper.defined_in} import {name} as {name}")
    if record.comm_exists:
        for name, func in sorted(record.comm_functions.items()):
            if func is None:
                continue
            target = module(func.defined_in)
            body = _comm_function_body(name, func)
            target.lines += ["", "", *_function_source(func, name, body, target.defaults, "")]
            comm.lines.append(f"from {func.defined_in} import {name} as {name}")
        for name, enum in sorted(record.comm_enums.items()):
            if enum is None:
                continue
            module(enum.defined_in).lines += ["", "", *_enum_source(enum)]
            comm.lines.append(f"from {enum.defined_in} import {name} as {name}")
        for name, cls in sorted(record.comm_classes.items()):
            if cls is None or cls.exported is False:
                continue  # concrete workspace classes flashinfer.comm does not export
            target = module(cls.defined_in)
            target.lines += ["", "", *_class_source(cls, target.defaults)]
            if symbol_named(name) is TORCH_DIST_BACKEND:
                where = cls.module or cls.defined_in
                if where != cls.defined_in:
                    module(where).lines.append(f"from {cls.defined_in} import {name} as {name}")
            else:
                comm.lines.append(f"from {cls.defined_in} import {name} as {name}")
    sources: dict[str, str] = {}
    header = [
        "# Generated by fi_compat.testing from recorded flashinfer-python signatures.",
        "from __future__ import annotations",
        "",
        "import fi_compat.testing._fake as _fake",
        "",
        f"_TOKEN = {token!r}",
    ]
    for name, text in modules.items():
        lines = list(header)
        if name in errors:
            lines.append(f"_fake._raise_planned(_TOKEN, {name!r})")
        if name == COMM and not cuda_runtime:
            lines.append(f"from {CUDART_MODULE} import cudart as cudart")
        if name == FLASHINFER:
            lines.append(f"__version__ = {record.release!r}")
        if text.defaults:
            items = ", ".join(f"_fake.Default({source!r})" for source in text.defaults)
            lines.append(f"_D = ({items},)")
        sources[name] = "\n".join([*lines, *text.lines]) + "\n"
    if not record.comm_exists:
        sources.pop(COMM, None)
    elif not cuda_runtime:
        sources[CUDART_MODULE] = (
            "\n".join(
                [
                    *header,
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
            sources.setdefault(parent, "\n".join(header) + "\n")
    return sources


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


class _Finder(importlib.abc.MetaPathFinder):
    """Serves ``flashinfer`` and its submodules from the generated files only."""

    def __init__(self, paths: Mapping[str, Path], packages: set[str]) -> None:
        self.paths = dict(paths)
        self.packages = packages

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != FLASHINFER and not fullname.startswith(FLASHINFER + "."):
            return None
        file = self.paths.get(fullname)
        if file is None:
            # A submodule the fake lacks: the path finder then searches the fake package's
            # own directory (its __path__) and finds nothing, as for a real missing module.
            return None
        locations = [str(file.parent)] if fullname in self.packages else None
        return importlib.util.spec_from_file_location(
            fullname, file, submodule_search_locations=locations
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


@contextlib.contextmanager
def fake_flashinfer(
    version: str,
    *,
    cuda_runtime: bool = True,
    installed: bool = True,
    import_error: BaseException | type[BaseException] | None = None,
    comm_import_error: BaseException | type[BaseException] | None = None,
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

    Yields
    ------
    FakeFlashInfer
        The handle with the call log.

    Raises
    ------
    UnknownReleaseError
        ``version`` is not a recorded release.
    InvalidArgumentError
        ``cuda_runtime`` or ``installed`` is not a bool, or an import error is neither an
        exception nor an exception class.
    """
    require_bool("cuda_runtime", cuda_runtime)
    require_bool("installed", installed)
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
    directory = Path(tempfile.mkdtemp(prefix=f"fake-flashinfer-{record.release}-"))
    kit = FakeFlashInfer(record, directory, token, planned_errors=errors)
    sources = _generate(record, token, cuda_runtime=cuda_runtime, errors=errors)
    paths = _write(directory, sources)
    packages = {name.rpartition(".")[0] for name in sources if "." in name} | {FLASHINFER}
    finder = _Finder(paths, packages)
    with _LOCK:
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
        _clear_capabilities()
        shutil.rmtree(directory, ignore_errors=True)
