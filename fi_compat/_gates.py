"""The FlashInfer releases that changed what fi-compat relies on, kept in one place.

fi-compat *detects* every capability from the installed code; these release numbers are
never compared against the installed version to decide anything. They exist so that
messages, reports and hazards can say which release changed a thing, and so that tests
can check them against the recorded signatures of every release.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GATES", "Gate"]


@dataclass(frozen=True)
class Gate:
    """One change in FlashInfer's Python surface.

    Attributes
    ----------
    key
        Short name used by ``fi-compat report --require`` and in messages.
    where
        The callable (or module) the change is on.
    introduced_in
        The first release on the package registry that has it.
    summary
        One sentence for people.
    """

    key: str
    where: str
    introduced_in: str
    summary: str


GATES: dict[str, Gate] = {
    gate.key: gate
    for gate in (
        Gate(
            "legacy_api",
            "flashinfer.comm.trtllm_allreduce_fusion",
            "0.2.9",
            "The TRT-LLM IPC allreduce-fusion API "
            "(trtllm_create_ipc_workspace_for_all_reduce_fusion + trtllm_allreduce_fusion).",
        ),
        Gate(
            "unified_api",
            "flashinfer.comm.allreduce_fusion",
            "0.6.0",
            "The unified API (create_allreduce_fusion_workspace + allreduce_fusion).",
        ),
        Gate(
            "comm_backend",
            "flashinfer.comm.create_allreduce_fusion_workspace",
            "0.6.0",
            "comm_backend= on the workspace factory (e.g. a torch.distributed TorchDistBackend).",
        ),
        Gate(
            "trigger_completion_at_end",
            "flashinfer.comm.allreduce_fusion",
            "0.6.8",
            "trigger_completion_at_end= on allreduce_fusion.",
        ),
        Gate(
            "group",
            "flashinfer.comm.create_allreduce_fusion_workspace",
            "0.6.10.post1",
            "group= on the workspace factory; without it the rendezvous spans the whole world.",
        ),
        Gate(
            "fixed_split_size",
            "flashinfer.<wrapper>.plan",
            "0.4.0",
            "fixed_split_size= on the plan of the prefill (paged, ragged) and decode wrappers.",
        ),
        Gate(
            "disable_split_kv",
            "flashinfer.<wrapper>.plan",
            "0.4.0",
            "disable_split_kv= on the plan of the prefill (paged, ragged) and decode wrappers.",
        ),
        Gate(
            "comm_imports_without_cuda_runtime",
            "flashinfer.comm",
            "0.6.14",
            "import flashinfer.comm no longer asserts that libcudart is loaded.",
        ),
    )
}
