"""Where a ``**kwargs`` dict goes, proven from a function's syntax tree.

One analysis serves both the live probe (:mod:`fi_compat._signature`, over
``inspect.getsource``) and the recorder (:mod:`fi_compat._recorder`, over a release's
files), so live and recorded answers cannot drift apart. Its entry point is
:func:`analyse`; :mod:`.model` holds the data and syntax helpers, :mod:`.stages` the
stages of one function's analysis, :mod:`.forward` the forwarding calls. The report guide,
``docs/guide/report.md`` ("How ``**kwargs`` is followed"), gives the rules and the stages.
"""

from __future__ import annotations

from fi_compat._forwarding.forward import analyse, bound_skip, positional_doubts
from fi_compat._forwarding.model import (
    ALL,
    Analysis,
    Doubt,
    ForwardCall,
    FunctionNode,
    Ref,
    Resolver,
    calls_named,
    method_kind,
)
from fi_compat._forwarding.stages import MAX_HELPER_DEPTH

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
