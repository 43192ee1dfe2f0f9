"""What the fusion policy knows about a deployment, and the names its rules use.

:class:`Deployment` describes one engine deployment; :class:`FusionChoice` is what the
user said on the command line; :class:`RuleEffect` and :class:`RuleId` classify and name
the rules of :mod:`fi_compat.policy._rules`; the architecture allow-list and the
compute-capability classes are kept here, in this one place.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from fi_compat._arguments import require_bool, require_instance, require_int, require_str
from fi_compat.determinism import is_deterministic
from fi_compat.errors import PolicyInputError

__all__ = [
    "FUSION_ARCHITECTURES",
    "FUSION_COMPUTE_CAPABILITY_MAJORS",
    "Deployment",
    "FusionChoice",
    "RuleEffect",
    "RuleId",
    "is_h20_device",
    "parse_compute_capability",
]

FUSION_ARCHITECTURES: frozenset[str] = frozenset(
    {
        # -- SGLang PR #22664 (merged 2026-04-18), server_args.py
        #    `_handle_model_specific_adjustments`: the list as it stood then.
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "GptOssForCausalLM",
        "GlmMoeDsaForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "Qwen3MoeForCausalLM",
        "Qwen3NextForCausalLM",  # added by PR #22664 itself
        "KimiK25ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        # -- Added in SGLang since: `_FLASHINFER_ALLREDUCE_FUSION_ARCHS` in
        #    python/sglang/srt/arg_groups/overrides.py (the auto-enable moved there
        #    from server_args.py), as read at sgl-project/sglang commit 003bbaf9ab79.
        "DeepseekV4ForCausalLM",
        "MistralLarge3ForCausalLM",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "NemotronH_Omni_Reasoning_V3",
    }
)
"""Architectures (``config.json`` -> ``architectures[0]``) that SGLang auto-enables
FlashInfer allreduce fusion for. Kept in this one place; every rule reads it.

.. versionadded:: 0.2.0
"""

FUSION_COMPUTE_CAPABILITY_MAJORS: frozenset[int] = frozenset({9, 10})
"""Compute-capability majors that count as "SM90 or SM100 class". SGLang's
`is_sm90_supported()` is `major == 9` (H100, H200, H20: 9.0) and its
`is_sm100_supported()` is `major == 10` (B200/GB200: 10.0, B300/GB300: 10.3);
both also require a CUDA toolkit of at least 12.3 / 12.8, which fi-compat does not
model. Consumer and workstation Blackwell (12.x), Thor (11.0) and Ampere (8.x) do
not count.

.. versionadded:: 0.2.0
"""


class FusionChoice(enum.Enum):
    """What the user said about allreduce fusion on the command line.

    .. versionadded:: 0.2.0
    """

    UNSET = "unset"
    """No flag given: the policy may auto-enable."""
    ENABLE = "enable"
    """``--enable-flashinfer-allreduce-fusion``."""
    DISABLE = "disable"
    """Fusion off by the user's choice (no auto-enable)."""
    ENFORCE_DISABLE = "enforce-disable"
    """``--enforce-disable-flashinfer-allreduce-fusion``: off, whatever else says."""


class RuleEffect(enum.IntEnum):
    """What a rule does when it applies, in precedence order (lower wins).

    The order of this enum *is* the precedence: any applying ``VETO`` beats any
    ``USER_DISABLE``/``USER_ENABLE``, which beat any ``BLOCK_AUTO_ENABLE``. When no rule
    applies, fusion is auto-enabled.

    .. versionadded:: 0.2.0
    """

    VETO = 0
    """Fusion off, whatever the user asked: enforce-disable, determinism, hard blockers."""
    USER_DISABLE = 1
    """The user turned fusion off."""
    USER_ENABLE = 2
    """The user turned fusion on; only a veto overrides it."""
    BLOCK_AUTO_ENABLE = 3
    """A condition of the automatic enable does not hold; an explicit enable still wins."""


class RuleId(enum.Enum):
    """Stable identifiers of the rules, also used in ``--json`` output.

    .. versionadded:: 0.2.0
    """

    ENFORCE_DISABLE = "enforce-disable"
    DETERMINISTIC_INFERENCE = "deterministic-inference"
    TP_SIZE_ONE = "tp-size-one"
    UNSUPPORTED_GPU = "unsupported-gpu"
    DP_ATTENTION = "dp-attention"
    ATTENTION_CONTEXT_PARALLEL = "attention-context-parallel"
    USER_DISABLE = "user-disable"
    USER_ENABLE = "user-enable"
    ARCHITECTURE_NOT_ALLOWED = "architecture-not-allowed"
    MULTI_NODE = "multi-node"
    H20_DEVICE = "h20-device"
    MOE_A2A_BACKEND = "moe-a2a-backend"
    AUTO_ENABLE = "auto-enable"
    """Not a rule: the outcome when no rule applies."""


def parse_compute_capability(text: str) -> tuple[int, int]:
    """Parse a compute capability such as ``"9.0"``, ``"10.3"``, ``"sm90"`` or ``"100"``.

    .. versionadded:: 0.2.0

    Raises
    ------
    PolicyInputError
        If ``text`` is not a str, or not a compute capability.
    """
    require_str("the compute capability", text, error=PolicyInputError)
    raw = text.strip().lower()
    for prefix in ("sm_", "sm"):
        if raw.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    raw = raw.rstrip("af")  # sm_90a, sm_100f: arch-specific suffixes
    major_s, dot, minor_s = raw.partition(".")
    if not dot:  # "90" -> 9.0, "103" -> 10.3
        major_s, minor_s = raw[:-1], raw[-1:]
    if not (major_s.isdigit() and minor_s.isdigit() and major_s.isascii() and minor_s.isascii()):
        raise PolicyInputError(
            f"expected a compute capability like '9.0', '10.3' or 'sm90'; found {text!r}."
        )
    return int(major_s), int(minor_s)


def is_h20_device(device_name: str) -> bool:
    """Whether ``device_name`` names an H20 (an H200 does not count).

    Matches SGLang's test: the name contains ``H20`` but not ``H200``; case-insensitive.

    .. versionadded:: 0.2.0

    Raises
    ------
    PolicyInputError
        If ``device_name`` is not a str.
    """
    require_str("device_name", device_name, error=PolicyInputError)
    name = device_name.upper()
    return "H20" in name and "H200" not in name


@dataclass(frozen=True)
class Deployment:
    """What the fusion policy needs to know about one engine deployment.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    architecture
        ``architectures[0]`` of the model's ``config.json``.
    compute_capability
        ``(major, minor)`` of the GPU, e.g. ``(9, 0)``.
    device_name
        The GPU's name, e.g. ``"NVIDIA H20"``; empty when unknown.
    tp_size
        Tensor-parallel size.
    nnodes
        Number of nodes.
    dp_attention
        Whether DP attention is on.
    attn_cp_size
        Attention context-parallel size.
    moe_a2a_backend
        MoE all-to-all backend; ``"none"`` means none.
    deterministic
        Whether deterministic inference is on. Defaults to the process-wide switch,
        :func:`fi_compat.determinism.is_deterministic`, read when the description is
        made, so an engine that set determinism once cannot describe a deployment that
        forgets it.
    fusion_choice
        What the user said about fusion.

    Raises
    ------
    PolicyInputError
        If a size is below 1 or not an int, the capability is malformed, a string is
        empty, or ``dp_attention`` or ``deterministic`` is not a bool (``"false"`` would
        otherwise count as on).
    """

    architecture: str
    compute_capability: tuple[int, int]
    device_name: str = ""
    tp_size: int = 1
    nnodes: int = 1
    dp_attention: bool = False
    attn_cp_size: int = 1
    moe_a2a_backend: str = "none"
    deterministic: bool = field(default_factory=is_deterministic)
    fusion_choice: FusionChoice = FusionChoice.UNSET

    def __post_init__(self) -> None:
        require_str(
            "architecture",
            self.architecture,
            nonempty=True,
            detail="architectures[0] of the model's config.json",
            error=PolicyInputError,
        )
        cc = self.compute_capability
        if not (isinstance(cc, tuple) and len(cc) == 2):
            raise PolicyInputError(f"expected compute_capability (major, minor); found {cc!r}.")
        require_int("compute_capability major", cc[0], minimum=0, error=PolicyInputError)
        require_int("compute_capability minor", cc[1], minimum=0, error=PolicyInputError)
        require_str("device_name", self.device_name, error=PolicyInputError)
        require_int("tp_size", self.tp_size, minimum=1, error=PolicyInputError)
        require_int("nnodes", self.nnodes, minimum=1, error=PolicyInputError)
        require_int("attn_cp_size", self.attn_cp_size, minimum=1, error=PolicyInputError)
        require_bool("dp_attention", self.dp_attention, error=PolicyInputError)
        require_bool("deterministic", self.deterministic, error=PolicyInputError)
        require_str(
            "moe_a2a_backend",
            self.moe_a2a_backend,
            nonempty=True,
            detail="a MoE all-to-all backend name, or 'none'",
            error=PolicyInputError,
        )
        require_instance(
            "fusion_choice",
            self.fusion_choice,
            FusionChoice,
            "a FusionChoice",
            error=PolicyInputError,
            fix="pass a FusionChoice member",
        )

    @property
    def sm(self) -> str:
        """The compute capability as text, e.g. ``"9.0"``."""
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view of this deployment."""
        return {
            "architecture": self.architecture,
            "compute_capability": self.sm,
            "device_name": self.device_name,
            "tp_size": self.tp_size,
            "nnodes": self.nnodes,
            "dp_attention": self.dp_attention,
            "attn_cp_size": self.attn_cp_size,
            "moe_a2a_backend": self.moe_a2a_backend,
            "deterministic": self.deterministic,
            "fusion_choice": self.fusion_choice.value,
        }
