"""What a FlashInfer release's own files say, read without fi-compat's records.

The upgrade preview (``fi-compat scan``) judges an engine's uses from the recorded releases.
Its tests must not grade it with the same records, so this module answers the same
questions from the published wheel itself (downloaded once through
:class:`tools.releases.ReleaseCache`): is a module there, does a module bind a name, what
parameters does a function or method declare, does importing ``flashinfer.comm`` assert that
the CUDA runtime is loaded. The reading is Python's ``ast`` on the release's ``*.py`` files
and nothing else: no import, no fi-compat code.

Every answer is three-valued. ``True`` and ``False`` are proven from the files; ``None``
means the files do not settle it statically (a module ``__getattr__``, a star import from
outside FlashInfer, a class whose bases are not FlashInfer's, a name bound by assignment to
an expression), and a test that needs a proof counts that as unproven.
"""

from __future__ import annotations

import ast
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, cached_property

from tools.releases import ReleaseCache

__all__ = ["Parameters", "ReleaseFiles", "release_files"]

#: The names every module object has, whatever its source binds.
MODULE_DUNDERS = frozenset(
    {
        "__name__",
        "__file__",
        "__doc__",
        "__spec__",
        "__loader__",
        "__package__",
        "__builtins__",
        "__dict__",
        "__cached__",
    }
)
_DEPTH = 12
#: Bases from the standard library that add no public names a FlashInfer class is used by.
_PLAIN_BASES = frozenset(
    {"object", "ABC", "abc.ABC", "Generic", "typing.Generic", "Protocol", "typing.Protocol"}
)


@dataclass(frozen=True)
class Parameters:
    """What a ``def`` declares (``self``/``cls`` left out for methods)."""

    positional: tuple[str, ...]
    positional_only: tuple[str, ...]
    keyword_only: tuple[str, ...]
    var_positional: bool
    var_keyword: bool

    def takes_keyword(self, name: str) -> bool:
        if name in self.keyword_only:
            return True
        if name in self.positional and name not in self.positional_only:
            return True
        return self.var_keyword


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> Parameters:
    arguments = node.args
    positional = [a.arg for a in (*arguments.posonlyargs, *arguments.args)]
    decorators = {ast.unparse(d) for d in node.decorator_list}
    if method and "staticmethod" not in decorators and positional:
        positional = positional[1:]
    return Parameters(
        tuple(positional),
        tuple(a.arg for a in arguments.posonlyargs),
        tuple(a.arg for a in arguments.kwonlyargs),
        arguments.vararg is not None,
        arguments.kwarg is not None,
    )


def _fields(node: ast.ClassDef) -> Parameters | None:
    """The ``__init__`` parameters a ``@dataclass`` without bases generates: its annotated
    fields in order, ``ClassVar`` and ``field(init=False)`` left out."""
    if node.bases or any(getattr(s, "name", None) == "__init__" for s in node.body):
        return None
    names = []
    for statement in node.body:
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            continue
        if "ClassVar" in ast.unparse(statement.annotation):
            continue
        if statement.value is not None and "init=False" in ast.unparse(statement.value):
            continue
        names.append(statement.target.id)
    return Parameters(tuple(names), (), (), False, False)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement a module runs at import, into every branch of if/try/with/for."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.If | ast.For | ast.While | ast.With):
            yield from _statements(statement.body)
            yield from _statements(getattr(statement, "orelse", []))
        elif isinstance(statement, ast.Try):
            yield from _statements(statement.body)
            for handler in statement.handlers:
                yield from _statements(handler.body)
            yield from _statements(statement.orelse)
            yield from _statements(statement.finalbody)


def _targets(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _targets(element)
    elif isinstance(target, ast.Starred):
        yield from _targets(target.value)


@dataclass(frozen=True)
class _Module:
    """One module's top-level bindings."""

    name: str
    package: bool
    #: name -> the statements binding it (a def, class, import or assignment).
    bindings: dict[str, list[ast.stmt]]
    #: modules star-imported, absolute.
    stars: tuple[str, ...]
    #: True when the module defines ``__getattr__`` (any name may resolve).
    dynamic: bool
    #: the literal ``__all__`` where there is one.
    exported: frozenset[str] | None


class ReleaseFiles:
    """One release's files, read statically."""

    def __init__(self, version: str) -> None:
        self.version = version
        wheel = ReleaseCache().download(f"flashinfer-python=={version}", wheel_only=True)
        self._archive = zipfile.ZipFile(wheel)

    def close(self) -> None:
        self._archive.close()

    @cached_property
    def files(self) -> frozenset[str]:
        return frozenset(self._archive.namelist())

    def _path(self, module: str) -> tuple[str, bool] | None:
        base = module.replace(".", "/")
        if f"{base}/__init__.py" in self.files:
            return f"{base}/__init__.py", True
        if f"{base}.py" in self.files:
            return f"{base}.py", False
        return None

    def is_module(self, module: str) -> bool:
        return self._path(module) is not None

    def source(self, module: str) -> str | None:
        found = self._path(module)
        if found is None:
            return None
        return self._archive.read(found[0]).decode("utf-8", errors="replace")

    @cache  # noqa: B019 - one object per release, kept for the run
    def tree(self, module: str) -> ast.Module:
        """The module's parsed source (an empty module where there is no such file)."""
        found = self._path(module)
        if found is None:
            return ast.Module(body=[], type_ignores=[])
        return ast.parse(self._archive.read(found[0]), found[0])

    @cache  # noqa: B019 - one object per release, kept for the run
    def _module(self, module: str) -> _Module | None:
        found = self._path(module)
        if found is None:
            return None
        _path, package = found
        tree = self.tree(module)
        bindings: dict[str, list[ast.stmt]] = {}
        stars: list[str] = []
        dynamic = False
        exported: frozenset[str] | None = None
        for statement in _statements(tree.body):
            names: list[str] = []
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.append(statement.name)
                dynamic = dynamic or statement.name == "__getattr__"
            elif isinstance(statement, ast.Import):
                names.extend(
                    alias.asname or alias.name.partition(".")[0] for alias in statement.names
                )
            elif isinstance(statement, ast.ImportFrom):
                source = self.absolute(module, package, statement)
                for alias in statement.names:
                    if alias.name == "*":
                        stars.append(source)
                    else:
                        names.append(alias.asname or alias.name)
            elif isinstance(statement, ast.Assign):
                for target in statement.targets:
                    names.extend(_targets(target))
                if any(isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets):
                    try:
                        exported = frozenset(ast.literal_eval(statement.value))
                    except (ValueError, TypeError, SyntaxError):
                        exported = None
            elif isinstance(statement, (ast.AnnAssign | ast.AugAssign, ast.For)):
                names.extend(_targets(statement.target))
            elif isinstance(statement, ast.With):
                for item in statement.items:
                    if item.optional_vars is not None:
                        names.extend(_targets(item.optional_vars))
            for name in names:
                bindings.setdefault(name, []).append(statement)
        return _Module(module, package, bindings, tuple(stars), dynamic, exported)

    @staticmethod
    def absolute(module: str, package: bool, statement: ast.ImportFrom) -> str:
        if not statement.level:
            return statement.module or ""
        parts = module.split(".")
        if not package:
            parts = parts[:-1]
        if statement.level > 1:
            parts = parts[: len(parts) - (statement.level - 1)]
        base = ".".join(parts)
        return f"{base}.{statement.module}" if statement.module else base

    # ---------------------------------------------------------------------- names

    def binds(self, module: str, name: str, depth: int = 0) -> bool | None:
        """Whether ``from module import name`` works: the module binds ``name`` at import
        (in any branch), or ``module.name`` is a submodule. ``None`` where a module
        ``__getattr__`` or a star import from outside FlashInfer leaves it open."""
        found = self._module(module)
        if found is None:
            return False
        if name in found.bindings or name in MODULE_DUNDERS:
            return True
        if found.package and name == "__path__":
            return True
        if found.package and self.is_module(f"{module}.{name}"):
            return True
        undecided = found.dynamic
        for source in found.stars:
            if not source.startswith("flashinfer") or depth > _DEPTH:
                undecided = True
                continue
            star = self._module(source)
            if star is None:
                continue
            if star.exported is not None:
                if name in star.exported:
                    return True
                continue
            if name.startswith("_"):
                continue
            answer = self.binds(source, name, depth + 1)
            if answer:
                return True
            undecided = undecided or answer is None
        return None if undecided else False

    def definition(
        self, module: str, name: str, depth: int = 0
    ) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] | None:
        """The ``def`` or ``class`` that ``module.name`` is, followed through FlashInfer's
        own imports and plain re-assignments; None where that is not one definition."""
        found = self._module(module)
        if found is None or depth > _DEPTH:
            return None
        statements = found.bindings.get(name)
        if not statements:
            for source in found.stars:
                if source.startswith("flashinfer") and self.binds(source, name):
                    return self.definition(source, name, depth + 1)
            return None
        answers = []
        for statement in statements:
            answer = self._definition_of(module, found, name, statement, depth)
            if answer is None:
                return None
            answers.append(answer)
        last = answers[-1]
        if all(home == last[0] and node is last[1] for home, node in answers):
            return last  # one statement, or each leads to the same node: nothing to compare
        # Several definitions: one only when they are alike (a class's ast.dump is costly).
        alike = {(home, ast.dump(node)) for home, node in answers}
        return last if len(alike) == 1 else None

    def _definition_of(
        self, module: str, found: _Module, name: str, statement: ast.stmt, depth: int
    ) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] | None:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return module, statement
        if isinstance(statement, ast.ImportFrom):
            source = self.absolute(module, found.package, statement)
            for alias in statement.names:
                if (alias.asname or alias.name) == name and source.startswith("flashinfer"):
                    return self.definition(source, alias.name, depth + 1)
            return None
        if (
            isinstance(statement, ast.Assign)
            and isinstance(statement.value, ast.Name)
            and statement.value.id != name
        ):
            return self.definition(module, statement.value.id, depth + 1)
        return None

    def _member(
        self, module: str, cls: ast.ClassDef, name: str, depth: int = 0
    ) -> tuple[str, ast.stmt] | bool | None:
        """A class's member: its defining statement, True for a member bound otherwise,
        False when the class and its FlashInfer bases do not bind it, None when a base is
        not FlashInfer's (or cannot be followed)."""
        for statement in cls.body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if statement.name == name:
                    return module, statement
            elif isinstance(statement, ast.Assign | ast.AnnAssign):
                targets = (
                    statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                )
                if any(name in _targets(t) for t in targets):
                    return True
        if name.startswith("__") and name.endswith("__"):
            return True  # object's own (__init__, __call__ via type, __doc__ ...)
        # a class with __getattr__ may hand out any name: the files alone do not settle it
        undecided = any(
            isinstance(s, ast.FunctionDef) and s.name == "__getattr__" for s in cls.body
        )
        for base in cls.bases:
            if ast.unparse(base).partition("[")[0] in _PLAIN_BASES:
                continue  # a standard-library base hands out none of FlashInfer's names
            if isinstance(base, ast.Name | ast.Attribute) and depth <= _DEPTH:
                dotted = ast.unparse(base)
                head, _, rest = dotted.partition(".")
                defined = self.definition(module, head) if not rest else None
                if defined is not None and isinstance(defined[1], ast.ClassDef):
                    answer = self._member(defined[0], defined[1], name, depth + 1)
                    if answer is False:
                        continue
                    return answer
            undecided = True
        return None if undecided else False

    def _returned(
        self, module: str, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    ) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] | None:
        """The FlashInfer class a function's return annotation names, where it names one
        class of the function's module (or one it imports)."""
        returns = getattr(node, "returns", None)
        if isinstance(returns, ast.Constant) and isinstance(returns.value, str):
            returns = ast.parse(returns.value, mode="eval").body
        if not isinstance(returns, ast.Name):
            return None
        found = self.definition(module, returns.id)
        return found if found is not None and isinstance(found[1], ast.ClassDef) else None

    def _subclass_defines(self, module: str, cls: str, name: str) -> bool | None:
        """Whether a class of ``module``'s package (``flashinfer.comm`` for
        ``flashinfer.comm.workspace_base``) that names ``cls`` as a base defines ``name``;
        None where none does but one has a ``__getattr__`` that may hand it out."""
        package = ".".join(module.split(".")[:2])
        prefix = package.replace(".", "/") + "/"
        served = False
        for file in sorted(self.files):
            if not (file.startswith(prefix) and file.endswith(".py")):
                continue
            dotted = file[:-3].replace("/", ".").removesuffix(".__init__")
            for node in ast.walk(self.tree(dotted)):
                if not isinstance(node, ast.ClassDef) or not any(
                    ast.unparse(base).rpartition(".")[2] == cls for base in node.bases
                ):
                    continue
                names = {getattr(item, "name", None) for item in node.body}
                if name in names:
                    return True
                served = served or "__getattr__" in names
        return None if served else False

    def _split(self, path: str, *, whole: bool) -> tuple[str, list[str]] | None:
        """``path`` as its longest importable module prefix and the names after it (the
        whole path may be the module only where ``whole``); None without such a prefix."""
        parts = path.split(".")
        for cut in range(len(parts) if whole else len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            if self.is_module(module):
                return module, parts[cut:]
        return None

    def resolves(self, path: str) -> bool | None:
        """Whether the dotted ``path`` (``flashinfer.comm.Mapping.rank``) resolves: the
        longest importable module prefix, then a name it binds, then members of classes."""
        split = self._split(path, whole=True)
        if split is None:
            return False
        module, rest = split
        if not rest:
            return True
        bound = self.binds(module, rest[0])
        if not bound or len(rest) == 1:
            return bound
        defined = self.definition(module, rest[0])
        if defined is not None and not isinstance(defined[1], ast.ClassDef):
            defined = self._returned(*defined)
        if defined is None or not isinstance(defined[1], ast.ClassDef):
            return None
        owner, cls = defined[0], defined[1]
        for index, name in enumerate(rest[1:], start=1):
            member = self._member(owner, cls, name)
            if member is False:
                # a factory returns a subclass: one that defines it, or may serve it
                member = self._subclass_defines(owner, cls.name, name)
            if member is None or member is False or index == len(rest) - 1:
                return member if member is None or member is False else True
            if member is True or not isinstance(member[1], ast.ClassDef):
                return None
            owner, cls = member[0], member[1]
        return True

    def parameters(self, path: str) -> Parameters | None:
        """The parameters a call of ``path`` meets: a function's, a method's, a class's
        ``__init__``; None where the files do not give one ``def``."""
        split = self._split(path, whole=False)
        if split is None:
            return None
        module, rest = split
        defined = self.definition(module, rest[0])
        if defined is None:
            return None
        owner, node = defined
        method = False
        for name in rest[1:]:
            if not isinstance(node, ast.ClassDef):
                return None
            member = self._member(owner, node, name)
            if not isinstance(member, tuple) or not isinstance(
                member[1], ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                return None
            owner, node = member[0], member[1]
            method = True
        if isinstance(node, ast.ClassDef):
            if any(ast.unparse(d).startswith("dataclass") for d in node.decorator_list):
                return _fields(node)
            init = self._member(owner, node, "__init__")
            if not isinstance(init, tuple) or not isinstance(
                init[1], ast.FunctionDef | ast.AsyncFunctionDef
            ):
                return None
            return _parameters(init[1], method=True)
        return _parameters(node, method=method)

    # ---------------------------------------------------------------------- imports

    def imports(self, module: str) -> frozenset[str]:
        """The FlashInfer modules ``module``'s own source imports at top level, transitively,
        within ``module``'s package (its parent packages, which the import system runs first,
        are left out: they are the parents' own findings)."""
        seen: set[str] = set()
        todo = [module]
        while todo:
            current = todo.pop()
            inside = current == module or current.startswith(f"{module}.")
            if current in seen or not inside or not self.is_module(current):
                continue
            seen.add(current)
            found = self._module(current)
            assert found is not None
            for statement in _statements(self.tree(current).body):
                if isinstance(statement, ast.Import):
                    todo.extend(alias.name for alias in statement.names)
                elif isinstance(statement, ast.ImportFrom):
                    base = self.absolute(current, found.package, statement)
                    todo.append(base)
                    todo.extend(f"{base}.{alias.name}" for alias in statement.names)
        return frozenset(name for name in seen if name.startswith("flashinfer"))

    def asserts_cuda_runtime(self, module: str) -> bool:
        """Whether importing ``module`` builds FlashInfer's ``CudaRTLibrary()`` at top level
        with no library path, whose ``__init__`` asserts that libcudart is loaded."""
        for name in self.imports(module):
            for statement in self.tree(name).body:
                value = getattr(statement, "value", None)
                if (
                    isinstance(statement, ast.Assign)
                    and isinstance(value, ast.Call)
                    and ast.unparse(value.func) == "CudaRTLibrary"
                    and not value.args
                    and not value.keywords
                ):
                    defined = self.definition(name, "CudaRTLibrary")
                    if defined is None:
                        continue
                    text = ast.unparse(defined[1])
                    if "assert" in text and "libcudart" in text:
                        return True
        return False


@cache
def release_files(version: str) -> ReleaseFiles:
    """One reader per release for the run."""
    return ReleaseFiles(version)
