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

from fi_compat._arguments import (
    require_bool,
    require_choice,
    require_instance,
    require_int,
    require_str,
)
from fi_compat.determinism import is_deterministic
from fi_compat.errors import PolicyInputError

__all__ = [
    "FUSION_ARCHITECTURES",
    "FUSION_BACKENDS",
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

FUSION_BACKENDS: frozenset[str] = frozenset({"auto", "trtllm", "mnnvl", "cutedsl"})
"""Backend names :attr:`Deployment.fusion_backend` takes: SGLang 0.5.23's choices of
``--flashinfer-allreduce-fusion-backend``. vLLM 0.33.0's
``VLLM_FLASHINFER_ALLREDUCE_BACKEND`` takes the first three; its rule set refuses
``cutedsl``.

.. versionadded:: 0.3.0
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
    BACKEND_REFUSED = "backend-refused"
    """The engine refuses the chosen backend at start-up (engine rule sets only). New in 0.3.0."""
    MIMO_CUTEDSL = "mimo-cutedsl"
    """A condition of SGLang's MiMo CuTe DSL auto-enable does not hold. New in 0.3.0."""
    UNSUPPORTED_WORLD_SIZE = "unsupported-world-size"
    """vLLM's fusion pass has no workspace size for this TP size on this GPU. New in 0.3.0."""
    NO_COMPILATION = "no-compilation"
    """vLLM at optimization level O0 compiles nothing, so its fusion pass never runs.
    New in 0.3.0."""
    OPTIMIZATION_LEVEL = "optimization-level"
    """vLLM's optimization level leaves fusion off by default (O0, O1). New in 0.3.0."""
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
        Whether deterministic inference is on; defaults to
        :func:`fi_compat.determinism.is_deterministic`, read when the description is made.
    fusion_choice
        What the user said about fusion.
    fusion_backend
        The FlashInfer fusion backend the user named, or None: SGLang's
        ``--flashinfer-allreduce-fusion-backend`` (naming one also asks for fusion),
        vLLM's ``VLLM_FLASHINFER_ALLREDUCE_BACKEND`` (it only picks the backend). One
        of :data:`FUSION_BACKENDS`. :data:`DEFAULT_RULES` do not read it. New in 0.3.0.
    optimization_level
        vLLM's optimization level, 0 to 3 (``-O``; vLLM's default is 2). Only vLLM's
        rule set reads it. New in 0.3.0.
    dtype
        The model's dtype as SGLang spells it (``bfloat16``, ``float16``, ...). Only
        SGLang's MiMo auto-enable reads it. New in 0.3.0.
    encoder_only
        SGLang's ``--encoder-only``. Only SGLang's MiMo auto-enable reads it. New in 0.3.0.
    enable_pdmux
        SGLang's ``--enable-pdmux``. Only SGLang's MiMo auto-enable reads it. New in
        0.3.0.

    Raises
    ------
    PolicyInputError
        If a size is below 1 or not an int, the capability is malformed, a string is
        empty, a switch (``dp_attention``, ``deterministic``, ``encoder_only``,
        ``enable_pdmux``) is not a bool (``"false"`` would otherwise count as on),
        ``fusion_backend`` is not None or one of :data:`FUSION_BACKENDS`, or
        ``optimization_level`` is not an int from 0 to 3.
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
    fusion_backend: str | None = None
    optimization_level: int = 2
    dtype: str = "bfloat16"
    encoder_only: bool = False
    enable_pdmux: bool = False

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
        if self.fusion_backend is not None:
            require_choice(
                "fusion_backend",
                self.fusion_backend,
                tuple(sorted(FUSION_BACKENDS)),
                error=PolicyInputError,
                fix="pass None or a backend name",
            )
        require_int(
            "optimization_level",
            self.optimization_level,
            minimum=0,
            maximum=3,
            error=PolicyInputError,
        )
        require_str(
            "dtype",
            self.dtype,
            nonempty=True,
            detail="the model's dtype, e.g. 'bfloat16'",
            error=PolicyInputError,
        )
        require_bool("encoder_only", self.encoder_only, error=PolicyInputError)
        require_bool("enable_pdmux", self.enable_pdmux, error=PolicyInputError)

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
            "fusion_backend": self.fusion_backend,
            "optimization_level": self.optimization_level,
            "dtype": self.dtype,
            "encoder_only": self.encoder_only,
            "enable_pdmux": self.enable_pdmux,
        }
