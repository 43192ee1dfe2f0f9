"""An engine's FlashInfer uses, found by a reading independent of ``fi-compat scan``.

The scan's tests measure its coverage against this inventory, so it shares none of the
scan's code: it is a plain ``ast`` walk of each file that notes

- every ``import flashinfer...`` and every name of ``from flashinfer... import ...``;
- every call and attribute read through a name bound by those imports (or by
  ``importlib.import_module("flashinfer...")``) in the scope Python looks it up in, and
  through a ``self.<attr>`` that its class only ever assigns such a name;

with the keywords and the count of positional arguments of each call, and the exception
types of every ``try`` around it. It is deliberately simple (no flow, no types): whatever it
finds, a scan must give a verdict or say why it cannot.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from fi_compat._recorder.resolve import collector_paused

__all__ = ["EngineUse", "inventory"]


@dataclass(frozen=True)
class EngineUse:
    """One use: where, what kind, of what, with which keywords, inside which handlers."""

    path: str
    line: int
    kind: str  # "import", "call" or "attribute"
    target: str
    keywords: tuple[str, ...]
    positional: int
    unpacked: bool
    caught: frozenset[str]
    scope: str

    def catches(self, *names: str) -> bool:
        """Whether a ``try`` around the use has a handler for one of ``names`` (or for
        ``Exception``/``BaseException``, or a bare ``except``)."""
        return bool(self.caught & {*names, "Exception", "BaseException"})


def _flashinfer(name: str | None) -> bool:
    return name is not None and (name == "flashinfer" or name.startswith("flashinfer."))


def _handled(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return {"BaseException"}
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {_last_name(t) for t in types}


def _last_name(node: ast.expr) -> str:
    """The last dotted part of how ``node`` is spelled (``ast.unparse`` of a name or an
    attribute, without spelling it)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ast.unparse(node).rpartition(".")[2]


_OTHER = ""  # a binding that is not FlashInfer's
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


#: Module -> name -> the FlashInfer path that module binds the name to at its top level.
Passed = dict[str, dict[str, str]]


def _imports_a_module(func: ast.expr) -> bool:
    """Whether ``func`` is spelled ``importlib.import_module`` or ``import_module``."""
    if isinstance(func, ast.Name):
        return func.id == "import_module"
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "import_module"
        and isinstance(func.value, ast.Name)
        and func.value.id == "importlib"
    )


def _source(node: ast.ImportFrom, module: str, package: bool) -> str | None:
    """The absolute module a from-import reads (a relative one from ``module``)."""
    if not node.level:
        return node.module
    parts = module.split(".") if module else []
    if not package:
        parts = parts[:-1]
    if not parts or node.level > len(parts):
        return None
    parts = parts[: len(parts) - node.level + 1]
    return ".".join([*parts, node.module] if node.module else parts)


def _bound(node: ast.AST, passed: Passed, module: str, package: bool) -> Iterator[tuple[str, str]]:
    """The names a statement or expression binds in its scope, each with the FlashInfer
    path it binds to (``_OTHER`` for anything else); a name another module of the tree
    binds to FlashInfer (``passed``) is that path."""
    relative = isinstance(node, ast.ImportFrom) and node.level
    if isinstance(node, ast.ImportFrom) and (relative or not _flashinfer(node.module)):
        source = _source(node, module, package)
        given = passed.get(source or "", {})
        for alias in node.names:
            if alias.name == "*":
                yield from ((n, p) for n, p in given.items() if not n.startswith("_"))
            else:
                yield alias.asname or alias.name, given.get(alias.name, _OTHER)
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                yield alias.asname, alias.name if _flashinfer(alias.name) else _OTHER
            else:
                head = alias.name.partition(".")[0]
                yield head, head if _flashinfer(alias.name) else _OTHER
    elif isinstance(node, ast.ImportFrom):
        source = node.module if not node.level else None
        for alias in node.names:
            if alias.name != "*":
                path = f"{source}.{alias.name}" if _flashinfer(source) else _OTHER
                yield alias.asname or alias.name, path
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name, _OTHER
    elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        module = (
            value.args[0].value
            if isinstance(value, ast.Call)
            and _imports_a_module(value.func)
            and len(value.args) == 1
            and isinstance(value.args[0], ast.Constant)
            and isinstance(value.args[0].value, str)
            and _flashinfer(value.args[0].value)
            else _OTHER
        )
        for target in targets:
            if type(target) is ast.Name:  # what the walk below finds in a plain name
                yield target.id, module
                continue
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    yield name.id, module if isinstance(target, ast.Name) else _OTHER
    elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        if type(node.target) is ast.Name:  # what the walk below finds in a plain name
            yield node.target.id, _OTHER
            return
        for name in ast.walk(node.target):
            if isinstance(name, ast.Name):
                yield name.id, _OTHER
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        for name in ast.walk(node.optional_vars):
            if isinstance(name, ast.Name):
                yield name.id, _OTHER
    elif isinstance(node, ast.ExceptHandler) and node.name:
        yield node.name, _OTHER
    elif isinstance(node, ast.arg):
        yield node.arg, _OTHER


#: The nodes :func:`_bound` finds a binding in (every other node binds nothing).
_BINDING = frozenset(
    (
        ast.Import,
        ast.ImportFrom,
        ast.FunctionDef,
        ast.AsyncFunctionDef,
        ast.ClassDef,
        ast.Assign,
        ast.AnnAssign,
        ast.AugAssign,
        ast.NamedExpr,
        ast.For,
        ast.AsyncFor,
        ast.comprehension,
        ast.withitem,
        ast.ExceptHandler,
        ast.arg,
    )
)
#: The nodes :meth:`_File.uses` reads.
_USED = frozenset((ast.Import, ast.ImportFrom, ast.Call, ast.Attribute))


class Shape(NamedTuple):
    """What one walk of a file's tree gives, kept by :func:`inventory` for later rounds."""

    #: Each node's parent.
    parents: dict[ast.AST, ast.AST]
    #: Each node's scope: the innermost function or lambda strictly around it, else the module.
    scopes: dict[ast.AST, ast.AST]
    #: The nodes that bind a name, those a use is read from, and the assignments, each in
    #: the order ``ast.walk`` visits them (breadth first).
    binding: list[ast.AST]
    used: list[ast.AST]
    assigned: list[ast.Assign | ast.AnnAssign]


#: Each node class's fields that may hold nodes a walk goes into: all of them but ``ctx``
#: (``Load``, ``Store``, ``Del``: one shared node each, binding and using nothing).
_CHILD_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {}


def _child_fields(kind: type[ast.AST]) -> tuple[str, ...]:
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = tuple(f for f in kind._fields if f != "ctx")
    return fields


def _shape(tree: ast.Module) -> Shape:
    """:class:`Shape` of ``tree``, in one breadth-first walk (the order of ``ast.walk``;
    the expression contexts aside)."""
    parents: dict[ast.AST, ast.AST] = {}
    scopes: dict[ast.AST, ast.AST] = {tree: tree}
    binding: list[ast.AST] = []
    used: list[ast.AST] = []
    assigned: list[ast.Assign | ast.AnnAssign] = []
    order: list[ast.AST] = [tree]
    for node in order:  # breadth first: the list grows behind the loop as it is read
        kind = type(node)  # a parsed tree holds the ast classes themselves, never subclasses
        if kind in _BINDING:
            binding.append(node)
            if kind is ast.Assign or kind is ast.AnnAssign:
                assigned.append(node)  # type: ignore[arg-type]
        if kind in _USED:
            used.append(node)
        inner = node if kind in _SCOPES else scopes[node]
        for field in _CHILD_FIELDS.get(kind) or _child_fields(kind):
            value = getattr(node, field, None)
            if type(value) is list:
                for child in value:
                    if isinstance(child, ast.AST):
                        parents[child] = node
                        scopes[child] = inner
                        order.append(child)
            elif isinstance(value, ast.AST):
                parents[value] = node
                scopes[value] = inner
                order.append(value)
    return Shape(parents, scopes, binding, used, assigned)


class _File:
    """One file: its scopes' bindings, each class's ``self.<attr>`` aliases, its uses."""

    def __init__(
        self,
        path: str,
        tree: ast.Module,
        passed: Passed | None = None,
        module: str = "",
        package: bool = False,
        shape: Shape | None = None,
    ) -> None:
        self.path = path
        self.tree = tree
        self.shape = shape or _shape(tree)
        self.parents, self.scopes = self.shape.parents, self.shape.scopes
        #: scope node -> name -> the paths it is bound to there.
        self.bindings: dict[ast.AST, dict[str, set[str]]] = {}
        for node in self.shape.binding:
            scope = self.scopes[node]
            for name, path in _bound(node, passed or {}, module, package):
                self.bindings.setdefault(scope, {}).setdefault(name, set()).add(path)
        #: class node -> "self.attr" -> the paths assigned to it in the class's methods.
        self.members: dict[ast.AST | None, dict[str, set[str]]] = {}
        for node in self.shape.assigned:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    owner = self.class_of(node)
                    if node.value is None or (
                        isinstance(node.value, ast.Constant) and node.value.value is None
                    ):
                        continue  # ``self._comm = None``: not set yet
                    path = self.resolve(node.value) or _OTHER
                    self.members.setdefault(owner, {}).setdefault(f"self.{target.attr}", set()).add(
                        path
                    )

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The function (or module) whose namespace ``node`` binds in: the innermost
        function or lambda around it (for an argument, the function that takes it)."""
        return self.scopes[node]

    def class_of(self, node: ast.AST) -> ast.AST | None:
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, ast.ClassDef):
            parent = self.parents.get(parent)
        return parent

    def lookup(self, name: str, at: ast.AST) -> str | None:
        """The FlashInfer path ``name`` means at node ``at``: the innermost function scope
        binding it, else the module's (class bodies are skipped, as Python skips them)."""
        scope: ast.AST | None = self.scope_of(at)
        while scope is not None:
            paths = self.bindings.get(scope, {}).get(name)
            if paths is not None:
                return next(iter(paths)) or None if len(paths) == 1 else None
            if scope is self.tree:
                return None
            scope = self.scope_of(scope)
        return None

    def resolve(self, node: ast.expr) -> str | None:
        """The FlashInfer path of a name or attribute chain rooted in a FlashInfer name or
        in a ``self.<attr>`` its class only ever assigns one FlashInfer path."""
        parts: list[str] = []
        current = node
        while isinstance(current, ast.Attribute):
            if isinstance(current.value, ast.Name) and current.value.id == "self":
                owner = self.class_of(current)
                assigned = self.members.get(owner, {}).get(f"self.{current.attr}", set())
                if len(assigned) == 1 and next(iter(assigned)):
                    return ".".join([next(iter(assigned)), *reversed(parts)])
                return None
            parts.append(current.attr)
            current = current.value
        if isinstance(current, ast.Name):
            path = self.lookup(current.id, current)
            if path:
                return ".".join([path, *reversed(parts)])
        return None

    def caught(self, node: ast.AST) -> frozenset[str]:
        names: set[str] = set()
        child, parent = node, self.parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.Try) and child in parent.body:
                for handler in parent.handlers:
                    names |= _handled(handler)
            child, parent = parent, self.parents.get(parent)
        return frozenset(names)

    def scope_name(self, node: ast.AST) -> str:
        """``Class.function`` of the defs and classes around ``node``."""
        names = []
        parent = self.parents.get(node)
        while parent is not None:
            if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.append(parent.name)
            parent = self.parents.get(parent)
        return ".".join(reversed(names)) or "<module>"

    def uses(self) -> Iterator[EngineUse]:
        for node in self.shape.used:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _flashinfer(alias.name):
                        yield self.use(node, "import", alias.name)
            elif isinstance(node, ast.ImportFrom) and not node.level and _flashinfer(node.module):
                for alias in node.names:
                    if alias.name != "*":
                        yield self.use(node, "import", f"{node.module}.{alias.name}")
            elif isinstance(node, ast.Call):
                target = self.resolve(node.func)
                if target is not None:
                    yield self.use(node, "call", target, node)
            elif isinstance(node, ast.Attribute):
                parent = self.parents.get(node)
                outer = isinstance(parent, ast.Attribute) or (
                    isinstance(parent, ast.Call) and parent.func is node
                )
                stored = isinstance(node.ctx, ast.Store | ast.Del)
                target = None if outer or stored else self.resolve(node)
                if target is not None:
                    yield self.use(node, "attribute", target)

    def use(
        self, node: ast.stmt | ast.expr, kind: str, target: str, call: ast.Call | None = None
    ) -> EngineUse:
        keywords = tuple(k.arg for k in call.keywords if k.arg) if call else ()
        unpacked = call is not None and (
            any(k.arg is None for k in call.keywords)
            or any(isinstance(a, ast.Starred) for a in call.args)
        )
        return EngineUse(
            self.path,
            node.lineno,
            kind,
            target,
            keywords,
            len(call.args) if call else 0,
            unpacked,
            self.caught(node),
            self.scope_name(node),
        )

    def passes(self) -> dict[str, str]:
        """The names this module binds at its top level to one FlashInfer path (other
        bindings of the name, such as a fallback, aside)."""
        found = {}
        for name, paths in self.bindings.get(self.tree, {}).items():
            flashinfer = {path for path in paths if path}
            if len(flashinfer) == 1:
                found[name] = flashinfer.pop()
        return found


def _module(file: Path) -> tuple[str, bool]:
    """The dotted module ``file`` is: its path from the outermost directory above it that
    holds an ``__init__.py`` (directories below that one count as packages, with or
    without one of their own)."""
    package = file.name == "__init__.py"
    directories = list(file.parents)
    marked = [i for i, d in enumerate(directories) if (d / "__init__.py").exists()]
    parts = [d.name for d in reversed(directories[: marked[-1] + 1])] if marked else []
    return ".".join(parts if package else [*parts, file.stem]), package


def inventory(root: Path, *, follow: bool = False) -> list[EngineUse]:
    """Every use under ``root`` (paths relative to ``root``, as a scan of ``root`` gives
    them), one per file, line, kind and target. With ``follow``, also the uses of names
    a module of the tree binds to FlashInfer at its top level and another imports from it
    (``from engine.kernels import X``, ``from .kernels import X``, through chains of them)."""
    uses: dict[tuple[str, int, str, str], EngineUse] = {}
    passed: Passed = {}
    files = {file: file.read_bytes() for file in sorted(root.rglob("*.py"))}
    kept = _Kept(_Spelled(files), {}, {})
    with collector_paused():  # every parsed tree is kept for later rounds
        for _ in range(8 if follow else 1):
            before = {module: dict(names) for module, names in passed.items()}
            _round(root, files, kept, passed, before, uses, follow)
            if passed == before:
                break
    return sorted(uses.values(), key=lambda u: (u.path, u.line, u.target))


class _Spelled:
    """Which files spell a name (anywhere in their bytes, as ``name in source`` says): one
    search of all the files' bytes for each name, the first time it is asked about."""

    def __init__(self, files: dict[Path, bytes]) -> None:
        self.files = files
        self.by_name: dict[bytes, frozenset[Path]] = {}
        #: The files, their bytes joined with ``\0`` between them, and where each starts in
        #: them (made on the first question).
        self.order = list(files)
        self.text = b""
        self.starts: list[int] = []

    def files_of(self, name: bytes) -> frozenset[Path]:
        """The files whose bytes hold ``name``."""
        known = self.by_name.get(name)
        if known is not None:
            return known
        if not name or b"\0" in name:  # a match could run from one file into the next
            known = frozenset(file for file, source in self.files.items() if name in source)
        else:
            if not self.starts:
                position = 0
                for source in self.files.values():
                    self.starts.append(position)
                    position += len(source) + 1
                self.text = b"\0".join(self.files.values())
            found: set[Path] = set()
            at = self.text.find(name)
            while at >= 0:
                index = bisect.bisect_right(self.starts, at) - 1
                found.add(self.order[index])
                if index + 1 == len(self.starts):
                    break
                at = self.text.find(name, self.starts[index + 1])  # on from the next file
            known = frozenset(found)
        self.by_name[name] = known
        return known

    def any_of(self, passed: Passed) -> frozenset[Path] | None:
        """The files spelling a name passed on so far; None while there is none."""
        names = {name.encode() for given in passed.values() for name in given}
        if not names:
            return None
        return frozenset().union(*(self.files_of(name) for name in names))


class _Parsed(NamedTuple):
    """A parsed file, what it is, and the modules its reading takes names passed on from."""

    tree: ast.Module
    shape: Shape
    module: str
    package: bool
    #: The module each from-import of a module other than FlashInfer reads (``""`` for a
    #: relative import beyond the top), as :func:`_bound` looks them up in ``passed``.
    reads: tuple[str, ...]


def _parse(file: Path, source: bytes) -> _Parsed | None:
    try:
        tree = ast.parse(source, str(file))
    except SyntaxError:
        return None
    shape = _shape(tree)
    module, package = _module(file)
    reads = {
        _source(node, module, package) or ""
        for node in shape.binding
        if isinstance(node, ast.ImportFrom) and (node.level or not _flashinfer(node.module))
    }
    return _Parsed(tree, shape, module, package, tuple(sorted(reads)))


class _Kept(NamedTuple):
    """What :func:`inventory` keeps from round to round."""

    spelled: _Spelled
    #: Each file parsed so far (None: it does not parse).
    parsed: dict[Path, _Parsed | None]
    #: Each file's last reading: the names passed on it took, what it passed on, its uses.
    read: dict[Path, tuple[tuple[dict[str, str] | None, ...], dict[str, str], list[EngineUse]]]


def _round(
    root: Path,
    files: dict[Path, bytes],
    kept: _Kept,
    passed: Passed,
    before: Passed,
    uses: dict[tuple[str, int, str, str], EngineUse],
    follow: bool,
) -> None:
    """One round of :func:`inventory` over every file, ``before`` the names passed on so
    far; adds to ``passed`` and ``uses``. A file whose reading takes the same names passed
    on as in the last round it was read in gives what it gave then."""
    spelled, parsed = kept.spelled, kept.parsed
    mentions = spelled.any_of(passed)
    for file, source in files.items():
        if b"flashinfer" not in source and (mentions is None or file not in mentions):
            continue
        if file not in parsed:  # each file is parsed once, whatever the rounds
            parsed[file] = _parse(file, source)
        found = parsed[file]
        if found is None:
            continue
        taken = tuple(before.get(module) for module in found.reads)
        last = kept.read.get(file)
        if last is not None and last[0] == taken:
            given, read = last[1], last[2]
        else:
            relative = file.relative_to(root).as_posix()
            reader = _File(relative, found.tree, before, found.module, found.package, found.shape)
            given = reader.passes() if follow else {}
            read = list(reader.uses())
            kept.read[file] = (taken, given, read)
        if given:
            passed[found.module] = given
            mentions = spelled.any_of(passed)
        for use in read:
            uses.setdefault((use.path, use.line, use.kind, use.target), use)
