"""Per-call cost of ``fi_compat.comm``'s fused call. Prints its figures.

Part 1, the issue's measure: calls into one no-op stand-in that carries the newest
recorded release's exact ``allreduce_fusion`` signature (generated from
``fi_compat.testing``'s record), outputs preallocated, measured in one run:

* direct: ``allreduce_fusion(input=..., workspace=..., pattern=..., ...)`` as an engine
  would write it against one known release;
* checked: ``allreduce_residual_rmsnorm(x, residual, weight, workspace=ws, ...)``, with its
  full validation (dtype, shape, token limit, device and contiguity of every tensor);
* prepared: ``ws.prepare(x, residual, weight, ...)`` once, then the returned call, which
  launches on those static buffers with no per-call checks;
* dict per call: a kwargs dict built on every call and splatted, with the keyword added
  when a capability flag says so (the pattern of SGLang's ``flashinfer_comm_fusion``).

Part 2, the installed FlashInfer's real ``allreduce_fusion`` (0.7.x), its whole Python path
run on the CPU, with only the workspace allocation and the CUDA kernel replaced by
stand-ins. There the workspace binds to the lowest public launch layer (the legacy
``trtllm_allreduce_fusion`` below its deprecation wrapper, ``fi_compat/comm/_layers.py``),
which the script says, with the workspace's decision. Skipped, with the reason, when the
installed release differs.

Targets: part 1, at most 1.2x the direct call (issue 4); part 2, the checked call at most
0.5x and the prepared call at most 0.3x FlashInfer's own call (issue 14).

Run: ``.venv/bin/python bench/bench_comm_facade.py`` (``make bench`` runs every script and
writes their figures to ``bench/results.md``)
"""

from __future__ import annotations

import importlib
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch
from _figures import Figure, best_ns, report

from fi_compat import get_capabilities
from fi_compat.comm import (
    AllReduceFusionPattern,
    FusionWorkspace,
    allreduce_residual_rmsnorm,
    create_workspace,
)
from fi_compat.testing import available_releases, fake_flashinfer, load_release

TOKENS, HIDDEN = 8, 4096
NUMBER = 100_000


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


Tensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _tensors() -> Tensors:
    """input, residual, weight, norm_out, residual_out."""
    x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
    residual = torch.randn_like(x)
    weight = torch.randn(HIDDEN, dtype=torch.bfloat16)
    return x, residual, weight, torch.empty_like(x), torch.empty_like(x)


def _calls(
    target: Callable[..., Any], native: Any, workspace: FusionWorkspace, tensors: Tensors
) -> dict[str, Callable[[], object]]:
    """The direct call of ``target``, the checked call and the prepared call, alike."""
    x, residual, weight, norm_out, residual_out = tensors
    pattern = AllReduceFusionPattern.kARResidualRMSNorm

    def direct() -> None:
        target(
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

    def checked() -> None:
        allreduce_residual_rmsnorm(
            x,
            residual,
            weight,
            workspace=workspace,
            eps=1e-6,
            norm_out=norm_out,
            residual_out=residual_out,
        )

    prepared = workspace.prepare(
        x, residual, weight, eps=1e-6, norm_out=norm_out, residual_out=residual_out
    )
    return {"direct": direct, "checked": checked, "prepared": prepared}


def against_stand_in() -> tuple[str, dict[str, float]]:
    """Part 1: everything into a no-op with the newest recorded signature."""
    no_op, release = no_op_with_newest_signature()
    with fake_flashinfer(release):
        supports_trigger = (
            get_capabilities()
            .comm.kwargs["allreduce_fusion"]["trigger_completion_at_end"]
            .supported
        )
        module = importlib.import_module("flashinfer.comm")
        module.allreduce_fusion = no_op  # type: ignore[attr-defined]  # the workspace binds to it
        workspace = create_workspace(2, 0, TOKENS, HIDDEN, torch.bfloat16, device="cpu")
        native = workspace.native
        pattern = AllReduceFusionPattern.kARResidualRMSNorm
        tensors = _tensors()
        x, residual, weight, norm_out, residual_out = tensors
        calls = _calls(no_op, native, workspace, tensors)

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
            # Only the tensor properties the checked call's validation reads.
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

        for call in calls.values():
            call()
        assert reads_only()
        figures = best_ns({**calls, "dict": dict_per_call, "reads": reads_only}, NUMBER)
        workspace.destroy()
    return release, figures


def against_real_python_path() -> tuple[str, str, dict[str, float]] | str:
    """Part 2: the installed release's own allreduce_fusion, kernel and allocation stubbed.

    Returns the release, the workspace's binding decision and the figures, or why they could
    not be taken.
    """
    try:
        import flashinfer
        import flashinfer.comm as real
        import flashinfer.comm.trtllm_ar as trtllm_ar
        from flashinfer.comm.allreduce import TRTLLMAllReduceFusionWorkspace
    except Exception as error:  # any failure just skips part 2
        return f"flashinfer's unified TRT-LLM path is not importable here ({error!r})"
    # A TRT-LLM workspace without its GPU buffers: the attributes allreduce_fusion reads.
    native: Any = object.__new__(TRTLLMAllReduceFusionWorkspace)
    native.world_size, native.rank, native.mem_handles = 2, 0, []
    native.workspace_tensor = torch.zeros(8, dtype=torch.int64)
    native.metadata = {
        "max_token_num": TOKENS,
        "tp_size": 2,
        "hidden_dim": HIDDEN,
        "use_fp32_lamport": False,
    }
    native.destroy = lambda: None
    native._destroyed = True  # nothing to free; keeps its __del__ quiet
    launches: list[int] = []
    kernel = types.SimpleNamespace(trtllm_allreduce_fusion=lambda **_: launches.append(1))
    originals = (trtllm_ar.get_trtllm_comm_module, real.create_allreduce_fusion_workspace)
    trtllm_ar.get_trtllm_comm_module = lambda: kernel  # type: ignore[assignment]
    real.create_allreduce_fusion_workspace = lambda **_: native
    try:
        workspace = create_workspace(2, 0, TOKENS, HIDDEN, torch.bfloat16, device="cpu")
        calls = _calls(real.allreduce_fusion, native, workspace, _tensors())
        try:
            with warnings.catch_warnings():  # the direct call's per-call DeprecationWarning
                warnings.simplefilter("ignore", DeprecationWarning)
                for call in calls.values():
                    call()
        except Exception as error:
            return f"flashinfer {flashinfer.__version__} differs from 0.7.x here ({error!r})"
        if len(launches) != 3:
            return f"expected 3 stand-in kernel launches, saw {len(launches)}"
        # Each call costs about 100 times part 1's: fewer calls per round.
        figures = best_ns(calls, number=NUMBER // 20)
        return flashinfer.__version__, workspace.decisions[-1], figures
    finally:
        trtllm_ar.get_trtllm_comm_module, real.create_allreduce_fusion_workspace = originals


def _figures(
    part: str, figures: dict[str, float], checked: float | None, prepared: float | None
) -> list[Figure]:
    """The direct call's cost, then each other call's cost and its ratio to the direct one.

    ``checked`` and ``prepared`` are the targets of those ratios (None: no target).
    """
    base = figures["direct"]
    labels = {
        "checked": ("allreduce_residual_rmsnorm (checked)", checked),
        "prepared": ("prepared call (checked once)", prepared),
        "dict": ("kwargs dict built per call", None),
    }
    rows = [Figure(f"{part}: direct allreduce_fusion call", base, "ns")]
    for name, (label, below) in labels.items():
        if name in figures:
            rows.append(Figure(f"{part}: {label}", figures[name], "ns"))
            rows.append(Figure("  / direct", figures[name] / base, "x", below, inclusive=True))
    return rows


def main() -> None:
    release, figures = against_stand_in()
    rows = _figures(f"part 1 (no-op, signature of {release})", figures, 1.2, 1.2)
    rows.append(Figure("  the 20 tensor-property reads alone", figures["reads"], "ns"))
    notes = [
        "part 1: the reads alone are the floor for checking five tensors in Python; the"
        " checked call is not expected to meet its target (docs/benchmarks.md)"
    ]
    real = against_real_python_path()
    if isinstance(real, str):
        notes.append(f"part 2 skipped: {real}")
    else:
        version, decision, figures = real
        rows += _figures(f"part 2 (flashinfer {version}'s own path)", figures, 0.5, 0.3)
        notes.append(f"part 2 workspace: {decision}")
    report("bench_comm_facade.py", rows, notes)


if __name__ == "__main__":
    main()
