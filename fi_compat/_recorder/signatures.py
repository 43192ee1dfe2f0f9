"""Signatures of a release's functions, classes and constant holders, read from source.

A function is recorded as its own ``def`` (what ``inspect.signature`` reports behind a
``functools.wraps`` decorator): where it is defined, its decorators, its parameters with
defaults and annotations as source text. A ``**kwargs`` is followed with the live probe's
own analysis (:func:`fi_compat._forwarding.analyse`) so that recorded and live answers
agree; a class's methods are looked up along its base classes, and its instance attributes
are read from what its construction assigns on ``self``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from fi_compat._forwarding import (
    ALL,
    FunctionNode,
    analyse,
    bound_skip,
    method_kind,
    positional_doubts,
)
from fi_compat._recorder.plan_state import PLANNING, written
from fi_compat._recorder.resolve import MAX_DEPTH, Module, Package, absolute
from fi_compat._recorder.trees import walk
from fi_compat._recorder.values import Values
from fi_compat._records._format import parameters

__all__ = ["Recorder", "parameters"]

#: A class found in the release: the module holding it and its ``class`` statement.
ClassNode = tuple[Module, ast.ClassDef]
#: A method found along a class's bases: its module, its class and its ``def``.
MethodNode = tuple[Module, ast.ClassDef, FunctionNode]

_INIT = "__init__"
#: The standard-library module whose classes make a class an enum.
_ENUM_MODULE = "enum"
#: What ``@dataclass``, ``@dataclasses.dataclass(frozen=True)``, ... unparse to end with.
_DATACLASS = "dataclass"
_CLASS_VAR = "ClassVar"
#: What a ``typing.NamedTuple`` base unparses to end with.
_NAMED_TUPLE = "NamedTuple"
#: What ``@overload`` / ``@typing.overload`` unparse to end with.
_OVERLOAD = "overload"


def _first_parameter(func: FunctionNode) -> str | None:
    positional = [*func.args.posonlyargs, *func.args.args]
    return positional[0].arg if positional else None


@dataclass(frozen=True)
class _SelfUse:
    """What a method does with its first parameter (``self``), read in one walk of it."""

    #: Names it stores as ``self.<name>`` (any assignment, augmented or annotated).
    assigned: frozenset[str]
    #: Methods it calls as ``self.<method>(...)``, in source order, each once.
    called: tuple[str, ...]
    #: Whether it runs ``super().__init__(...)`` (or ``super(C, self).__init__(...)``).
    calls_super_init: bool


def _self_use(func: FunctionNode) -> _SelfUse:
    this = _first_parameter(func)
    assigned: set[str] = set()
    called: dict[str, None] = {}
    super_init = False
    for node in walk(func):
        if isinstance(node, ast.Attribute):
            if (
                isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == this
            ):
                assigned.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == this:
                called.setdefault(node.func.attr)
            elif (
                node.func.attr == _INIT
                and isinstance(owner, ast.Call)
                and isinstance(owner.func, ast.Name)
                and owner.func.id == "super"
            ):
                super_init = True
    return _SelfUse(frozenset(assigned), tuple(called), super_init)


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any(
        ast.unparse(d.func if isinstance(d, ast.Call) else d).rpartition(".")[2] == _DATACLASS
        for d in node.decorator_list
    )


def _dataclass_fields(node: ast.ClassDef) -> set[str]:
    """The annotated class-body names of a dataclass, but ``ClassVar`` ones."""
    return {
        stmt.target.id
        for stmt in node.body
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and _CLASS_VAR not in ast.unparse(stmt.annotation)
    }


def _decorator_keyword(node: ast.ClassDef, keyword: str, value: bool = True) -> bool:
    """A decorator of ``node`` passes ``keyword=value`` (``@dataclass(kw_only=True)``)."""
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Call):
            for given in decorator.keywords:
                if given.arg == keyword and isinstance(given.value, ast.Constant):
                    return given.value.value is value
    return False


def _field(stmt: ast.stmt, keyword_only: bool) -> dict[str, str] | None:
    """A dataclass or NamedTuple field as a parameter record (``init`` kept when given)."""
    if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
        return None
    if _CLASS_VAR in ast.unparse(stmt.annotation):
        return None
    record = {
        "name": stmt.target.id,
        "kind": "KEYWORD_ONLY" if keyword_only else "POSITIONAL_OR_KEYWORD",
        "annotation": ast.unparse(stmt.annotation),
    }
    value = stmt.value
    if isinstance(value, ast.Call) and ast.unparse(value.func).rpartition(".")[2] == "field":
        for given in value.keywords:
            if given.arg == "default":
                record["default"] = ast.unparse(given.value)
            elif given.arg == "default_factory":
                record["default"] = f"{ast.unparse(given.value)}()"
            elif given.arg == "init":
                record["init"] = ast.unparse(given.value)
            elif given.arg == "kw_only" and isinstance(given.value, ast.Constant):
                record["kind"] = "KEYWORD_ONLY" if given.value.value else "POSITIONAL_OR_KEYWORD"
    elif value is not None:
        record["default"] = ast.unparse(value)
    return record


def _holds_constants(node: ast.ClassDef) -> bool:
    if node.bases or node.keywords or node.decorator_list:
        return False
    names: list[str] = []
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            names += [t.id for t in stmt.targets if isinstance(t, ast.Name)]
        elif not isinstance(stmt, ast.Expr | ast.Pass):  # a docstring, ``...``
            return False
    return any(not name.startswith("_") for name in names)


class _RecordedResolver:
    """Resolve names in a recorded module for :func:`fi_compat._forwarding.analyse`."""

    def __init__(self, package: Package, module: str) -> None:
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


def _alias_target(stmt: ast.stmt, name: str) -> str | None:
    """``other`` when ``stmt`` is the class-body assignment ``name = other``, else None."""
    if not isinstance(stmt, ast.Assign) or not isinstance(stmt.value, ast.Name):
        return None
    if any(isinstance(target, ast.Name) and target.id == name for target in stmt.targets):
        return stmt.value.id
    return None


def _is_overload(func: FunctionNode) -> bool:
    """``func`` is an ``@overload`` (``@typing.overload``) stub: a decorator whose source
    ends in ``overload`` after its last dot (a name or an attribute is read without
    unparsing it, as almost every decorator is one)."""
    for decorator in func.decorator_list:
        if isinstance(decorator, ast.Name):
            last = decorator.id
        elif isinstance(decorator, ast.Attribute):
            last = decorator.attr
        else:
            last = ast.unparse(decorator).rpartition(".")[2]
        if last == _OVERLOAD:
            return True
    return False


def _descriptor(node: FunctionNode) -> str:
    names = {ast.unparse(decorator) for decorator in node.decorator_list}
    return next((kind for kind in ("staticmethod", "classmethod") if kind in names), "function")


def _returned_attribute(func: FunctionNode) -> str | None:
    """``name`` when the body of ``func`` (a docstring aside) is ``return self.name``.

    ``is_cuda_graph_enabled`` of every attention wrapper is such a property
    (``return self._use_cuda_graph``): the fake answers it from what the constructor stored.
    """
    body = list(func.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    first = _first_parameter(func)
    if len(body) != 1 or first is None or not isinstance(body[0], ast.Return):
        return None
    value = body[0].value
    if (
        isinstance(value, ast.Attribute)
        and isinstance(value.value, ast.Name)
        and value.value.id == first
    ):
        return value.attr
    return None


def _function_record(
    module: Module,
    func: FunctionNode,
    qualname: str,
    forward: tuple[str | None, list[str]] = (None, []),
    keeps: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The record of ``func``; ``keeps``: its kept arguments (:func:`written`), where it is
    a planning method and they were read already."""
    record: dict[str, Any] = {
        "defined_in": module.name,
        "qualname": qualname,
        "decorators": [ast.unparse(decorator) for decorator in func.decorator_list],
        "parameters": parameters(func.args),
    }
    if func.returns is not None:
        record["returns"] = ast.unparse(func.returns)
    attribute = _returned_attribute(func) if "." in qualname else None
    if attribute is not None:
        record["returns_attribute"] = attribute
    if func.name in PLANNING:
        kept = written(func) if keeps is None else keeps
        if kept:
            record["keeps"] = kept
    target, drops = forward
    if target is not None:
        record["forwards_kwargs_to"] = target
        if drops:
            record["forwards_kwargs_drops"] = drops
    return record


class Recorder:
    """Records what one release binds under a name in one of its modules."""

    def __init__(self, package: Package) -> None:
        self.package = package
        #: The name record of each ``def`` and ``class`` statement, made once however many
        #: modules re-export it (see :func:`fi_compat._recorder.names.name_record`).
        self.definitions: dict[ast.AST, dict[str, Any]] = {}
        self._self_uses: dict[FunctionNode, _SelfUse] = {}
        self._keeps: dict[FunctionNode, list[dict[str, Any]]] = {}
        #: What each module-level value is (see :mod:`fi_compat._recorder.values`).
        self.values = Values(package)

    def function(self, module: str, name: str) -> dict[str, Any] | None:
        """The record of the function ``module.name``; None unless it is a ``def``."""
        found = self.package.resolve(module, name)
        if found is None:
            return None
        defining, binding = found
        if binding.kind != "def":
            return None
        node = binding.node
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        forward = self._forwarding(defining, node, node.name, None)
        return _function_record(defining, node, node.name, forward, self._kept(node))

    def find_class(self, module: str, name: str) -> ClassNode | None:
        """The ``class`` statement ``module.name`` resolves to, or None."""
        found = self.package.resolve(module, name)
        if found is None or found[1].kind != "class":
            return None
        node = found[1].node
        assert isinstance(node, ast.ClassDef)
        return found[0], node

    def _mro(self, module: Module, node: ast.ClassDef) -> list[ClassNode]:
        chain: list[ClassNode] = []
        todo = [(module, node)]
        while todo and len(chain) < MAX_DEPTH:
            current_module, current = todo.pop(0)
            if any(current is seen for _, seen in chain):
                continue
            chain.append((current_module, current))
            for base in current.bases:
                if isinstance(base, ast.Name):
                    resolved = self.find_class(current_module.name, base.id)
                    if resolved is not None:
                        todo.append(resolved)
        return chain

    def find_method(
        self, module: Module, node: ast.ClassDef, name: str, *, aliases: bool = False
    ) -> MethodNode | None:
        """The ``def`` of method ``name`` on the class or the first base class that has one.

        ``@overload`` stubs are passed over for the implementation that follows them (what
        Python binds); otherwise the first ``def`` counts (a property's getter, not its
        ``@x.setter``). With ``aliases``, a class-body assignment ``name = other`` where
        ``other`` is a ``def`` of the same class body above it (``begin_forward = plan``)
        counts as well: that ``def`` is returned, as the class attribute is that very
        function.
        """
        for owner_module, owner in self._mro(module, node):
            bound: dict[str, FunctionNode] = {}
            for stmt in owner.body:
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                    if _is_overload(stmt):
                        continue
                    bound.setdefault(stmt.name, stmt)
                    if stmt.name == name:
                        return owner_module, owner, stmt
                    continue
                target = _alias_target(stmt, name) if aliases else None
                found = bound.get(target) if target is not None else None
                if found is not None:
                    return owner_module, owner, found
            stubs = [
                stmt
                for stmt in owner.body
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name
            ]
            if stubs:  # overload stubs without an implementation: the first, as before
                return owner_module, owner, stubs[0]
        return None

    def public_methods(self, module: Module, node: ast.ClassDef) -> tuple[str, ...]:
        """``__init__`` and every public method the class or its base classes define, a
        class-body alias of a ``def`` above it (``begin_forward = plan``) included."""
        names = [_INIT]
        for _, owner in self._mro(module, node):
            defined: set[str] = set()
            for stmt in owner.body:
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                    defined.add(stmt.name)
                    if not stmt.name.startswith("_"):
                        names.append(stmt.name)
                elif (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Name)
                    and stmt.value.id in defined
                ):
                    names += [
                        target.id
                        for target in stmt.targets
                        if isinstance(target, ast.Name) and not target.id.startswith("_")
                    ]
        return tuple(dict.fromkeys(names))

    def is_enum(self, module: Module, node: ast.ClassDef) -> bool:
        """The class is used for its constants, as ``_surface`` means an ``"enum"``.

        It derives, through release classes, from a class of :mod:`enum`; or it is a plain
        constant holder such as ``AllReduceFusionPattern``: no base, no decorator, and a
        body of class-level assignments only (with at least one public name).
        """
        if _holds_constants(node):
            return True
        for owner_module, owner in self._mro(module, node):
            for base in owner.bases:
                head = base.value if isinstance(base, ast.Attribute) else base
                if not isinstance(head, ast.Name):
                    continue
                found = self.package.resolve(owner_module.name, head.id)
                if found is None:
                    continue
                binding = found[1]
                if isinstance(base, ast.Attribute):
                    if binding.kind == "module" and binding.target_module == _ENUM_MODULE:
                        return True
                elif binding.kind == "import" and binding.target_module == _ENUM_MODULE:
                    return True
        return False

    def attributes(self, module: Module, node: ast.ClassDef) -> list[str]:
        """The instance attributes construction gives the class, sorted.

        The names assigned on ``self`` by the ``__init__`` the class runs and by each method
        it calls on ``self`` (one level deep), then the same for each ``__init__`` reached
        through ``super().__init__(...)``; and the fields of every dataclass among the class
        and its bases. Assignments under a condition count: the name may be set.
        """
        chain = self._mro(module, node)
        names: set[str] = set()
        for _, owner in chain:
            if _is_dataclass(owner):
                names |= _dataclass_fields(owner)
        start = 0
        while start < len(chain):
            init = self.find_method(*chain[start], _INIT)
            if init is None:
                break
            _, owner, func = init
            use = self._self_use(func)
            names |= use.assigned
            for called in use.called:
                helper = self.find_method(module, node, called)
                if helper is not None:
                    names |= self._self_use(helper[2]).assigned
            if not use.calls_super_init:
                break
            start = 1 + next((i for i, (_, cls) in enumerate(chain) if cls is owner), len(chain))
        return sorted(names)

    def _self_use(self, func: FunctionNode) -> _SelfUse:
        """:func:`_self_use` of ``func``, read once per release (a base class's
        ``__init__`` is read for every class built on it)."""
        found = self._self_uses.get(func)
        if found is None:
            found = self._self_uses[func] = _self_use(func)
        return found

    def _kept(self, func: FunctionNode) -> list[dict[str, Any]] | None:
        """:func:`written` of a planning method, read once per release (a wrapper's ``plan``
        is recorded again for every wrapper built on it, and a planning method is the
        longest there is); a copy, so a record changed later changes no other. None for a
        method that plans nothing."""
        if func.name not in PLANNING:
            return None
        found = self._keeps.get(func)
        if found is None:
            found = self._keeps[func] = written(func)
        return [dict(item) for item in found]

    def _method(
        self, module: Module, node: ast.ClassDef, name: str, *, aliases: bool = False
    ) -> dict[str, Any] | None:
        if name == _INIT and not any(
            isinstance(stmt, ast.FunctionDef) and stmt.name == _INIT for stmt in node.body
        ):
            generated = self.generated_init(module, node)
            if generated is not None:
                return generated
        found = self.find_method(module, node, name, aliases=aliases)
        if found is None:
            return None
        owner_module, owner, stmt = found
        # An alias is recorded as the function it is (its qualname names the def).
        where = f"{owner.name}.{stmt.name}"
        forward = self._forwarding(owner_module, stmt, where, (module, node))
        return _function_record(owner_module, stmt, where, forward, self._kept(stmt))

    def generated_init(self, module: Module, node: ast.ClassDef) -> dict[str, Any] | None:
        """The ``__init__`` a dataclass or a ``NamedTuple`` gets from its fields, or None.

        Its keywords are the fields, base classes' first (a renamed field breaks every
        caller as a renamed parameter does); ``field(default=...)`` gives the default's
        text, ``field(default_factory=f)`` the default ``f()``, ``init=False``
        leaves the field out and ``kw_only=True`` on the decorator makes them keyword-only.
        Recorded with the decorator ``"generated"`` and the class as its home.
        """
        chain = self._mro(module, node)
        named_tuple = any(
            ast.unparse(base).rpartition(".")[2] == _NAMED_TUPLE
            for _, owner in chain
            for base in owner.bases
        )
        if not named_tuple and not _is_dataclass(node):
            return None
        if not named_tuple and _decorator_keyword(node, "init", False):
            return None
        records: dict[str, dict[str, str]] = {}
        for _, owner in reversed(chain):
            if not (named_tuple or _is_dataclass(owner)):
                continue
            keyword_only = _decorator_keyword(owner, "kw_only")
            for stmt in owner.body:
                field = _field(stmt, keyword_only)
                if field is not None:
                    records.pop(field["name"], None)
                    if field.pop("init", "True") != "False":
                        records[field["name"]] = field
        first = [] if named_tuple else [{"name": "self", "kind": "POSITIONAL_OR_KEYWORD"}]
        # As dataclasses order them: keyword-only fields after the others.
        fields = sorted(records.values(), key=lambda field: field["kind"] == "KEYWORD_ONLY")
        return {
            "defined_in": module.name,
            "qualname": f"{node.name}.{_INIT}",
            "decorators": ["generated"],
            "parameters": [*first, *fields],
        }

    def _forwarding(
        self,
        module: Module,
        func: FunctionNode,
        where: str,
        cls: ClassNode | None,
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
            found = self.find_method(*cls, target)
            if found is not None:
                callee = found[2]
                params = [(p["name"], p["kind"]) for p in parameters(callee.args)]
                skip = bound_skip(ref.base, _descriptor(callee))
                doubts += positional_doubts(analysis.calls, params, skip, where)
        # A keyword the function declares itself never travels in **kwargs.
        own = {
            p["name"]
            for p in parameters(func.args)
            if p["kind"] in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")
        }
        drops = sorted({doubt.keyword for doubt in doubts} - own)
        return target, [ALL] if ALL in drops else drops

    def class_record(
        self, module: str, name: str, methods: tuple[str, ...], *, aliases: bool = False
    ) -> dict[str, Any] | None:
        """The class ``module.name`` with ``methods`` and whatever their ``**kwargs`` reach.

        With ``aliases``, a method bound by a class-body assignment (``begin_forward =
        plan``) is recorded as the ``def`` it names (see :meth:`find_method`).
        """
        found = self.find_class(module, name)
        if found is None:
            return None
        defining, node = found
        recorded: dict[str, Any] = {}
        for method in methods:
            recorded[method] = self._method(defining, node, method, aliases=aliases)
        # Follow **kwargs forwards to other methods of the class.
        todo = [m for m in methods if recorded[m] is not None]
        while todo:
            method_record = recorded[todo.pop(0)]
            target = method_record.get("forwards_kwargs_to")
            if target and target not in recorded and target.isidentifier():
                recorded[target] = self._method(defining, node, target)
                if recorded[target] is not None:
                    todo.append(target)
        found_record: dict[str, Any] = {
            "defined_in": defining.name,
            "bases": [ast.unparse(base) for base in node.bases],
            "decorators": [ast.unparse(decorator) for decorator in node.decorator_list],
            "methods": dict(sorted(recorded.items())),
            "attributes": self.attributes(defining, node),
        }
        served = next(
            (
                statement
                for statement in node.body
                if isinstance(statement, ast.FunctionDef) and statement.name == "__getattr__"
            ),
            None,
        )
        if served is not None:
            # an instance hands out names its class does not list: where it hands out those
            # of another of the release's classes (a lazy proxy), that class
            found_record["getattr"] = self._delegate(defining, node, served) or True
        return found_record

    def _delegate(
        self, defining: Module, node: ast.ClassDef, served: ast.FunctionDef
    ) -> str | None:
        """The class whose names ``__getattr__`` hands out, where its body is ``return
        getattr(self.<method>(), name)`` and that method's return annotation names one of the
        release's classes (``_LazyCudaRTLibrary`` -> ``CudaRTLibrary``); None otherwise."""
        body = [
            s
            for s in served.body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        ]
        if len(body) != 1 or not isinstance(body[0], ast.Return):
            return None
        call = body[0].value
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "getattr"
            and len(call.args) == 2
            and isinstance(call.args[0], ast.Call)
            and isinstance(call.args[0].func, ast.Attribute)
            and isinstance(call.args[0].func.value, ast.Name)
            and call.args[0].func.value.id == "self"
        ):
            return None
        method = call.args[0].func.attr
        found = next(
            (
                s
                for s in node.body
                if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == method
            ),
            None,
        )
        returns = found.returns if found is not None else None
        if isinstance(returns, ast.Constant) and isinstance(returns.value, str):
            returns = ast.Name(returns.value)
        if not isinstance(returns, ast.Name):
            return None
        resolved = self.package.resolve(defining.name, returns.id)
        if resolved is None or resolved[1].kind != "class":
            return None
        assert isinstance(resolved[1].node, ast.ClassDef)
        return f"{resolved[0].name}.{resolved[1].node.name}"

    def enum_record(self, module: str, name: str) -> dict[str, Any] | None:
        """The public class attributes of ``module.name`` with their literal values."""
        found = self.find_class(module, name)
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

    def returned_classes(self, module: str, function: str) -> dict[str, str]:
        """Classes named in the return annotation of ``module.function``.

        Maps each class name, in the order the annotation names them, to the module it
        resolves in: the function's own module.
        """
        found = self.package.resolve(module, function)
        if found is None or found[1].kind != "def":
            return {}
        defining, binding = found
        node = binding.node
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        if node.returns is None:
            return {}
        names: dict[str, str] = {}
        for sub in walk(node.returns):
            text = sub.value if isinstance(sub, ast.Constant) else None
            if isinstance(sub, ast.Name):
                text = sub.id
            if isinstance(text, str):
                for part in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
                    if self.find_class(defining.name, part) is not None:
                        names.setdefault(part, defining.name)
        return names

    def constructed_classes(self, module: str, function: str) -> dict[str, str]:
        """Classes ``module.function`` instantiates in a ``return Class(...)``.

        Maps each class name to the module it resolves in: the function's own module, or
        the module of an import inside the function body (a lazy import).
        """
        found = self.package.resolve(module, function)
        if found is None or found[1].kind != "def":
            return {}
        defining = found[0]
        local: dict[str, tuple[str, str]] = {}
        for node in walk(found[1].node):
            if isinstance(node, ast.ImportFrom):
                base = absolute(defining, node.level, node.module)
                for alias in node.names:
                    local[alias.asname or alias.name] = (base, alias.name)
        names: dict[str, str] = {}
        returns = [node for node in walk(found[1].node) if isinstance(node, ast.Return)]
        for node in sorted(returns, key=lambda node: (node.lineno, node.col_offset)):
            if not (isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)):
                continue
            name = node.value.func.id
            where, original = local.get(name, (defining.name, name))
            if original == name and self.find_class(where, name) is not None:
                names.setdefault(name, where)
        return names
