"""One process of the two-process engine test: SGLang-style code over a real gloo group.

``python -m tests.support.engine_worker RANK WORLD PORT DIRECTORY VERSION...`` (from the
repository root) joins a gloo world, makes a gloo group over every rank (SGLang's device and
CPU group, one object on a CPU node), counts the ranks on this host the way SGLang does, and
for each VERSION runs :func:`~tests.support.engine_shapes.sglang_session` against
``fi_compat.comm`` inside ``fake_flashinfer(VERSION)``: probe, workspace, size check, fused
RMSNorm, all-reduce, destroy; once with one group for both roles ("same"), once with a
second gloo group over the same ranks as the device group ("separate", SGLang's shape on a
GPU node). It writes what reached the fake to DIRECTORY/RANK.json, after checking with the other
ranks that every rank came to the same decisions. With ``--widths`` before the versions it
runs the shapes whose calls are narrower or wider than their workspace instead
(:data:`WIDTH_SHAPES`: SGLang's compile branch, vLLM's draft model).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.ranks import join_gloo

__all__ = ["main"]

_KERNELS = ("allreduce_fusion", "trtllm_allreduce_fusion")
_FACTORIES = (
    "create_allreduce_fusion_workspace",
    "trtllm_create_ipc_workspace_for_all_reduce_fusion",
)
_INPUTS = {"allreduce_fusion": "input", "trtllm_allreduce_fusion": "allreduce_in"}
_PATTERNS = {"allreduce_fusion": "pattern", "trtllm_allreduce_fusion": "pattern_code"}


def _summary(outcome: Any, group: Any, per_node: int) -> dict[str, Any]:
    """What reached the fake, as JSON (the tensors compared here, by identity)."""
    trace = outcome.trace
    fused = [a for a in trace.asked if a.name == "allreduce_fusion"]
    kernels = []
    for asked in fused:
        for call in outcome.calls_of(asked):
            if call.name not in _KERNELS:
                continue
            tensors = all(
                call.arguments.get(_INPUTS[call.name] if name == "input" else name) is value
                for name, value in asked.kwargs.items()
                if name in ("input", "residual_in", "rms_gamma", "norm_out", "residual_out")
            )
            trigger = call.arguments.get("trigger_completion_at_end", "absent")
            kernels.append(
                {
                    "name": call.name,
                    "pattern": call.arguments[_PATTERNS[call.name]],
                    "trigger": trigger,
                    "tensors_are_the_engines": tensors,
                }
            )
    made = next((c for c in outcome.calls if c.name in _FACTORIES), None)
    arguments = made.arguments if made is not None else {}
    return {
        "kind": outcome.kind,
        "reasons": list(outcome.reasons),
        "calls": [call.name for call in outcome.calls if not call.name.endswith("__init__")],
        "factory": {
            "name": made.name if made is not None else None,
            "rank": arguments.get("rank", arguments.get("tp_rank")),
            "group_is_the_device_group": arguments.get("group") is group,
        },
        "kernels": kernels,
        "destroyed": all(workspace.destroyed for workspace in trace.workspaces),
        "fits": trace.notes.get("fits"),
        "gpus_per_node": per_node,
        "decisions": [list(workspace.decisions) for workspace in trace.workspaces],
    }


#: The shapes whose calls are of another width than their workspace (``--widths``).
WIDTH_SHAPES = ("sglang_compile_narrower", "vllm_draft_model")


def _widths(outcome: Any) -> dict[str, Any]:
    """Per fused call of a width shape: the input's shape asked and the sizes that reached
    the kernel (the unified call's input, the legacy call's token_num and hidden_dim)."""
    calls = []
    for asked in outcome.trace.asked:
        if asked.name != "allreduce_fusion":
            continue
        for call in outcome.calls_of(asked):
            if call.name == "allreduce_fusion":
                reached = list(call.arguments["input"].shape)
            elif call.name == "trtllm_allreduce_fusion":
                reached = [call.arguments["token_num"], call.arguments["hidden_dim"]]
            else:
                continue
            calls.append({"asked": list(asked.kwargs["input"].shape), "reached": reached})
    workspaces = outcome.trace.workspaces
    return {
        "kind": outcome.kind,
        "reasons": list(outcome.reasons),
        "error": type(outcome.error).__name__ if outcome.error is not None else None,
        "hidden_dim": [workspace.hidden_dim for workspace in workspaces],
        "calls": calls,
        "destroyed": all(workspace.destroyed for workspace in workspaces),
    }


def main(argv: Sequence[str]) -> int:
    """Run the session for each release in ``argv[4:]`` (with ``--widths`` first: the
    width shapes instead); see the module docstring."""
    import torch.distributed as dist

    import fi_compat.comm as comm
    import fi_compat.comm.mnnvl as mnnvl
    from fi_compat.testing import fake_flashinfer
    from tests.support.engine_shapes import Engine, gpus_per_node, run_shape, sglang_session

    rank, world, port = int(argv[0]), int(argv[1]), int(argv[2])
    out, versions = Path(argv[3]) / f"{rank}.json", list(argv[4:])
    widths = versions[:1] == ["--widths"]
    versions = versions[1:] if widths else versions
    join_gloo(rank, world, port)
    try:
        ranks = list(range(world))
        group = dist.new_group(ranks, backend="gloo")
        # SGLang on a GPU node: an NCCL device group and a gloo CPU group over the same
        # ranks, two objects (both gloo here).
        device_group = dist.new_group(ranks, backend="gloo")
        per_node = gpus_per_node(group)

        def engine(device: Any) -> Engine:
            """This rank's engine: ``device`` as its device group, the gloo CPU group."""
            return Engine(
                comm,
                mnnvl,
                world_size=dist.get_world_size(group),
                rank=dist.get_rank(group),
                device_group=device,
                cpu_group=group,
                gpus_per_node=per_node,
            )

        results: dict[str, Any] = {}
        for version in versions:
            results[version] = {}
            for shape in WIDTH_SHAPES if widths else ():
                with fake_flashinfer(version) as fake:
                    summary = _widths(run_shape(shape, fake, engine(group)))
                everyone: list[Any] = [None] * world
                dist.all_gather_object(everyone, json.dumps(summary["calls"]), group=group)
                summary["agreed"] = len(set(everyone)) == 1
                results[version][shape] = summary
            for label, device in (
                (("same", group), ("separate", device_group)) if not widths else ()
            ):
                with fake_flashinfer(version) as fake:
                    outcome = run_shape("sglang_session", fake, engine(device), sglang_session)
                    summary = _summary(outcome, device, per_node)
                decided = (summary["kind"], summary["calls"], summary["decisions"])
                everyone = [None] * world
                dist.all_gather_object(everyone, json.dumps(decided), group=group)
                summary["agreed"] = len(set(everyone)) == 1
                results[version][label] = summary
        dist.barrier(group=group)
    finally:
        dist.destroy_process_group()
    out.write_text(json.dumps(results, indent=1, default=repr))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
