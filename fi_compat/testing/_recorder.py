"""Record the signatures of one flashinfer-python release without importing it.

The release (a wheel, an sdist or a source tree) is read as text and parsed with
:mod:`ast`. Names are resolved the way Python would resolve them at import time: an
``__init__.py`` that re-exports ``from .allreduce import allreduce_fusion`` is followed to
the module that defines the function, and only names bound in ``flashinfer.comm``'s (or
``flashinfer``'s) own namespace count as present, so that the recorded "exists" answer
matches ``hasattr(flashinfer.comm, name)``.

The output format is described in ``fi_compat/testing/signatures/README.md``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import tarfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from fi_compat._forwarding import (
    ALL,
    FunctionNode,
    analyse,
    bound_skip,
    calls_named,
    method_kind,
    positional_doubts,
)
from fi_compat.testing._errors import RecordingError

__all__ = [
    "ATTENTION_WRAPPERS",
    "COMM_CLASSES",
    "COMM_ENUMS",
    "COMM_FUNCTIONS",
    "SCHEMA_VERSION",
    "dump_record",
    "record_release",
]

#: Bumped whenever the JSON layout changes incompatibly.
SCHEMA_VERSION = 1

#: Functions looked up in ``flashinfer.comm``: the unified API (0.6.0+), the legacy
#: TRT-LLM IPC API and its workspace destroy function.
COMM_FUNCTIONS: tuple[str, ...] = (
    "create_allreduce_fusion_workspace",
    "allreduce_fusion",
    "trtllm_create_ipc_workspace_for_all_reduce_fusion",
    "trtllm_allreduce_fusion",
    "trtllm_destroy_ipc_workspace_for_all_reduce_fusion",
)

#: Constant holders looked up in ``flashinfer.comm``.
COMM_ENUMS: tuple[str, ...] = ("AllReduceFusionPattern",)

#: Classes looked up by name in ``flashinfer.comm`` (besides the workspace classes that
#: ``create_allreduce_fusion_workspace`` is annotated to return).
COMM_CLASSES: tuple[str, ...] = ("AllReduceFusionWorkspace",)

#: Where ``TorchDistBackend`` has lived, oldest first.
TORCH_DIST_BACKEND_MODULES: tuple[str, ...] = (
    "flashinfer.comm.mnnvl",
    "flashinfer.comm.comm_backend",
)

#: Attention wrappers exported from top-level ``flashinfer``.
ATTENTION_WRAPPERS: tuple[str, ...] = (
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchDecodeWithPagedKVCacheWrapper",
)

_MAX_DEPTH = 12
_CUDART_MESSAGE = "libcudart is not loaded"
#: ``torch.cuda`` calls that need a visible GPU (they raise on a CPU-only machine).
_GPU_QUERIES = frozenset(
    {
        "get_device_properties",
        "get_device_capability",
        "get_device_name",
        "current_device",
        "mem_get_info",
        "set_device",
        "synchronize",
    }
)
_VERSION_RE = re.compile(
    r"^flashinfer[_-]python-(?P<version>[0-9][^-]*?)(?:-py3.*\.whl|\.tar\.gz|\.zip)$"
)


# ------------------------------------------------------------------------------ sources


@dataclass
class _Source:
    """The ``flashinfer`` package of one release: module name -> (path, text)."""

    files: dict[str, tuple[str, str]]

    def module(self, name: str) -> tuple[str, str] | None:
        return self.files.get(name)

    def is_module(self, name: str) -> bool:
        return name in self.files


def _module_name(relative: PurePosixPath) -> str:
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _collect(paths: Iterator[tuple[str, bytes]]) -> _Source:
    """Keep the ``.py`` files of the shallowest ``flashinfer`` package found."""
    entries = [(PurePosixPath(path), data) for path, data in paths if path.endswith(".py")]
    roots = sorted(
        (p.parent.parent for p, _ in entries if p.parts[-2:] == ("flashinfer", "__init__.py")),
        key=lambda p: (len(p.parts), str(p)),
    )
    if not roots:
        raise RecordingError("no flashinfer/__init__.py found in the release")
    root = roots[0]
    files: dict[str, tuple[str, str]] = {}
    for path, data in entries:
        try:
            relative = path.relative_to(root)
        except ValueError:
            continue
        if relative.parts[0] != "flashinfer":
            continue
        files[_module_name(relative)] = (str(relative), data.decode("utf-8", "replace"))
    return _Source(files)


def _read_wheel(path: Path) -> _Source:
    with zipfile.ZipFile(path) as archive:
        return _collect(
            (info.filename, archive.read(info))
            for info in archive.infolist()
            if info.filename.endswith(".py") and "flashinfer/" in info.filename
        )


def _read_sdist(path: Path) -> _Source:
    def members() -> Iterator[tuple[str, bytes]]:
        with tarfile.open(path) as archive:
            for member in archive.getmembers():
                if not member.name.endswith(".py") or "flashinfer/" not in member.name:
                    continue
                if not (member.isfile() or member.issym()):
                    continue
                try:
                    handle = archive.extractfile(member)
                except KeyError:  # a symlink pointing outside the archive
                    continue
                if handle is not None:
                    yield member.name, handle.read()

    return _collect(members())


def _read_tree(path: Path) -> _Source:
    # A directory holding the package (site-packages, a checkout): read only the package.
    top = path / "flashinfer" if (path / "flashinfer" / "__init__.py").is_file() else path

    def walk() -> Iterator[tuple[str, bytes]]:
        for file in sorted(top.rglob("*.py")):
            if file.is_file():
                yield file.relative_to(path).as_posix(), file.read_bytes()

    return _collect(walk())


def read_release(path: Path) -> _Source:
    """Read the ``flashinfer`` package out of a wheel, an sdist or a source tree."""
    if path.is_dir():
        return _read_tree(path)
    if path.name.endswith(".whl") or path.name.endswith(".zip"):
        return _read_wheel(path)
    if path.name.endswith((".tar.gz", ".tgz", ".tar")):
        return _read_sdist(path)
    raise RecordingError(f"expected a .whl, .tar.gz or a directory; found {path.name}")


def version_from_filename(name: str) -> str | None:
    """The release version in a wheel or sdist file name, or None."""
    match = _VERSION_RE.match(name)
    return match.group("version") if match else None


# ----------------------------------------------------------------------- module model


@dataclass
class _Binding:
    """How a module-level name is bound."""

    kind: str  # "def", "class", "import", "module", "assign"
    node: ast.AST
    target_module: str | None = None  # for "import": where the name comes from
    target_name: str | None = None  # for "import": the name in that module
    fallback: bool = False  # bound in an ``except`` handler


@dataclass
class _Module:
    name: str
    path: str
    tree: ast.Module
    is_package: bool
    bindings: dict[str, list[_Binding]] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    #: (imported module, line, context) of every import run at import time.
    imports: list[tuple[str, int, _Context]] = field(default_factory=list)
    statements: list[tuple[ast.stmt, _Context]] = field(default_factory=list)
    all_names: list[str] | None = None


def _absolute(module: _Module, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{target}" if target else package


#: Context of a module-level statement: the exception names caught around it ("*" for
#: everything) and whether it only runs when ``torch.cuda.is_available()``.
_Context = tuple[frozenset[str], bool]
_TOP: _Context = (frozenset(), False)
_CATCH_ALL = frozenset({"Exception", "BaseException"})


def _caught(handlers: list[ast.ExceptHandler]) -> frozenset[str]:
    names: set[str] = set()
    for handler in handlers:
        if handler.type is None:
            return frozenset({"*"})
        for node in ast.walk(handler.type):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
    return frozenset({"*"}) if names & _CATCH_ALL else frozenset(names)


def _catches(context: _Context, *errors: str) -> bool:
    caught = context[0]
    return bool(errors) and ("*" in caught or any(error in caught for error in errors))


def _needs_gpu_to_run(test: ast.expr) -> bool:
    text = ast.unparse(test)
    return "is_available" in text or "device_count" in text


def _import_time_statements(
    body: list[ast.stmt], context: _Context = _TOP, fallback: bool = False
) -> Iterator[tuple[ast.stmt, _Context, bool]]:
    """Module-level statements run at import, with their context and a fallback flag."""
    for stmt in body:
        yield stmt, context, fallback
        if isinstance(stmt, ast.If):
            gpu = context[1] or _needs_gpu_to_run(stmt.test)
            yield from _import_time_statements(stmt.body, (context[0], gpu), fallback)
            yield from _import_time_statements(stmt.orelse, context, fallback)
        elif isinstance(stmt, ast.Try):
            inner = (context[0] | _caught(stmt.handlers), context[1])
            yield from _import_time_statements(stmt.body, inner, fallback)
            for handler in stmt.handlers:
                yield from _import_time_statements(handler.body, context, True)
            yield from _import_time_statements(stmt.orelse, context, fallback)
            yield from _import_time_statements(stmt.finalbody, context, fallback)
        elif isinstance(stmt, ast.With):
            suppressed: set[str] = set()
            for item in stmt.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("suppress"):
                    suppressed.update(ast.unparse(arg).rpartition(".")[2] for arg in call.args)
            if suppressed & _CATCH_ALL:
                suppressed = {"*"}
            inner = (context[0] | frozenset(suppressed), context[1])
            yield from _import_time_statements(stmt.body, inner, fallback)


class _Package:
    """Lazily parsed modules of one release."""

    def __init__(self, source: _Source) -> None:
        self.source = source
        self._modules: dict[str, _Module | None] = {}

    def get(self, name: str) -> _Module | None:
        if name not in self._modules:
            self._modules[name] = self._parse(name)
        return self._modules[name]

    def _parse(self, name: str) -> _Module | None:
        found = self.source.module(name)
        if found is None:
            return None
        path, text = found
        try:
            tree = ast.parse(text, filename=path)
        except SyntaxError as error:
            raise RecordingError(f"cannot parse {path}: {error}") from error
        module = _Module(name, path, tree, path.endswith("__init__.py"))
        for stmt, context, fallback in _import_time_statements(tree.body):
            module.statements.append((stmt, context))
            self._bind(module, stmt, context, fallback)
        return module

    def _bind(self, module: _Module, stmt: ast.stmt, guarded: _Context, fallback: bool) -> None:
        def add(name: str, binding: _Binding) -> None:
            binding.fallback = fallback
            module.bindings.setdefault(name, []).append(binding)

        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            add(stmt.name, _Binding("def", stmt))
        elif isinstance(stmt, ast.ClassDef):
            add(stmt.name, _Binding("class", stmt))
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                module.imports.append((alias.name, stmt.lineno, guarded))
                bound = alias.asname or alias.name.partition(".")[0]
                target = alias.name if alias.asname else alias.name.partition(".")[0]
                add(bound, _Binding("module", stmt, target_module=target))
        elif isinstance(stmt, ast.ImportFrom):
            base = _absolute(module, stmt.level, stmt.module)
            module.imports.append((base, stmt.lineno, guarded))
            for alias in stmt.names:
                if alias.name == "*":
                    module.star_imports.append(base)
                    continue
                submodule = f"{base}.{alias.name}"
                if self.source.is_module(submodule):
                    module.imports.append((submodule, stmt.lineno, guarded))
                add(
                    alias.asname or alias.name,
                    _Binding("import", stmt, target_module=base, target_name=alias.name),
                )
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for assigned in targets:
                if isinstance(assigned, ast.Name):
                    if assigned.id == "__all__" and stmt.value is not None:
                        try:
                            value = ast.literal_eval(stmt.value)
                        except ValueError:
                            value = None
                        if isinstance(value, list | tuple):
                            module.all_names = [str(item) for item in value]
                    add(assigned.id, _Binding("assign", stmt))

    # -------------------------------------------------------------- name resolution

    def resolve(
        self, module_name: str, name: str, depth: int = 0
    ) -> tuple[_Module, _Binding] | None:
        """Follow ``name`` in ``module_name``'s namespace to its definition."""
        if depth > _MAX_DEPTH:
            return None
        module = self.get(module_name)
        if module is None:
            return None
        bindings = module.bindings.get(name)
        if bindings:
            preferred = [b for b in bindings if not b.fallback] or bindings
            binding = preferred[-1]
            if binding.kind == "import":
                assert binding.target_module is not None
                assert binding.target_name is not None
                submodule = f"{binding.target_module}.{binding.target_name}"
                if self.source.is_module(submodule):
                    sub = self.get(submodule)
                    assert sub is not None
                    return sub, _Binding("module", binding.node, target_module=submodule)
                found = self.resolve(binding.target_module, binding.target_name, depth + 1)
                if found is None and self.source.is_module(binding.target_module):
                    return None
                return found if found is not None else (module, binding)
            if binding.kind == "assign" and isinstance(binding.node, ast.Assign):
                value = binding.node.value
                if isinstance(value, ast.Name) and value.id != name:
                    found = self.resolve(module_name, value.id, depth + 1)
                    if found is not None:
                        return found
            return module, binding
        for star in module.star_imports:
            target = self.get(star)
            if target is None:
                continue
            if target.all_names is not None and name not in target.all_names:
                continue
            if target.all_names is None and name.startswith("_"):
                continue
            found = self.resolve(star, name, depth + 1)
            if found is not None:
                return found
        return None

    def import_closure(
        self, start: str, errors: tuple[str, ...], *, on_cpu: bool = True
    ) -> list[tuple[str, str]]:
        """Modules executed by ``import start`` (parents first), with how each was reached.

        An import inside ``try``/``suppress`` that catches one of ``errors`` is not
        followed: a failure there does not fail the import. With ``on_cpu``, imports that
        only run when ``torch.cuda.is_available()`` are not followed either.
        """
        order: list[tuple[str, str]] = []
        seen: set[str] = set()

        def visit(name: str, why: str) -> None:
            parts = name.split(".")
            for index in range(1, len(parts) + 1):
                prefix = ".".join(parts[:index])
                if prefix in seen or not self.source.is_module(prefix):
                    continue
                seen.add(prefix)
                order.append((prefix, why))
                module = self.get(prefix)
                assert module is not None
                for target, line, context in module.imports:
                    if target.split(".")[0] != "flashinfer" or _catches(context, *errors):
                        continue
                    if on_cpu and context[1]:
                        continue
                    visit(target, f"{module.path}:{line}")

        visit(start, "start")
        return order


# ---------------------------------------------------------------------- signatures


def _parameters(args: ast.arguments) -> list[dict[str, str]]:
    records: list[dict[str, str]] = []
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)

    def one(arg: ast.arg, kind: str, default: ast.expr | None) -> dict[str, str]:
        record = {"name": arg.arg, "kind": kind}
        if default is not None:
            record["default"] = ast.unparse(default)
        if arg.annotation is not None:
            record["annotation"] = ast.unparse(arg.annotation)
        return record

    for index, arg in enumerate(positional):
        kind = "POSITIONAL_ONLY" if index < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        records.append(one(arg, kind, defaults[index]))
    if args.vararg is not None:
        records.append(one(args.vararg, "VAR_POSITIONAL", None))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        records.append(one(arg, "KEYWORD_ONLY", kw_default))
    if args.kwarg is not None:
        records.append(one(args.kwarg, "VAR_KEYWORD", None))
    return records


class _RecordedResolver:
    """Resolve names in a recorded module for :func:`fi_compat._forwarding.analyse`."""

    def __init__(self, package: _Package, module: str) -> None:
        self.package = package
        self.module = module

    def function(self, name: str) -> tuple[FunctionNode, _RecordedResolver] | None:
        found = self.package.resolve(self.module, name)
        if found is None or found[1].kind != "def":
            return None
        node = found[1].node
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        return node, _RecordedResolver(self.package, found[0].name)

    def is_builtin(self, name: str) -> bool:
        return self.package.resolve(self.module, name) is None


def _descriptor(node: FunctionNode) -> str:
    names = {ast.unparse(decorator) for decorator in node.decorator_list}
    return next((kind for kind in ("staticmethod", "classmethod") if kind in names), "function")


def _function_record(
    module: _Module,
    func: ast.FunctionDef | ast.AsyncFunctionDef,
    qualname: str,
    forward: tuple[str | None, list[str]] = (None, []),
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "defined_in": module.name,
        "qualname": qualname,
        "decorators": [ast.unparse(decorator) for decorator in func.decorator_list],
        "parameters": _parameters(func.args),
    }
    if func.returns is not None:
        record["returns"] = ast.unparse(func.returns)
    target, drops = forward
    if target is not None:
        record["forwards_kwargs_to"] = target
        if drops:
            record["forwards_kwargs_drops"] = drops
    return record


class _Recorder:
    def __init__(self, package: _Package) -> None:
        self.package = package

    def exported(self, module: str, name: str) -> tuple[_Module, _Binding] | None:
        return self.package.resolve(module, name)

    def function(self, module: str, name: str) -> dict[str, Any] | None:
        found = self.exported(module, name)
        if found is None:
            return None
        defining, binding = found
        if binding.kind != "def":
            return None
        node = binding.node
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        forward = self.forwarding(defining, node, node.name, None)
        return _function_record(defining, node, node.name, forward)

    def _class(self, module: str, name: str) -> tuple[_Module, ast.ClassDef] | None:
        found = self.exported(module, name)
        if found is None or found[1].kind != "class":
            return None
        node = found[1].node
        assert isinstance(node, ast.ClassDef)
        return found[0], node

    def _mro(self, module: _Module, node: ast.ClassDef) -> list[tuple[_Module, ast.ClassDef]]:
        chain: list[tuple[_Module, ast.ClassDef]] = []
        todo = [(module, node)]
        while todo and len(chain) < _MAX_DEPTH:
            current_module, current = todo.pop(0)
            if any(current is seen for _, seen in chain):
                continue
            chain.append((current_module, current))
            for base in current.bases:
                if isinstance(base, ast.Name):
                    resolved = self._class(current_module.name, base.id)
                    if resolved is not None:
                        todo.append(resolved)
        return chain

    def _find_method(
        self, module: _Module, node: ast.ClassDef, name: str
    ) -> tuple[_Module, ast.ClassDef, FunctionNode] | None:
        for owner_module, owner in self._mro(module, node):
            for stmt in owner.body:
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
                    return owner_module, owner, stmt
        return None

    def method(self, module: _Module, node: ast.ClassDef, name: str) -> dict[str, Any] | None:
        found = self._find_method(module, node, name)
        if found is None:
            return None
        owner_module, owner, stmt = found
        where = f"{owner.name}.{name}"
        forward = self.forwarding(owner_module, stmt, where, (module, node))
        return _function_record(owner_module, stmt, where, forward)

    def forwarding(
        self,
        module: _Module,
        func: FunctionNode,
        where: str,
        cls: tuple[_Module, ast.ClassDef] | None,
    ) -> tuple[str | None, list[str]]:
        """Where ``func``'s ``**kwargs`` provably goes, and the keywords it may drop.

        The same analysis as the live probe (:func:`fi_compat._forwarding.analyse`).
        Returns (None, []) when no forward is proven; the drops list :data:`ALL` (``"*"``)
        when any keyword may be dropped. A target the class defines is recorded by method
        name; any other target as source text (the loader treats that as unresolved).
        """
        if func.args.kwarg is None:
            return None, []
        kind = method_kind(func) if cls is not None else None
        resolver = _RecordedResolver(self.package, module.name)
        analysis = analyse(func, func.args.kwarg.arg, resolver, where=where, method=kind)
        ref = analysis.target
        if analysis.problem is not None or ref is None:
            return None, []
        doubts = list(analysis.doubts)
        if ref.base == "global":
            target = ref.text
        else:
            target = ref.path[0]
            assert cls is not None
            found = self._find_method(*cls, target)
            if found is not None:
                callee = found[2]
                parameters = [(p["name"], p["kind"]) for p in _parameters(callee.args)]
                skip = bound_skip(ref.base, _descriptor(callee))
                doubts += positional_doubts(analysis.calls, parameters, skip, where)
        # A keyword the function declares itself never travels in **kwargs.
        own = {
            p["name"]
            for p in _parameters(func.args)
            if p["kind"] in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")
        }
        drops = sorted({doubt.keyword for doubt in doubts} - own)
        return target, [ALL] if ALL in drops else drops

    def class_record(
        self, module: str, name: str, methods: tuple[str, ...]
    ) -> dict[str, Any] | None:
        found = self._class(module, name)
        if found is None:
            return None
        defining, node = found
        recorded: dict[str, Any] = {}
        for method in methods:
            recorded[method] = self.method(defining, node, method)
        # Follow **kwargs forwards to other methods of the class.
        todo = [m for m in methods if recorded[m] is not None]
        while todo:
            method_record = recorded[todo.pop(0)]
            target = method_record.get("forwards_kwargs_to")
            if target and target not in recorded and target.isidentifier():
                recorded[target] = self.method(defining, node, target)
                if recorded[target] is not None:
                    todo.append(target)
        return {
            "defined_in": defining.name,
            "bases": [ast.unparse(base) for base in node.bases],
            "decorators": [ast.unparse(decorator) for decorator in node.decorator_list],
            "methods": dict(sorted(recorded.items())),
        }

    def enum_record(self, module: str, name: str) -> dict[str, Any] | None:
        found = self._class(module, name)
        if found is None:
            return None
        defining, node = found
        members: dict[str, Any] = {}
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if isinstance(target, ast.Name) and not target.id.startswith("_"):
                    try:
                        members[target.id] = ast.literal_eval(stmt.value)
                    except ValueError:
                        members[target.id] = ast.unparse(stmt.value)
        return {
            "defined_in": defining.name,
            "bases": [ast.unparse(base) for base in node.bases],
            "members": members,
        }

    def returned_classes(self, module: str, function: str) -> list[str]:
        """Class names in the return annotation of ``module.function``."""
        found = self.exported(module, function)
        if found is None or found[1].kind != "def":
            return []
        node = found[1].node
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        if node.returns is None:
            return []
        names: list[str] = []
        for sub in ast.walk(node.returns):
            text = sub.value if isinstance(sub, ast.Constant) else None
            if isinstance(sub, ast.Name):
                text = sub.id
            if isinstance(text, str):
                for part in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
                    resolved = self._class(found[0].name, part)
                    if resolved is not None and part not in names:
                        names.append(part)
        return names

    def constructed_classes(self, module: str, function: str) -> dict[str, str]:
        """Classes ``module.function`` instantiates in a ``return Class(...)``.

        Maps each class name to the module it resolves in: the function's own module, or
        the module of an import inside the function body (a lazy import).
        """
        found = self.exported(module, function)
        if found is None or found[1].kind != "def":
            return {}
        defining = found[0]
        local: dict[str, tuple[str, str]] = {}
        for node in ast.walk(found[1].node):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(defining, node.level, node.module)
                for alias in node.names:
                    local[alias.asname or alias.name] = (base, alias.name)
        names: dict[str, str] = {}
        returns = [node for node in ast.walk(found[1].node) if isinstance(node, ast.Return)]
        for node in sorted(returns, key=lambda node: (node.lineno, node.col_offset)):
            if not (
                isinstance(node, ast.Return)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
            ):
                continue
            name = node.value.func.id
            where, original = local.get(name, (defining.name, name))
            if original == name and self._class(where, name) is not None:
                names.setdefault(name, where)
        return names


# -------------------------------------------------------------------------- hazards


def _own_expressions(stmt: ast.stmt) -> Iterator[ast.AST]:
    """Nodes a module-level statement evaluates itself (nested statements come separately)."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
        roots: list[ast.AST] = [*stmt.decorator_list, *stmt.args.defaults]
        roots += [default for default in stmt.args.kw_defaults if default is not None]
    elif isinstance(stmt, ast.ClassDef):
        roots = [*stmt.decorator_list, *stmt.bases]
        for inner in stmt.body:
            roots.extend(_own_expressions(inner) if isinstance(inner, ast.FunctionDef) else [inner])
    elif isinstance(stmt, ast.If):
        roots = [stmt.test]
    elif isinstance(stmt, ast.With):
        roots = [item.context_expr for item in stmt.items]
    elif isinstance(stmt, ast.Try):
        roots = []
    else:
        roots = [stmt]
    for root in roots:
        for node in ast.walk(root):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            yield node


def _import_time_calls(module: _Module, errors: tuple[str, ...]) -> Iterator[ast.Call]:
    """Calls made while the module body runs on a CPU machine, outside handlers of ``errors``."""
    for stmt, context in module.statements:
        if context[1] or _catches(context, *errors):
            continue
        for node in _own_expressions(stmt):
            if isinstance(node, ast.Call):
                yield node


def _cudart_hazard(package: _Package) -> str | None:
    """A module-level call that reaches ``assert ..., "libcudart is not loaded ..."``."""
    asserting = {
        name for name, (_path, text) in package.source.files.items() if _CUDART_MESSAGE in text
    }
    if not asserting or not package.source.is_module("flashinfer.comm"):
        return None
    for module_name, _why in package.import_closure("flashinfer.comm", ("AssertionError",)):
        module = package.get(module_name)
        assert module is not None
        for node in _import_time_calls(module, ("AssertionError",)):
            if not isinstance(node.func, ast.Name):
                continue
            found = package.resolve(module_name, node.func.id)
            if found is None or found[1].kind not in ("class", "def"):
                continue
            defining, binding = found
            if defining.name not in asserting:
                continue
            for sub in ast.walk(binding.node):
                if (
                    isinstance(sub, ast.Assert)
                    and isinstance(sub.msg, ast.Constant)
                    and isinstance(sub.msg.value, str)
                    and _CUDART_MESSAGE in sub.msg.value
                    and _runs_on_call(binding.node, sub)
                ):
                    return (
                        f"{module.path}:{node.lineno}: {ast.unparse(node)} runs at import; "
                        f"it asserts {sub.msg.value!r} at {defining.path}:{sub.lineno}"
                    )
    return None


def _runs_on_call(definition: ast.AST, target: ast.AST) -> bool:
    """Is ``target`` in the code that calling ``definition`` runs (``__init__`` for a class)?"""
    if isinstance(definition, ast.ClassDef):
        for stmt in definition.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                return any(sub is target for sub in ast.walk(stmt))
        return False
    return True


def _gpu_query_hazard(package: _Package) -> str | None:
    """A ``torch.cuda.<query>(...)`` that ``import flashinfer`` runs on a machine without a GPU.

    A query inside ``try``/``except`` still counts (it runs, and on a GPU machine it
    initializes CUDA at import); one behind ``if torch.cuda.is_available():`` does not.
    """
    errors: tuple[str, ...] = ()
    for module_name, why in package.import_closure("flashinfer", errors):
        module = package.get(module_name)
        assert module is not None
        text = package.source.files[module_name][1]
        if not any(query in text for query in _GPU_QUERIES):
            continue
        for node in _import_time_calls(module, errors):
            if (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in _GPU_QUERIES
                and ast.unparse(node.func.value).endswith("cuda")
            ):
                return f"{module.path}:{node.lineno}: {ast.unparse(node)} (imported via {why})"
    return None


def _triton_hazard(package: _Package) -> str | None:
    """A module-level ``import triton`` on the path of ``import flashinfer.comm``."""
    if not package.source.is_module("flashinfer.comm"):
        return None
    errors = ("ImportError", "ModuleNotFoundError")
    closure = package.import_closure("flashinfer.comm", errors, on_cpu=False)
    for module_name, why in closure:
        module = package.get(module_name)
        assert module is not None
        for target, line, context in module.imports:
            if target.split(".")[0] == "triton" and not _catches(context, *errors):
                return f"{module.path}:{line}: import {target} (imported via {why})"
    return None


def _hazard(evidence: str | None) -> dict[str, Any]:
    return {"value": evidence is not None, "evidence": evidence}


# --------------------------------------------------------------------------- record


def record_release(path: Path, *, release: str | None = None) -> dict[str, Any]:
    """Record one release.

    Parameters
    ----------
    path
        A ``.whl``, an sdist ``.tar.gz`` or a directory containing ``flashinfer/``.
    release
        The version to record; by default taken from the file name.

    Returns
    -------
    dict
        The JSON-ready record (see ``signatures/README.md``).
    """
    version = release or version_from_filename(path.name)
    if version is None:
        raise RecordingError(f"cannot tell the release version of {path}; pass release=")
    package = _Package(read_release(path))
    comm_exists = package.source.is_module("flashinfer.comm")
    recorder = _Recorder(package)

    functions: dict[str, Any] = {
        name: recorder.function("flashinfer.comm", name) if comm_exists else None
        for name in COMM_FUNCTIONS
    }
    enums = {
        name: recorder.enum_record("flashinfer.comm", name) if comm_exists else None
        for name in COMM_ENUMS
    }
    factory = "create_allreduce_fusion_workspace"
    annotated = recorder.returned_classes("flashinfer.comm", factory) if comm_exists else []
    constructed = recorder.constructed_classes("flashinfer.comm", factory) if comm_exists else {}
    # The annotated (abstract) class first, then the concrete classes built per backend.
    workspace_classes = [*annotated, *(name for name in constructed if name not in annotated)]
    classes: dict[str, Any] = {}
    for name in sorted({*COMM_CLASSES, *workspace_classes}):
        methods = ("__init__", "destroy")
        found = recorder.class_record("flashinfer.comm", name, methods) if comm_exists else None
        if found is not None:
            found["exported"] = True
        elif comm_exists and name in workspace_classes:
            found = recorder.class_record(constructed[name], name, methods)
            if found is not None:
                found["exported"] = False
        classes[name] = found
    classes["TorchDistBackend"] = _torch_dist_backend(recorder) if comm_exists else None

    attention = {name: _wrapper(recorder, name) for name in ATTENTION_WRAPPERS}
    return {
        "schema": SCHEMA_VERSION,
        "release": version,
        "source": {"filename": path.name, "sha256": _sha256(path)},
        "import": {
            "comm_requires_cuda_runtime": _hazard(_cudart_hazard(package)),
            "import_queries_gpu": _hazard(_gpu_query_hazard(package)),
            "comm_requires_triton": _hazard(_triton_hazard(package)),
        },
        "comm": {
            "exists": comm_exists,
            "functions": functions,
            "enums": enums,
            "classes": classes,
            "workspace_classes": workspace_classes,
        },
        "attention": attention,
    }


def _torch_dist_backend(recorder: _Recorder) -> dict[str, Any] | None:
    for module in TORCH_DIST_BACKEND_MODULES[::-1]:
        if not recorder.package.source.is_module(module):
            continue
        found = recorder.class_record(module, "TorchDistBackend", ("__init__", "bcast"))
        if found is None:
            continue
        defining = recorder._class(module, "TorchDistBackend")
        assert defining is not None
        bcast = next(
            (
                stmt
                for owner_module, owner in recorder._mro(*defining)
                for stmt in owner.body
                if isinstance(stmt, ast.FunctionDef) and stmt.name == "bcast"
            ),
            None,
        )
        found["module"] = module
        found["bcast_root_is_group_local"] = bcast is not None and calls_named(
            bcast, "get_global_rank"
        )
        return found
    return None


def _wrapper(recorder: _Recorder, name: str) -> dict[str, Any] | None:
    found = recorder.class_record("flashinfer", name, ("__init__", "plan"))
    if found is None:
        return None
    plan = found["methods"].get("plan")
    target = plan.get("forwards_kwargs_to") if plan else None
    found["plan_forwards_to"] = target if target in found["methods"] else None
    return found


def _sha256(path: Path) -> str | None:
    if path.is_dir():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dump_record(record: Mapping[str, Any]) -> str:
    """Serialize a record deterministically (sorted keys, two-space indent, final newline)."""
    return json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_record(record: Mapping[str, Any], directory: Path) -> Path:
    """Write ``<directory>/<release>.json`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{record['release']}.json"
    text = dump_record(record)
    target.write_text(text, encoding="utf-8", newline="\n")
    return target
