"""Guarded signature inspection: which keyword arguments does a callable really accept?

Everything here runs once, at probe time, and never raises: a callable without signature
metadata, source that cannot be read or parsed, or a ``**kwargs`` whose destination
cannot be resolved all become an answer of status ``unknown`` carrying the reason.

A ``**kwargs`` parameter is followed, not trusted. FlashInfer's decode wrapper (0.6.15+)
declares ``plan(self, ..., *deprecated_positional_args, **kwargs)`` and forwards the
keywords to ``self._plan_impl(...)``; the answer for a keyword is then what
``_plan_impl`` declares, provided the syntax tree of ``plan`` proves the keyword reaches
it unchanged on every path (:mod:`fi_compat._forwarding`, shared with the recorder). A
keyword that may be popped, replaced or bound twice on the way is ``unknown``, as is
every keyword of a ``**kwargs`` with no provable destination; never ``supported``.
"""

from __future__ import annotations

import ast
import builtins
import enum
import inspect
import linecache
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import CodeType, MappingProxyType
from typing import Any

from fi_compat._arguments import require_str
from fi_compat._deprecation import renamed_attribute
from fi_compat._forwarding import (
    ALL,
    FunctionNode,
    Ref,
    analyse,
    bound_skip,
    method_kind,
    positional_doubts,
)
from fi_compat._frozen import picklable

__all__ = [
    "Shape",
    "Status",
    "Support",
    "acceptances",
    "describe_error",
    "exact_text",
    "inspect_callable",
    "parse_def",
]

#: How many ``**kwargs`` hops are followed before giving up (``unknown``).
MAX_FORWARD_DEPTH = 4

_KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
#: What a probe step may raise besides ``Exception``: a hostile ``__signature__`` or
#: attribute can raise ``SystemExit`` and friends. ``KeyboardInterrupt`` is let through.
_FAILURES = (Exception, SystemExit, GeneratorExit)


class Status(str, enum.Enum):
    """The three answers fi-compat gives to "is it supported?", whoever asks.

    A live probe (:class:`Support`), a recorded release
    (:meth:`fi_compat.testing.ReleaseRecord.acceptance`) and the requirements of
    ``fi-compat report --require`` all answer with these members; each is a ``str`` equal
    to its value (``Status.SUPPORTED == "supported"``), and JSON and ``to_dict`` forms write
    the value.

    .. versionadded:: 0.2.0
    """

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


@picklable
@dataclass(frozen=True)
class Support:
    """Whether one keyword argument is accepted, and why the probe thinks so.

    .. versionadded:: 0.2.0
    """

    status: Status
    reason: str

    @property
    def supported(self) -> bool:
        """True only for a definite ``supported``; ``unknown`` is not support."""
        return self.status is Status.SUPPORTED

    def to_dict(self) -> dict[str, str]:
        """The JSON form used by ``fi-compat report --json``."""
        return {"status": self.status.value, "reason": self.reason}


@picklable
@dataclass(frozen=True)
class Shape:
    """What one callable accepts by keyword.

    .. versionadded:: 0.2.0

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
    doubts
        Keywords that may be dropped, replaced or rejected on the way through a
        ``**kwargs`` forward, each with the construct and line that puts it in doubt (the
        answer for them is ``unknown``, even when the target declares them).
    doubt_all
        Set when a forward may drop or replace any keyword: names the target does not
        declare are then ``unknown`` instead of ``unsupported``.
    """

    name: str
    keywords: Mapping[str, str] | None
    open_ended: bool
    via: tuple[str, ...]
    error: str | None
    doubts: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    doubt_all: str | None = None

    def acceptance(self, keyword: str) -> Support:
        """Whether the callable accepts the keyword argument ``keyword``, and why.

        Spelled ``support`` before fi-compat 0.3.0 (still answers, with a
        ``DeprecationWarning``, until 0.4.0).

        .. versionadded:: 0.3.0

        Raises
        ------
        InvalidArgumentError
            ``keyword`` is not a str (checked before anything is read).
        """
        if type(keyword) is not str:
            require_str("keyword", keyword, fix="pass the keyword's name as a str")
        if self.keywords is None:
            return Support(
                Status.UNKNOWN, f"cannot read the signature of {self.name}: {self.error}"
            )
        declarer = self.keywords.get(keyword)
        if declarer == self.name:
            return Support(Status.SUPPORTED, f"declared by {self.name}")
        doubt = self.doubts.get(keyword)
        if doubt is not None:
            return Support(Status.UNKNOWN, f"{self.name} forwards **kwargs, but {doubt}")
        if declarer is not None:
            chain = " -> ".join(self.via[: self.via.index(declarer) + 1])
            return Support(Status.SUPPORTED, f"declared via **kwargs forwarding: {chain}")
        if self.open_ended:
            detail = f": {self.error}" if self.error else ""
            return Support(
                Status.UNKNOWN,
                f"{self.name} takes **kwargs whose destination cannot be resolved{detail}",
            )
        if self.doubt_all is not None:
            return Support(Status.UNKNOWN, f"{self.name} forwards **kwargs, but {self.doubt_all}")
        return Support(Status.UNSUPPORTED, f"not a keyword parameter of {' -> '.join(self.via)}")

    support = renamed_attribute("acceptance", until="0.4.0")
    """Deprecated since fi-compat 0.3.0, goes in 0.4.0: :meth:`acceptance`."""


def exact_text(value: object) -> str | None:
    """``value`` as an exact ``str`` (a ``str`` subclass may override every method), or None."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return "".join([value])  # copies the characters without calling any method of value
    return None


def _type_name(cls: type) -> str:
    try:
        name = exact_text(cls.__name__)
    except KeyboardInterrupt:
        raise
    except BaseException:  # a metaclass may make __name__ raise
        name = None
    return name or "<unnamed exception>"


def describe_error(error: BaseException) -> str:
    """``"ExceptionType: message"``, without trusting ``str()`` or ``repr()`` of ``error``.

    The one description of a failure for the probe and the signature reader: a
    ``__str__`` that raises or returns a non-str falls back to ``repr()``, then to
    ``<unprintable ...>``; a metaclass whose ``__name__`` raises gives
    ``<unnamed exception>``.
    """
    name = _type_name(type(error))
    for render in (str, repr):
        try:
            detail = exact_text(render(error))
        except KeyboardInterrupt:
            raise
        except BaseException:  # __str__ raised, or returned something that is not a str
            continue
        if detail is not None:
            return f"{name}: {detail}"
    return f"{name}: <unprintable {name}>"


def _last_line(code: CodeType) -> int | None:
    """The last source line any instruction of ``code`` (nested code included) spans.

    None where code objects carry no positions (before Python 3.11).
    """
    positions = getattr(code, "co_positions", None)
    if positions is None:
        return None
    last = code.co_firstlineno
    for _, end, _, _ in positions():
        if end is not None and end > last:
            last = end
    for const in code.co_consts:
        if isinstance(const, CodeType):
            nested = _last_line(const)
            if nested is not None and nested > last:
                last = nested
    return last


def _parse_lines(lines: list[str], start: int) -> FunctionNode:
    """Parse the ``def`` made of ``lines`` (starting at line ``start`` of its file).

    Blank lines in front give every node its line number in the file, without a walk.
    """
    source = "".join(lines)
    indented = source[:1].isspace()
    if indented:  # a method: the "if 1:" header takes the line just above
        tree = ast.parse("\n" * max(start - 2, 0) + "if 1:\n" + source)
    else:
        tree = ast.parse("\n" * (start - 1) + source)
    node: ast.stmt = tree.body[0]
    if indented and isinstance(node, ast.If):
        node = node.body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        raise ValueError("its source is not a def")
    return node


def parse_def(func: Callable[..., Any]) -> FunctionNode:
    """The ``def`` of ``func`` (decorators unwrapped), line numbers as in its file.

    Reads the lines like ``inspect.getsourcelines`` does, minus its ``getmodule`` scan of
    ``sys.modules`` (the slow part once torch is imported), and finds where the ``def``
    ends from its code object's instruction positions rather than by tokenizing the rest
    of the file (``inspect.getblock``), which it falls back to when those positions do not
    delimit a parsable ``def`` (a body that ends in a line with no instruction).
    """
    unwrapped = inspect.unwrap(func)
    code = unwrapped.__code__
    filename = code.co_filename
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, getattr(unwrapped, "__globals__", None))
    start = code.co_firstlineno
    if not lines or start > len(lines):
        raise OSError(f"source of {filename} is not available")
    last = _last_line(code)
    if last is not None:
        try:
            return _parse_lines(lines[start - 1 : last], start)
        except SyntaxError:
            pass  # the def goes on past its last instruction: find its end by tokens
    return _parse_lines(inspect.getblock(lines[start - 1 :]), start)


class _LiveResolver:
    """Resolve names in a live function's module (``__globals__``) for the analysis."""

    def __init__(
        self,
        namespace: Mapping[str, Any],
        parsed: dict[int, tuple[Any, FunctionNode | None]] | None = None,
    ) -> None:
        self.namespace = namespace
        #: Parsed helpers by id (the function is kept alive next to its node).
        self.parsed: dict[int, tuple[Any, FunctionNode | None]] = {} if parsed is None else parsed

    def function(self, name: str) -> tuple[FunctionNode, _LiveResolver] | None:
        found = self.namespace.get(name)
        if not inspect.isfunction(found) or "__wrapped__" in vars(found):
            return None
        if id(found) not in self.parsed:
            try:
                node: FunctionNode | None = parse_def(found)
            except _FAILURES:  # unreadable source: not a helper the analysis can trust
                node = None
            self.parsed[id(found)] = (found, node)
        node = self.parsed[id(found)][1]
        if node is None:
            return None
        return node, _LiveResolver(found.__globals__, self.parsed)

    def is_builtin(self, name: str) -> bool:
        missing = object()
        real = getattr(builtins, name, missing)
        return real is not missing and self.namespace.get(name, real) is real


def _resolve(
    ref: Ref, namespace: Mapping[str, Any], owner: type | None
) -> tuple[Callable[..., Any], int, type | None] | None:
    """The object a forward target names, how many leading parameters the call binds
    implicitly, and the owner class for following it further; None when unresolvable."""
    if ref.base != "global":
        if owner is None:
            return None
        found: Any = inspect.getattr_static(owner, ref.path[0], None)
        descriptor = "function"
        if isinstance(found, staticmethod | classmethod):
            descriptor = type(found).__name__
            found = found.__func__
        if not inspect.isfunction(found):
            return None
        return found, bound_skip(ref.base, descriptor), owner
    missing = object()
    found = namespace.get(ref.path[0], missing)
    if found is missing:
        found = getattr(builtins, ref.path[0], None)
    for attr in ref.path[1:]:
        if not inspect.ismodule(found):
            return None
        found = inspect.getattr_static(found, attr, None)
    if found is None or inspect.ismodule(found) or not callable(found):
        return None
    return found, 0, None


def _qualname(func: Any) -> str:
    module = getattr(func, "__module__", None) or ""
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    return f"{module}.{name}" if module else str(name)


@dataclass
class _Gathered:
    keywords: dict[str, str]
    doubts: dict[str, str] = field(default_factory=dict)
    doubt_all: str | None = None
    open_ended: bool = False
    via: list[str] = field(default_factory=list)
    error: str | None = None


def _parameters(func: Callable[..., Any]) -> list[inspect.Parameter]:
    """``func``'s signature's parameters, each checked to be a readable parameter.

    A hostile ``__signature__`` (an :class:`inspect.Signature` subclass) can hand out a
    mapping keyed by anything, or parameters whose name is not a str; such a signature is
    unreadable (:class:`TypeError`), never a set of keywords that breaks a sort later.
    """
    parameters = []
    for key, parameter in inspect.signature(func).parameters.items():
        if (
            type(key) is not str
            or not isinstance(parameter, inspect.Parameter)
            or type(parameter.name) is not str
            or parameter.name != key
            or not isinstance(parameter.kind, inspect._ParameterKind)
        ):
            raise TypeError(
                f"its signature's parameters are not keyed by their str names (found the key "
                f"{exact_text(key) or type(key).__name__})"
            )
        parameters.append(parameter)
    return parameters


def _gather(
    name: str,
    func: Callable[..., Any],
    owner: type | None,
    depth: int,
    seen: set[int],
) -> _Gathered:
    """Keyword names of ``func`` and of whatever its ``**kwargs`` provably reach.

    Raises only for the top callable's signature; the caller turns that into an
    ``unknown`` shape.
    """
    signature = _parameters(func)
    keywords = {p.name: name for p in signature if p.kind in _KEYWORD_KINDS}
    var_keyword = next(
        (p.name for p in signature if p.kind is inspect.Parameter.VAR_KEYWORD),
        None,
    )
    if var_keyword is None:
        return _Gathered(keywords)

    def unknown(error: str) -> _Gathered:
        return _Gathered(keywords, open_ended=True, error=error)

    if depth >= MAX_FORWARD_DEPTH:
        return unknown(f"more than {MAX_FORWARD_DEPTH} **kwargs hops")
    try:
        node = parse_def(func)
        namespace: Mapping[str, Any] = getattr(inspect.unwrap(func), "__globals__", {})
        if node.args.kwarg is None or node.args.kwarg.arg != var_keyword:
            return unknown(f"its signature's **{var_keyword} is not in its source")
        kind = method_kind(node) if owner is not None else None
        analysis = analyse(node, var_keyword, _LiveResolver(namespace), where=name, method=kind)
        if analysis.problem is not None or analysis.target is None:
            return unknown(analysis.problem or f"no call forwards **{var_keyword}")
        resolved = _resolve(analysis.target, namespace, owner)
    except _FAILURES as failure:  # unreadable source or hostile objects: unknown
        return unknown(f"cannot read its source ({describe_error(failure)})")
    if resolved is None:
        return unknown(f"cannot resolve the call to {analysis.target.text}")
    target, skip, target_owner = resolved
    target_name = _qualname(target)
    if id(target) in seen:
        return unknown(f"**{var_keyword} forwarding loops back to {target_name}")
    try:
        parameters = [(p.name, p.kind.name) for p in _parameters(target)]
        inner = _gather(target_name, target, target_owner, depth + 1, seen | {id(target)})
    except _FAILURES as failure:
        return unknown(f"cannot read the signature of {target_name} ({describe_error(failure)})")
    hop: dict[str, str] = {}
    hop_all: str | None = None
    for doubt in (*analysis.doubts, *positional_doubts(analysis.calls, parameters, skip, name)):
        if doubt.keyword == ALL:
            hop_all = hop_all or doubt.reason
        else:
            hop.setdefault(doubt.keyword, doubt.reason)
    doubts: dict[str, str] = {}
    for keyword in inner.keywords:
        reason = hop.get(keyword) or hop_all or inner.doubts.get(keyword)
        if reason is not None:
            doubts[keyword] = reason
    for keyword, reason in (*hop.items(), *inner.doubts.items()):
        doubts.setdefault(keyword, reason)
    # The outer callable's own declaration wins: it is what a caller binds against first.
    return _Gathered(
        keywords=inner.keywords | keywords,
        doubts={k: r for k, r in doubts.items() if k not in keywords},
        doubt_all=hop_all or inner.doubt_all,
        open_ended=inner.open_ended,
        via=[target_name, *inner.via],
        error=inner.error,
    )


def inspect_callable(name: str, func: Callable[..., Any], *, owner: type | None = None) -> Shape:
    """Read what ``func`` accepts by keyword, following ``**kwargs`` forwards.

    Never raises (except ``KeyboardInterrupt``): any failure, ``SystemExit`` from a
    hostile ``__signature__`` included, becomes an ``unknown`` shape with the reason.

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
        found = _gather(name, func, owner, 0, {id(func)})
        return Shape(
            name,
            MappingProxyType(found.keywords),
            found.open_ended,
            (name, *found.via),
            found.error,
            doubts=MappingProxyType(found.doubts),
            doubt_all=found.doubt_all,
        )
    except KeyboardInterrupt:
        raise
    except BaseException as failure:  # the probe must never raise
        return Shape(name, None, True, (name,), describe_error(failure))


def acceptances(shape: Shape, keywords: Iterable[str]) -> dict[str, Support]:
    """:meth:`Shape.acceptance` of several keywords of one shape, in the order given."""
    return {keyword: shape.acceptance(keyword) for keyword in keywords}
