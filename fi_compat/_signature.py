"""Guarded signature inspection: which keyword arguments does a callable really accept?

Everything here runs once, at probe time, and never raises: a callable without signature
metadata, source that cannot be read or parsed, or a ``**kwargs`` whose destination
cannot be resolved all become an answer of status ``unknown`` carrying the reason.

A ``**kwargs`` parameter is followed, not trusted. FlashInfer's decode wrapper (0.6.15+)
declares ``plan(self, ..., *deprecated_positional_args, **kwargs)`` and forwards the
keywords to ``self._plan_impl(...)``; the answer for a keyword is then what
``_plan_impl`` declares. A bare ``**kwargs`` with no resolvable destination is
``unknown``, never ``supported``.
"""

from __future__ import annotations

import ast
import builtins
import enum
import inspect
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["Shape", "Status", "Support", "inspect_callable", "supports"]

#: How many ``**kwargs`` hops are followed before giving up (``unknown``).
MAX_FORWARD_DEPTH = 4

_KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class Status(str, enum.Enum):
    """The three answers a probe can give."""

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Support:
    """Whether one keyword argument is accepted, and why the probe thinks so."""

    status: Status
    reason: str

    @property
    def supported(self) -> bool:
        """True only for a definite ``supported``; ``unknown`` is not support."""
        return self.status is Status.SUPPORTED

    def to_dict(self) -> dict[str, str]:
        """The JSON form used by ``fi-compat report --json``."""
        return {"status": self.status.value, "reason": self.reason}


@dataclass(frozen=True)
class Shape:
    """What one callable accepts by keyword.

    Attributes
    ----------
    name
        Dotted name used in reasons and reports.
    keywords
        Every name the callable accepts by keyword, following ``**kwargs`` forwards,
        mapped to the callable that declares it; ``None`` when the signature could not be
        read at all.
    open_ended
        True when some ``**kwargs`` could not be followed, so a name outside
        ``keywords`` may still be accepted (answers for such names are ``unknown``).
    via
        The chain of callables the keywords were gathered from, first the callable itself.
    error
        Why the signature (or a forward) could not be read, when it could not.
    """

    name: str
    keywords: Mapping[str, str] | None
    open_ended: bool
    via: tuple[str, ...]
    error: str | None

    def support(self, keyword: str) -> Support:
        """Answer for one keyword argument."""
        if self.keywords is None:
            return Support(
                Status.UNKNOWN, f"cannot read the signature of {self.name}: {self.error}"
            )
        declarer = self.keywords.get(keyword)
        if declarer is not None:
            if declarer != self.name:
                chain = " -> ".join(self.via[: self.via.index(declarer) + 1])
                return Support(Status.SUPPORTED, f"declared via **kwargs forwarding: {chain}")
            return Support(Status.SUPPORTED, f"declared by {self.name}")
        if self.open_ended:
            detail = f": {self.error}" if self.error else ""
            return Support(
                Status.UNKNOWN,
                f"{self.name} takes **kwargs whose destination cannot be resolved{detail}",
            )
        return Support(Status.UNSUPPORTED, f"not a keyword parameter of {' -> '.join(self.via)}")


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _signature(func: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(func)


def _forward_call_targets(func: Callable[..., Any], var_keyword: str) -> list[ast.expr]:
    """The ``func`` expressions of calls inside ``func`` that splat its ``**kwargs``.

    A name assigned from an expression that mentions the ``**kwargs`` name (for example
    ``merged = _merge(kwargs, ...)``) carries it on.
    """
    source = textwrap.dedent(inspect.getsource(func))
    tree = ast.parse(source)
    body = next(
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    )

    def mentions(node: ast.AST, names: set[str]) -> bool:
        return any(isinstance(sub, ast.Name) and sub.id in names for sub in ast.walk(node))

    carried = {var_keyword}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(body):
            value: ast.expr | None
            targets: list[ast.expr]
            if isinstance(node, ast.Assign):
                value, targets = node.value, list(node.targets)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                value, targets = node.value, [node.target]
            else:
                continue
            if value is None or not mentions(value, carried):
                continue
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name) and sub.id not in carried:
                        carried.add(sub.id)
                        changed = True
    calls: list[ast.expr] = []
    for node in ast.walk(body):
        if isinstance(node, ast.Call) and any(
            keyword.arg is None and mentions(keyword.value, carried) for keyword in node.keywords
        ):
            calls.append(node.func)
    return calls


def _resolve(
    expr: ast.expr, func: Callable[..., Any], owner: type | None
) -> Callable[..., Any] | None:
    """Turn a call's ``func`` expression back into the object it names, or None."""
    if isinstance(expr, ast.Attribute):
        base = expr.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            if owner is None:
                return None
            found: Any = inspect.getattr_static(owner, expr.attr, None)
            if isinstance(found, staticmethod | classmethod):
                found = found.__func__
            return found if callable(found) else None
        parent = _resolve(base, func, owner)
        if parent is None:
            return None
        found = getattr(parent, expr.attr, None)
        return found if callable(found) or inspect.ismodule(found) else None
    if isinstance(expr, ast.Name):
        namespace: Mapping[str, Any] = getattr(inspect.unwrap(func), "__globals__", {})
        found = namespace.get(expr.id, getattr(builtins, expr.id, None))
        return found if callable(found) or inspect.ismodule(found) else None
    return None


def _qualname(func: Any) -> str:
    module = getattr(func, "__module__", None) or ""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    return f"{module}.{name}" if module else str(name)


def _gather(
    name: str,
    func: Callable[..., Any],
    owner: type | None,
    depth: int,
    seen: set[int],
) -> tuple[dict[str, str], bool, list[str], str | None]:
    """Keyword names of ``func`` and of whatever its ``**kwargs`` reach.

    Returns (keywords, open_ended, via chain, error). Raises only for the top callable's
    signature; the caller turns that into an ``unknown`` shape.
    """
    signature = _signature(func)
    keywords = {p.name: name for p in signature.parameters.values() if p.kind in _KEYWORD_KINDS}
    var_keyword = next(
        (p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD),
        None,
    )
    if var_keyword is None:
        return keywords, False, [], None
    if depth >= MAX_FORWARD_DEPTH:
        return keywords, True, [], f"more than {MAX_FORWARD_DEPTH} **kwargs hops"
    try:
        exprs = _forward_call_targets(func, var_keyword)
    except Exception as failure:  # unreadable or unparsable source: the answer is unknown
        return keywords, True, [], f"cannot read its source ({_describe(failure)})"
    if not exprs:
        return keywords, True, [], f"no call forwards **{var_keyword}"
    targets: list[Callable[..., Any]] = []
    for expr in exprs:
        target = _resolve(expr, func, owner)
        if target is None or inspect.ismodule(target):
            return keywords, True, [], f"cannot resolve the call to {ast.unparse(expr)}"
        if id(target) not in {id(t) for t in targets}:
            targets.append(target)
    if len(targets) > 1:
        names = ", ".join(_qualname(t) for t in targets)
        return keywords, True, [], f"**{var_keyword} is forwarded to several callables ({names})"
    target = targets[0]
    target_name = _qualname(target)
    if id(target) in seen:
        return keywords, True, [], f"**{var_keyword} forwarding loops back to {target_name}"
    try:
        inner, open_ended, via, error = _gather(
            target_name, target, owner, depth + 1, seen | {id(target)}
        )
    except Exception as failure:
        return keywords, True, [], f"cannot read the signature of {target_name} ({failure})"
    # The outer callable's own declaration wins: it is what a caller binds against first.
    return inner | keywords, open_ended, [target_name, *via], error


def inspect_callable(name: str, func: Callable[..., Any], *, owner: type | None = None) -> Shape:
    """Read what ``func`` accepts by keyword, following ``**kwargs`` forwards.

    Never raises.

    Parameters
    ----------
    name
        Dotted name for reasons, e.g. ``"BatchDecodeWithPagedKVCacheWrapper.plan"``.
    func
        The callable (for a method, the function found on the class).
    owner
        The class a method belongs to, so that ``self.method(**kwargs)`` can be resolved.
    """
    try:
        keywords, open_ended, via, error = _gather(name, func, owner, 0, {id(func)})
    except Exception as failure:
        return Shape(name, None, True, (name,), _describe(failure))
    return Shape(name, MappingProxyType(keywords), open_ended, (name, *via), error)


def supports(shape: Shape, keywords: Iterable[str]) -> dict[str, Support]:
    """Answers for several keywords of one shape, in the order given."""
    return {keyword: shape.support(keyword) for keyword in keywords}
