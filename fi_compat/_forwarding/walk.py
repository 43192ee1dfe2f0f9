"""The state of one function's analysis: its parsed body, its bindings, its doubts.

:class:`_Walk` is the base every stage builds on (:mod:`.carriers`, :mod:`.uses`,
:mod:`.paths`, :mod:`.forward`); it walks the body once and makes the reasons.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from fi_compat._forwarding.results import ALL, Doubt, FunctionNode, MethodKind, Resolver
from fi_compat._forwarding.syntax import SCOPES, bound_names, parameters_of, snippet

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
