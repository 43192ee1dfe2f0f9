"""SGLang 0.5.23's allreduce-fusion decision, as a rule set of fi-compat's own.

Read from the ``sglang==0.5.23`` wheel (paths below are under ``python/sglang/srt/``);
fi-compat's code, not SGLang's. SGLang decides in four places:

- ``arg_groups/serving_hook.py``, ``_handle_deprecated_args``: the deprecated
  ``--enable-flashinfer-allreduce-fusion`` becomes ``flashinfer_allreduce_fusion_backend =
  "auto"`` when no backend is given.
- ``arg_groups/overrides.py``: ``_flashinfer_allreduce_fusion_auto_enable`` (sets the
  backend when none is given), ``_enforce_disable_allreduce_fusion`` and
  ``_deterministic_allreduce_fusion_disable`` (clear it).
- ``layers/flashinfer_comm_fusion.py``: ``_resolve_backend`` turns the backend into the one
  that runs, or raises ``ValueError``; it is reached from ``ensure_workspace_initialized``
  (skipped for a fusion group of one rank) and, for ``cutedsl``, from
  ``_pre_initialize_flashinfer_allreduce_workspace`` in
  ``model_executor/runner/base_runner.py``.
- ``layers/layer_boundary/residual/add_norm.py``, ``flashinfer_ar_fusion_applies``: the
  per-layer gate (SM90/SM100, no DP attention).
"""

from __future__ import annotations

from fi_compat.policy._deployment import (
    FUSION_ARCHITECTURES,
    Deployment,
    FusionChoice,
    RuleEffect,
    RuleId,
)
from fi_compat.policy._rules import FusionRule, FusionRuleSet

__all__ = ["ARCHITECTURES", "RELEASE", "RULES", "SOURCES", "backend_for", "refusal_for"]

#: The SGLang release these rules follow.
RELEASE = "0.5.23"

BACKEND_FLAG = "--flashinfer-allreduce-fusion-backend"
ENFORCE_FLAG = "--enforce-disable-flashinfer-allreduce-fusion"

# arg_groups/overrides.py: `_FLASHINFER_ALLREDUCE_FUSION_ARCHS` in 0.5.23.
ARCHITECTURES: frozenset[str] = FUSION_ARCHITECTURES
"""SGLang 0.5.23's ``_FLASHINFER_ALLREDUCE_FUSION_ARCHS`` (``arg_groups/overrides.py``).
The same list as :data:`FUSION_ARCHITECTURES`, which already follows it (one home). The
MiMo architectures are auto-enabled apart from it, with the ``cutedsl`` backend.

.. versionadded:: 0.3.0
"""

_MIMO_ARCHITECTURES = frozenset({"MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM"})
# layers/flashinfer_mnnvl_cutedsl.py: `SUPPORTED_TP_SIZES`.
_CUTEDSL_TP_SIZES = (2, 4, 8, 16)


def _is_sm90(d: Deployment) -> bool:
    # utils/common.py `is_sm90_supported`: major 9 (and CUDA >= 12.3, not modelled).
    return d.compute_capability[0] == 9


def _is_sm100(d: Deployment) -> bool:
    # utils/common.py `is_sm100_supported`: major 10 (and CUDA >= 12.8, not modelled).
    return d.compute_capability[0] == 10


def _is_mimo(d: Deployment) -> bool:
    return d.architecture in _MIMO_ARCHITECTURES


def _requested(d: Deployment) -> str | None:
    """The backend the user's flags set, after `_handle_deprecated_args`."""
    if d.fusion_choice is FusionChoice.DISABLE:
        return None  # fi-compat's own "off"; SGLang has no such flag
    if d.fusion_backend is not None:
        return d.fusion_backend
    if d.fusion_choice is FusionChoice.ENABLE:
        return "auto"  # the deprecated --enable-flashinfer-allreduce-fusion
    return None


def _auto_enable_conditions_fail(d: Deployment) -> list[str]:
    """The conditions of `_flashinfer_allreduce_fusion_auto_enable` that fail."""
    failed: list[str] = []
    if d.architecture not in ARCHITECTURES and not _is_mimo(d):
        failed.append("architecture")
    if _is_mimo(d) and not (
        _is_sm100(d)
        and d.dtype == "bfloat16"
        and d.tp_size in _CUTEDSL_TP_SIZES
        and d.attn_cp_size == 1
        and not d.encoder_only
        and not d.enable_pdmux
    ):
        failed.append("mimo")
    if not (_is_sm90(d) or _is_sm100(d)):
        failed.append("gpu")
    if d.tp_size <= 1:
        failed.append("tp")
    if d.dp_attention:
        failed.append("dp-attention")
    if not (d.nnodes == 1 or _is_sm100(d)):
        failed.append("nodes")
    if d.moe_a2a_backend != "none":
        failed.append("a2a")
    return failed


def _configured(d: Deployment) -> str | None:
    """``flashinfer_allreduce_fusion_backend`` once SGLang's server-args passes have run."""
    if d.fusion_choice is FusionChoice.ENFORCE_DISABLE or d.deterministic:
        return None
    requested = _requested(d)
    if requested is not None:
        return requested
    if _auto_enable_conditions_fail(d):
        return None
    return "cutedsl" if _is_mimo(d) else "auto"


def _resolve(backend: str, d: Deployment) -> tuple[str | None, str | None]:
    """(resolved backend, None) or (None, SGLang's ValueError text): `_resolve_backend`."""
    multi_node = d.nnodes > 1
    if not (_is_sm90(d) or _is_sm100(d)):
        return None, "FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs."
    if backend == "cutedsl":
        if not _is_sm100(d):
            return None, (
                "FlashInfer allreduce fusion cutedsl backend requires a Blackwell system."
            )
        return backend, None
    if backend == "auto":
        if _is_sm100(d):
            return "mnnvl", None
        if multi_node:
            return None, (
                "FlashInfer allreduce fusion does not support multi-node on non-Blackwell systems."
            )
        return "trtllm", None
    if backend == "trtllm" and multi_node:
        return None, "FlashInfer allreduce fusion trtllm backend supports single-node only."
    if backend == "mnnvl" and not (_is_sm100(d) or (_is_sm90(d) and not multi_node)):
        return None, (
            "FlashInfer allreduce fusion mnnvl backend requires a Blackwell system, "
            "or SM90 single-node."
        )
    return backend, None


def refusal_for(deployment: Deployment) -> str | None:
    """SGLang 0.5.23's start-up error for ``deployment``, or None when it starts.

    The backend SGLang configures (user flags, auto-enable, enforce-disable and the
    deterministic pass applied) is resolved by ``_resolve_backend``
    (``layers/flashinfer_comm_fusion.py``) when a workspace is built: for ``cutedsl``
    always (``_pre_initialize_flashinfer_allreduce_workspace``), otherwise only for a
    fusion group wider than one rank (``ensure_workspace_initialized``).

    .. versionadded:: 0.3.0
    """
    backend = _configured(deployment)
    if backend is None or (backend != "cutedsl" and deployment.tp_size <= 1):
        return None
    return _resolve(backend, deployment)[1]


def backend_for(deployment: Deployment) -> str | None:
    """The backend SGLang 0.5.23 runs for ``deployment``, or None when none is configured.

    ``auto`` resolves as ``_resolve_backend`` does: ``mnnvl`` on SM100-class GPUs,
    ``trtllm`` on SM90 (single node). The MiMo auto-enable picks ``cutedsl``.

    .. versionadded:: 0.3.0
    """
    backend = _configured(deployment)
    if backend is None:
        return None
    return _resolve(backend, deployment)[0]


def _requested_flag(d: Deployment) -> str:
    if d.fusion_backend is not None:
        return f"{BACKEND_FLAG} {d.fusion_backend}"
    return "--enable-flashinfer-allreduce-fusion (deprecated: " + BACKEND_FLAG + " auto)"


def _mimo_failure_list(d: Deployment) -> list[str]:
    """The MiMo CuTe DSL conditions other than ``attn_cp_size == 1`` that fail."""
    failed = []
    if not _is_sm100(d):
        failed.append(f"SM {d.sm} is not SM100 class")
    if d.dtype != "bfloat16":
        failed.append(f"dtype is {d.dtype}, not bfloat16")
    if d.tp_size not in _CUTEDSL_TP_SIZES:
        failed.append(f"TP {d.tp_size} is not one of {_CUTEDSL_TP_SIZES}")
    if d.encoder_only:
        failed.append("--encoder-only is set")
    if d.enable_pdmux:
        failed.append("--enable-pdmux is set")
    return failed


_SOURCE_AUTO = "arg_groups/overrides.py `_flashinfer_allreduce_fusion_auto_enable`"

RULES = FusionRuleSet(
    name="SGLang 0.5.23",
    enable_flag=BACKEND_FLAG,
    backend=backend_for,
    rules=(
        # arg_groups/overrides.py `_enforce_disable_allreduce_fusion`.
        FusionRule(
            rule_id=RuleId.ENFORCE_DISABLE,
            effect=RuleEffect.VETO,
            applies=lambda d: d.fusion_choice is FusionChoice.ENFORCE_DISABLE,
            explain=lambda d: f"fusion is forcibly disabled by {ENFORCE_FLAG}",
            priority=0,
        ),
        # arg_groups/overrides.py `_deterministic_allreduce_fusion_disable` (run from
        # `handle_deterministic_inference`, attention_hook.py). Here it wins by
        # precedence, not by running last.
        FusionRule(
            rule_id=RuleId.DETERMINISTIC_INFERENCE,
            effect=RuleEffect.VETO,
            applies=lambda d: d.deterministic,
            explain=lambda d: "deterministic inference is enabled",
            priority=1,
        ),
        # layers/flashinfer_comm_fusion.py `_resolve_backend` raises ValueError.
        FusionRule(
            rule_id=RuleId.BACKEND_REFUSED,
            effect=RuleEffect.VETO,
            applies=lambda d: refusal_for(d) is not None,
            explain=lambda d: (
                f"SGLang 0.5.23 refuses to start: {refusal_for(d)} "
                f"(_resolve_backend in layers/flashinfer_comm_fusion.py, for "
                f"{_requested_flag(d) if _requested(d) else 'the auto-enabled backend'})"
            ),
            priority=2,
            refuses=True,
        ),
        # layers/flashinfer_comm_fusion.py `ensure_workspace_initialized`: no workspace
        # for a group of one rank; the auto-enable requires `tp_size > 1` too.
        FusionRule(
            rule_id=RuleId.TP_SIZE_ONE,
            effect=RuleEffect.VETO,
            applies=lambda d: d.tp_size <= 1,
            explain=lambda d: "tensor-parallel size is 1, so there is no allreduce to fuse",
            priority=3,
        ),
        # layers/layer_boundary/residual/add_norm.py `flashinfer_ar_fusion_applies`
        # (`_is_sm90_supported or _is_sm100_supported`). An explicit backend there is
        # refused first (BACKEND_REFUSED); this only names why auto-enable stays off.
        FusionRule(
            rule_id=RuleId.UNSUPPORTED_GPU,
            effect=RuleEffect.VETO,
            applies=lambda d: not (_is_sm90(d) or _is_sm100(d)),
            explain=lambda d: f"compute capability {d.sm} is neither SM90 nor SM10X",
            priority=4,
        ),
        # layers/layer_boundary/residual/add_norm.py `flashinfer_ar_fusion_applies`
        # (`not is_dp_attention_enabled()`); the workspace is still built.
        FusionRule(
            rule_id=RuleId.DP_ATTENTION,
            effect=RuleEffect.VETO,
            applies=lambda d: d.dp_attention,
            explain=lambda d: (
                "DP attention is on (--attn-dp-size > 1), and the per-layer gate "
                "never fuses under it"
            ),
            priority=5,
        ),
        # fi-compat's API only: SGLang has no "off" flag besides enforce-disable.
        FusionRule(
            rule_id=RuleId.USER_DISABLE,
            effect=RuleEffect.USER_DISABLE,
            applies=lambda d: d.fusion_choice is FusionChoice.DISABLE,
            explain=lambda d: "fusion is disabled by the user",
        ),
        # arg_groups/overrides.py `_flashinfer_allreduce_fusion_auto_enable` only runs
        # while `flashinfer_allreduce_fusion_backend is None`: a given backend stays.
        FusionRule(
            rule_id=RuleId.USER_ENABLE,
            effect=RuleEffect.USER_ENABLE,
            applies=lambda d: _requested(d) is not None,
            explain=lambda d: f"fusion is enabled by the user ({_requested_flag(d)})",
        ),
        # The conditions of `_flashinfer_allreduce_fusion_auto_enable` (overrides.py).
        FusionRule(
            rule_id=RuleId.ARCHITECTURE_NOT_ALLOWED,
            effect=RuleEffect.BLOCK_AUTO_ENABLE,
            applies=lambda d: d.architecture not in ARCHITECTURES and not _is_mimo(d),
            explain=lambda d: (
                f"{d.architecture} is neither on SGLang 0.5.23's "
                "_FLASHINFER_ALLREDUCE_FUSION_ARCHS nor a MiMo V2 model"
            ),
            priority=0,
        ),
        FusionRule(
            rule_id=RuleId.MULTI_NODE,
            effect=RuleEffect.BLOCK_AUTO_ENABLE,
            applies=lambda d: d.nnodes > 1 and not _is_sm100(d),
            explain=lambda d: (
                f"the deployment spans {d.nnodes} nodes, and SGLang 0.5.23 auto-enables "
                "across nodes only on SM100-class GPUs"
            ),
            priority=1,
        ),
        FusionRule(
            rule_id=RuleId.MOE_A2A_BACKEND,
            effect=RuleEffect.BLOCK_AUTO_ENABLE,
            applies=lambda d: d.moe_a2a_backend != "none",
            explain=lambda d: f"MoE all-to-all backend {d.moe_a2a_backend!r} is in use",
            priority=2,
        ),
        FusionRule(
            rule_id=RuleId.ATTENTION_CONTEXT_PARALLEL,
            effect=RuleEffect.BLOCK_AUTO_ENABLE,
            applies=lambda d: _is_mimo(d) and d.attn_cp_size > 1,
            explain=lambda d: (
                f"{d.architecture} auto-enables the cutedsl backend only without "
                f"attention context parallelism (--attn-cp-size is {d.attn_cp_size})"
            ),
            priority=3,
        ),
        FusionRule(
            rule_id=RuleId.MIMO_CUTEDSL,
            effect=RuleEffect.BLOCK_AUTO_ENABLE,
            applies=lambda d: _is_mimo(d) and bool(_mimo_failure_list(d)),
            explain=lambda d: (
                f"{d.architecture} auto-enables the cutedsl backend only on SM100 in "
                f"bfloat16 at TP 2, 4, 8 or 16: {'; '.join(_mimo_failure_list(d))}"
            ),
            priority=4,
        ),
    ),
)
"""SGLang 0.5.23's fusion decision as fi-compat rules; pass it to
:func:`decide_fusion`. Each rule's source is cited beside it in
``fi_compat/policy/_sglang.py``; the fusion policy guide lists them. Decisions name the
backend SGLang runs (``auto`` resolved). Where SGLang's ``_resolve_backend`` raises at
start-up, :func:`decide_fusion` raises :class:`~fi_compat.errors.DeploymentRefusedError`
with SGLang's reason. Deterministic inference and enforce-disable win whatever the order
of the rules. Not modelled: the DeepSeek V4.1 TP4 custom all-reduce preference, the
model's own CuTe DSL services (``prepare_cutedsl_fusion``), FlashInfer being absent, and
the CUDA toolkit versions behind ``is_sm90_supported`` / ``is_sm100_supported``.

.. versionadded:: 0.3.0
"""

# The SGLang 0.5.23 code each rule of RULES follows (paths under
# `python/sglang/srt/`), and the code behind an auto-enabled decision: what the migration
# guide's generated table cites (tools/policy_cases.py).
_OVERRIDES = "arg_groups/overrides.py"
_ADD_NORM = "layers/layer_boundary/residual/add_norm.py `flashinfer_ar_fusion_applies`"
SOURCES: dict[RuleId, str] = {
    RuleId.ENFORCE_DISABLE: f"{_OVERRIDES} `_enforce_disable_allreduce_fusion`",
    RuleId.DETERMINISTIC_INFERENCE: f"{_OVERRIDES} `_deterministic_allreduce_fusion_disable`",
    RuleId.BACKEND_REFUSED: "layers/flashinfer_comm_fusion.py `_resolve_backend`",
    RuleId.TP_SIZE_ONE: "layers/flashinfer_comm_fusion.py `ensure_workspace_initialized`",
    RuleId.UNSUPPORTED_GPU: _ADD_NORM,
    RuleId.DP_ATTENTION: _ADD_NORM,
    RuleId.USER_DISABLE: "fi-compat's own: SGLang has no such flag",
    RuleId.USER_ENABLE: f"{_SOURCE_AUTO} keeps a given backend",
    RuleId.ARCHITECTURE_NOT_ALLOWED: _SOURCE_AUTO,
    RuleId.MULTI_NODE: _SOURCE_AUTO,
    RuleId.MOE_A2A_BACKEND: _SOURCE_AUTO,
    RuleId.ATTENTION_CONTEXT_PARALLEL: _SOURCE_AUTO,
    RuleId.MIMO_CUTEDSL: _SOURCE_AUTO,
    RuleId.AUTO_ENABLE: _SOURCE_AUTO,
}
