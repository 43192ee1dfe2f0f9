"""Import hazards of a release: what ``import flashinfer[.comm]`` needs beyond a CPU machine.

Each heuristic walks the modules an import executes (:meth:`Package.import_closure`) and
the calls or imports their bodies run at import time, skipping what a ``try`` (or
``contextlib.suppress``) around them catches, and returns the first offending statement
as ``"<file>:<line>: <what>"`` evidence, or None.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from fi_compat._recorder.resolve import Module, Package, catches
from fi_compat._recorder.trees import walk
from fi_compat._surface import COMM, FLASHINFER

__all__ = ["import_hazards"]

#: The assertion message a CUDA runtime handle raises when libcudart is not mapped.
_CUDART_MESSAGE = "libcudart is not loaded"
#: ``torch.cuda`` calls that need a visible GPU (they raise on a CPU-only machine).
_GPU_QUERIES = frozenset(
    {
        "get_device_properties",
        "get_device_capability",
        "get_device_name",
        "current_device",
        "mem_get_info",
        "set_device",
        "synchronize",
    }
)
_IMPORT_ERRORS = ("ImportError", "ModuleNotFoundError")


def _own_expressions(stmt: ast.stmt) -> Iterator[ast.AST]:
    """Nodes a module-level statement evaluates itself (nested statements come separately)."""
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
        roots: list[ast.AST] = [*stmt.decorator_list, *stmt.args.defaults]
        roots += [default for default in stmt.args.kw_defaults if default is not None]
    elif isinstance(stmt, ast.ClassDef):
        roots = [*stmt.decorator_list, *stmt.bases]
        for inner in stmt.body:
            roots.extend(_own_expressions(inner) if isinstance(inner, ast.FunctionDef) else [inner])
    elif isinstance(stmt, ast.If):
        roots = [stmt.test]
    elif isinstance(stmt, ast.With):
        roots = [item.context_expr for item in stmt.items]
    elif isinstance(stmt, ast.Try):
        roots = []
    else:
        roots = [stmt]
    for root in roots:
        for node in walk(root):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            yield node


def _import_time_calls(module: Module, errors: tuple[str, ...]) -> Iterator[ast.Call]:
    """Calls made while the module body runs on a CPU machine, outside handlers of ``errors``."""
    for stmt, context in module.statements:
        if context[1] or catches(context, *errors):
            continue
        for node in _own_expressions(stmt):
            if isinstance(node, ast.Call):
                yield node


def _runs_on_call(definition: ast.AST, target: ast.AST) -> bool:
    """Is ``target`` in the code that calling ``definition`` runs (``__init__`` for a class)?"""
    if isinstance(definition, ast.ClassDef):
        for stmt in definition.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
                return any(sub is target for sub in walk(stmt))
        return False
    return True


def _cudart_hazard(package: Package) -> str | None:
    """A module-level call that reaches ``assert ..., "libcudart is not loaded ..."``."""
    errors = ("AssertionError",)
    asserting = {
        name for name, (_path, text) in package.source.files.items() if _CUDART_MESSAGE in text
    }
    if not asserting or not package.source.is_module(COMM):
        return None
    for module_name, _why in package.import_closure(COMM, errors):
        module = package.get(module_name)
        assert module is not None
        for node in _import_time_calls(module, errors):
            if not isinstance(node.func, ast.Name):
                continue
            found = package.resolve(module_name, node.func.id)
            if found is None or found[1].kind not in ("class", "def"):
                continue
            defining, binding = found
            if defining.name not in asserting:
                continue
            for sub in walk(binding.node):
                if (
                    isinstance(sub, ast.Assert)
                    and isinstance(sub.msg, ast.Constant)
                    and isinstance(sub.msg.value, str)
                    and _CUDART_MESSAGE in sub.msg.value
                    and _runs_on_call(binding.node, sub)
                ):
                    return (
                        f"{module.path}:{node.lineno}: {ast.unparse(node)} runs at import; "
                        f"it asserts {sub.msg.value!r} at {defining.path}:{sub.lineno}"
                    )
    return None


def _gpu_query_hazard(package: Package) -> str | None:
    """A ``torch.cuda.<query>(...)`` that ``import flashinfer`` runs on a machine without a GPU.

    A query inside ``try``/``except`` still counts (it runs, and on a GPU machine it
    initializes CUDA at import); one behind ``if torch.cuda.is_available():`` does not.
    """
    errors: tuple[str, ...] = ()
    for module_name, why in package.import_closure(FLASHINFER, errors):
        module = package.get(module_name)
        assert module is not None
        text = package.source.files[module_name][1]
        if not any(query in text for query in _GPU_QUERIES):
            continue
        for node in _import_time_calls(module, errors):
            if (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in _GPU_QUERIES
                and ast.unparse(node.func.value).endswith("cuda")
            ):
                return f"{module.path}:{node.lineno}: {ast.unparse(node)} (imported via {why})"
    return None


def _triton_hazard(package: Package) -> str | None:
    """A module-level ``import triton`` on the path of ``import flashinfer.comm``."""
    if not package.source.is_module(COMM):
        return None
    for module_name, why in package.import_closure(COMM, _IMPORT_ERRORS, on_cpu=False):
        module = package.get(module_name)
        assert module is not None
        for target, line, context in module.imports:
            if target.split(".")[0] == "triton" and not catches(context, *_IMPORT_ERRORS):
                return f"{module.path}:{line}: import {target} (imported via {why})"
    return None


#: Standard-library classes that became subscriptable at run time in a later Python than
#: fi-compat's oldest (3.10): ``array.array[int]`` evaluated at import raises ``TypeError``
#: before 3.12. Checked against real imports in tests/tools/test_python_hazard.py.
_GENERIC_INTRODUCED_IN = {("array", "array"): "3.12"}
_FUTURE_ANNOTATIONS = "annotations"


def _evaluated_annotations(module: Module) -> Iterator[ast.expr]:
    """The annotations the module body evaluates at import: none under ``from __future__
    import annotations``; else those of module-level and class-level functions and of
    annotated assignments at module and class level."""
    for stmt in module.tree.body:
        if (
            isinstance(stmt, ast.ImportFrom)
            and stmt.module == "__future__"
            and any(alias.name == _FUTURE_ANNOTATIONS for alias in stmt.names)
        ):
            return
    for stmt, _context in module.statements:
        bodies = [stmt, *(stmt.body if isinstance(stmt, ast.ClassDef) else [])]
        for node in bodies:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args
                every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                every += [arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None]
                yield from (arg.annotation for arg in every if arg.annotation is not None)
                if node.returns is not None:
                    yield node.returns
            elif isinstance(node, ast.AnnAssign):
                yield node.annotation


def _python_hazard(package: Package) -> tuple[str, str] | None:
    """``(the Python the import needs, evidence)`` when ``import flashinfer.comm`` evaluates
    an annotation subscripting a class that Python only subscripts from a later version."""
    if not package.source.is_module(COMM):
        return None
    for module_name, why in package.import_closure(COMM, ()):
        module = package.get(module_name)
        assert module is not None
        for annotation in _evaluated_annotations(module):
            for node in walk(annotation):
                if not isinstance(node, ast.Subscript):
                    continue
                target = node.value
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    found = package.resolve(module_name, target.value.id)
                    binding = found[1] if found else None
                    if binding is None or binding.kind != "module":
                        continue
                    key = (binding.target_module or "", target.attr)
                elif isinstance(target, ast.Name):
                    found = package.resolve(module_name, target.id)
                    binding = found[1] if found else None
                    if binding is None or binding.kind != "import":
                        continue
                    key = (binding.target_module or "", binding.target_name or "")
                else:
                    continue
                python = _GENERIC_INTRODUCED_IN.get(key)
                if python is not None:
                    return python, (
                        f"{module.path}:{node.lineno}: the annotation {ast.unparse(node)} is "
                        f"evaluated at import; {'.'.join(key)} is subscriptable from Python "
                        f"{python} on (TypeError before; imported via {why})"
                    )
    return None


def _hazard(evidence: str | None) -> dict[str, Any]:
    return {"value": evidence is not None, "evidence": evidence}


def import_hazards(package: Package) -> dict[str, Any]:
    """The ``"import"`` section of a record: each hazard's value and evidence."""
    return {
        "comm_requires_cuda_runtime": _hazard(_cudart_hazard(package)),
        "import_queries_gpu": _hazard(_gpu_query_hazard(package)),
        "comm_requires_triton": _hazard(_triton_hazard(package)),
        "comm_requires_python": _python(_python_hazard(package)),
    }


def _python(found: tuple[str, str] | None) -> dict[str, Any]:
    if found is None:
        return {"value": False, "evidence": None}
    python, evidence = found
    return {"value": True, "evidence": evidence, "python": python}
