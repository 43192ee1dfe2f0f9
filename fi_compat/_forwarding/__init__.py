"""Where a ``**kwargs`` dict goes, proven from a function's syntax tree.

One analysis serves both the live probe (:mod:`fi_compat._signature`, over
``inspect.getsource``) and the recorder (``tools.recorder``, outside the package, over a
release's files), so live and recorded answers cannot drift apart. Its entry point is
:func:`analyse`; each module of this package is one stage. The report guide,
``docs/guide/report.md`` ("How ``**kwargs`` is followed"), gives the rules and the stages.
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
