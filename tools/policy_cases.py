"""The deployments on which the migration guides compare an engine's rules with the defaults.

Per engine, a list of representative deployments (:class:`Case`), each decided with the
engine's rule set and with ``DEFAULT_RULES``. The tables in ``docs/migration/sglang.md``
and ``docs/migration/vllm.md`` are generated from these decisions by
:mod:`tools.doc_tables` (between ``<!-- policy-table:<engine>:start -->`` /
``<!-- policy-table:<engine>:end -->`` markers); nothing in their cells is typed by hand.

Every case sets ``deterministic`` itself: :class:`Deployment` would otherwise read the
process-wide switch when this module is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fi_compat.policy import (
    DEFAULT_RULES,
    Deployment,
    FusionChoice,
    FusionRule,
    FusionRuleSet,
    RuleId,
    engine_rules,
)
from fi_compat.policy._rules import ENABLE_FLAG

__all__ = ["ENGINES", "Case", "Column", "EngineCases"]


@dataclass(frozen=True)
class Case:
    """One row: a label (Markdown) that says what is deployed, and the deployment."""

    label: str
    deployment: Deployment


@dataclass(frozen=True)
class Column:
    """One rule set a table decides every case with, and how a user names it.

    ``sources`` cite, per deciding rule (and :attr:`RuleId.AUTO_ENABLE`), the code the rule
    follows; empty for :data:`DEFAULT_RULES`, whose cells cite what the reason cites.
    """

    constant: str
    rules: FusionRuleSet | tuple[FusionRule, ...]
    sources: Mapping[RuleId, str]

    @property
    def title(self) -> str:
        """The column's header: the rule set's name in fi-compat, and what it models."""
        named = f" ({self.rules.name})" if isinstance(self.rules, FusionRuleSet) else ""
        return f"`{self.constant}`{named}"

    @property
    def enable_flag(self) -> str:
        """The flag the decisions' warnings name, as :func:`decide_fusion` picks it."""
        return self.rules.enable_flag if isinstance(self.rules, FusionRuleSet) else ENABLE_FLAG


@dataclass(frozen=True)
class EngineCases:
    """An engine's table: its marker name, the two rule sets compared, and the cases."""

    engine: str
    columns: tuple[Column, Column]
    cases: tuple[Case, ...]


DEEPSEEK = "DeepseekV3ForCausalLM"
LLAMA = "LlamaForCausalLM"
MIMO = "MiMoV2FlashForCausalLM"
HOPPER, BLACKWELL, AMPERE, RTX_BLACKWELL = (9, 0), (10, 0), (8, 0), (12, 0)
ENABLE = FusionChoice.ENABLE
FUSE = "`fuse_allreduce_rms=True`"


def _case(
    label: str,
    compute_capability: tuple[int, int] = HOPPER,
    *,
    architecture: str = DEEPSEEK,
    tp_size: int = 8,
    deterministic: bool = False,
    **fields: Any,
) -> Case:
    deployment = Deployment(
        architecture=architecture,
        compute_capability=compute_capability,
        tp_size=tp_size,
        deterministic=deterministic,
        **fields,
    )
    return Case(label, deployment)


def _explicit(
    label: str,
    backend: str,
    compute_capability: tuple[int, int] = HOPPER,
    **fields: Any,
) -> Case:
    """SGLang's ``--flashinfer-allreduce-fusion-backend BACKEND``: an explicit enable too,
    so that :data:`DEFAULT_RULES`, which do not read the backend, see the user's choice."""
    return _case(
        f"{label}, explicit `{backend}`",
        compute_capability,
        fusion_backend=backend,
        fusion_choice=ENABLE,
        **fields,
    )


_DEFAULT = Column("DEFAULT_RULES", DEFAULT_RULES, {})

_SGLANG = EngineCases(
    engine="sglang",
    columns=(
        Column(
            'engine_rules("sglang").rules',
            engine_rules("sglang").rules,
            engine_rules("sglang").sources,
        ),
        _DEFAULT,
    ),
    cases=(
        _case("H100, DeepSeek V3, TP 8"),
        _case("B200, DeepSeek V3, TP 8", BLACKWELL),
        _case("GB200, 2 nodes, DeepSeek V3, TP 8", BLACKWELL, nnodes=2),
        _case("H100, 2 nodes, DeepSeek V3, TP 8", nnodes=2),
        _case("H20, DeepSeek V3, TP 8", device_name="NVIDIA H20"),
        _case("MiMoV2 on SM100, TP 4", BLACKWELL, architecture=MIMO, tp_size=4),
        _case("MiMoV2 on Hopper, TP 4", architecture=MIMO, tp_size=4),
        _case(
            "MiMoV2 on SM100, TP 4, attention CP 2",
            BLACKWELL,
            architecture=MIMO,
            tp_size=4,
            attn_cp_size=2,
        ),
        _case("H100, DeepSeek V3, TP 8, attention CP 2", attn_cp_size=2),
        _case(
            "H100, Llama, TP 8, the deprecated `--enable-flashinfer-allreduce-fusion`",
            architecture=LLAMA,
            fusion_choice=ENABLE,
        ),
        _explicit("A100 (SM 8.0), DeepSeek V3, TP 8", "trtllm", AMPERE),
        _explicit("H100, DeepSeek V3, TP 8", "cutedsl"),
        _explicit("H100, 2 nodes, DeepSeek V3, TP 8", "auto", nnodes=2),
        _explicit("H100, 2 nodes, DeepSeek V3, TP 8", "mnnvl", nnodes=2),
        _explicit("GB200, 2 nodes, DeepSeek V3, TP 8", "trtllm", BLACKWELL, nnodes=2),
        _case(
            "H100, 2 nodes, DeepSeek V3, TP 8, explicit `trtllm`, deterministic inference",
            nnodes=2,
            fusion_backend="trtllm",
            fusion_choice=ENABLE,
            deterministic=True,
        ),
    ),
)

_VLLM = EngineCases(
    engine="vllm",
    columns=(
        Column(
            'engine_rules("vllm").rules', engine_rules("vllm").rules, engine_rules("vllm").sources
        ),
        _DEFAULT,
    ),
    cases=(
        _case("H100, Llama, TP 4", architecture=LLAMA, tp_size=4),
        _case("H20, DeepSeek V3, TP 8", device_name="NVIDIA H20"),
        _case("H100, DeepSeek V3, TP 8, DeepEP all-to-all", moe_a2a_backend="deepep"),
        _case("H100, DeepSeek V3, TP 8, DP attention", dp_attention=True),
        _case("H100, DeepSeek V3, TP 8, attention CP 2", attn_cp_size=2),
        _case(f"H100, DeepSeek V3, TP 8, O0, {FUSE}", optimization_level=0, fusion_choice=ENABLE),
        _case("H100, DeepSeek V3, TP 8, O1", optimization_level=1),
        _case(f"H100, DeepSeek V3, TP 8, O1, {FUSE}", optimization_level=1, fusion_choice=ENABLE),
        _case("H100, DeepSeek V3, TP 16", tp_size=16),
        _case(f"H100, DeepSeek V3, TP 6, {FUSE}", tp_size=6, fusion_choice=ENABLE),
        _case(
            f"RTX PRO 6000 (SM 12.0), DeepSeek V3, TP 4, {FUSE}",
            RTX_BLACKWELL,
            tp_size=4,
            fusion_choice=ENABLE,
        ),
        _case("GB200, 2 nodes, DeepSeek V3, TP 8", BLACKWELL, nnodes=2),
        _case(f"H100, 2 nodes, DeepSeek V3, TP 8, {FUSE}", nnodes=2, fusion_choice=ENABLE),
        _case(
            "GB200, 2 nodes, DeepSeek V3, TP 8, `VLLM_FLASHINFER_ALLREDUCE_BACKEND=trtllm`",
            BLACKWELL,
            nnodes=2,
            fusion_backend="trtllm",
        ),
        _case(
            "H100, DeepSeek V3, TP 8, `VLLM_FLASHINFER_ALLREDUCE_BACKEND=trtllm`",
            fusion_backend="trtllm",
        ),
        _case(
            f"H100, DeepSeek V3, TP 8, `VLLM_BATCH_INVARIANT=1`, {FUSE}",
            fusion_choice=ENABLE,
            deterministic=True,
        ),
    ),
)

#: Every engine's table, by the name its markers use.
ENGINES: dict[str, EngineCases] = {table.engine: table for table in (_SGLANG, _VLLM)}
