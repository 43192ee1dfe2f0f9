"""The FlashInfer releases at which the fake's workspace, wrapper and helper models change.

Most of what the fake does is generated from the recorded signatures, but the workspace
arithmetic (:mod:`fi_compat.testing._workspaces`), the decode wrapper's tensor-core rule
(:mod:`fi_compat.testing._runtime`) and the arithmetic of the helpers the fake computes
(:mod:`fi_compat.testing._helpers`) are facts read in each release's source that the
signatures cannot carry. Each such fact is a :class:`FakeGate` here: a name, the first release
that has it and a line saying what changed. ``tests/testing/test_fake_gates.py`` compares
each gate with what the recorded or measured data shows, where that data shows it at all
(:attr:`FakeGate.evidence`). See the testing guide, ``docs/guide/testing.md``, "Release gates".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.version import Version

__all__ = [
    "AUTO_ASKS_MULTICAST",
    "CACHE_BUF_GROWS",
    "CONFIDENTIAL_COMPUTE",
    "CUTE_DSL_TENSOR_CORES",
    "GATES",
    "MNNVL_ALIGNMENT",
    "MULTICAST_ONLY_WHEN_ASKED",
    "PRIMS_TS_REMOVED",
    "PRIMS_TS_TENSOR_CORES",
    "SYMM_DEVICE_MEMORY",
    "TIGHT_MOE_TILE_BOUND",
    "TORCH_SYMMETRIC_MEMORY",
    "TWO_SHOT_ELEMENT_SIZE",
    "FakeGate",
]


@dataclass(frozen=True)
class FakeGate:
    """A change in FlashInfer's behaviour that the fake models from ``introduced_in`` on.

    Attributes
    ----------
    name
        What the code calls the gate.
    introduced_in
        The first release with the new behaviour.
    what
        What changed in that release, in one line.
    evidence
        Where the recorded data (``fi_compat/_records``) or the measured data
        (``fi_compat/_measured/reach.json``, ``fi_compat/_measured/layers.json``) shows the same
        change; None where it cannot (arithmetic or checks inside a function body, which
        no signature, attribute or measured boundary carries).
    """

    name: str
    introduced_in: str
    what: str
    evidence: str | None
    version: Version = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "version", Version(self.introduced_in))


CACHE_BUF_GROWS = FakeGate(
    "cache-buf-grows",
    "0.4.1",
    "flashinfer.utils._get_cache_buf makes its buffer anew when the cached one is smaller "
    "than asked (before, the first buffer of a name and device was kept whatever its size)",
    None,
)
TORCH_SYMMETRIC_MEMORY = FakeGate(
    "torch-symmetric-memory",
    "0.6.10",
    "the TRT-LLM and MNNVL workspaces allocate torch symmetric memory (the MNNVL workspace "
    "keeps ptrs, handle and tensor instead of mcast_buffer_handle)",
    "the recorded MNNVL workspace class gains the attribute tensor",
)
TIGHT_MOE_TILE_BOUND = FakeGate(
    "tight-moe-tile-bound",
    "0.6.11rc1",
    "the CuTe DSL MoE's get_max_num_tiles (and get_max_num_permuted_tokens) is the tight "
    "bound (E + (T - 1) * L) // T (L + ceil((E - L) / T) before)",
    None,
)
CUTE_DSL_TENSOR_CORES = FakeGate(
    "cute-dsl-tensor-cores",
    "0.6.13",
    "the decode wrapper forces tensor cores on for backend='cute-dsl' as for 'trtllm-gen'",
    "reach.json first measures the decode wrapper's backend 'cute-dsl'",
)
SYMM_DEVICE_MEMORY = FakeGate(
    "symm-device-memory",
    "0.6.15",
    "the workspaces are back on SymmDeviceMemory: checkpoint_prepare/checkpoint_restore, "
    "and the TRT-LLM metadata gains control_flag_ptr",
    "the recorded workspace classes gain checkpoint_prepare and the MNNVL one loses tensor",
)
AUTO_ASKS_MULTICAST = FakeGate(
    "auto-asks-multicast",
    "0.6.16",
    "backend='auto' picks MNNVL only when every rank's GPU supports NVLink multicast "
    "(always before)",
    "the recorded comm MNNVL module first binds is_multicast_supported and all_ranks_support_mnnvl",
)
MULTICAST_ONLY_WHEN_ASKED = FakeGate(
    "multicast-only-when-asked",
    "0.6.16",
    "a SymmDeviceMemory allocation checks for NVLink multicast only when asked for a "
    "multicast buffer (always before)",
    None,
)
CONFIDENTIAL_COMPUTE = FakeGate(
    "confidential-compute",
    "0.6.16",
    "under Confidential Computing the MNNVL backend is refused and the TRT-LLM workspace "
    "falls back to torch symmetric memory",
    None,
)
MNNVL_ALIGNMENT = FakeGate(
    "mnnvl-alignment",
    "0.6.18",
    "the MNNVL Lamport buffer is rounded up to 32 bytes (two stages of 16; 16 before)",
    None,
)
PRIMS_TS_TENSOR_CORES = FakeGate(
    "prims-ts-tensor-cores",
    "0.7.0",
    "the decode wrapper also forces tensor cores on for backend='prims-ts'",
    "reach.json first measures the decode wrapper's backend 'prims-ts'",
)
PRIMS_TS_REMOVED = FakeGate(
    "prims-ts-removed",
    "0.7.1",
    "backend='prims-ts' is gone, and with it from the backends forcing tensor cores",
    "reach.json no longer measures the decode wrapper's backend 'prims-ts'",
)
TWO_SHOT_ELEMENT_SIZE = FakeGate(
    "two-shot-element-size",
    "0.7.2",
    "the TRT-LLM two-shot buffer is sized by the element size (4 bytes for float32; 2 before)",
    None,
)

#: Every gate, in release order.
GATES: tuple[FakeGate, ...] = (
    CACHE_BUF_GROWS,
    TORCH_SYMMETRIC_MEMORY,
    TIGHT_MOE_TILE_BOUND,
    CUTE_DSL_TENSOR_CORES,
    SYMM_DEVICE_MEMORY,
    AUTO_ASKS_MULTICAST,
    MULTICAST_ONLY_WHEN_ASKED,
    CONFIDENTIAL_COMPUTE,
    MNNVL_ALIGNMENT,
    PRIMS_TS_TENSOR_CORES,
    PRIMS_TS_REMOVED,
    TWO_SHOT_ELEMENT_SIZE,
)
