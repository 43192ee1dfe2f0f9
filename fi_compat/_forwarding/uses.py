"""Doubts: every read of a carrier, and which keywords it may drop or replace."""

from __future__ import annotations

import ast

from fi_compat._forwarding.carriers import Carriers
from fi_compat._forwarding.results import ALL
from fi_compat._forwarding.syntax import constant_key, only_read, snippet, splatted

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
