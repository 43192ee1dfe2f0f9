"""The public names of a module, each with its kind, where it is defined and its signature.

Engines use far more names of ``flashinfer.comm`` and ``flashinfer.comm.mnnvl`` than
fi-compat adapts; a table per module lets fi-compat say which release brought a name the
installed one lacks, and the fake model every one of them. The names are those ``import``
binds (:meth:`Package.public_names`); each is followed through re-exports to the
statement that binds it and recorded in the format the other records use: a function as
its ``def``, a class with ``__init__``, every public method and its instance attributes.
"""

from __future__ import annotations

import ast
from typing import Any

from fi_compat._recorder.resolve import Binding, Module
from fi_compat._recorder.signatures import Recorder

__all__ = ["instance_of", "name_record", "name_table"]


def name_record(recorder: Recorder, module: str, name: str) -> dict[str, Any]:
    """What ``module.name`` is bound to: ``{kind, defined_in}`` and, by kind, its record.

    ``kind`` is ``"function"`` (with ``"function"``: its record), ``"class"`` or ``"enum"``
    (with ``"class"``: its record; an enum adds ``"enum"``: its members), ``"module"``
    (``defined_in`` is the module's own name) or ``"value"``: anything else, including a
    name imported from outside the release (``defined_in`` is the module it comes from)
    and a name the release binds in a way its source does not show (``defined_in`` null).
    A value that is an instance of one of the release's classes, built at import
    (``cudart = CudaRTLibrary()``), adds ``"instance_of"``: that class's path. A value the
    release assigns adds what it is once imported: ``"literal"`` (Python source) or
    ``"opaque"`` (why the source cannot tell; :mod:`fi_compat._recorder.values`).
    """
    found = recorder.package.resolve(module, name)
    if found is None:
        return {"kind": "value", "defined_in": None}
    defining, binding = found
    if binding.kind in ("def", "class"):
        # The record of a def or a class depends on that statement alone, not on the module
        # that re-exports it: made once, handed out as a fresh outer dict each time (callers
        # add "conditional" to it), the inner records shared and never changed.
        known = recorder.definitions.get(binding.node)
        if known is None:
            known = recorder.definitions[binding.node] = _definition(
                recorder, module, name, defining, binding
            )
        return dict(known)
    if binding.kind in ("module", "import"):
        # A module, or a name from a module outside the release (not followed there).
        kind = "module" if binding.kind == "module" else "value"
        return {"kind": kind, "defined_in": binding.target_module}
    record: dict[str, Any] = {"kind": "value", "defined_in": defining.name}
    found_class = instance_of(recorder, defining.name, binding.node)
    if found_class is not None:
        record["instance_of"] = found_class
    record.update(recorder.values.record(defining, name, binding))
    return record


def _definition(
    recorder: Recorder, module: str, name: str, defining: Module, binding: Binding
) -> dict[str, Any]:
    """:func:`name_record` of ``module.name``, bound to the ``def`` or ``class`` statement
    ``binding`` of module ``defining``."""
    if binding.kind == "def":
        return {
            "kind": "function",
            "defined_in": defining.name,
            "function": recorder.function(module, name),
        }
    node = binding.node
    assert isinstance(node, ast.ClassDef)
    methods = recorder.public_methods(defining, node)
    record: dict[str, Any] = {
        "kind": "class",
        "defined_in": defining.name,
        "class": recorder.class_record(module, name, methods, aliases=True),
    }
    if recorder.is_enum(defining, node):
        record["kind"] = "enum"
        record["enum"] = recorder.enum_record(module, name)
    return record


def instance_of(recorder: Recorder, module: str, node: ast.AST) -> str | None:
    """The class (``module.Class``, where it is defined) whose instance an assignment
    binds: ``cudart = CudaRTLibrary()``, with the class a name the module binds; None for
    anything else."""
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
        return None
    found = recorder.package.resolve(module, value.func.id)
    if found is None or found[1].kind != "class":
        return None
    defining, binding = found
    assert isinstance(binding.node, ast.ClassDef)
    return f"{defining.name}.{binding.node.name}"


def name_table(recorder: Recorder, module: str) -> dict[str, dict[str, Any]]:
    """Every public name of ``module`` -> :func:`name_record`; empty without the module.

    A name the release binds only when a guarded statement succeeds
    (:meth:`~fi_compat._recorder.resolve.Package.conditional`) adds ``"conditional": true``.
    """
    table: dict[str, dict[str, Any]] = {}
    for name in recorder.package.public_names(module):
        record = name_record(recorder, module, name)
        if recorder.package.conditional(module, name):
            record["conditional"] = True
        table[name] = record
    return table
