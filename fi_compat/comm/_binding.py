"""Placing arguments once: how a release's function is called without per-call work.

A call with more than 15 keyword arguments makes CPython build a dict on every call (the
legacy ``trtllm_allreduce_fusion`` takes 21), and a :func:`functools.partial` with stored
keywords merges them into a new dict on every call. A positional call does neither. So the
positions are worked out once, when a workspace is created or a call is prepared, from the
callable's own signature: :func:`positional_layout` says where each argument goes, and
:func:`freeze_call` builds a zero-argument call from it.

Positions are used only where the callable's own parameters are explicit (a plain
``def``). A forwarding wrapper's ``(*args, **kwargs)`` says nothing about the order of what
it forwards to, so such a callable, or one with a keyword-only or unknown name, is called
by keyword: correct on every release, and the wrapper builds its ``**kwargs`` dict anyway.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Layout", "freeze_call", "positional_layout"]

#: ``(template, slots)``: the positional arguments with the callable's defaults filled in
#: and None at the named positions, and the position of each name, in the given order.
Layout = tuple[list[Any], tuple[int, ...]]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def positional_layout(function: Callable[..., Any], names: Sequence[str]) -> Layout | None:
    """Where each of ``names`` goes in a positional call of ``function``, or None.

    Parameters left out before the last named one are filled with their defaults (the
    very objects the signature holds, so the call is the same as leaving them out). None
    when the callable's own signature is unreadable or is a forwarding ``(*args,
    **kwargs)``, or when a name is keyword-only or unknown, or a parameter without a
    default would be left out: call by keyword then.
    """
    try:
        parameters = inspect.signature(function, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return None
    wanted = set(names)
    template: list[Any] = []
    position: dict[str, int] = {}
    for parameter in parameters:
        if len(position) == len(wanted):
            break
        if parameter.kind not in _POSITIONAL:
            return None
        if parameter.name in wanted:
            position[parameter.name] = len(template)
            template.append(None)
        elif parameter.default is not inspect.Parameter.empty:
            template.append(parameter.default)
        else:
            return None
    if len(position) != len(wanted) or len(wanted) != len(names):
        return None
    return template, tuple(position[name] for name in names)


def freeze_call(function: Callable[..., Any], arguments: Mapping[str, Any]) -> Callable[[], Any]:
    """A zero-argument call that runs ``function(**arguments)``.

    Positional where :func:`positional_layout` allows (the cheapest call), by keyword
    otherwise; the result is a :func:`functools.partial` either way.
    """
    layout = positional_layout(function, tuple(arguments))
    if layout is None:
        return functools.partial(function, **arguments)
    template, slots = layout
    for slot, value in zip(slots, arguments.values(), strict=True):
        template[slot] = value
    return functools.partial(function, *template)
