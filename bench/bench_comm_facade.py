"""Per-call cost of ``fi_compat.comm.allreduce_residual_rmsnorm``. Prints its figures.

Three calls into the same no-op stand-in that carries the newest recorded release's exact
``allreduce_fusion`` signature (generated from ``fi_compat.testing``'s record), outputs
preallocated, measured in one run:

* direct: ``allreduce_fusion(input=..., workspace=..., pattern=..., ...)`` as an engine
  would write it against one known release;
* facade: ``allreduce_residual_rmsnorm(x, residual, weight, workspace=ws, ...)``, with its
  full validation (dtype, shape, token limit, device and contiguity of every tensor);
* dict per call: a kwargs dict built on every call and splatted, with the keyword added
  when a capability flag says so (the pattern of SGLang's ``flashinfer_comm_fusion``).

Target (issue 4): the facade at most 1.2x the direct call.

Run: ``.venv/bin/python bench/bench_comm_facade.py``
"""

from __future__ import annotations

import importlib
import timeit
from collections.abc import Callable
from typing import Any

import torch

from fi_compat import get_capabilities
from fi_compat.comm import AllReduceFusionPattern, allreduce_residual_rmsnorm, create_workspace
from fi_compat.testing import available_releases, fake_flashinfer, load_release

TOKENS, HIDDEN = 8, 4096
NUMBER, REPEAT = 100_000, 7


def no_op_with_newest_signature() -> tuple[Callable[..., Any], str]:
    """A ``def allreduce_fusion(...)`` with the newest recorded parameter list, doing nothing."""
    release = available_releases()[-1]
    record = load_release(release).comm_function("allreduce_fusion")
    assert record is not None
    parts: list[str] = []
    star = False
    for parameter in record.parameters:
        text = parameter.name
        if parameter.kind == "KEYWORD_ONLY" and not star:
            parts.append("*")
            star = True
        if parameter.default is not None:
            text += f"={parameter.default}"
        parts.append(text)
    namespace: dict[str, Any] = {}
    exec(f"def allreduce_fusion({', '.join(parts)}):\n    return None\n", namespace)
    function: Callable[..., Any] = namespace["allreduce_fusion"]
    return function, release


def best_ns(statements: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Best of ``REPEAT`` rounds each, candidates interleaved in every round so that load
    from other processes on the machine falls on all of them alike."""
    best = dict.fromkeys(statements, float("inf"))
    for _ in range(REPEAT):
        for name, statement in statements.items():
            seconds = timeit.timeit(statement, number=NUMBER)
            best[name] = min(best[name], seconds / NUMBER * 1e9)
    return best


def main() -> None:
    no_op, release = no_op_with_newest_signature()
    with fake_flashinfer(release):
        supports_trigger = (
            get_capabilities()
            .comm.kwargs["allreduce_fusion"]["trigger_completion_at_end"]
            .supported
        )
        module = importlib.import_module("flashinfer.comm")
        module.allreduce_fusion = no_op  # what the workspace binds to
        workspace = create_workspace(2, 0, TOKENS, HIDDEN, torch.bfloat16, device="cpu")
        native = workspace.native
        pattern = AllReduceFusionPattern.kARResidualRMSNorm
        x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
        residual = torch.randn_like(x)
        weight = torch.randn(HIDDEN, dtype=torch.bfloat16)
        norm_out, residual_out = torch.empty_like(x), torch.empty_like(x)

        def direct() -> None:
            no_op(
                input=x,
                workspace=native,
                pattern=pattern,
                launch_with_pdl=True,
                trigger_completion_at_end=True,
                residual_out=residual_out,
                norm_out=norm_out,
                residual_in=residual,
                rms_gamma=weight,
                rms_eps=1e-6,
                use_oneshot=None,
                fp32_acc=False,
            )

        def facade() -> None:
            allreduce_residual_rmsnorm(
                x,
                residual,
                weight,
                workspace=workspace,
                eps=1e-6,
                norm_out=norm_out,
                residual_out=residual_out,
            )

        def dict_per_call() -> None:
            kwargs = dict(  # noqa: C408  (spelled the way SGLang spells it)
                input=x,
                workspace=native,
                pattern=pattern,
                launch_with_pdl=True,
                residual_out=residual_out,
                norm_out=norm_out,
                residual_in=residual,
                rms_gamma=weight,
                rms_eps=1e-6,
                use_oneshot=None,
                fp32_acc=False,
            )
            if supports_trigger:
                kwargs["trigger_completion_at_end"] = True
            no_op(**kwargs)

        def reads_only() -> bool:
            # Only the tensor properties the facade's validation reads.
            shape = x.shape
            return bool(
                x.dtype is residual.dtype is weight.dtype is norm_out.dtype is residual_out.dtype
                and shape[0] <= TOKENS
                and shape[1] == HIDDEN
                and residual.shape == shape
                and weight.shape == (HIDDEN,)
                and norm_out.shape == shape
                and residual_out.shape == shape
                and x.get_device()
                == residual.get_device()
                == weight.get_device()
                == norm_out.get_device()
                == residual_out.get_device()
                and x.is_contiguous()
                and residual.is_contiguous()
                and weight.is_contiguous()
                and norm_out.is_contiguous()
                and residual_out.is_contiguous()
            )

        facade()
        assert reads_only()
        figures = best_ns(
            {"direct": direct, "facade": facade, "dict": dict_per_call, "reads": reads_only}
        )
    base = figures["direct"]
    print(f"stand-in: no-op with the allreduce_fusion signature of flashinfer {release}")
    print(f"direct allreduce_fusion call:           {base:8.1f} ns")
    print(
        f"allreduce_residual_rmsnorm (validated): {figures['facade']:8.1f} ns  "
        f"{figures['facade'] / base:5.2f}x direct  (target <= 1.2x)"
    )
    print(
        f"kwargs dict built per call:             {figures['dict']:8.1f} ns  "
        f"{figures['dict'] / base:5.2f}x direct"
    )
    print(f"facade overhead over direct:            {figures['facade'] - base:8.1f} ns")
    print(
        f"  the 20 tensor-property reads alone:   {figures['reads']:8.1f} ns "
        "(the floor for validating in Python)"
    )


if __name__ == "__main__":
    main()
