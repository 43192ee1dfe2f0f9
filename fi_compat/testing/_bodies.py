"""What each generated function and method does when called: the body the writer puts in it.

The writer (:mod:`fi_compat.testing._generator`) makes each recorded ``def`` with the
release's signature; its body, chosen here from what the function is, hands the call to
:mod:`fi_compat.testing._runtime`: the workspace factories and the fused call, an attention
family's planning methods (the kernel boundary, keeping the arguments the release keeps) and
``run``, ``fast_decode_plan``, the helpers the fake computes, a ``**kwargs`` forward as the
release writes it, ``TorchDistBackend.bcast``; every other body returns None.
"""

from __future__ import annotations

from typing import Any

from fi_compat._records import ClassRecord, FunctionRecord
from fi_compat._surface import (
    FAST_DECODE_PLAN,
    LEGACY_FACTORY,
    PLAN,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
    symbol_named,
)
from fi_compat.testing._helpers import helper
from fi_compat.testing._registry import Entry

__all__ = ["forward_source", "function_body", "method_body", "values_source"]

#: The older name of an attention wrapper's ``plan`` (an alias of it in most classes; the
#: planning method itself of the shared-prefix cascade wrapper).
_BEGIN_FORWARD = "begin_forward"
#: The planning methods of an attention family, where the kernel boundary is.
_PLANNING = (PLAN, _BEGIN_FORWARD)


def _planning_methods(owner: ClassRecord) -> set[str]:
    """The methods of an attention family where the kernel boundary is: ``plan`` and a
    ``begin_forward`` that is no alias of it, or the method their ``**kwargs`` go to."""
    found = set()
    for name in _PLANNING:
        method = owner.method(name)
        if method is None or name in owner.aliases:
            continue
        target = method.forwards_kwargs_to
        forwarded = forward_source(owner, method) is not None and target is not None
        found.add(target if forwarded and target is not None else name)
    return found


def _keeps(func: FunctionRecord) -> str:
    """The recorded kept arguments of a planning method as generated code passes them to
    ``_plan_kernel``: ``(attribute, parameter, kind, literal)`` with ``kind`` one of
    ``"passed"``, ``"literal"`` (None becomes ``literal``, source text written as code) and
    ``"computed"`` (None leaves the attribute alone)."""
    items = []
    for kept in func.keeps:
        if kept.when_none is not None:
            kind, literal = "literal", kept.when_none
        else:
            kind, literal = ("computed" if kept.none_computed else "passed"), "None"
        items.append(f"({kept.attribute!r}, {kept.parameter!r}, {kind!r}, {literal})")
    return "(" + "".join(f"{item}, " for item in items) + ")"


def forward_source(owner: ClassRecord, func: FunctionRecord) -> list[str] | None:
    """The body of a method whose ``**kwargs`` is forwarded to ``self.<target>(...)``.

    Written in the shape real releases use (0.7.2.post1's ``_merge_deprecated_plan_kwargs``)
    so that the probe's forwarding analysis can prove it: the keywords are copied with
    ``dict(kwargs)``, extra positionals are added by name to the target's parameters
    after the named ones (only if absent: the add-only idiom), and recorded drops are
    reproduced with ``pop`` (or ``clear`` for any keyword).
    """
    target_name = func.forwards_kwargs_to
    if target_name is None or func.var_keyword is None:
        return None
    target = owner.method(target_name)
    if target is None:
        return None
    target_keywords = set(target.keyword_names)
    named = [p.name for p in func.parameters[1:] if p.accepts_keyword and p.name in target_keywords]
    var_positional = next((p.name for p in func.parameters if p.kind == "VAR_POSITIONAL"), None)
    lines = [f"_fi_merged = dict({func.var_keyword})"]
    if var_positional is not None:
        extra = tuple(target.keyword_names[1:])[len(named) :]
        lines += [
            f"for _fi_name, _fi_value in zip({extra!r}, {var_positional}):",
            "    if _fi_name in _fi_merged:",
            f"        raise TypeError(f'{func.qualname}() got multiple values for {{_fi_name!r}}')",
            "    _fi_merged[_fi_name] = _fi_value",
        ]
    if "*" in func.forwards_kwargs_drops:
        lines.append("_fi_merged.clear()")
    else:
        lines += [f"_fi_merged.pop({name!r}, None)" for name in func.forwards_kwargs_drops]
    arguments = ", ".join([*(f"{name}={name}" for name in named), "**_fi_merged"])
    return [*lines, f"return self.{target_name}({arguments})"]


def values_source(func: FunctionRecord) -> str:
    """``dict(locals())`` spelled out, with ``**kwargs`` copied (a forwarder's analysis
    must see that nothing but the forwarding call can change the keywords)."""
    items = [
        f"{p.name!r}: dict({p.name})" if p.kind == "VAR_KEYWORD" else f"{p.name!r}: {p.name}"
        for p in func.parameters
    ]
    return "{" + ", ".join(items) + "}"


def function_body(entry: Entry, func: FunctionRecord) -> list[str]:
    names = {entry.name} | {n for names in entry.bindings.values() for n in names}
    symbols = [symbol_named(name) for name in sorted(names)]

    def named(symbol: Any) -> bool:
        return any(found is symbol for found in symbols)

    if named(UNIFIED_FACTORY):
        return ["return _fi_runtime._new_workspace(_fi_token, __values)"]
    if named(LEGACY_FACTORY):
        return [
            "if __call.arguments.get('create_metadata'):",
            "    return [], _fi_runtime.StandIn('workspace_tensor'), {}",
            "return [], _fi_runtime.StandIn('workspace_tensor')",
        ]
    if named(UNIFIED_FUSION):
        return ["return __call.arguments.get('output', __call.arguments.get('input'))"]
    if entry.takes_self and func.parameters:
        wrapper = func.parameters[0].name
        return [
            f"return _fi_runtime._plan_kernel(_fi_token, {wrapper}, __values, __call, "
            f"{func.var_keyword!r}, {FAST_DECODE_PLAN.key!r}, {_keeps(func)})"
        ]
    computed = helper(entry.defined_in, entry.name, func)
    if computed is not None:
        return [f"return _fi_runtime._compute(_fi_token, {computed.key!r}, __values)"]
    return ["return None"]


def method_body(entry: Entry, owner: ClassRecord, func: FunctionRecord) -> list[str]:
    forward = forward_source(owner, func)
    if forward is not None:
        return forward
    name = func.name
    if entry.family is not None and name in _planning_methods(owner) and func.parameters:
        this = func.parameters[0].name
        return [
            "return _fi_runtime._plan_kernel("
            f"_fi_token, {this}, __values, __call, {func.var_keyword!r}, None, "
            f"{_keeps(func)})"
        ]
    if entry.family is not None and name == "run" and len(func.parameters) > 1:
        return [f"return _fi_runtime._run_result(__values, {func.parameters[1].name!r})"]
    if entry.workspace is not None:
        workspace = {
            "__init__": [
                f"_fi_runtime._init_workspace(_fi_token, self, {entry.workspace!r}, __values)"
            ],
            "is_buffer_size_sufficient": ["return _fi_runtime._sufficient(self, __values)"],
            "get_required_buffer_size_bytes": ["return _fi_runtime._required_bytes(__values)"],
            "checkpoint_prepare": ["return _fi_runtime._checkpoint(self, 'prepare')"],
            "checkpoint_restore": ["return _fi_runtime._checkpoint(self, 'restore')"],
            "destroy": ["return _fi_runtime._destroy_workspace(self)"],
        }.get(name)
        if workspace is not None:
            return workspace
    if symbol_named(entry.name) is TORCH_DIST_BACKEND and name == "bcast":
        lines = []
        if owner.bcast_root_is_group_local:
            # Mirrors the recorded fact: this release maps a group-local root.
            lines.append("_global_root = _fi_runtime.get_global_rank(__call.arguments)")
        data = func.parameters[1].name if len(func.parameters) > 1 else "None"
        return [*lines, f"return {data}"]
    if name == "__init__":
        attributes = tuple(owner.attributes) or None
        return [f"_fi_runtime._init_object(_fi_token, self, {attributes!r}, __values)"]
    if name == "destroy":
        return [
            "if self.destroyed:",
            "    return None",
            "self.destroyed = True",
            "return None",
        ]
    return ["return None"]
