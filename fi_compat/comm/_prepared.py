"""Prepared calls: validate the tensors once, then launch on them any number of times.

:meth:`FusionWorkspace.prepare <fi_compat.comm.FusionWorkspace.prepare>` checks a set of
tensors the way every :func:`~fi_compat.comm.allreduce_residual_rmsnorm` call does and
returns a :class:`PreparedAllReduce`: a zero-argument call of the installed release's
function with every argument already in place (see ``_binding.freeze_call``). It is meant
for static buffers, the ones an engine fills before each step and captures in a CUDA
graph. Calling it reads no tensor attribute, builds nothing and inspects nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["PreparedAllReduce"]


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
