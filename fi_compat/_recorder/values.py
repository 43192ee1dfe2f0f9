"""What a module-level value of a release is once the module has been imported.

Engines read some of FlashInfer's module-level values (vLLM pins the tensor it finds in
``flashinfer.utils._cache_buf``, reads ``flashinfer.kda_decode._FUSED_KDA_DECODE_AVAILABLE``
and looks a key up in a dispatch table), so the fake binds what the release binds. Read from
the source, without importing it, a value is one of:

* a literal: the value a literal expression gives (``{}``, ``0``, ``("fa2", "fa3")``), also
  when it is computed from literals and other such values (``2 ** 31 - 1``,
  ``_MAX - 1``, a name imported from another module of the release), written as Python
  source that :func:`ast.literal_eval` reads back (``{"literal": "{}"}``);
* opaque, with the reason the source cannot tell it (``{"opaque": "computed at import"}``):
  a call, a comprehension or anything else that runs code; a name bound by several
  statements, or in an ``if``, ``try`` or ``with`` (which binding holds depends on the
  machine); a value changed at import after it is bound (``X[k] = v``, ``X.update(...)``,
  ``X += ...``, passed to a call); one too large to keep.

A value is never guessed: what the source does not show is opaque.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from fi_compat._recorder.resolve import Binding, Module, Package
from fi_compat._recorder.trees import walk

__all__ = ["MOST_CHARACTERS", "Values", "spell"]

#: The longest literal kept (its source, in characters); a longer one is opaque.
MOST_CHARACTERS = 2048

#: How deep a literal nests, and how many names deep a value may refer to others.
_MOST_DEPTH = 24

#: The largest integer a computed value may reach (bits), and the largest exponent or shift.
_MOST_BITS = 256
_MOST_EXPONENT = 256

COMPUTED = "computed at import"
SEVERAL = "bound by several statements"
GUARDED = "bound in an if, try or with"
CHANGED = "changed at import after it is bound"
TOO_LARGE = "too large to keep"

_MISSING = object()

_BINARY: dict[type[ast.operator], Any] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
    ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
    ast.BitOr: lambda a, b: a | b,
    ast.BitAnd: lambda a, b: a & b,
    ast.BitXor: lambda a, b: a ^ b,
}

_UNARY: dict[type[ast.unaryop], Any] = {
    ast.USub: lambda a: -a,
    ast.UAdd: lambda a: +a,
    ast.Invert: lambda a: ~a,
    ast.Not: lambda a: not a,
}


@dataclass(frozen=True)
class Opaque:
    """What the evaluation of a value gives where the source cannot tell it: why."""

    reason: str


class Values:
    """The values of one release's modules (each found once, by :meth:`record`)."""

    def __init__(self, package: Package) -> None:
        self.package = package
        self._found: dict[tuple[str, str], Any] = {}
        self._changed: dict[str, tuple[frozenset[str], frozenset[str]]] = {}

    def record(self, module: Module, name: str, binding: Binding) -> dict[str, str]:
        """``{"literal": source}`` or ``{"opaque": reason}`` for the value the assignment
        ``binding`` of ``module`` binds, asked for as ``name`` (re-exported under another
        name, the name ``module`` binds it under)."""
        value = self._value(module, _own_name(binding, name) or name, binding, 0)
        if isinstance(value, Opaque):
            return {"opaque": value.reason}
        text = spell(value)
        if text is None:
            return {"opaque": COMPUTED}
        if len(text) > MOST_CHARACTERS:
            return {"opaque": TOO_LARGE}
        return {"literal": text}

    def _value(self, module: Module, name: str, binding: Binding, depth: int) -> Any:
        key = (module.name, name)
        found = self._found.get(key, _MISSING)
        if found is _MISSING:
            self._found[key] = Opaque(COMPUTED)  # a value that refers to itself
            found = self._found[key] = self._read(module, name, binding, depth)
        return found

    def _read(self, module: Module, name: str, binding: Binding, depth: int) -> Any:
        bindings = [b for b in module.bindings.get(name, ()) if not b.annotation_only]
        if len(bindings) > 1:
            return Opaque(SEVERAL)
        if binding.guarded or binding.fallback:
            return Opaque(GUARDED)
        rebound, touched = self._changes(module)
        if name in rebound:
            return Opaque(CHANGED)
        node = binding.node
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            return Opaque(COMPUTED)  # a loop's or a with's target
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not all(isinstance(target, ast.Name) for target in targets):
            return Opaque(COMPUTED)  # unpacked from an iterable
        value = self._evaluate(module, node.value, depth)
        if name in touched and _mutable(value):
            return Opaque(CHANGED)
        return value

    def _evaluate(self, module: Module, node: ast.expr, depth: int) -> Any:
        """The value of ``node``, or the first :class:`Opaque` met on the way."""
        if depth > _MOST_DEPTH:
            return Opaque(COMPUTED)
        deeper = depth + 1
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
            return self._container(module, node, deeper)
        if isinstance(node, ast.Name):
            return self._named(module, node.id, deeper)
        if isinstance(node, ast.UnaryOp):
            operand = self._evaluate(module, node.operand, deeper)
            if isinstance(operand, Opaque):
                return operand
            return _compute(_UNARY.get(type(node.op)), operand)
        if isinstance(node, ast.BinOp):
            left = self._evaluate(module, node.left, deeper)
            if isinstance(left, Opaque):
                return left
            right = self._evaluate(module, node.right, deeper)
            if isinstance(right, Opaque):
                return right
            if isinstance(node.op, ast.Pow | ast.LShift) and not _small(right, _MOST_EXPONENT):
                return Opaque(COMPUTED)
            return _compute(_BINARY.get(type(node.op)), left, right)
        return Opaque(COMPUTED)

    def _container(
        self, module: Module, node: ast.Tuple | ast.List | ast.Set | ast.Dict, depth: int
    ) -> Any:
        if isinstance(node, ast.Dict):
            if any(key is None for key in node.keys):
                return Opaque(COMPUTED)  # ``{**other}``
            parts = [key for key in node.keys if key is not None]
            values = [self._evaluate(module, value, depth) for value in node.values]
        else:
            parts, values = node.elts, []
        items = [self._evaluate(module, item, depth) for item in parts]
        for item in [*items, *values]:
            if isinstance(item, Opaque):
                return item
        if isinstance(node, ast.Tuple):
            return tuple(items)
        if isinstance(node, ast.List):
            return items
        if not _hashable(items):
            return Opaque(COMPUTED)
        if isinstance(node, ast.Set):
            return set(items)
        return dict(zip(items, values, strict=True))

    def _named(self, module: Module, name: str, depth: int) -> Any:
        found = self.package.resolve(module.name, name)
        if found is None or found[1].kind != "assign":
            return Opaque(COMPUTED)  # a builtin, a function, a class, a module from outside
        defining, binding = found
        own = _own_name(binding, name)
        if own is None:
            return Opaque(COMPUTED)
        return self._value(defining, own, binding, depth)

    def _changes(self, module: Module) -> tuple[frozenset[str], frozenset[str]]:
        """The names ``module``'s import-time statements rebind (``X += 1``), and those they
        may change in place (``X[k] = v``, ``X.update(...)``, ``f(X)``)."""
        found = self._changed.get(module.name)
        if found is None:
            rebound: set[str] = set()
            touched: set[str] = set()
            for stmt, _ in module.statements:
                for part in _run_parts(stmt):
                    _collect_changes(part, rebound, touched)
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    for decorator in stmt.decorator_list:  # ``@REGISTRY.setdefault``
                        base = _base(decorator)
                        if base is not None:
                            touched.add(base)
            found = self._changed[module.name] = (frozenset(rebound), frozenset(touched))
        return found


def _own_name(binding: Binding, wanted: str) -> str | None:
    """The name the assignment ``binding`` binds that ``wanted`` leads to: ``wanted`` itself
    where it is a target, else its first plain target (an import under another name); None
    where it binds no plain name."""
    node = binding.node
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return None
    names = [target.id for target in targets if isinstance(target, ast.Name)]
    if wanted in names:
        return wanted
    return names[0] if names else None


def _run_parts(stmt: ast.stmt) -> list[ast.AST]:
    """What of ``stmt`` runs at import and is not listed apart: an ``if``'s, ``try``'s and
    ``with``'s bodies are (see ``resolve``), a function's body and a class's are not run
    (their decorators, defaults and bases are); anything else whole."""
    if isinstance(stmt, ast.If):
        return [stmt.test]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return [item.context_expr for item in stmt.items]
    if isinstance(stmt, ast.Try):
        return []
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
        arguments = stmt.args
        return [*stmt.decorator_list, *arguments.defaults, *filter(None, arguments.kw_defaults)]
    if isinstance(stmt, ast.ClassDef):
        return [*stmt.decorator_list, *stmt.bases, *(keyword.value for keyword in stmt.keywords)]
    return [stmt]


def _collect_changes(node: ast.AST, rebound: set[str], touched: set[str]) -> None:
    for part in walk(node):
        if isinstance(part, ast.AugAssign):
            base = _base(part.target)
            if base is not None:
                (rebound if isinstance(part.target, ast.Name) else touched).add(base)
        elif isinstance(part, ast.Subscript | ast.Attribute) and not isinstance(part.ctx, ast.Load):
            base = _base(part)
            if base is not None:
                touched.add(base)  # ``X[k] = v``, ``X.a = v``, ``del X[k]``
        elif isinstance(part, ast.Call):
            if isinstance(part.func, ast.Attribute):
                base = _base(part.func.value)
                if base is not None:
                    touched.add(base)  # ``X.update(...)``, ``X[0].append(...)``
            for argument in [*part.args, *(keyword.value for keyword in part.keywords)]:
                base = _base(argument.value if isinstance(argument, ast.Starred) else argument)
                if base is not None:
                    touched.add(base)  # handed to code that may change it


def _base(node: ast.AST) -> str | None:
    """The name at the root of ``X``, ``X.a``, ``X[k]``, ``X.a[k].b``; None for anything
    else."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _mutable(value: Any) -> bool:
    """``value`` is, or holds, a list, a dict or a set."""
    if isinstance(value, list | dict | set):
        return True
    return isinstance(value, tuple) and any(_mutable(item) for item in value)


def _hashable(items: list[Any]) -> bool:
    for item in items:
        try:
            hash(item)
        except TypeError:
            return False
    return True


def _small(value: Any, most: int) -> bool:
    return isinstance(value, int | float) and abs(value) <= most


def _compute(operation: Any, *operands: Any) -> Any:
    """``operation`` of numbers, strings or bytes, within bounds; :class:`Opaque` otherwise."""
    if operation is None or not all(
        isinstance(operand, int | float | str | bytes) for operand in operands
    ):
        return Opaque(COMPUTED)
    try:
        result = operation(*operands)
    except (ArithmeticError, TypeError, ValueError):
        return Opaque(COMPUTED)
    if isinstance(result, int) and result.bit_length() > _MOST_BITS:
        return Opaque(TOO_LARGE)
    if isinstance(result, str | bytes) and len(result) > MOST_CHARACTERS:
        return Opaque(TOO_LARGE)
    return result


def spell(value: Any) -> str | None:
    """``value`` as Python source that :func:`ast.literal_eval` reads back equal, the same
    text in every process (a set's items in sorted order); None for anything else."""
    text = _spelled(value, 0)
    if text is None:
        return None
    try:
        back = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return text if back == value and type(back) is type(value) else None


def _spelled(value: Any, depth: int) -> str | None:
    if depth > _MOST_DEPTH:
        return None
    deeper = depth + 1
    if value is None or isinstance(value, bool | int | str | bytes):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else None
    if isinstance(value, tuple | list | set):
        items = [_spelled(item, deeper) for item in value]
        if any(item is None for item in items):
            return None
        texts: list[str] = [item for item in items if item is not None]
        if isinstance(value, set):
            return "{" + ", ".join(sorted(texts)) + "}" if texts else "set()"
        if isinstance(value, list):
            return "[" + ", ".join(texts) + "]"
        return "(" + ", ".join(texts) + ("," if len(texts) == 1 else "") + ")"
    if isinstance(value, dict):
        pairs = []
        for key, item in value.items():
            spelled_key, spelled_item = _spelled(key, deeper), _spelled(item, deeper)
            if spelled_key is None or spelled_item is None:
                return None
            pairs.append(f"{spelled_key}: {spelled_item}")
        return "{" + ", ".join(pairs) + "}"
    return None
