"""Where a ``**kwargs`` dict goes, proven from a function's syntax tree.

One analysis serves both the live probe (:mod:`fi_compat._signature`, over
``inspect.getsource``) and the recorder (``tools.recorder``, outside the package, over a
release's files), so live and recorded answers cannot drift apart. Only the syntax tree
is read: comments and strings never count.

The question is whether a keyword a caller puts into ``**kwargs`` surely reaches the one
callable the dict is splatted into. The answer is built from four rules, each
conservative (when in doubt, the keyword is in doubt):

Carriers
    The ``**kwargs`` name and names bound, everywhere in the function, only to a pure copy
    of a carrier: ``c``, ``dict(c)``, ``c.copy()``, ``{**c}``, ``{"k": v, **c}`` (entries
    after ``**c`` win, so ``{**c, "k": v}`` puts ``k`` in doubt, as does
    ``dict(c, k=v)``), or the result of a plain module-level helper whose own analysis
    shows it returns a copy of the dict parameter it was given, with additions only.
Doubts
    ``c.pop(k)``, ``del c[k]``, ``c[k] = v`` put ``k`` in doubt (every keyword when ``k``
    is not a constant string, except the add-only idiom ``if k in c: raise ...`` directly
    followed by ``c[k] = v``); ``c.update``, ``c |= ...``, ``c.clear()``, ``c.popitem()``,
    any other method, passing ``c`` to a call that is not a copy or an analysable helper,
    putting it in a container, using it in a nested function, or ``locals()``/``vars()``
    put every keyword in doubt. Reading (``c.get``, ``k in c``, ``c[k]``) is fine. In the
    forwarding call itself an explicit ``k=...`` puts ``k`` in doubt and a second ``**``
    puts every keyword in doubt; positional arguments are reported so the caller can put
    the target parameters they bind in doubt (:func:`positional_doubts`).
Paths
    Every path through the function must reach the forwarding call or raise; a path that
    returns first, falls off the end, or runs through something the check cannot follow
    (a loop body, a ``with`` block, a handler) makes the forward conditional, and then
    nothing is proven.
Targets
    ``self.name`` / ``cls.name`` (the method's first parameter, not rebound) and names
    not bound anywhere in the function (module globals, ``module.attr`` chains) can be
    resolved; a call through a parameter, a local, or an attribute of either cannot.
    Several different targets cannot either.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, cast

__all__ = [
    "ALL",
    "MAX_HELPER_DEPTH",
    "Analysis",
    "Doubt",
    "ForwardCall",
    "FunctionNode",
    "Ref",
    "Resolver",
    "analyse",
    "bound_skip",
    "calls_named",
    "method_kind",
    "positional_doubts",
]

#: The keyword of a :class:`Doubt` that applies to every keyword.
ALL = "*"
#: How many helper calls deep a copy is followed.
MAX_HELPER_DEPTH = 4

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
MethodKind = Literal["instance", "class"]

#: ``dict`` methods that only read (or, for ``setdefault``, only add a missing key).
_READS = frozenset(
    {"get", "keys", "values", "items", "copy", "setdefault", "__contains__", "__getitem__"}
)
#: Calls that hand out every local variable.
_REFLECTIVE = frozenset({"locals", "vars", "eval", "exec"})
#: Builtins that only read a dict passed to them.
_PURE = frozenset({"len", "isinstance", "bool", "sorted", "list", "tuple", "set", "frozenset"})
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_SNIPPET = 60
_TRY: tuple[type[ast.stmt], ...] = tuple(
    kind for kind in (ast.Try, getattr(ast, "TryStar", None)) if kind is not None
)


@dataclass(frozen=True)
class Ref:
    """A call target that can be resolved outside the function.

    Attributes
    ----------
    base
        ``"instance"`` for ``self.name``, ``"class"`` for ``cls.name`` (the method's first
        parameter), ``"global"`` for a module-level name and its attribute chain.
    path
        ``(name,)`` for ``self.name``; ``(name, attr, ...)`` for a global.
    text
        The target as source text.
    """

    base: Literal["instance", "class", "global"]
    path: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Doubt:
    """A keyword (or :data:`ALL`) that may be dropped or replaced on the way."""

    keyword: str
    reason: str


@dataclass(frozen=True)
class ForwardCall:
    """One call that splats the carried dict: where, and its positional arguments."""

    line: int
    positional: int
    starred: bool


@dataclass(frozen=True)
class Analysis:
    """What :func:`analyse` proved.

    ``problem`` is set when no forward is proven at all (then every forwarded keyword is
    unknown); otherwise ``target`` is where the dict goes and ``doubts`` are the keywords
    (or :data:`ALL`) that may not arrive unchanged.
    """

    target: Ref | None
    calls: tuple[ForwardCall, ...] = ()
    doubts: tuple[Doubt, ...] = ()
    problem: str | None = None


class Resolver(Protocol):
    """What the analysis asks of its caller (live objects or recorded sources)."""

    def function(self, name: str) -> tuple[FunctionNode, Resolver] | None:
        """The ``def`` of the undecorated module-level function ``name``, or None.

        Returns the node and a resolver for the module that holds it.
        """

    def is_builtin(self, name: str) -> bool:
        """True when ``name`` in this module's namespace is the builtin of that name."""


def calls_named(node: FunctionNode, name: str) -> bool:
    """Does the body of ``node`` call something named ``name`` (``name(...)``, ``x.name(...)``)?

    Read from the syntax tree: a mention in a comment, a string, a docstring, a default
    value or a bare reference does not count. Used for ``TorchDistBackend.bcast`` and
    ``get_global_rank`` by the live probe and the recorder alike.
    """
    for statement in node.body:
        for sub in ast.walk(statement):
            if not isinstance(sub, ast.Call):
                continue
            callee = sub.func
            if (isinstance(callee, ast.Name) and callee.id == name) or (
                isinstance(callee, ast.Attribute) and callee.attr == name
            ):
                return True
    return False


def method_kind(node: FunctionNode) -> MethodKind | None:
    """How a ``def`` in a class body binds its first parameter (None for staticmethod)."""
    names = {ast.unparse(decorator) for decorator in node.decorator_list}
    if "staticmethod" in names:
        return None
    return "class" if "classmethod" in names else "instance"


def bound_skip(base: str, descriptor: str) -> int:
    """Leading parameters of a target that the call binds implicitly.

    ``descriptor`` is ``"function"``, ``"staticmethod"`` or ``"classmethod"``: how the
    target is stored on the class. A global target skips nothing (its signature is what
    a call sees).
    """
    if descriptor == "classmethod":
        return 1
    if base == "instance" and descriptor == "function":
        return 1
    return 0


def positional_doubts(
    calls: Sequence[ForwardCall], parameters: Sequence[tuple[str, str]], skip: int, where: str
) -> list[Doubt]:
    """Target parameters the forwarding calls bind positionally.

    A keyword that is also bound positionally raises ``TypeError`` (multiple values), so
    it cannot be passed through ``**kwargs``. ``parameters`` are (name, kind) pairs in
    order, kinds as ``inspect.Parameter.kind.name``.
    """
    positional = [
        (name, kind)
        for name, kind in parameters[skip:]
        if kind in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
    ]
    doubts: list[Doubt] = []
    for call in calls:
        bound = positional if call.starred else positional[: call.positional]
        how = "a *args splat" if call.starred else "a positional argument"
        for name, kind in bound:
            if kind == "POSITIONAL_OR_KEYWORD":
                doubts.append(
                    Doubt(name, f"{how} of the call at line {call.line} of {where} binds it")
                )
    return doubts


def analyse(
    node: FunctionNode,
    param: str,
    resolver: Resolver,
    *,
    where: str,
    method: MethodKind | None = None,
) -> Analysis:
    """Follow ``param`` (the ``**kwargs`` of ``node``) to the call it is splatted into.

    Parameters
    ----------
    node
        The function's ``def``; line numbers are reported as they are in the node.
    param
        The name of its ``**kwargs`` parameter.
    resolver
        Finds helper functions and tells builtins from shadowing globals.
    where
        The function's name, for reasons.
    method
        How the first parameter is bound when ``node`` is a method, else None.
    """
    return _Function(node, param, resolver, where, method, {}, 0).forward()


# ------------------------------------------------------------------------- internals


def _snippet(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= _SNIPPET else text[: _SNIPPET - 3] + "..."


def _constant_key(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _parameters(node: FunctionNode | ast.Lambda) -> list[ast.arg]:
    args = node.args
    found = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    found += [arg for arg in (args.vararg, args.kwarg) if arg is not None]
    return found


_HelperCache = dict[tuple[int, str], "tuple[Doubt, ...] | None"]


@dataclass
class _Function:
    node: FunctionNode
    param: str
    resolver: Resolver
    where: str
    method: MethodKind | None
    cache: _HelperCache
    depth: int
    helper: bool = False
    parents: dict[int, ast.AST] = field(default_factory=dict)
    bindings: dict[str, list[ast.AST]] = field(default_factory=dict)
    params: set[str] = field(default_factory=set)
    carriers: set[str] = field(default_factory=set)
    doubts: dict[tuple[str, str], Doubt] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    copies: dict[tuple[int, frozenset[str]], tuple[Doubt, ...] | None] = field(default_factory=dict)
    nodes: list[ast.AST] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.params = {arg.arg for arg in _parameters(self.node)}
        todo: list[ast.AST] = list(self.node.body)
        for stmt in todo:
            self.parents[id(stmt)] = self.node
        while todo:  # one walk: the body's nodes and their parents
            parent = todo.pop()
            self.nodes.append(parent)
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent
                todo.append(child)
        for sub in self.nodes:
            for name in _bound_names(sub):
                self.bindings.setdefault(name, []).append(sub)

    # ---------------------------------------------------------------- the walk

    def _body_nodes(self) -> list[ast.AST]:
        return self.nodes

    def _line(self, node: ast.AST) -> int:
        return getattr(node, "lineno", getattr(self.node, "lineno", 0))

    def _doubt(self, keyword: str, node: ast.AST, what: str | None = None) -> None:
        doubt = self._make(keyword, node, what)
        self.doubts.setdefault((doubt.keyword, doubt.reason), doubt)

    def _nested(self, node: ast.AST) -> bool:
        current = self.parents.get(id(node))
        while current is not None and current is not self.node:
            if isinstance(current, _SCOPES):
                return True
            current = self.parents.get(id(current))
        return False

    # ---------------------------------------------------------------- carriers

    def _compute_carriers(self) -> None:
        if self.param in self.bindings and any(
            self._assigned_value(b) is None for b in self.bindings[self.param]
        ):
            return  # the parameter itself is rebound to something else
        candidates = {self.param} | {
            name
            for name, found in self.bindings.items()
            if name not in self.params
            and all(self._assigned_value(binding) is not None for binding in found)
        }
        changed = True
        while changed:
            changed = False
            for name in sorted(candidates):
                for binding in self.bindings.get(name, []):
                    value = self._assigned_value(binding)
                    if value is True:
                        continue
                    if not isinstance(value, ast.expr) or self._copy(value, candidates) is None:
                        candidates.discard(name)
                        changed = True
                        break
        self.carriers = candidates

    def _assigned_value(self, binding: ast.AST) -> ast.expr | bool | None:
        """The value a plain ``name = value`` binds; True for ``name op= ...``; else None."""
        if not isinstance(binding, ast.Name) or self._nested(binding):
            return None
        parent = self.parents.get(id(binding))
        if isinstance(parent, ast.Assign) and any(t is binding for t in parent.targets):
            return parent.value
        if isinstance(parent, ast.AnnAssign) and parent.target is binding:
            return parent.value
        if isinstance(parent, ast.AugAssign) and parent.target is binding:
            return True
        return None

    def _copy(self, expr: ast.expr, carriers: set[str]) -> tuple[Doubt, ...] | None:
        """Doubts when ``expr`` is a copy of a carrier, else None (memoized)."""
        key = (id(expr), frozenset(carriers))
        if key not in self.copies:
            self.copies[key] = self._copy_uncached(expr, carriers)
        return self.copies[key]

    def _copy_uncached(self, expr: ast.expr, carriers: set[str]) -> tuple[Doubt, ...] | None:
        if isinstance(expr, ast.Name):
            return () if expr.id in carriers else None
        if isinstance(expr, ast.Dict):
            return self._copy_display(expr, carriers)
        if not isinstance(expr, ast.Call):
            return None
        func = expr.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "copy"
            and not expr.args
            and not expr.keywords
        ):
            return self._copy(func.value, carriers)
        if isinstance(func, ast.Name) and func.id == "dict" and self._builtin("dict"):
            return self._copy_dict_call(expr, carriers)
        return self._copy_helper(expr, carriers)

    def _builtin(self, name: str) -> bool:
        return (
            name not in self.params
            and name not in self.bindings
            and (self.resolver.is_builtin(name))
        )

    def _copy_display(self, expr: ast.Dict, carriers: set[str]) -> tuple[Doubt, ...] | None:
        found: list[Doubt] = []
        first: int | None = None
        for index, (key, value) in enumerate(zip(expr.keys, expr.values, strict=True)):
            inner = self._copy(value, carriers) if key is None else None
            if inner is not None:
                found += inner
                first = index if first is None else first
        if first is None:
            return None
        for key, value in list(zip(expr.keys, expr.values, strict=True))[first + 1 :]:
            if key is None and self._copy(value, carriers) is not None:
                continue
            constant = _constant_key(key) if key is not None else None
            keyword = constant if constant is not None else ALL
            found.append(self._make(keyword, expr, f"{_snippet(expr)} (a later entry)"))
        return tuple(found)

    def _copy_dict_call(self, expr: ast.Call, carriers: set[str]) -> tuple[Doubt, ...] | None:
        if len(expr.args) > 1 or any(isinstance(arg, ast.Starred) for arg in expr.args):
            return None
        sources = [*expr.args, *(kw.value for kw in expr.keywords if kw.arg is None)]
        copies = [self._copy(source, carriers) for source in sources]
        if not any(copy is not None for copy in copies):
            return None
        found = [doubt for copy in copies if copy is not None for doubt in copy]
        if len(sources) > 1:
            found.append(self._make(ALL, expr))
        for keyword in expr.keywords:
            if keyword.arg is not None:
                found.append(self._make(keyword.arg, expr))
        return tuple(found)

    def _copy_helper(self, expr: ast.Call, carriers: set[str]) -> tuple[Doubt, ...] | None:
        if not isinstance(expr.func, ast.Name) or self.depth >= MAX_HELPER_DEPTH:
            return None
        name = expr.func.id
        if name in self.params or name in self.bindings or not _mentions(expr, carriers):
            return None
        mentions = [
            sub for sub in ast.walk(expr) if isinstance(sub, ast.Name) and sub.id in carriers
        ]
        carried: list[tuple[int | str, ast.expr]] = [
            (index, arg)
            for index, arg in enumerate(expr.args)
            if isinstance(arg, ast.Name) and arg.id in carriers
        ]
        carried += [
            (kw.arg, kw.value)
            for kw in expr.keywords
            if kw.arg is not None and isinstance(kw.value, ast.Name) and kw.value.id in carriers
        ]
        if len(carried) != 1 or len(mentions) != 1:
            return None
        if any(isinstance(arg, ast.Starred) for arg in expr.args) or any(
            kw.arg is None for kw in expr.keywords
        ):
            return None
        found = self.resolver.function(name)
        if found is None:
            return None
        helper, resolver = found
        if helper.decorator_list:
            return None
        slot = carried[0][0]
        positional = [*helper.args.posonlyargs, *helper.args.args]
        if isinstance(slot, int):
            if slot >= len(positional):
                return None
            target = positional[slot].arg
        else:
            names = {arg.arg for arg in [*helper.args.args, *helper.args.kwonlyargs]}
            if slot not in names:
                return None
            target = slot
        key = (id(helper), target)
        if key not in self.cache:
            self.cache[key] = None  # recursion guard
            inner = _Function(
                helper,
                target,
                resolver,
                helper.name,
                None,
                self.cache,
                self.depth + 1,
                helper=True,
            )
            self.cache[key] = inner.returned_copy()
        return self.cache[key]

    def _make(self, keyword: str, node: ast.AST, what: str | None = None) -> Doubt:
        text = what or _snippet(node)
        effect = "may drop it" if keyword != ALL else "may drop or replace any keyword"
        return Doubt(keyword, f"{text} at line {self._line(node)} of {self.where} {effect}")

    # ---------------------------------------------------------------- uses

    def _scan_uses(self) -> None:
        for node in self._body_nodes():
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id in _REFLECTIVE:
                    self._doubt(ALL, node)
            if isinstance(node, ast.Dict | ast.Call):
                for doubt in self._copy(node, self.carriers) or ():
                    self.doubts.setdefault((doubt.keyword, doubt.reason), doubt)
            target = node.target if isinstance(node, ast.AugAssign) else None
            if isinstance(target, ast.Name) and target.id in self.carriers:
                self._doubt(ALL, node)
            if (
                isinstance(node, ast.Name)
                and node.id in self.carriers
                and isinstance(node.ctx, ast.Load)
            ):
                self._use(node)

    def _use(self, node: ast.Name) -> None:
        """Check one read of a carrier: fine, a doubt for some keyword, or for all."""
        if self._nested(node):
            self._doubt(ALL, node, f"{node.id} used in a nested scope")
            return
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            self._method_use(node, parent)
        elif isinstance(parent, ast.Subscript) and parent.value is node:
            self._item_use(node, parent)
        elif _splatted(node, parent) or _only_read(node, parent):
            return
        elif isinstance(parent, ast.Call | ast.keyword):
            call = parent if isinstance(parent, ast.Call) else self.parents.get(id(parent))
            if not isinstance(call, ast.Call):
                self._doubt(ALL, node)
            elif self._pure_builtin(call) and call.func is not node:
                return
            elif self._copy(call, self.carriers) is None:
                self._doubt(ALL, call, f"{node.id} passed to {_snippet(call.func)}(...)")
            elif isinstance(call.func, ast.Name) and call.func.id != "dict":
                self._alias_use(node, call)  # a helper may hand back the very same dict
        elif isinstance(parent, ast.Assign | ast.AnnAssign) and parent.value is node:
            self._alias_use(node, node)
        else:
            self._doubt(ALL, parent if parent is not None else node)

    def _pure_builtin(self, call: ast.Call) -> bool:
        func = call.func
        return isinstance(func, ast.Name) and func.id in _PURE and self._builtin(func.id)

    def _alias_use(self, node: ast.Name, value: ast.expr) -> None:
        """``x = c`` or ``x = helper(c)``: ``x`` may be the same dict, so it must be a carrier."""
        consumer = self.parents.get(id(value))
        if isinstance(consumer, ast.Assign | ast.AnnAssign) and consumer.value is value:
            targets = consumer.targets if isinstance(consumer, ast.Assign) else [consumer.target]
            if all(isinstance(t, ast.Name) and t.id in self.carriers for t in targets):
                return
        elif isinstance(consumer, ast.Expr | ast.Return) or _splatted(value, consumer):
            return
        where = consumer or node
        self._doubt(ALL, where, f"{node.id} is aliased by {_snippet(where)}")

    def _method_use(self, node: ast.Name, attribute: ast.Attribute) -> None:
        call = self.parents.get(id(attribute))
        if not (isinstance(call, ast.Call) and call.func is attribute):
            self._doubt(ALL, attribute)
            return
        if attribute.attr in _READS:
            return
        if attribute.attr == "pop" and call.args:
            key = _constant_key(call.args[0])
            self._doubt(key if key is not None else ALL, call)
            return
        self._doubt(ALL, call)

    def _item_use(self, node: ast.Name, subscript: ast.Subscript) -> None:
        if isinstance(subscript.ctx, ast.Load):
            return
        key = _constant_key(subscript.slice)
        if isinstance(subscript.ctx, ast.Store) and self._add_only(node, subscript):
            return
        statement = self.parents.get(id(subscript))
        self._doubt(key if key is not None else ALL, statement or subscript)

    def _add_only(self, node: ast.Name, subscript: ast.Subscript) -> bool:
        """``if k in c: raise ...`` right before ``c[k] = v`` in the same block."""
        assign = self.parents.get(id(subscript))
        if not (
            isinstance(assign, ast.Assign)
            and len(assign.targets) == 1
            and assign.targets[0] is subscript
        ):
            return False
        if any(isinstance(sub, ast.NamedExpr) for sub in ast.walk(assign.value)):
            return False
        block = self._block_of(assign)
        if block is None:
            return False
        index = next(i for i, stmt in enumerate(block) if stmt is assign)
        if index == 0:
            return False
        guard = block[index - 1]
        if not (
            isinstance(guard, ast.If)
            and not guard.orelse
            and len(guard.body) == 1
            and isinstance(guard.body[0], ast.Raise)
            and isinstance(guard.test, ast.Compare)
            and len(guard.test.ops) == 1
            and isinstance(guard.test.ops[0], ast.In)
        ):
            return False
        container = guard.test.comparators[0]
        key = subscript.slice
        return (
            isinstance(container, ast.Name)
            and container.id == node.id
            and isinstance(key, ast.Name | ast.Constant)
            and ast.dump(guard.test.left) == ast.dump(key)
        )

    def _block_of(self, stmt: ast.stmt) -> list[ast.stmt] | None:
        parent = self.parents.get(id(stmt))
        if parent is None:
            return None
        for name in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and any(item is stmt for item in block):
                return block
        return None

    # ---------------------------------------------------------------- forwards

    def _forward_calls(self) -> list[ast.Call]:
        calls: list[ast.Call] = []
        for node in self._body_nodes():
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Name) and node.func.id == "dict" and self._builtin("dict"):
                continue
            if any(
                kw.arg is None and self._copy(kw.value, self.carriers) is not None
                for kw in node.keywords
            ):
                calls.append(node)
        return calls

    def _ref(self, expr: ast.expr) -> tuple[Ref | None, str]:
        attrs: list[str] = []
        base = expr
        while isinstance(base, ast.Attribute):
            attrs.insert(0, base.attr)
            base = base.value
        text = ast.unparse(expr)
        if not isinstance(base, ast.Name):
            return None, f"{text} is not a name or an attribute of one"
        name = base.id
        positional = [*self.node.args.posonlyargs, *self.node.args.args]
        first = positional[0].arg if positional else None
        if self.method is not None and name == first:
            if name in self.bindings:
                return None, f"{name} is rebound in {self.where}"
            if len(attrs) != 1:
                return None, f"{text} is an attribute of an instance attribute"
            for node in self._body_nodes():
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store | ast.Del)
                    and node.attr == attrs[0]
                    and isinstance(node.value, ast.Name)
                    and node.value.id == name
                ):
                    return None, f"{text} is assigned at line {node.lineno} of {self.where}"
            return Ref(self.method, (attrs[0],), text), ""
        if name in self.params:
            return None, f"{name} is a parameter of {self.where}"
        if name in self.bindings:
            line = self._line(self.bindings[name][0])
            return None, f"{name} is bound locally at line {line} of {self.where}"
        return Ref("global", (name, *attrs), text), ""

    # ---------------------------------------------------------------- paths

    def _definite(self, node: ast.AST, wanted: set[int]) -> bool:
        """Does evaluating ``node`` surely evaluate one of the ``wanted`` nodes?"""
        if id(node) in wanted:
            return True
        if isinstance(node, _SCOPES):
            return False
        if isinstance(node, ast.IfExp):
            return self._definite(node.test, wanted)
        if isinstance(node, ast.BoolOp):
            return self._definite(node.values[0], wanted)
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            return self._definite(node.generators[0].iter, wanted)
        return any(self._definite(child, wanted) for child in ast.iter_child_nodes(node))

    def _block(self, stmts: list[ast.stmt], done: bool, wanted: set[int]) -> tuple[bool, bool]:
        """(forwarded on every path that falls through, every path left the block)."""
        for stmt in stmts:
            done, left = self._stmt(stmt, done, wanted)
            if left:
                return done, True
        return done, False

    def _stmt(self, stmt: ast.stmt, done: bool, wanted: set[int]) -> tuple[bool, bool]:
        if isinstance(stmt, ast.Return):
            if self.helper:
                if stmt.value is None or self._copy(stmt.value, self.carriers) is None:
                    self.problems.append(
                        f"{self.where} returns something other than a copy of {self.param} "
                        f"at line {stmt.lineno}"
                    )
                return True, True
            if not (done or (stmt.value is not None and self._definite(stmt.value, wanted))):
                self.problems.append(
                    f"{self.where} returns without forwarding at line {stmt.lineno}"
                )
            return True, True
        if isinstance(stmt, ast.Raise):
            return done, True
        if isinstance(stmt, ast.Break | ast.Continue):
            return done, True
        if isinstance(stmt, ast.If):
            done = done or self._definite(stmt.test, wanted)
            body = self._block(stmt.body, done, wanted)
            orelse = self._block(stmt.orelse, done, wanted)
            open_paths = [forwarded for forwarded, left in (body, orelse) if not left]
            return all(open_paths), not open_paths
        if isinstance(stmt, _TRY):
            attempt = cast(ast.Try, stmt)  # ast.TryStar (3.11+) has the same fields
            body = self._block(attempt.body, done, wanted)
            if not body[1]:
                body = self._block(attempt.orelse, body[0], wanted)
            results = [body] + [self._block(h.body, done, wanted) for h in attempt.handlers]
            open_paths = [forwarded for forwarded, left in results if not left]
            final = self._block(attempt.finalbody, done, wanted)
            return all(open_paths) or final[0], not open_paths or final[1]
        if isinstance(stmt, ast.For | ast.AsyncFor | ast.While):
            head = stmt.test if isinstance(stmt, ast.While) else stmt.iter
            done = done or self._definite(head, wanted)
            self._block(stmt.body, done, wanted)
            self._block(stmt.orelse, done, wanted)
            return done, False
        if isinstance(stmt, ast.With | ast.AsyncWith):
            done = done or any(self._definite(item.context_expr, wanted) for item in stmt.items)
            self._block(stmt.body, done, wanted)
            return done, False  # a context manager may swallow an exception
        if isinstance(stmt, ast.Match):
            done = done or self._definite(stmt.subject, wanted)
            for case in stmt.cases:
                self._block(case.body, done, wanted)
            return done, False
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return done, False
        return done or self._definite(stmt, wanted), False

    def _paths(self, wanted: set[int]) -> None:
        done, left = self._block(self.node.body, False, wanted)
        if not left and not done:
            what = "returns None" if self.helper else "can return without forwarding"
            self.problems.append(f"{self.where} {what} at its end")

    # ---------------------------------------------------------------- results

    def _generator(self) -> bool:
        return any(
            isinstance(node, ast.Yield | ast.YieldFrom) and not self._nested(node)
            for node in self._body_nodes()
        )

    def returned_copy(self) -> tuple[Doubt, ...] | None:
        """Helper mode: doubts when every return gives a copy of the parameter, else None."""
        if self._generator() or self.param not in self.params:
            return None
        self._compute_carriers()
        if self.param not in self.carriers:
            return None
        self._scan_uses()
        self._paths(set())
        if self.problems:
            return None
        return tuple(self.doubts.values())

    def forward(self) -> Analysis:
        """Main mode: the forward target and the doubts."""
        if self._generator():
            return Analysis(None, problem=f"{self.where} is a generator")
        self._compute_carriers()
        if self.param not in self.carriers:
            return Analysis(None, problem=f"**{self.param} is rebound in {self.where}")
        calls = self._forward_calls()
        if not calls:
            return Analysis(None, problem=f"no call forwards **{self.param}")
        refs: list[Ref] = []
        for call in calls:
            ref, why = self._ref(call.func)
            if ref is None:
                return Analysis(None, problem=f"cannot resolve the call to {why}")
            if ref not in refs:
                refs.append(ref)
        if len(refs) > 1:
            names = ", ".join(ref.text for ref in refs)
            return Analysis(
                None, problem=f"**{self.param} is forwarded to several callables ({names})"
            )
        self._paths({id(call) for call in calls})
        if self.problems:
            return Analysis(None, problem=self.problems[0])
        self._scan_uses()
        forwards: list[ForwardCall] = []
        for call in calls:
            splats = [kw for kw in call.keywords if kw.arg is None]
            if len(splats) > 1:
                self._doubt(ALL, call, f"{_snippet(call)} (more than one **)")
            for kw in call.keywords:
                if kw.arg is not None:
                    self._doubt(kw.arg, call, f"{kw.arg}= passed as well to {_snippet(call.func)}")
            starred = any(isinstance(arg, ast.Starred) for arg in call.args)
            plain = sum(not isinstance(arg, ast.Starred) for arg in call.args)
            forwards.append(ForwardCall(call.lineno, plain, starred))
        return Analysis(refs[0], tuple(forwards), tuple(self.doubts.values()))


def _mentions(call: ast.Call, carriers: set[str]) -> bool:
    """Does a direct argument of ``call`` name a carrier (cheap pre-check)?"""
    values = [*call.args, *(keyword.value for keyword in call.keywords)]
    return any(isinstance(value, ast.Name) and value.id in carriers for value in values)


def _splatted(node: ast.expr, parent: ast.AST | None) -> bool:
    """``**node`` in a call or a dict display: its items are copied, it is not kept."""
    if isinstance(parent, ast.keyword):
        return parent.arg is None
    if isinstance(parent, ast.Dict):
        pairs = zip(parent.keys, parent.values, strict=True)
        return any(key is None and value is node for key, value in pairs)
    return False


def _only_read(node: ast.expr, parent: ast.AST | None) -> bool:
    """``k in c``, ``if c``, ``not c``, ``for k in c``, ``return c``: nothing can change it."""
    if isinstance(parent, ast.Compare | ast.Expr | ast.Return):
        return True
    if isinstance(parent, ast.UnaryOp):
        return isinstance(parent.op, ast.Not)
    if isinstance(parent, ast.If | ast.While | ast.IfExp | ast.Assert):
        return parent.test is node
    if isinstance(parent, ast.For | ast.AsyncFor | ast.comprehension):
        return parent.iter is node
    return False


def _bound_names(node: ast.AST) -> Iterator[str]:
    """Names a node binds (any scope inside the function counts: conservative)."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
        yield node.id
    elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.Lambda):
        pass
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, ast.Import | ast.ImportFrom):
        for alias in node.names:
            yield alias.asname or alias.name.partition(".")[0]
    elif isinstance(node, ast.ExceptHandler) and node.name:
        yield node.name
    elif isinstance(node, ast.Global | ast.Nonlocal):
        yield from node.names
    elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
        yield node.name
    elif isinstance(node, ast.MatchMapping) and node.rest:
        yield node.rest
