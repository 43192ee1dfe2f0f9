"""Every use of FlashInfer in one file, read statically (nothing is imported or run).

:func:`read_module` parses one file's bytes with :mod:`ast` and records each :class:`Use`:
imports and their aliases, attribute chains, calls with their keywords, ``backend="..."``
strings passed to constructors, ``inspect.signature`` probes and ``hasattr``/``getattr``
guards; and what the module binds from FlashInfer at its top level
(:class:`~fi_compat._engine_source.binding.Bound`), which the walk over the scanned trees
(:mod:`fi_compat._engine_source.walk`) hands to the modules importing it. What each name
holds as the reading goes is kept by :mod:`fi_compat._engine_source.binding`. A file that
cannot be decoded or parsed (binary, not in its declared encoding, a syntax error, nested
too deeply) becomes a :class:`Diagnostic`.

What the reading follows, and what it does not: names are scoped as Python scopes them,
from the imports of the file (``import flashinfer.comm as fc``, ``from flashinfer.comm.mnnvl
import TorchDistBackend``) and the names other scanned modules pass on (``from
engine.kernels import Wrapper``, relative imports included); an instance is followed from
an assignment of a FlashInfer constructor's result to a name or ``self.<attr>``; a module
stored on ``self`` into every method of its class (a further reading of the file, where the
first found one); containers of FlashInfer objects of one kind; a function of the file that
returns one; a parameter annotated with a FlashInfer class or defaulting to a FlashInfer
name; ``importlib.import_module("flashinfer...")`` with a literal; a guard's answer kept in
a name and tested by an ``if``; a name that a conditional expression or a ``try``'s handler
rebinds to a fallback keeps its FlashInfer binding (``comm = comm if hasattr(comm, "f") else
None``, ``except ImportError: Wrapper = object``: :mod:`fi_compat._engine_source.fallbacks`).
Unannotated arguments without such a default, and functions wrapping a FlashInfer function,
are not followed.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fi_compat._engine_source.binding import CONTAINER, Bindings, Bound, text_of, under
from fi_compat._engine_source.fallbacks import branch, caught, guards, is_none, kept_through
from fi_compat._surface import ATTENTION_FAMILIES

__all__ = ["BINARY", "Diagnostic", "Reading", "Use", "UseKind", "read_module"]

#: What a :class:`Use` is: an import, an attribute chain, a call, a backend string given
#: to a constructor, an ``inspect.signature`` probe, or a ``hasattr``/``getattr`` guard.
UseKind = Literal["import", "attribute", "call", "backend", "signature", "guard"]

_FAMILIES = frozenset(ATTENTION_FAMILIES)
_LITERALS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp)
#: Why a file holding a NUL byte is not read.
BINARY = "binary file (contains NUL bytes): not read"
#: How many times a file is read again at most, to follow what earlier readings learned.
_READINGS = 3


@dataclass(frozen=True)
class Use:
    """One use of FlashInfer in a file.

    ``target`` is the dotted path used (``flashinfer.comm.allreduce_fusion``), ``module``
    the part known to be a module (from the import statement, or the longest prefix
    imported as a module in the file). Lines are 1-based, columns 1-based (as SARIF and
    editors count). ``catches`` are the exception names of the ``try`` handlers around
    the use (``""`` for a bare ``except``); ``guarded`` is true inside a ``try`` whose
    handlers catch ``ImportError`` or ``AttributeError`` (or any exception), or under an
    ``if`` that tests ``hasattr``/``getattr``/a signature. ``kept_guard`` names where the
    file keeps a guard's answer about what the use names (``_pcie_ipc_available =
    hasattr(flashinfer_comm, "PcieIpcAllReduceWorkspace")``), when the use is not under an
    ``if`` that tests it: whether that answer skips the use is not read.
    """

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    kind: UseKind
    target: str
    module: str
    scope: str
    keywords: tuple[str, ...] = ()
    positional: int = 0
    star: bool = False
    backend: str | None = None
    keyword: str | None = None
    guarded: bool = False
    catches: frozenset[str] = field(default_factory=frozenset)
    kept_guard: str | None = None


@dataclass(frozen=True)
class Diagnostic:
    """A file the scan could not read or parse: its path and why (one line), and the line
    and column where the parser stopped, for a syntax error.

    .. versionadded:: 0.3.0
    """

    path: str
    message: str
    line: int | None = None
    column: int | None = None


@dataclass(frozen=True)
class Reading:
    """One file read: its uses (or the diagnostic that stopped the reading), what it binds
    from FlashInfer at its top level (for the modules that import it), every module it
    imports whole (``import a.b``, ``from a.b import *``, and ``a.b.X`` for ``from a.b
    import X``, which may be a submodule) and every name it imports from one (``"a.b.X"``).
    Module names are absolute."""

    uses: list[Use]
    diagnostic: Diagnostic | None = None
    bound: dict[str, Bound] = field(default_factory=dict)
    imports: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()


class _Reader(Bindings, ast.NodeVisitor):
    """Collects the uses of one parsed file, reading names through :class:`Bindings`."""

    def __init__(
        self,
        path: str,
        members: dict[tuple[str, str], str] | None = None,
        returns: dict[str, str] | None = None,
        kept: dict[str, str] | None = None,
        *,
        module: str = "",
        package: bool = False,
        exports: Mapping[str, Mapping[str, Bound]] | None = None,
    ) -> None:
        super().__init__(members, returns, module=module, package=package, exports=exports)
        self.path = path
        #: What this file imports, for the walk's next round (see :class:`Reading`).
        self.imports: set[str] = set()
        self.names: set[str] = set()
        #: What a guard kept in a name asks about (``hasattr(flashinfer_comm, "X")`` kept in
        #: ``_x_available``): the FlashInfer path -> the name that keeps the answer.
        self.kept: dict[str, str] = dict(kept or {})
        #: True once this reading learned a member or a kept guard the next one can use.
        self.learned = False
        self.scope: list[str] = []
        self.catches: list[frozenset[str]] = [frozenset()]
        self.if_guarded = 0
        self.handled: set[int] = set()
        self.uses: list[Use] = []

    # ------------------------------------------------------------------ traversal

    def visit(self, node: ast.AST) -> None:
        """:meth:`ast.NodeVisitor.visit`, with the method for each node type looked up once
        (a file is hundreds of thousands of nodes)."""
        kind = type(node)
        (_VISITS.get(kind) or _visit_of(kind))(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        """:meth:`ast.NodeVisitor.generic_visit`: every child, in the order of the fields
        (but the expression contexts, :func:`child_fields`), each handed to its method
        here rather than through :meth:`visit` (a call less per node)."""
        for name in _CHILD_FIELDS.get(type(node)) or child_fields(type(node)):
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        kind = type(item)
                        (_VISITS.get(kind) or _visit_of(kind))(self, item)
            elif isinstance(value, ast.AST):
                kind = type(value)
                (_VISITS.get(kind) or _visit_of(kind))(self, value)

    def visit_Constant(self, node: ast.Constant) -> None:
        """A literal: no node below it (what :meth:`ast.NodeVisitor.visit_Constant` ends in,
        without its search for the methods of the node types Python 3.8 retired)."""

    # ------------------------------------------------------------------ bookkeeping

    def _add(self, node: ast.AST, kind: UseKind, target: str, **extra: object) -> None:
        catches = self.catches[-1]
        line = int(getattr(node, "lineno", 1))
        module = str(extra.pop("module", "") or self.module_of(target))
        self.uses.append(
            Use(
                path=self.path,
                line=line,
                column=int(getattr(node, "col_offset", 0)) + 1,
                end_line=int(getattr(node, "end_lineno", None) or line),
                end_column=int(getattr(node, "end_col_offset", None) or 0) + 1,
                kind=kind,
                target=target,
                module=module,
                scope=".".join(self.scope) or "<module>",
                guarded=guards(catches) or self.if_guarded > 0,
                catches=catches,
                kept_guard=None if self.if_guarded else self._kept_guard(kind, target),
                **extra,  # type: ignore[arg-type]
            )
        )

    def _kept_guard(self, kind: str, target: str) -> str | None:
        """The name keeping a guard's answer about ``target`` (or a path it lies under)."""
        if kind == "guard":
            return None
        for path, holder in self.kept.items():
            if under(target, path):
                return holder
        return None

    # ------------------------------------------------------------------ scopes

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A function, read in its own scope (:meth:`Bindings.enter_function`)."""
        saved = self.enter_function(node)
        self._scoped(node)
        self.leave_function(saved)

    def visit_Global(self, node: ast.Global) -> None:
        if self.functions:
            self.functions[-1][1].update(node.names)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self.visit(node.value)
        value = node.value
        if not self.functions or value is None:
            return
        if isinstance(value, ast.Constant) and value.value is None:
            return  # ``return None``: a function that may have nothing to give
        made = self.made(value)
        if made is not None:
            self.returned.setdefault(self.functions[-1][0], set()).add(made)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        source, target = node.iter, node.target
        if (
            isinstance(source, ast.Call)
            and text_of(source.func) == "enumerate"
            and source.args
            and isinstance(target, ast.Tuple)
            and len(target.elts) == 2
        ):
            source, target = source.args[0], target.elts[1]
        elif (
            isinstance(source, ast.Call)
            and isinstance(source.func, ast.Attribute)
            and source.func.attr == "values"
            and not source.args
        ):
            source = source.func.value
        for name in ast.walk(node.target):
            if isinstance(name, ast.Name):
                self.forget(name.id)
        made = self.made(source)
        if made is not None and made.startswith(CONTAINER) and isinstance(target, ast.Name):
            self.instances[target.id] = made[len(CONTAINER) :]
        self.visit(node.target)
        for statement in (*node.body, *node.orelse):
            self.visit(statement)

    visit_AsyncFor = visit_For

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(".".join((*self.scope, node.name)))
        self._scoped(node)
        self.classes.pop()

    def visit_Try(self, node: ast.Try) -> None:
        names = frozenset(name for handler in node.handlers for name in caught(handler))
        self.catches.append(self.catches[-1] | names)
        for statement in node.body:
            self.visit(statement)
        self.catches.pop()
        body = [dict(mapping) for mapping in (self.aliases, self.instances, self.containers)]
        for handler in node.handlers:
            self.visit(handler)
        # a handler's fallback (``Wrapper = object``) is the other branch: not what the names
        # the body bound from FlashInfer hold where it ran (and where ``else:`` runs)
        kept_through(body, (self.aliases, self.instances, self.containers), under)
        for part in (*node.orelse, *node.finalbody):
            self.visit(part)

    visit_TryStar = visit_Try

    def _tests_a_guard(self, test: ast.expr) -> bool:
        """``test`` asks a guard (``hasattr``, ``getattr``, a signature probe), directly or
        through a name that holds a guard's answer (``available = hasattr(...)``)."""
        holders = self.guard_names
        for node in _subtree(test):
            if isinstance(node, ast.Call):
                if self._guard_call(node) is not None:
                    return True
            elif isinstance(node, ast.Compare):
                if self._probe_compare(node) is not None:
                    return True
            elif (
                holders and isinstance(node, (ast.Name, ast.Attribute)) and text_of(node) in holders
            ):
                return True
        return False

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        guard = self._tests_a_guard(node.test)
        self.if_guarded += guard
        for statement in node.body:
            self.visit(statement)
        self.if_guarded -= guard
        for statement in node.orelse:
            self.visit(statement)

    # ------------------------------------------------------------------ imports

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            name = alias.name
            self.imports.add(name)
            if alias.asname is not None:
                self.aliases[alias.asname] = name
                self.imported.add(alias.asname)
            else:
                self.aliases[name.split(".")[0]] = name.split(".")[0]
                self.imported.add(name.split(".")[0])
            if under(name):
                self.note_module(name)
                self._add(node, "import", name, module=name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = self.absolute(node)
        if module is None:
            return
        exported = self.exports.get(module, {})
        for alias in node.names:
            bound = alias.asname or alias.name
            if alias.name == "*":
                self.imports.add(module)
                # what the module binds from FlashInfer, its public names
                for name, found in exported.items():
                    if not name.startswith("_"):
                        self.bind(name, found)
                continue
            self.imports.add(f"{module}.{alias.name}")  # it may be a submodule
            self.names.add(f"{module}.{alias.name}")  # or a name the module binds
            self.aliases[bound] = f"{module}.{alias.name}"
            self.imported.add(bound)
            if alias.name in exported:  # a scanned module's FlashInfer name, passed on
                self.bind(bound, exported[alias.name])
            elif under(module):
                self.note_module(module)
                self._add(node, "import", f"{module}.{alias.name}", module=module)

    # ------------------------------------------------------------------ assignments

    def visit_Assign(self, node: ast.Assign) -> None:
        value = node.value
        if self._tests_a_guard(value):
            # ``wrapper_uses_fast_decode_plan = hasattr(wrapper.begin_forward, "func")``
            holders = [
                text_of(target)
                for target in node.targets
                if isinstance(target, (ast.Name, ast.Attribute))
            ]
            self.guard_names.update(holders)
            for call in ast.walk(value):
                guard = self._guard_call(call) if isinstance(call, ast.Call) else None
                if guard is not None and holders:
                    path = ".".join(guard)
                    if path not in self.kept:
                        self.kept[path] = holders[0]
                        self.learned = True
        if (
            isinstance(value, ast.Attribute)
            and value.attr == "parameters"
            and isinstance(value.value, ast.Call)
        ):
            probed = self._signature_of(value.value)
            if probed is not None:  # ``params = inspect.signature(f).parameters``
                self.handled.add(id(value.value))
                # the probe reads the callable's name: a use of it (what ``"x" in params``
                # asks later is a signature use of its own)
                self._add(value.value.args[0], "attribute", probed)
                for target in node.targets:
                    self.parameters[text_of(target)] = probed
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)
        value = branch(node.value, self.meaning)
        imported = self.imported_module(value) if isinstance(value, ast.Call) else None
        # ``comm = importlib.import_module("flashinfer.comm")`` binds the module
        named = imported or (
            self.resolve(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
        )
        literal = isinstance(value, _LITERALS)
        made = None if imported or literal else self.made(value)
        for target in node.targets if not is_none(value) else ():
            # A name bound anew means what this value is, not what it meant before; ``None``
            # is the fallback of a failed import (``except ImportError: comm = None``), not
            # another value the uses below could mean.
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    self.forget(name.id)
        made = self.made(value) if literal else made
        probed = self._signature_of(value) if isinstance(value, ast.Call) else None
        for target in node.targets:
            if isinstance(target, (ast.Name, ast.Attribute)):
                self.hold(target, made)  # ``wrapper = self.wrapper`` copies what it holds
                if probed is not None:
                    self.signatures[text_of(target)] = probed
            if named is None:
                continue
            if isinstance(target, ast.Name):
                self.aliases[target.id] = named
            key = self.member_key(target)
            # A module, or a name an import bound (``self._comm = comm``, lmdeploy, read back
            # in the class's methods): not a value read off an object (``self.backend =
            # self.workspace.backend`` is a str).
            if (
                key is not None
                and self.members.get(key) != named
                and (
                    named in self.modules
                    or (isinstance(value, ast.Name) and value.id in self.imported)
                )
            ):
                self.members[key] = named
                self.learned = True

    # ------------------------------------------------------------------ probes, guards

    def _signature_of(self, call: ast.Call) -> str | None:
        if self.python_path(call.func) not in ("inspect.signature", "signature") or not call.args:
            return None
        return self.resolve(call.args[0])

    def _guard_call(self, call: ast.Call) -> tuple[str, str] | None:
        name = call.func.id if isinstance(call.func, ast.Name) else None
        if name not in ("hasattr", "getattr") or len(call.args) < 2:
            return None
        if name == "getattr" and len(call.args) < 3:
            return None
        owner, attr = self.resolve(call.args[0]), call.args[1]
        if owner is None or not (isinstance(attr, ast.Constant) and isinstance(attr.value, str)):
            return None
        return owner, attr.value

    def _probe_compare(self, node: ast.Compare) -> tuple[str, str] | None:
        if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.In, ast.NotIn)):
            return None
        left, right = node.left, node.comparators[0]
        if not (isinstance(left, ast.Constant) and isinstance(left.value, str)):
            return None
        if isinstance(right, (ast.Name, ast.Attribute)) and text_of(right) in self.parameters:
            return self.parameters[text_of(right)], left.value
        if not (isinstance(right, ast.Attribute) and right.attr == "parameters"):
            return None
        probed = (
            self._signature_of(right.value)
            if isinstance(right.value, ast.Call)
            else self.signatures.get(text_of(right.value))
        )
        return None if probed is None else (probed, left.value)

    def visit_Compare(self, node: ast.Compare) -> None:
        probe = self._probe_compare(node)
        if probe is None:
            self.generic_visit(node)
            return
        target, keyword = probe
        self._add(node, "signature", target, keyword=keyword)
        right = node.comparators[0]
        if isinstance(right, ast.Attribute) and isinstance(right.value, ast.Call):
            self.handled.add(id(right.value))

    # ------------------------------------------------------------------ calls, chains

    def visit_Call(self, node: ast.Call) -> None:
        if id(node) in self.handled:
            return
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("append", "add", "insert")
            and isinstance(func.value, (ast.Name, ast.Attribute))
            and node.args
        ):
            self.put(func.value, node.args[-1])
        imported = self.imported_module(node)
        if imported is not None:
            self.note_module(imported)
            self._add(node, "import", imported, module=imported)
            return
        guard = self._guard_call(node)
        if guard is not None:
            owner, attr = guard
            self._add(node, "guard", f"{owner}.{attr}")
            return
        probed = self._signature_of(node)
        if probed is not None:
            self._add(node, "signature", probed)
            self.generic_visit(node)
            return
        target = self.resolve(node.func)
        if target is None:
            self.generic_visit(node)
            return
        keywords = tuple(k.arg for k in node.keywords if k.arg is not None)
        star = any(k.arg is None for k in node.keywords) or any(
            isinstance(a, ast.Starred) for a in node.args
        )
        self._add(node, "call", target, keywords=keywords, positional=len(node.args), star=star)
        family = target.rpartition(".")[2] in _FAMILIES
        for keyword in node.keywords if family else ():
            value = keyword.value
            if (
                keyword.arg == "backend"
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
            ):
                self._add(value, "backend", target, backend=value.value)
        if family and "backend" not in keywords and not star:
            self._add(node, "backend", target, backend=None)
        if not isinstance(node.func, ast.Name):
            self.visit(_root_of(node.func))
        for child in (*node.args, *node.keywords):
            self.visit(child)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        target = self.resolve(node)
        if target is None:
            self.generic_visit(node)
            return
        if isinstance(node.ctx, ast.Load):
            self._add(node, "attribute", target)


#: Each node type's method of :class:`_Reader` (:meth:`_Reader.visit`).
_VISITS: dict[type[ast.AST], Callable[[_Reader, Any], None]] = {}


def _visit_of(kind: type[ast.AST]) -> Callable[[_Reader, Any], None]:
    """``kind``'s method of :class:`_Reader` (``visit_<Kind>``, else ``generic_visit``),
    looked up once."""
    method: Callable[[_Reader, Any], None] = getattr(
        _Reader, f"visit_{kind.__name__}", _Reader.generic_visit
    )
    _VISITS[kind] = method
    return method


#: Each node type's fields that may hold nodes the reader visits (:func:`child_fields`).
_CHILD_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {}


def child_fields(kind: type[ast.AST]) -> tuple[str, ...]:
    """``kind``'s fields less ``ctx``: an expression context (``Load``, ``Store``, ``Del``)
    has no child and nothing reads it, and every name, attribute and subscript has one (a
    quarter of the nodes a traversal would visit)."""
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = tuple(name for name in kind._fields if name != "ctx")
    return fields


def _subtree(node: ast.AST) -> Iterator[ast.AST]:
    """``node`` and every node below it (as :func:`ast.walk`, in another order), the
    expression contexts aside."""
    stack = [node]
    while stack:
        found = stack.pop()
        yield found
        for name in _CHILD_FIELDS.get(type(found)) or child_fields(type(found)):
            value = getattr(found, name, None)
            if isinstance(value, list):
                stack.extend(item for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                stack.append(value)


def _root_of(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node


def _decode(data: bytes) -> str:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    return text[1:] if text.startswith("\ufeff") else text


def read_module(
    data: bytes,
    path: str,
    module: str = "",
    *,
    package: bool = False,
    exports: Mapping[str, Mapping[str, Bound]] | None = None,
) -> Reading:
    """One file's bytes read as module ``module`` (``package``: its ``__init__``), knowing
    what other scanned modules bind from FlashInfer (``exports``, by module)."""
    if b"\0" in data:
        return Reading([], Diagnostic(path, BINARY))
    try:
        text = _decode(data)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        reason = error.reason if isinstance(error, UnicodeDecodeError) else str(error)
        return Reading([], Diagnostic(path, f"not decodable as its declared encoding: {reason}"))
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as error:
        return Reading(
            [],
            Diagnostic(
                path, f"syntax error: {error.msg}", error.lineno, (error.offset or 0) or None
            ),
        )
    except (ValueError, RecursionError, MemoryError) as error:
        return Reading([], Diagnostic(path, f"not parsable: {type(error).__name__}: {error}"))
    reader = _Reader(path, module=module, package=package, exports=exports)
    try:
        reader.visit(tree)
        for _ in range(_READINGS):
            # A module or object stored on ``self`` is read in methods above the one that
            # stores it as well, and a function returning a FlashInfer object may be called
            # above its definition (or return what another such function returns): read
            # the file again knowing them, until a reading learns nothing new.
            returns = {
                name: next(iter(made)) for name, made in reader.returned.items() if len(made) == 1
            }
            if not reader.learned and returns == reader.returns:
                break
            reader = _Reader(
                path,
                reader.members,
                returns,
                reader.kept,
                module=module,
                package=package,
                exports=exports,
            )
            reader.visit(tree)
    except RecursionError:
        return Reading([], Diagnostic(path, "nested too deeply to read"))
    return Reading(
        reader.uses, None, reader.bound(), frozenset(reader.imports), frozenset(reader.names)
    )
