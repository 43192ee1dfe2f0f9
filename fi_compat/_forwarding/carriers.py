"""Carriers: the ``**kwargs`` name and the pure copies of it, and what a copy may drop."""

from __future__ import annotations

import ast

from fi_compat._forwarding.results import ALL, Doubt
from fi_compat._forwarding.syntax import constant_key, mentions_carrier, snippet
from fi_compat._forwarding.walk import Walk

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
