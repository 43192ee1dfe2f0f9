"""``fi-compat policy``: would FlashInfer allreduce fusion be on for this deployment, and why.

Exits 0 whatever the decision (fusion off is an answer, not an error), 2 for a bad
command line, 3 when the engine named by ``--engine`` would refuse to start with the
deployment (SGLang's ``_resolve_backend``, vLLM's ``get_fi_ar_workspace``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fi_compat.policy import (
    DEFAULT_RULES,
    ENGINE_RULES,
    Deployment,
    DeploymentRefusedError,
    FusionChoice,
    FusionDecision,
    FusionRule,
    FusionRuleSet,
    PolicyInputError,
    decide_fusion,
    engine_rules,
    parse_compute_capability,
)

#: ``--engine NAME``: each modelled engine's newest rule set.
_ENGINES: dict[str, FusionRuleSet] = {
    engine: engine_rules(engine).rules for engine, _ in ENGINE_RULES
}

#: The flags only one engine reads: their destination -> (the engine, the flag as spelled).
_ENGINE_ONLY: dict[str, tuple[str, str]] = {
    "fusion_backend": ("sglang", "--flashinfer-allreduce-fusion-backend"),
    "attn_dp_size": ("sglang", "--attn-dp-size"),
    "dp_size": ("sglang", "--dp-size"),
    "dtype": ("sglang", "--dtype"),
    "encoder_only": ("sglang", "--encoder-only"),
    "enable_pdmux": ("sglang", "--enable-pdmux"),
    "optimization_level": ("vllm", "--optimization-level"),
    "fuse_allreduce_rms": ("vllm", "--fuse-allreduce-rms"),
    "vllm_backend": ("vllm", "--flashinfer-allreduce-backend"),
}

__all__ = ["register", "render_text", "run"]


def __dir__() -> list[str]:
    return list(__all__)


def _compute_capability(text: str) -> tuple[int, int]:
    try:
        return parse_compute_capability(text)
    except PolicyInputError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer; found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1; found {value}")
    return value


def _bool_text(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false; found {text!r}")


def _optimization_level(text: str) -> int:
    raw = text[1:] if text[:1] in ("O", "o") else text
    if raw not in ("0", "1", "2", "3"):
        raise argparse.ArgumentTypeError(f"expected an optimization level 0 to 3; found {text!r}")
    return int(raw)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``policy`` subcommand."""
    parser = subparsers.add_parser(
        "policy",
        help="decide whether FlashInfer allreduce fusion is on for a deployment",
        description=(
            "Describe a deployment and get the allreduce-fusion decision, the rule that "
            "made it and why. Without --engine, fi-compat's own rules decide; with "
            "--engine sglang or --engine vllm, the rules of SGLang 0.5.23 or vLLM 0.33.0 "
            "decide, and the engine's own flag spellings are accepted."
        ),
    )
    parser.add_argument(
        "--engine",
        choices=sorted(_ENGINES),
        default=None,
        help="decide as this engine does (sglang: 0.5.23, vllm: 0.33.0); "
        "deterministic inference still wins",
    )
    parser.add_argument(
        "--arch",
        required=True,
        metavar="ARCH",
        help="architectures[0] of the model's config.json, e.g. DeepseekV3ForCausalLM",
    )
    parser.add_argument(
        "--compute-capability",
        "--sm",
        dest="compute_capability",
        required=True,
        type=_compute_capability,
        metavar="CC",
        help="GPU compute capability, e.g. 9.0, 10.3 or sm90",
    )
    parser.add_argument(
        "--device-name", default="", metavar="NAME", help="GPU name, e.g. 'NVIDIA H200'"
    )
    parser.add_argument(
        "--tp",
        "--tp-size",
        "--tensor-parallel-size",
        "-tp",
        dest="tp_size",
        type=_positive_int,
        default=1,
        metavar="N",
        help="tensor-parallel size (default: 1)",
    )
    parser.add_argument(
        "--nnodes", type=_positive_int, default=1, metavar="N", help="nodes (default: 1)"
    )
    parser.add_argument(
        "--dp-attention",
        "--enable-dp-attention",
        dest="dp_attention",
        action="store_true",
        help="DP attention is on",
    )
    parser.add_argument(
        "--attn-cp-size",
        "--attention-context-parallel-size",
        type=_positive_int,
        default=1,
        metavar="N",
        help="attention context-parallel size (default: 1)",
    )
    parser.add_argument(
        "--moe-a2a-backend",
        default="none",
        metavar="NAME",
        help="MoE all-to-all backend; 'none' means none (default: none)",
    )
    parser.add_argument(
        "--deterministic",
        "--enable-deterministic-inference",
        dest="deterministic",
        action="store_true",
        help="deterministic inference is on",
    )
    sglang = parser.add_argument_group("SGLang 0.5.23 (--engine sglang)")
    sglang.add_argument(
        "--flashinfer-allreduce-fusion-backend",
        dest="fusion_backend",
        choices=["auto", "trtllm", "mnnvl", "cutedsl"],
        default=None,
        help="enable fusion with this backend",
    )
    sglang.add_argument(
        "--attn-dp-size",
        "--attention-data-parallel-size",
        dest="attn_dp_size",
        type=_positive_int,
        default=None,
        metavar="N",
        help="attention data-parallel size; DP attention is on above 1",
    )
    sglang.add_argument(
        "--dp-size",
        "--data-parallel-size",
        dest="dp_size",
        type=_positive_int,
        default=None,
        metavar="N",
        help="data-parallel replicas; with the deprecated --enable-dp-attention it is "
        "the attention-DP size",
    )
    sglang.add_argument("--dtype", default=None, metavar="DTYPE", help="model dtype")
    sglang.add_argument("--encoder-only", action="store_true", default=None)
    sglang.add_argument("--enable-pdmux", action="store_true", default=None)
    vllm = parser.add_argument_group("vLLM 0.33.0 (--engine vllm)")
    vllm.add_argument(
        "-O",
        "--optimization-level",
        dest="optimization_level",
        type=_optimization_level,
        default=None,
        metavar="N",
        help="vLLM's optimization level, 0 to 3 (default: 2)",
    )
    vllm.add_argument(
        "--fuse-allreduce-rms",
        "--compilation-config.pass_config.fuse_allreduce_rms",
        "-cc.pass_config.fuse_allreduce_rms",
        dest="fuse_allreduce_rms",
        type=_bool_text,
        default=None,
        metavar="BOOL",
        help="pass_config.fuse_allreduce_rms set by the user (default: the level's)",
    )
    vllm.add_argument(
        "--batch-invariant",
        dest="deterministic",
        action="store_true",
        help="VLLM_BATCH_INVARIANT=1 (fi-compat's determinism: fusion off)",
    )
    vllm.add_argument(
        "--flashinfer-allreduce-backend",
        dest="vllm_backend",
        choices=["auto", "trtllm", "mnnvl"],
        default=None,
        help="VLLM_FLASHINFER_ALLREDUCE_BACKEND (default: auto)",
    )
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument(
        "--enable-fusion",
        "--enable-flashinfer-allreduce-fusion",
        dest="fusion_choice",
        action="store_const",
        const=FusionChoice.ENABLE,
        help="the user asks for fusion",
    )
    choice.add_argument(
        "--disable-fusion",
        dest="fusion_choice",
        action="store_const",
        const=FusionChoice.DISABLE,
        help="the user turns fusion off",
    )
    choice.add_argument(
        "--enforce-disable-fusion",
        "--enforce-disable-flashinfer-allreduce-fusion",
        dest="fusion_choice",
        action="store_const",
        const=FusionChoice.ENFORCE_DISABLE,
        help="fusion is off, whatever else says",
    )
    parser.set_defaults(fusion_choice=FusionChoice.UNSET)
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.set_defaults(func=run)


def render_text(decision: FusionDecision) -> str:
    """The decision as a few readable lines."""
    state = "ON" if decision.enabled else "OFF"
    lines = [
        f"FlashInfer allreduce fusion: {state}",
        f"  decided by: {decision.rule.value}",
        f"  reason:     {decision.reason}",
    ]
    lines.extend(f"  warning:    {warning}" for warning in decision.warnings)
    if decision.applied_rules:
        applied = ", ".join(rule.value for rule in decision.applied_rules)
        lines.append(f"  applied:    {applied}")
    return "\n".join(lines) + "\n"


def _engine_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The Deployment fields the engine's flags set; PolicyInputError for a misplaced flag."""
    engine = args.engine
    for dest, (owner, flag) in _ENGINE_ONLY.items():
        if getattr(args, dest, None) is not None and engine != owner:
            raise PolicyInputError(f"{flag} is read only with --engine {owner}.")
    fields: dict[str, Any] = {
        "dp_attention": args.dp_attention is True,
        "fusion_choice": args.fusion_choice,
    }
    if engine == "sglang":
        # arg_groups/parallel_hook.py `_handle_deprecated_dp_attention`: --dp-size N
        # --enable-dp-attention is --attn-dp-size N.
        attn_dp_size = args.attn_dp_size or 1
        if args.dp_attention and attn_dp_size == 1:
            attn_dp_size = args.dp_size or 1
        fields["dp_attention"] = attn_dp_size > 1
        fields["fusion_backend"] = args.fusion_backend
        if args.dtype is not None:
            fields["dtype"] = args.dtype
        fields["encoder_only"] = bool(args.encoder_only)
        fields["enable_pdmux"] = bool(args.enable_pdmux)
    elif engine == "vllm":
        if args.fusion_choice is not FusionChoice.UNSET and args.fuse_allreduce_rms is not None:
            raise PolicyInputError(
                "give --fuse-allreduce-rms or one of --enable-fusion / --disable-fusion / "
                "--enforce-disable-fusion, not both."
            )
        if args.fuse_allreduce_rms is not None:
            fields["fusion_choice"] = (
                FusionChoice.ENABLE if args.fuse_allreduce_rms else FusionChoice.DISABLE
            )
        if args.optimization_level is not None:
            fields["optimization_level"] = args.optimization_level
        fields["fusion_backend"] = args.vllm_backend
    return fields


def run(args: argparse.Namespace) -> int:
    """Build the deployment, decide, print."""
    rules: tuple[FusionRule, ...] | FusionRuleSet = (
        _ENGINES[args.engine] if args.engine else DEFAULT_RULES
    )
    try:
        deployment = Deployment(
            architecture=args.arch,
            compute_capability=args.compute_capability,
            device_name=args.device_name,
            tp_size=args.tp_size,
            nnodes=args.nnodes,
            attn_cp_size=args.attn_cp_size,
            moe_a2a_backend=args.moe_a2a_backend,
            deterministic=args.deterministic,
            **_engine_fields(args),
        )
        decision = decide_fusion(deployment, rules)
    except DeploymentRefusedError as error:
        print(f"fi-compat policy: {error}", file=sys.stderr)
        return 3
    except PolicyInputError as error:
        print(f"fi-compat policy: {error}", file=sys.stderr)
        return 2
    if args.json:
        payload: dict[str, Any] = {
            "deployment": deployment.as_dict(),
            "decision": decision.as_dict(),
        }
        if args.engine:
            payload["rules"] = _ENGINES[args.engine].name
        print(json.dumps(payload, indent=2))
    else:
        sys.stdout.write(render_text(decision))
    return 0
