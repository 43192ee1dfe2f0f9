"""vLLM 0.33.0's allreduce-fusion decision, as a rule set of fi-compat's own.

Read from the ``vllm==0.33.0`` wheel (paths below are under ``vllm/``); fi-compat's code,
not vLLM's. vLLM decides in three places:

- ``config/vllm.py``: ``OPTIMIZATION_LEVEL_00`` .. ``_03`` give the default of
  ``pass_config.fuse_allreduce_rms`` (False at O0 and O1, ``enable_allreduce_rms_fusion``
  at O2 and O3), applied by ``VllmConfig._apply_optimization_level_defaults`` only where
  the user left it unset; O0 also leaves ``compilation_config.mode`` at ``NONE``, so no
  compiler pass runs at all.
- ``compilation/passes/fusion/allreduce_rms_fusion.py``, ``AllReduceFusionPass.__init__``:
  the pass disables itself at TP 1, when ``PassConfig.flashinfer_max_size``
  (``config/compilation.py``) has no size for the TP size on this GPU
  (``FI_ALLREDUCE_FUSION_MAX_SIZE_MB``), or when no workspace can be made.
- ``distributed/device_communicators/flashinfer_all_reduce.py``:
  ``_resolve_fi_ar_backend`` picks the backend from ``VLLM_FLASHINFER_ALLREDUCE_BACKEND``
  and ``get_fi_ar_workspace`` raises ``ValueError`` for ``trtllm`` across nodes.
"""

from __future__ import annotations

from fi_compat.policy._deployment import Deployment, FusionChoice, RuleEffect, RuleId
from fi_compat.policy._rules import FusionRule, FusionRuleSet

__all__ = ["RELEASE", "RULES", "SOURCES", "backend_for", "refusal_for"]

#: The vLLM release these rules follow.
RELEASE = "0.33.0"

FUSE_FLAG = "compilation_config.pass_config.fuse_allreduce_rms"
BACKEND_ENV = "VLLM_FLASHINFER_ALLREDUCE_BACKEND"

# compilation/passes/fusion/allreduce_rms_fusion.py `FI_ALLREDUCE_FUSION_MAX_SIZE_MB`:
# the TP sizes the pass has a workspace size for, per `DeviceCapability.to_int()`.
_MAX_SIZE_TP_SIZES: dict[int, frozenset[int]] = {
    90: frozenset({2, 4, 8}),
    100: frozenset({2, 4, 8, 16}),
    103: frozenset({2, 4, 8, 16}),
    107: frozenset({2, 4, 8}),
}
_BACKENDS = ("auto", "trtllm", "mnnvl")  # envs.py: env_with_choices


def _cc_int(d: Deployment) -> int:
    # platforms/interface.py `DeviceCapability.to_int`: major * 10 + minor.
    return d.compute_capability[0] * 10 + d.compute_capability[1]


def _default_gpu(d: Deployment) -> bool:
    # config/vllm.py `enable_allreduce_rms_fusion`:
    # `is_device_capability_family(100) or is_device_capability(90)`.
    return d.compute_capability[0] == 10 or d.compute_capability == (9, 0)


def _has_max_size(d: Deployment) -> bool:
    # config/compilation.py `PassConfig.flashinfer_max_size` is not None
    # (fi_allreduce_fusion_max_size_mb left unset).
    return d.tp_size in _MAX_SIZE_TP_SIZES.get(_cc_int(d), frozenset())


def _env_backend(d: Deployment) -> str:
    return d.fusion_backend if d.fusion_backend is not None else "auto"


def _pass_configured(d: Deployment) -> bool:
    """``pass_config.fuse_allreduce_rms`` after the defaults, with fi-compat's switches."""
    if d.deterministic or d.fusion_choice is FusionChoice.ENFORCE_DISABLE:
        return False
    if d.optimization_level == 0:
        return False
    if d.fusion_choice is FusionChoice.ENABLE:
        return True
    if d.fusion_choice is FusionChoice.DISABLE or d.optimization_level < 2:
        return False
    return d.tp_size > 1 and _default_gpu(d)


def refusal_for(deployment: Deployment) -> str | None:
    """vLLM 0.33.0's start-up error for ``deployment``, or None when it starts.

    Reached only when the fusion pass is configured and gets as far as its workspace
    (TP > 1 with a workspace size for the GPU): an invalid
    ``VLLM_FLASHINFER_ALLREDUCE_BACKEND`` (``envs.py``, ``env_with_choices``) and
    ``trtllm`` across nodes (``get_fi_ar_workspace``) raise ``ValueError``.

    .. versionadded:: 0.3.0
    """
    d = deployment
    if not (_pass_configured(d) and d.tp_size > 1 and _has_max_size(d)):
        return None
    backend = _env_backend(d)
    if backend not in _BACKENDS:
        return f"Invalid value '{backend}' for {BACKEND_ENV}. Valid options: {list(_BACKENDS)}."
    if backend == "trtllm" and d.nnodes > 1:
        return (
            "Flashinfer allreduce is not supported for multi-node allreduce with "
            "'trtllm' backend. Please use 'mnnvl' backend instead."
        )
    return None


def backend_for(deployment: Deployment) -> str | None:
    """The backend vLLM 0.33.0 asks for (``_resolve_fi_ar_backend``), or None for none.

    ``VLLM_FLASHINFER_ALLREDUCE_BACKEND`` (:attr:`Deployment.fusion_backend`) when it is
    not ``auto``; otherwise ``mnnvl`` on one node (vLLM falls back to ``trtllm`` at run
    time when the MNNVL workspace cannot be made, e.g. without NVSwitch multicast), and
    ``mnnvl`` across nodes on SM 10.0 or newer.

    .. versionadded:: 0.3.0
    """
    backend = _env_backend(deployment)
    if backend != "auto":
        return backend
    if deployment.nnodes == 1 or deployment.compute_capability >= (10, 0):
        return "mnnvl"
    return None


RULES = FusionRuleSet(
    name="vLLM 0.33.0",
    enable_flag=f"{FUSE_FLAG}=True",
    backend=backend_for,
    rules=(
        # fi-compat's API only: vLLM has no enforce-disable flag.
        FusionRule(
            rule_id=RuleId.ENFORCE_DISABLE,
            effect=RuleEffect.VETO,
            applies=lambda d: d.fusion_choice is FusionChoice.ENFORCE_DISABLE,
            explain=lambda d: "fusion is forcibly disabled",
            priority=0,
        ),
        # fi-compat's determinism switch. vLLM's own VLLM_BATCH_INVARIANT only changes
        # the default (config/vllm.py `enable_allreduce_rms_fusion`) and keeps an
        # explicit fuse_allreduce_rms=True; fi-compat does not.
        FusionRule(
            rule_id=RuleId.DETERMINISTIC_INFERENCE,
            effect=RuleEffect.VETO,
            applies=lambda d: d.deterministic,
            explain=lambda d: (
                "deterministic inference is on (VLLM_BATCH_INVARIANT=1) and the fused "
                "all-reduce + RMSNorm path is not batch-invariant; vLLM 0.33.0 itself "
                f"would keep an explicit {FUSE_FLAG}=True"
            ),
            priority=1,
        ),
        # envs.py `env_with_choices`; distributed/device_communicators/
        # flashinfer_all_reduce.py `get_fi_ar_workspace` raises ValueError.
        FusionRule(
            rule_id=RuleId.BACKEND_REFUSED,
            effect=RuleEffect.VETO,
            applies=lambda d: refusal_for(d) is not None,
            explain=lambda d: f"vLLM 0.33.0 refuses to start: {refusal_for(d)}",
            priority=2,
            refuses=True,
        ),
        # config/vllm.py: O0 leaves compilation_config.mode NONE, so no pass runs.
        FusionRule(
            rule_id=RuleId.NO_COMPILATION,
            effect=RuleEffect.VETO,
            applies=lambda d: d.optimization_level == 0,
            explain=lambda d: (
                "optimization level O0 compiles nothing (compilation mode NONE), so the "
                "fusion pass never runs"
            ),
            priority=3,
        ),
        # allreduce_rms_fusion.py `AllReduceFusionPass.__init__`: disabled for TP <= 1.
        FusionRule(
            rule_id=RuleId.TP_SIZE_ONE,
            effect=RuleEffect.VETO,
            applies=lambda d: d.tp_size <= 1,
            explain=lambda d: "tensor-parallel size is 1, so there is no allreduce to fuse",
            priority=4,
        ),
        # config/compilation.py `PassConfig.flashinfer_max_size` returns None, and
        # `AllReduceFusionPass.__init__` disables itself.
        FusionRule(
            rule_id=RuleId.UNSUPPORTED_WORLD_SIZE,
            effect=RuleEffect.VETO,
            applies=lambda d: d.tp_size > 1 and not _has_max_size(d),
            explain=lambda d: (
                f"vLLM's fusion pass has no workspace size for TP {d.tp_size} on SM {d.sm} "
                "(FI_ALLREDUCE_FUSION_MAX_SIZE_MB), so it disables itself"
            ),
            priority=5,
        ),
        # flashinfer_all_reduce.py `_resolve_fi_ar_backend`: `auto` across nodes below
        # SM 10.0 finds no backend; the workspace is None and the pass disables itself.
        FusionRule(
            rule_id=RuleId.MULTI_NODE,
            effect=RuleEffect.VETO,
            applies=lambda d: (
                d.nnodes > 1 and _env_backend(d) == "auto" and d.compute_capability < (10, 0)
            ),
            explain=lambda d: (
                f"the TP group spans {d.nnodes} nodes, and vLLM's automatic backend needs "
                "an MNNVL-capable Blackwell GPU (SM 10.0 or newer) there"
            ),
            priority=6,
        ),
        FusionRule(
            rule_id=RuleId.USER_DISABLE,
            effect=RuleEffect.USER_DISABLE,
            applies=lambda d: d.fusion_choice is FusionChoice.DISABLE,
            explain=lambda d: f"fusion is disabled by the user ({FUSE_FLAG}=False)",
        ),
        FusionRule(
            rule_id=RuleId.USER_ENABLE,
            effect=RuleEffect.USER_ENABLE,
            applies=lambda d: d.fusion_choice is FusionChoice.ENABLE,
            explain=lambda d: f"fusion is enabled by the user ({FUSE_FLAG}=True)",
        ),
        # config/vllm.py `OPTIMIZATION_LEVEL_01`: fuse_allreduce_rms defaults to False.
        FusionRule(
            rule_id=RuleId.OPTIMIZATION_LEVEL,
            effect=RuleEffect.BLOCK_AUTO_ENABLE,
            applies=lambda d: d.optimization_level < 2,
            explain=lambda d: (
                f"at optimization level O{d.optimization_level} {FUSE_FLAG} defaults to False"
            ),
            priority=0,
        ),
        # config/vllm.py `enable_allreduce_rms_fusion` (the O2/O3 default).
        FusionRule(
            rule_id=RuleId.UNSUPPORTED_GPU,
            effect=RuleEffect.BLOCK_AUTO_ENABLE,
            applies=lambda d: not _default_gpu(d),
            explain=lambda d: (
                f"SM {d.sm} is neither SM 10.x nor exactly 9.0, so {FUSE_FLAG} defaults to False"
            ),
            priority=1,
        ),
    ),
)
"""vLLM 0.33.0's fusion decision as fi-compat rules; pass it to :func:`decide_fusion`.
Each rule's source is cited beside it in ``fi_compat/policy/_vllm.py``; the fusion
policy guide lists them. ``fusion_choice`` is ``pass_config.fuse_allreduce_rms`` (ENABLE
True, DISABLE False, UNSET the optimization level's default), ``optimization_level``
vLLM's ``-O``, ``fusion_backend`` ``VLLM_FLASHINFER_ALLREDUCE_BACKEND`` and
``deterministic`` ``VLLM_BATCH_INVARIANT``. Decisions name the backend vLLM asks for.
One difference is on purpose: under fi-compat's determinism switch fusion is off even
where vLLM's batch-invariant mode keeps an explicit ``fuse_allreduce_rms=True``. Not
modelled: ROCm (AITER), a user-set ``fi_allreduce_fusion_max_size_mb``, an explicit
``compilation_config.mode``, FlashInfer being absent, and workspace creation failing at
run time.

.. versionadded:: 0.3.0
"""

# The vLLM 0.33.0 code each rule of RULES follows (paths under `vllm/`), and
# the code behind an auto-enabled decision: what the migration guide's generated table
# cites (tools/policy_cases.py).
_DEFAULT = "config/vllm.py `enable_allreduce_rms_fusion`"
_PASS = "compilation/passes/fusion/allreduce_rms_fusion.py `AllReduceFusionPass.__init__`"
_WORKSPACE = "distributed/device_communicators/flashinfer_all_reduce.py"
_USER_SET = "config/vllm.py `_apply_optimization_level_defaults` keeps a value the user set"
SOURCES: dict[RuleId, str] = {
    RuleId.ENFORCE_DISABLE: "fi-compat's own: vLLM has no such flag",
    RuleId.DETERMINISTIC_INFERENCE: (
        f"fi-compat's determinism switch, where vLLM's {_DEFAULT} keeps an explicit "
        f"`{FUSE_FLAG}=True`"
    ),
    RuleId.BACKEND_REFUSED: f"envs.py `env_with_choices`, {_WORKSPACE} `get_fi_ar_workspace`",
    RuleId.NO_COMPILATION: "config/vllm.py `OPTIMIZATION_LEVEL_00`",
    RuleId.TP_SIZE_ONE: _PASS,
    RuleId.UNSUPPORTED_WORLD_SIZE: "config/compilation.py `PassConfig.flashinfer_max_size`",
    RuleId.MULTI_NODE: f"{_WORKSPACE} `_resolve_fi_ar_backend`",
    RuleId.USER_DISABLE: _USER_SET,
    RuleId.USER_ENABLE: _USER_SET,
    RuleId.OPTIMIZATION_LEVEL: "config/vllm.py `OPTIMIZATION_LEVEL_01`",
    RuleId.UNSUPPORTED_GPU: _DEFAULT,
    RuleId.AUTO_ENABLE: _DEFAULT,
}
