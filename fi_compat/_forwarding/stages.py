"""The stages of one function's analysis: the walk, the carriers, the paths, the uses.

A section each: the walk (its parsed body, its bindings, its doubts), the carriers (the
``**kwargs`` name and its pure copies), the paths (does every path reach the forwarding
call or raise?) and the uses (every read of a carrier, and which keywords it may drop or
replace). :class:`Walk` is the base every stage builds on; it walks the body once and
makes the reasons.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import cast

from fi_compat._forwarding.model import (
    ALL,
    SCOPES,
    Doubt,
    FunctionNode,
    MethodKind,
    Resolver,
    bound_names,
    constant_key,
    mentions_carrier,
    only_read,
    parameters_of,
    snippet,
    splatted,
)

# ---------------------------------------------------------------------- walk
# The state of one function's analysis: its parsed body, its bindings, its doubts.


_HelperCache = dict[tuple[int, str], "tuple[Doubt, ...] | None"]


@dataclass
class Walk:
    """One function's body, walked once: parents, bindings, and the doubts found so far."""

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
        self.params = {arg.arg for arg in parameters_of(self.node)}
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
            for name in bound_names(sub):
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
            if isinstance(current, SCOPES):
                return True
            current = self.parents.get(id(current))
        return False

    def _make(self, keyword: str, node: ast.AST, what: str | None = None) -> Doubt:
        text = what or snippet(node)
        effect = "may drop it" if keyword != ALL else "may drop or replace any keyword"
        return Doubt(keyword, f"{text} at line {self._line(node)} of {self.where} {effect}")

    def _builtin(self, name: str) -> bool:
        return (
            name not in self.params
            and name not in self.bindings
            and (self.resolver.is_builtin(name))
        )


# ---------------------------------------------------------------------- carriers
# Carriers: the ``**kwargs`` name and the pure copies of it, and what a copy may drop.


#: How many helper calls deep a copy is followed.
MAX_HELPER_DEPTH = 4


class Carriers(Walk):
    """Which names carry the dict, and what each copy on the way may drop."""

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
            constant = constant_key(key) if key is not None else None
            keyword = constant if constant is not None else ALL
            found.append(self._make(keyword, expr, f"{snippet(expr)} (a later entry)"))
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
        if name in self.params or name in self.bindings or not mentions_carrier(expr, carriers):
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
            inner = type(self)(
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

    def returned_copy(self) -> tuple[Doubt, ...] | None:
        """Helper mode, defined by the whole analysis (:class:`.forward._Function`)."""
        raise NotImplementedError


# ---------------------------------------------------------------------- paths
# Paths: does every path through the function reach the forwarding call or raise?


_TRY: tuple[type[ast.stmt], ...] = tuple(
    kind for kind in (ast.Try, getattr(ast, "TryStar", None)) if kind is not None
)


class Paths(Carriers):
    """Whether the forward (or, for a helper, a returned copy) is reached on every path."""

    def _definite(self, node: ast.AST, wanted: set[int]) -> bool:
        """Does evaluating ``node`` surely evaluate one of the ``wanted`` nodes?"""
        if id(node) in wanted:
            return True
        if isinstance(node, SCOPES):
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


# ---------------------------------------------------------------------- uses
# Doubts: every read of a carrier, and which keywords it may drop or replace.


#: ``dict`` methods that only read (or, for ``setdefault``, only add a missing key).
_READS = frozenset(
    {"get", "keys", "values", "items", "copy", "setdefault", "__contains__", "__getitem__"}
)
#: Calls that hand out every local variable.
_REFLECTIVE = frozenset({"locals", "vars", "eval", "exec"})
#: Builtins that only read a dict passed to them.
_PURE = frozenset({"len", "isinstance", "bool", "sorted", "list", "tuple", "set", "frozenset"})


class Uses(Carriers):
    """The doubts every read of a carrier raises."""

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
        elif splatted(node, parent) or only_read(node, parent):
            return
        elif isinstance(parent, ast.Call | ast.keyword):
            call = parent if isinstance(parent, ast.Call) else self.parents.get(id(parent))
            if not isinstance(call, ast.Call):
                self._doubt(ALL, node)
            elif self._pure_builtin(call) and call.func is not node:
                return
            elif self._copy(call, self.carriers) is None:
                self._doubt(ALL, call, f"{node.id} passed to {snippet(call.func)}(...)")
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
        elif isinstance(consumer, ast.Expr | ast.Return) or splatted(value, consumer):
            return
        where = consumer or node
        self._doubt(ALL, where, f"{node.id} is aliased by {snippet(where)}")

    def _method_use(self, node: ast.Name, attribute: ast.Attribute) -> None:
        call = self.parents.get(id(attribute))
        if not (isinstance(call, ast.Call) and call.func is attribute):
            self._doubt(ALL, attribute)
            return
        if attribute.attr in _READS:
            return
        if attribute.attr == "pop" and call.args:
            key = constant_key(call.args[0])
            self._doubt(key if key is not None else ALL, call)
            return
        self._doubt(ALL, call)

    def _item_use(self, node: ast.Name, subscript: ast.Subscript) -> None:
        if isinstance(subscript.ctx, ast.Load):
            return
        key = constant_key(subscript.slice)
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
