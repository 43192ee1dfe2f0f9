"""Where a ``**kwargs`` dict goes, proven from a function's syntax tree.

One analysis serves both the live probe (:mod:`fi_compat._signature`, over
``inspect.getsource``) and the recorder (``tools.recorder``, outside the package, over a
release's files), so live and recorded answers cannot drift apart. Only the syntax tree
is read: comments and strings never count.

The question is whether a keyword a caller puts into ``**kwargs`` surely reaches the one
callable the dict is splatted into. The answer is built from four rules, each
conservative (when in doubt, the keyword is in doubt):

Carriers
    The ``**kwargs`` name and names bound, everywhere in the function, only to a pure copy
    of a carrier: ``c``, ``dict(c)``, ``c.copy()``, ``{**c}``, ``{"k": v, **c}`` (entries
    after ``**c`` win, so ``{**c, "k": v}`` puts ``k`` in doubt, as does
    ``dict(c, k=v)``), or the result of a plain module-level helper whose own analysis
    shows it returns a copy of the dict parameter it was given, with additions only.
Doubts
    ``c.pop(k)``, ``del c[k]``, ``c[k] = v`` put ``k`` in doubt (every keyword when ``k``
    is not a constant string, except the add-only idiom ``if k in c: raise ...`` directly
    followed by ``c[k] = v``); ``c.update``, ``c |= ...``, ``c.clear()``, ``c.popitem()``,
    any other method, passing ``c`` to a call that is not a copy or an analysable helper,
    putting it in a container, using it in a nested function, or ``locals()``/``vars()``
    put every keyword in doubt. Reading (``c.get``, ``k in c``, ``c[k]``) is fine. In the
    forwarding call itself an explicit ``k=...`` puts ``k`` in doubt and a second ``**``
    puts every keyword in doubt; positional arguments are reported so the caller can put
    the target parameters they bind in doubt (:func:`positional_doubts`).
Paths
    Every path through the function must reach the forwarding call or raise; a path that
    returns first, falls off the end, or runs through something the check cannot follow
    (a loop body, a ``with`` block, a handler) makes the forward conditional, and then
    nothing is proven.
Targets
    ``self.name`` / ``cls.name`` (the method's first parameter, not rebound) and names
    not bound anywhere in the function (module globals, ``module.attr`` chains) can be
    resolved; a call through a parameter, a local, or an attribute of either cannot.
    Several different targets cannot either.

The analysis, one module per stage (each builds on the one before):

``results``
    What goes in (:class:`Resolver`) and what comes out (:class:`Analysis`).
``syntax``
    Questions about single syntax-tree nodes, and :func:`calls_named`.
``walk``
    One function's parsed body and bindings; how reasons are worded.
``carriers``
    Which names hold a pure copy of the dict (following helpers, :data:`MAX_HELPER_DEPTH`).
``uses``
    Which keywords each use of a carrier puts in doubt.
``paths``
    Whether every path reaches the forwarding call or raises.
``forward``
    The forwarding calls and their target: :func:`analyse`.
``positional``
    For callers, afterwards: :func:`bound_skip` and :func:`positional_doubts`.
"""

from __future__ import annotations

from fi_compat._forwarding.carriers import MAX_HELPER_DEPTH
from fi_compat._forwarding.forward import analyse
from fi_compat._forwarding.positional import bound_skip, positional_doubts
from fi_compat._forwarding.results import (
    ALL,
    Analysis,
    Doubt,
    ForwardCall,
    FunctionNode,
    Ref,
    Resolver,
)
from fi_compat._forwarding.syntax import calls_named, method_kind

__all__ = [
    "ALL",
    "MAX_HELPER_DEPTH",
    "Analysis",
    "Doubt",
    "ForwardCall",
    "FunctionNode",
    "Ref",
    "Resolver",
    "analyse",
    "bound_skip",
    "calls_named",
    "method_kind",
    "positional_doubts",
]
