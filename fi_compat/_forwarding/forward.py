"""The forwarding calls, where they go, and the :class:`Analysis`.

Then, for callers, the target parameters the forwarding calls also bind positionally.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from fi_compat._forwarding.model import (
    ALL,
    Analysis,
    Doubt,
    ForwardCall,
    FunctionNode,
    MethodKind,
    Ref,
    Resolver,
    snippet,
)
from fi_compat._forwarding.stages import Paths, Uses

# ---------------------------------------------------------------------- forward
# Targets and results: the forwarding calls, where they go, and the :class:`Analysis`.


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


class _Function(Uses, Paths):
    """The whole analysis of one function: every stage, in the order :meth:`forward` runs them."""

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
                self._doubt(ALL, call, f"{snippet(call)} (more than one **)")
            for kw in call.keywords:
                if kw.arg is not None:
                    self._doubt(kw.arg, call, f"{kw.arg}= passed as well to {snippet(call.func)}")
            starred = any(isinstance(arg, ast.Starred) for arg in call.args)
            plain = sum(not isinstance(arg, ast.Starred) for arg in call.args)
            forwards.append(ForwardCall(call.lineno, plain, starred))
        return Analysis(refs[0], tuple(forwards), tuple(self.doubts.values()))


# ---------------------------------------------------------------------- positional
# After the analysis: target parameters the forwarding calls also bind positionally.


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
