"""Names in a release's modules, resolved the way ``import`` would bind them.

Each module is parsed once, on first use, and its import-time statements (module level,
and inside ``if``, ``try`` and ``with`` blocks) are turned into bindings. A name is then
followed through re-exports (``from .allreduce import allreduce_fusion``, ``from .x
import *`` with or without ``__all__``, ``name = other``) to the statement that defines
it. Only names bound in a module's own namespace count, so "found" matches ``hasattr``
on the imported module, and :meth:`Package.public_names` lists what ``dir`` shows of it
but for submodules bound as a side effect of importing them. Every import run at import
time is kept too, with the exceptions caught around it and whether it only runs on a GPU
machine, for the import hazards.
"""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from fi_compat._recorder.archive import Source
from fi_compat._recorder.trees import walk
from fi_compat._surface import FLASHINFER
from fi_compat.errors import RecordingError

__all__ = [
    "MAX_DEPTH",
    "TOP",
    "Binding",
    "Context",
    "Module",
    "Package",
    "absolute",
    "catches",
    "collector_paused",
]

#: How far re-exports, assignments and base classes are followed before giving up.
MAX_DEPTH = 12

#: Context of a module-level statement: the exception names caught around it ("*" for
#: everything) and whether it only runs when ``torch.cuda.is_available()``.
Context = tuple[frozenset[str], bool]
TOP: Context = (frozenset(), False)
_CATCH_ALL = frozenset({"Exception", "BaseException"})
#: The constant that is true only for type checkers.
_TYPING = "TYPE_CHECKING"

BindingKind = Literal["def", "class", "import", "module", "assign"]


@dataclass
class Binding:
    """How a module-level name is bound."""

    kind: BindingKind
    node: ast.AST
    target_module: str | None = None  # for "import" and "module": where the name comes from
    target_name: str | None = None  # for "import": the name in that module
    fallback: bool = False  # bound in an ``except`` handler
    #: For type checkers only, not bound at import: under ``if TYPE_CHECKING:``, or a bare
    #: annotation (``name: int``).
    annotation_only: bool = False
    #: Inside an ``if``, a ``try`` or a ``with`` at module level: bound only when its
    #: condition holds or what it guards imports (an optional dependency, a GPU, a flag).
    guarded: bool = False


@dataclass
class Module:
    """One parsed module of the release and what its import-time statements bind and run."""

    name: str
    path: str
    tree: ast.Module
    is_package: bool
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    star_imports: list[str] = field(default_factory=list)
    #: (imported module, line, context) of every import run at import time.
    imports: list[tuple[str, int, Context]] = field(default_factory=list)
    statements: list[tuple[ast.stmt, Context]] = field(default_factory=list)
    all_names: list[str] | None = None
    #: The line of a ``sys.modules[__name__] = ...`` run at import: the module hands its
    #: importers another module, whose names its source does not tell (None without one).
    replaced_at: int | None = None


def absolute(module: Module, level: int, target: str | None) -> str:
    """The absolute module name of ``from <level dots><target> import ...`` in ``module``."""
    if level == 0:
        return target or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{target}" if target else package


def _target_names(target: ast.expr) -> list[str]:
    """The names an assignment target binds (``a``, ``a, (b, *c)``); attributes and
    subscripts bind none."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in _target_names(element)]
    return []


def _replaces_itself(target: ast.expr) -> bool:
    """``sys.modules[__name__]`` as an assignment target."""
    return (
        isinstance(target, ast.Subscript)
        and isinstance(target.slice, ast.Name)
        and target.slice.id == "__name__"
        and ast.unparse(target.value).endswith("sys.modules")
    )


def _caught(handlers: list[ast.ExceptHandler]) -> frozenset[str]:
    names: set[str] = set()
    for handler in handlers:
        if handler.type is None:
            return frozenset({"*"})
        for node in walk(handler.type):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
    return frozenset({"*"}) if names & _CATCH_ALL else frozenset(names)


def catches(context: Context, *errors: str) -> bool:
    """A failure raising one of ``errors`` in this context is caught (does not fail import)."""
    caught = context[0]
    return bool(errors) and ("*" in caught or any(error in caught for error in errors))


def _type_checking_only(body: list[ast.stmt]) -> set[int]:
    """``id`` of every statement inside an import-time ``if TYPE_CHECKING:`` body."""
    found: set[int] = set()
    for stmt, _, _ in _import_time_statements(body):
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test).rpartition(".")[2] == _TYPING:
            found.update(id(node) for inner in stmt.body for node in walk(inner))
    return found


def _nested_statements(body: list[ast.stmt]) -> set[int]:
    """The ids of the statements nested in a module-level ``if``, ``try`` or ``with``."""
    found: set[int] = set()
    for stmt in body:
        if isinstance(stmt, ast.If | ast.Try | ast.With):
            found.update(id(node) for node in walk(stmt) if node is not stmt)
    return found


def _needs_gpu_to_run(test: ast.expr) -> bool:
    text = ast.unparse(test)
    return "is_available" in text or "device_count" in text


def _import_time_statements(
    body: list[ast.stmt], context: Context = TOP, fallback: bool = False
) -> Iterator[tuple[ast.stmt, Context, bool]]:
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


@contextmanager
def collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector off while a release is modelled.

    A :class:`Package` keeps every tree it parses, millions of objects that live as long as
    it does and hold no cycles to reclaim; with the collector on, each collection walks all of
    them again, which made modelling a 0.7 release six times slower than its parsing alone
    (measured: parsing every module of 0.7.2.post1 and keeping the trees took 84 s with the
    collector on and 13 s with it off). The collector is restored as it was on leaving.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Package:
    """The modules of one release, parsed lazily, and name resolution across them."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._modules: dict[str, Module | None] = {}

    def get(self, name: str) -> Module | None:
        """The parsed module ``name``; None when the release has no such module."""
        if name not in self._modules:
            self._modules[name] = self._parse(name)
        return self._modules[name]

    def parsed(self, name: str) -> bool:
        """``name`` was looked for already (parsed, or found missing): :meth:`get` of it
        parses nothing more."""
        return name in self._modules

    def _parse(self, name: str) -> Module | None:
        found = self.source.files.get(name)
        if found is None:
            return None
        path, text = found
        try:
            tree = ast.parse(text, filename=path)
        except SyntaxError as error:
            raise RecordingError(f"cannot parse {path}: {error}") from error
        module = Module(name, path, tree, path.endswith("__init__.py"))
        typing_only = _type_checking_only(tree.body)
        nested = _nested_statements(tree.body)
        for stmt, context, fallback in _import_time_statements(tree.body):
            module.statements.append((stmt, context))
            self._bind(module, stmt, context, fallback, id(stmt) in typing_only, id(stmt) in nested)
        return module

    def _bind(
        self,
        module: Module,
        stmt: ast.stmt,
        guarded: Context,
        fallback: bool,
        typing_only: bool,
        nested: bool = False,
    ) -> None:
        def add(name: str, binding: Binding) -> None:
            binding.fallback = fallback
            binding.guarded = nested
            binding.annotation_only = binding.annotation_only or typing_only
            module.bindings.setdefault(name, []).append(binding)

        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            add(stmt.name, Binding("def", stmt))
        elif isinstance(stmt, ast.ClassDef):
            add(stmt.name, Binding("class", stmt))
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                module.imports.append((alias.name, stmt.lineno, guarded))
                bound = alias.asname or alias.name.partition(".")[0]
                target = alias.name if alias.asname else alias.name.partition(".")[0]
                add(bound, Binding("module", stmt, target_module=target))
        elif isinstance(stmt, ast.ImportFrom):
            base = absolute(module, stmt.level, stmt.module)
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
                    Binding("import", stmt, target_module=base, target_name=alias.name),
                )
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(_replaces_itself(target) for target in targets):
                module.replaced_at = stmt.lineno
            for assigned in targets:
                if isinstance(assigned, ast.Tuple | ast.List | ast.Starred):
                    # ``_A, _B = 1, 2`` and ``first, *rest = ...`` bind every name in them.
                    for name in _target_names(assigned):
                        add(name, Binding("assign", stmt))
                    continue
                if isinstance(assigned, ast.Name):
                    if assigned.id == "__all__" and stmt.value is not None:
                        try:
                            value = ast.literal_eval(stmt.value)
                        except ValueError:
                            value = None
                        if isinstance(value, list | tuple):
                            module.all_names = [str(item) for item in value]
                    bare = isinstance(stmt, ast.AnnAssign) and stmt.value is None
                    add(assigned.id, Binding("assign", stmt, annotation_only=bare))
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            # The loop variable stays bound after a module-level loop (its body is not read:
            # a loop is no place for definitions the recorder could follow).
            for name in _target_names(stmt.target):
                add(name, Binding("assign", stmt))
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                if item.optional_vars is not None:
                    for name in _target_names(item.optional_vars):
                        add(name, Binding("assign", stmt))
        elif isinstance(stmt, ast.Delete) and not nested:
            # ``del _helper`` at the top level: the name is gone after the import.
            for deleted in stmt.targets:
                for name in _target_names(deleted):
                    module.bindings.pop(name, None)

    def resolve(self, module_name: str, name: str, depth: int = 0) -> tuple[Module, Binding] | None:
        """Follow ``name`` in ``module_name``'s namespace to the module and statement binding it.

        None when the module does not bind the name at import. A name imported from outside
        the release (``torch``, ``typing``) resolves to the importing statement.
        """
        if depth > MAX_DEPTH:
            return None
        module = self.get(module_name)
        if module is None:
            return None
        bindings = module.bindings.get(name)
        if bindings:
            return self._follow(module, name, bindings, depth)
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

    def conditional(self, module_name: str, name: str, depth: int = 0) -> bool:
        """``name`` is bound in ``module_name`` only when a guarded statement succeeds, there
        or along the imports that bring it there (:attr:`Binding.guarded`): every binding of
        it sits in an ``if``, ``try`` or ``with`` and no ``except`` handler binds it instead
        (the CuTe DSL APIs 0.7.x re-exports under ``contextlib.suppress(ImportError)``); or
        only when one fails: every binding of it sits in an ``except`` handler."""
        module = self.get(module_name)
        if module is None or depth > MAX_DEPTH:
            return False
        bindings = module.bindings.get(name)
        if not bindings:
            for star in module.star_imports:
                if self.resolve(star, name, depth + 1) is not None:
                    return self.conditional(star, name, depth + 1)
            return False
        primary = [b for b in bindings if not b.fallback]
        if not primary:
            # Bound only in an ``except`` handler: only when the guarded code fails
            # (``except ImportError: from cutlass.base_dsl import ... as _ema``).
            return True
        here = all(b.guarded for b in primary) and len(primary) == len(bindings)
        binding = (primary or bindings)[-1]
        if here or binding.kind != "import":
            return here
        assert binding.target_module is not None
        assert binding.target_name is not None
        if self.get(binding.target_module) is None:
            return False
        return self.conditional(binding.target_module, binding.target_name, depth + 1)

    def public_names(self, module_name: str, depth: int = 0) -> list[str]:
        """The public names ``import module_name`` binds in its namespace, sorted.

        Its literal ``__all__`` when it has one; else every name its import-time statements
        bind, and every public name of each release module it star-imports. Names starting
        with ``_``, names bound for type checkers only, submodules bound only as a side
        effect of importing them and names served by a module ``__getattr__`` are left out.
        Empty when the release has no such module.

        Raises
        ------
        RecordingError
            The module star-imports a module outside the release, whose names the source
            cannot tell.
        """
        module = self.get(module_name)
        if module is None or depth > MAX_DEPTH:
            return []
        if module.all_names is not None:
            return sorted({name for name in module.all_names if not name.startswith("_")})
        names = {
            name
            for name, bindings in module.bindings.items()
            if not name.startswith("_") and not all(b.annotation_only for b in bindings)
        }
        for star in module.star_imports:
            if not self.source.is_module(star):
                raise RecordingError(
                    f"cannot list the names of {module_name}: {module.path} star-imports "
                    f"{star}, which is not in the release"
                )
            names.update(self.public_names(star, depth + 1))
        return sorted(names)

    def _follow(
        self, module: Module, name: str, bindings: list[Binding], depth: int
    ) -> tuple[Module, Binding] | None:
        """The definition behind the binding of ``name`` that wins at import."""
        # A binding in an ``except`` handler only stands in when the ``try`` failed.
        binding = ([b for b in bindings if not b.fallback] or bindings)[-1]
        if binding.kind == "import":
            assert binding.target_module is not None
            assert binding.target_name is not None
            # As ``from package import name`` does: the package's own binding of the name
            # first, and only without one the submodule of that name.
            found = self.resolve(binding.target_module, binding.target_name, depth + 1)
            if found is not None:
                return found
            submodule = f"{binding.target_module}.{binding.target_name}"
            if self.source.is_module(submodule):
                sub = self.get(submodule)
                assert sub is not None
                return sub, Binding("module", binding.node, target_module=submodule)
            if self.source.is_module(binding.target_module):
                return None
            return module, binding
        if binding.kind == "assign" and isinstance(binding.node, ast.Assign):
            value = binding.node.value
            if isinstance(value, ast.Name) and value.id != name:
                found = self.resolve(module.name, value.id, depth + 1)
                if found is not None:
                    return found
        return module, binding

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
                    if target.split(".")[0] != FLASHINFER or catches(context, *errors):
                        continue
                    if on_cpu and context[1]:
                        continue
                    visit(target, f"{module.path}:{line}")

        visit(start, "start")
        return order
