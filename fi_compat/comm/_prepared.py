"""Prepared calls: validate the tensors once, then launch on them any number of times.

:meth:`FusionWorkspace.prepare <fi_compat.comm.FusionWorkspace.prepare>` checks a set of
tensors the way every :func:`~fi_compat.comm.allreduce_residual_rmsnorm` call does and
returns a :class:`PreparedAllReduce`: a zero-argument call of the installed release's
function with every argument already in place. It is meant for static buffers, the ones
an engine fills before each step and captures in a CUDA graph. Calling it reads no tensor
attribute, builds nothing and inspects nothing.

:func:`freeze_call` is where the arguments are put in place: positionally when the
callable's own signature lists them (a plain ``def``, as FlashInfer's functions are when
no wrapper sits in front of them), otherwise by keyword. Both are decided once, when the
call is prepared.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["PreparedAllReduce", "freeze_call"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _positional(
    function: Callable[..., Any], arguments: Mapping[str, Any]
) -> tuple[Any, ...] | None:
    """``arguments`` in the order of ``function``'s own parameters, or None.

    Parameters left out before the last one given are filled with their defaults (the
    very objects the signature holds, so the call is the same as leaving them out). None
    when the callable's own signature is unreadable or is a forwarding ``(*args,
    **kwargs)``, or when a name is keyword-only or unknown: keywords are used then.
    """
    try:
        parameters = inspect.signature(function, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return None
    remaining = dict(arguments)
    values: list[Any] = []
    for parameter in parameters:
        if not remaining:
            break
        if parameter.kind not in _POSITIONAL:
            return None
        if parameter.name in remaining:
            values.append(remaining.pop(parameter.name))
        elif parameter.default is not inspect.Parameter.empty:
            values.append(parameter.default)
        else:
            return None
    return None if remaining else tuple(values)


def freeze_call(function: Callable[..., Any], arguments: Mapping[str, Any]) -> Callable[[], Any]:
    """A zero-argument call that runs ``function(**arguments)``.

    Positional where the function's own signature allows (cheapest to call), by keyword
    otherwise; the result is a :func:`functools.partial` either way.
    """
    ordered = _positional(function, arguments)
    if ordered is not None:
        return functools.partial(function, *ordered)
    return functools.partial(function, **arguments)


class PreparedAllReduce:
    """One allreduce + residual add + RMSNorm, checked once, ready to launch.

    Made by :meth:`FusionWorkspace.prepare <fi_compat.comm.FusionWorkspace.prepare>`.
    Calling it launches on the tensors it was prepared with, whatever they hold at that
    moment, and returns ``(norm_out, residual_out)``; it takes no arguments and does no
    per-call work besides the launch. After the workspace's ``destroy()`` a call raises
    :class:`~fi_compat.errors.WorkspaceDestroyedError`.

    The contract of static buffers: the tensors keep their shape, strides and storage.
    Writing new values into them is what they are for; ``resize_()``, ``set_()`` or
    ``as_strided_()`` on one of them after ``prepare`` is not detected.

    Attributes
    ----------
    workspace
        The workspace the call runs on.
    tokens
        The token count the tensors were checked for.
    norm_out, residual_out
        The output buffers (preallocated by the caller, or allocated by ``prepare``).
    """

    __slots__ = ("__weakref__", "_launch", "_outputs", "tokens", "workspace")

    def __init__(
        self,
        workspace: Any,
        launch: Callable[[], Any],
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
    ) -> None:
        self.workspace = workspace
        self.tokens = tokens
        self._launch = launch
        self._outputs = (norm_out, residual_out)

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        self._launch()
        return self._outputs

    @property
    def norm_out(self) -> torch.Tensor:
        """The normalized output, ``rmsnorm(residual_out) * weight``."""
        return self._outputs[0]

    @property
    def residual_out(self) -> torch.Tensor:
        """The residual output, ``allreduce(input) + residual``."""
        return self._outputs[1]

    def _revoke(self, refuse: Callable[[], Any]) -> None:
        """Called by the workspace's ``destroy()``: every later call runs ``refuse``."""
        self._launch = refuse

    def __repr__(self) -> str:
        return f"PreparedAllReduce(tokens={self.tokens}, workspace={self.workspace!r})"
