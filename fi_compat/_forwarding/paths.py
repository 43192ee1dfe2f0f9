"""Paths: does every path through the function reach the forwarding call or raise?"""

from __future__ import annotations

import ast
from typing import cast

from fi_compat._forwarding.carriers import Carriers
from fi_compat._forwarding.syntax import SCOPES

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
