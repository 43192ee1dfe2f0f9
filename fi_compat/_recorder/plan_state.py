"""What a planning method leaves on its object: ``self._<name> = <parameter>``, read from source.

An attention wrapper's ``plan`` keeps some of its arguments on the wrapper, and engines read
them back: vLLM 0.33.0's forward asserts that the wrapper's ``_window_left``,
``_logits_soft_cap``, ``_sm_scale`` and ``_causal`` are its own settings. The fake's ``plan``
keeps what the release's ``plan`` keeps, and this module reads which those are.

A *kept argument* is an attribute of the method's first parameter assigned from one of its
parameters, and nothing else, everywhere in the method: ``self._window_left = window_left``
in each branch that assigns ``_window_left``. An attribute also assigned from anything else
(``self._sm_scale = sm_scale`` in one branch, ``self._sm_scale = 1.0`` in another) keeps no
argument: which value it gets depends on the run. A parameter the method reassigns is read
as what the release does with it:

* never reassigned: the attribute holds the argument as passed;
* reassigned only by ``if <parameter> is None: <parameter> = <literal>`` at the method's
  top level (``if logits_soft_cap is None: logits_soft_cap = 0.0``): the argument, or that
  literal for None (:attr:`~fi_compat._records.KeptArgument.when_none`);
* reassigned only under ``if <parameter> is None:`` with anything else
  (``is_causal = q_len_per_req > 1``): the argument when it is not None; for None the value
  is computed from others and the fake leaves the attribute as it is
  (:attr:`~fi_compat._records.KeptArgument.none_computed`);
* reassigned any other way (``q_data_type = canonicalize_torch_dtype(q_data_type)``): not
  kept, the value is computed.

Nested functions, lambdas and classes are not the method's own code and are not read. Only
the planning methods are read (:data:`PLANNING`): ``plan``, its older name
``begin_forward``, the ``_plan_impl`` a ``plan`` forwards to, and the module function
``fast_decode_plan``, whose first parameter is the wrapper.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from fi_compat._forwarding import FunctionNode
from fi_compat._recorder.trees import children
from fi_compat._records._classes import KeptArgument
from fi_compat._surface import FAST_DECODE_PLAN, PLAN, PLAN_IMPL

__all__ = ["PLANNING", "kept_arguments", "written"]

#: The functions whose kept arguments are recorded, by name.
PLANNING = frozenset({PLAN, "begin_forward", PLAN_IMPL, FAST_DECODE_PLAN.key})

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` that is the method's own code (no nested scope), depth
    first in source order. One stack, not a generator per level: a planning method is
    thousands of nodes deep in ``yield from`` otherwise."""
    todo = _own_children(node)
    while todo:
        child = todo.pop()
        yield child
        todo += _own_children(child)


def _own_children(node: ast.AST) -> list[ast.AST]:
    """The children of ``node`` that are not nested scopes, last first (as popped)."""
    return [child for child in reversed(children(node)) if not isinstance(child, _NESTED)]


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for target in node.targets:
            found += _flatten(target)
        return found
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return _flatten(node.target)
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [
            target
            for item in node.items
            if item.optional_vars is not None
            for target in _flatten(item.optional_vars)
        ]
    if isinstance(node, ast.NamedExpr):
        return [node.target]
    return []


def _flatten(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [leaf for element in target.elts for leaf in _flatten(element)]
    if isinstance(target, ast.Starred):
        return _flatten(target.value)
    return [target]


def _none_test(test: ast.expr) -> str | None:
    """``name`` for a test ``name is None``."""
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return test.left.id
    return None


def _literal(node: ast.expr) -> str | None:
    """The source text of ``node`` when it is a literal ``ast.literal_eval`` reads."""
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return ast.unparse(node)


def _reassignments(func: FunctionNode, names: set[str]) -> dict[str, str | bool]:
    """For each parameter in ``names`` the method reassigns: the literal it puts in place of
    None (only ``if p is None: p = <literal>`` at the top level, one literal), True when it
    reassigns ``p`` only under such an ``if`` but not always to that one literal (the value
    for None is computed), False for any other reassignment."""
    kinds: dict[int, tuple[str, str | None]] = {}  # node -> (parameter, literal or None)
    for statement in func.body:
        name = _none_test(statement.test) if isinstance(statement, ast.If) else None
        if name is None or not isinstance(statement, ast.If) or statement.orelse:
            continue
        only = statement.body[0] if len(statement.body) == 1 else None
        for node in _walk(statement):
            if any(isinstance(t, ast.Name) and t.id == name for t in _targets(node)):
                literal = None
                if node is only and isinstance(node, ast.Assign) and len(node.targets) == 1:
                    literal = _literal(node.value)
                kinds[id(node)] = (name, literal)
    seen: dict[str, set[str | None]] = {}
    other: set[str] = set()
    for node in _walk(func):
        for target in _targets(node):
            if not isinstance(target, ast.Name) or target.id not in names:
                continue
            kind = kinds.get(id(node))
            if kind is None or kind[0] != target.id:
                other.add(target.id)
            else:
                seen.setdefault(target.id, set()).add(kind[1])
    found: dict[str, str | bool] = dict.fromkeys(other, False)
    for name, literals in seen.items():
        if name in other:
            continue
        only_literal = next(iter(literals)) if len(literals) == 1 else None
        found[name] = only_literal if only_literal is not None else True
    return found


def kept_arguments(func: FunctionNode) -> list[KeptArgument]:
    """The arguments ``func`` keeps (see the module docstring), sorted by attribute."""
    positional = [*func.args.posonlyargs, *func.args.args]
    if not positional:
        return []
    owner = positional[0].arg
    names = {
        argument.arg
        for argument in [*positional[1:], *func.args.kwonlyargs]
        if argument.arg != owner
    }
    sources: dict[str, set[str | None]] = {}
    for node in _walk(func):
        for target in _targets(node):
            if not (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == owner
            ):
                continue
            value = node.value if isinstance(node, ast.Assign) else None
            plain = (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and node.targets[0] is target
                and isinstance(value, ast.Name)
                and value.id in names
            )
            parameter = value.id if plain and isinstance(value, ast.Name) else None
            sources.setdefault(target.attr, set()).add(parameter)
    reassigned = _reassignments(func, names)
    found: list[KeptArgument] = []
    for attribute, parameters in sorted(sources.items()):
        if len(parameters) != 1:
            continue
        parameter = next(iter(parameters))
        if parameter is None:
            continue
        how = reassigned.get(parameter)
        if how is False:
            continue
        if isinstance(how, str):
            found.append(KeptArgument(attribute, parameter, when_none=how))
        else:
            found.append(KeptArgument(attribute, parameter, none_computed=how is True))
    return found


def written(func: FunctionNode) -> list[dict[str, Any]]:
    """:func:`kept_arguments` as the record files spell them (defaults left out)."""
    found: list[dict[str, Any]] = []
    for kept in kept_arguments(func):
        item: dict[str, Any] = {"attribute": kept.attribute, "parameter": kept.parameter}
        if kept.when_none is not None:
            item["when_none"] = kept.when_none
        if kept.none_computed:
            item["none_computed"] = True
        found.append(item)
    return found
