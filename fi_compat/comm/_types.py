"""What a workspace was created for (:class:`Spec`) and what one call on it passes
(:class:`FusedCall`): the records every other comm module reads.

The checks compare a call against its workspace's :class:`Spec` (:mod:`._call_checks`),
the size rules size a workspace from it (:mod:`._sizes`), and every path hands a call on
as the plain tuple :data:`Values`, unpacked in :class:`FusedCall`'s order (:mod:`._launch`).
:data:`Api` names the path that runs a workspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from typing import TypeAlias

    import torch
    from typing_extensions import Unpack

__all__ = ["Api", "FusedCall", "Spec", "Values", "device_name"]

#: Which path runs a workspace.
Api = Literal["unified", "legacy", "reference"]


@dataclass(frozen=True)
class Spec:
    """What one workspace was created for.

    Attributes
    ----------
    world_size, rank
        Ranks in the group and this process's rank in it.
    max_token_num, hidden_dim, dtype
        The largest batch, the hidden size and the element type the workspace holds.
    device_index
        ``Tensor.get_device()`` of tensors that belong here: -1 for CPU, else the CUDA
        index.
    """

    world_size: int
    rank: int
    max_token_num: int
    hidden_dim: int
    dtype: torch.dtype
    device_index: int

    @property
    def device_name(self) -> str:
        """``"cpu"`` or ``"cuda:<index>"``."""
        return device_name(self.device_index)


def device_name(index: int) -> str:
    """The device of ``Tensor.get_device() == index``, for messages."""
    return "cpu" if index < 0 else f"cuda:{index}"


class FusedCall(NamedTuple):
    """The arguments of one fused call, in the order every path passes them.

    Never built per call: the paths take these as positional arguments (``*call: *FusedCall``)
    and pass them on as one plain tuple (:data:`Values`), unpacked in this order.
    """

    input: torch.Tensor
    residual: torch.Tensor
    weight: torch.Tensor
    eps: float
    norm_out: torch.Tensor | None
    residual_out: torch.Tensor | None
    use_oneshot: bool | None
    fp32_acc: bool
    trigger_completion_at_end: bool
    launch_with_pdl: bool


if TYPE_CHECKING:
    #: :class:`FusedCall`'s values as the plain tuple the paths hand on (no field names at run
    #: time: unpacked in :class:`FusedCall`'s order).
    Values: TypeAlias = tuple[Unpack[FusedCall]]
else:
    Values = tuple
