"""What reaches the TRT-LLM kernel: FlashInfer's public call against fi-compat's bound calls.

Used in this interpreter against the installed release (``tests/comm/test_layers_real.py``)
and, run as a script, in a real release's subprocess (``tests/comm/test_layers_wheels.py``,
with the real-release harness's CPU workarounds), where it prints one JSON document.

On a TRT-LLM workspace stand-in (the release's own class, made without ``__init__``) with
the compiled module's loader replaced by a recorder, each case calls the release's public
``allreduce_fusion`` and then fi-compat's checked call and its prepared call on the same
tensors, and compares the three kernel-boundary calls argument by argument
(:func:`differences`): the same tensor object where FlashInfer passes the caller's, a view
of the same storage, offset, shape and strides where it passes a flattened view, a new
tensor of the same shape, dtype and device sharing no caller storage where it allocates,
and scalars of the same type and value. A case the public call cannot express
(``trigger_completion_at_end=False`` before 0.6.8) is counted in ``honoured`` and not
compared.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["CASES", "Stage", "compare", "differences", "main", "stage"]

TOKENS, HIDDEN, WORLD, RANK, MAX_TOKENS = 6, 256, 4, 1, 16

#: (launch_with_pdl, trigger_completion_at_end, fp32_acc, use_oneshot, eps, tokens)
CASES: tuple[tuple[bool, bool, bool, bool | None, float, int], ...] = tuple(
    (pdl, trigger, fp32, oneshot, eps, tokens)
    for (pdl, trigger), fp32, oneshot, (eps, tokens) in itertools.product(
        ((True, True), (True, False), (False, True), (False, False)),
        (False, True),
        (None, True, False),
        ((1e-6, TOKENS), (2.5e-5, MAX_TOKENS)),
    )
)


def _same(name: str, ours: Any, theirs: Any, caller: list[torch.Tensor]) -> str | None:
    """Why ``ours`` differs from ``theirs`` as the kernel sees them, or None."""
    if isinstance(theirs, torch.Tensor):
        if not isinstance(ours, torch.Tensor):
            return f"{name}: {type(ours).__name__} instead of a tensor"
        if any(theirs is tensor for tensor in caller):
            return None if ours is theirs else f"{name}: not the caller's tensor object"
        layout = (theirs.shape, theirs.stride(), theirs.dtype, theirs.device)
        if (ours.shape, ours.stride(), ours.dtype, ours.device) != layout:
            return f"{name}: {(ours.shape, ours.stride(), ours.dtype)} instead of {layout[:3]}"
        storages = {tensor.untyped_storage().data_ptr() for tensor in caller}
        if theirs.untyped_storage().data_ptr() in storages:  # a view of a caller tensor
            if ours.data_ptr() != theirs.data_ptr():
                return f"{name}: a view of other memory"
            return None
        if ours.untyped_storage().data_ptr() in storages:
            return f"{name}: aliases a caller tensor where FlashInfer allocates"
        return None
    if type(ours) is not type(theirs) or ours != theirs:
        return f"{name}: {ours!r} instead of {theirs!r}"
    return None


def differences(
    ours: dict[str, Any], theirs: dict[str, Any], caller: list[torch.Tensor]
) -> list[str]:
    """Every argument of one kernel call that differs from FlashInfer's own call."""
    found = [f"{name}: not passed" for name in theirs if name not in ours]
    found += [f"{name}: passed, FlashInfer does not" for name in ours if name not in theirs]
    for name in theirs.keys() & ours.keys():
        why = _same(name, ours[name], theirs[name], caller)
        if why is not None:
            found.append(why)
    return sorted(found)


class Stage:
    """The installed release's public call, a workspace stand-in and the kernel recorder."""

    def __init__(self) -> None:
        self.comm: Any = importlib.import_module("flashinfer.comm")
        self.public = self.comm.allreduce_fusion
        original = inspect.unwrap(self.public)
        self.namespace = original.__globals__
        legacy = inspect.unwrap(self.namespace["trtllm_allreduce_fusion"])
        self.kernel_namespace = legacy.__globals__
        self.takes_trigger = "trigger_completion_at_end" in inspect.signature(original).parameters
        self.pattern = self.comm.AllReduceFusionPattern.kARResidualRMSNorm
        self.calls: list[dict[str, Any]] = []
        self.native = self.workspace_stand_in()

    def workspace_stand_in(self) -> Any:
        native: Any = object.__new__(self.namespace["TRTLLMAllReduceFusionWorkspace"])
        native._destroyed = True  # nothing to free
        native.world_size, native.rank, native.mem_handles = WORLD, RANK, []
        native.workspace_tensor = torch.zeros(WORLD * 3, dtype=torch.int64)
        native.metadata = {
            "max_token_num": MAX_TOKENS,
            "tp_size": WORLD,
            "hidden_dim": HIDDEN,
            "use_fp32_lamport": False,
        }
        return native

    def record(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)

    def public_call(
        self, tensors: list[torch.Tensor], case: tuple[Any, ...], *, quiet: bool = True
    ) -> None:
        """The public call, its per-call DeprecationWarning silenced unless ``quiet=False``."""
        x, residual, weight, norm_out, residual_out = tensors
        pdl, trigger, fp32, oneshot, eps, _ = case
        options = {"trigger_completion_at_end": trigger} if self.takes_trigger else {}
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore", DeprecationWarning)
            self.public(
                input=x,
                workspace=self.native,
                pattern=self.pattern,
                launch_with_pdl=pdl,
                residual_out=residual_out,
                norm_out=norm_out,
                residual_in=residual,
                rms_gamma=weight,
                rms_eps=eps,
                use_oneshot=oneshot,
                fp32_acc=fp32,
                **options,
            )


@contextmanager
def stage() -> Iterator[Stage]:
    """A :class:`Stage`, the kernel loader and the workspace factory patched while it lasts."""
    staged = Stage()
    kernel = type("Kernel", (), {"trtllm_allreduce_fusion": staticmethod(staged.record)})()
    loader = staged.kernel_namespace["get_trtllm_comm_module"]
    factory = staged.comm.create_allreduce_fusion_workspace
    staged.kernel_namespace["get_trtllm_comm_module"] = lambda: kernel
    staged.comm.create_allreduce_fusion_workspace = lambda **_: staged.native
    try:
        yield staged
    finally:
        staged.kernel_namespace["get_trtllm_comm_module"] = loader
        staged.comm.create_allreduce_fusion_workspace = factory


def compare(staged: Stage) -> dict[str, Any]:
    """Every case through the public call, the checked call and the prepared call."""
    from fi_compat.comm import allreduce_residual_rmsnorm, create_workspace

    workspace = create_workspace(WORLD, RANK, MAX_TOKENS, HIDDEN, torch.bfloat16, device="cpu")
    found: list[str] = []
    warned: list[str] = []
    honoured = 0
    for case in CASES:
        pdl, trigger, fp32, oneshot, eps, tokens = case
        if pdl and not trigger and not staged.takes_trigger:
            # 0.6.0 to 0.6.7: the public call cannot take trigger_completion_at_end=False
            # (it passes launch_with_pdl); fi-compat honours it through the legacy call on
            # purpose (_unified._early_trigger, tested in tests/comm), so there is nothing to
            # compare with.
            honoured += 1
            continue
        x = torch.randn(tokens, HIDDEN, dtype=torch.bfloat16)
        tensors = [
            x,
            torch.randn_like(x),
            torch.randn(HIDDEN, dtype=torch.bfloat16),
            torch.empty_like(x),
            torch.empty_like(x),
        ]
        staged.calls.clear()
        staged.public_call(tensors, case)
        options: dict[str, Any] = {
            "eps": eps,
            "norm_out": tensors[3],
            "residual_out": tensors[4],
            "use_oneshot": oneshot,
            "fp32_acc": fp32,
            "trigger_completion_at_end": trigger,
            "launch_with_pdl": pdl,
        }
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            allreduce_residual_rmsnorm(*tensors[:3], workspace=workspace, **options)
            workspace.prepare(*tensors[:3], **options)()
        warned += [str(warning.message) for warning in caught]
        if len(staged.calls) != 3:
            found.append(f"{case}: {len(staged.calls)} kernel calls instead of 3")
            continue
        theirs, checked, prepared = staged.calls
        found += [f"{case} checked {why}" for why in differences(checked, theirs, tensors)]
        found += [f"{case} prepared {why}" for why in differences(prepared, theirs, tensors)]
    decisions = list(workspace.decisions)
    workspace.destroy()
    return {
        "cases": len(CASES) - honoured,
        "honoured": honoured,
        "differences": found,
        "decisions": decisions,
        "warned": warned,
    }


def main() -> int:
    """In a release's subprocess: print the comparison as the probe document tools read."""
    import flashinfer

    stdout, sys.stdout = sys.stdout, sys.stderr
    try:
        with stage() as staged:
            document = compare(staged)
    finally:
        sys.stdout = stdout
    document.update(probe=1, version=flashinfer.__version__)
    json.dump(document, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
