"""``fi-compat policy``: would FlashInfer allreduce fusion be on for this deployment, and why.

Exits 0 whatever the decision (fusion off is an answer, not an error), 2 for a bad
command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fi_compat.policy import (
    Deployment,
    FusionChoice,
    FusionDecision,
    PolicyInputError,
    decide_fusion,
    parse_compute_capability,
)

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


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``policy`` subcommand."""
    parser = subparsers.add_parser(
        "policy",
        help="decide whether FlashInfer allreduce fusion is on for a deployment",
        description=(
            "Describe a deployment and get the allreduce-fusion decision, the rule that "
            "made it and why. Flags in parentheses are SGLang's spellings."
        ),
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


def run(args: argparse.Namespace) -> int:
    """Build the deployment, decide, print."""
    try:
        deployment = Deployment(
            architecture=args.arch,
            compute_capability=args.compute_capability,
            device_name=args.device_name,
            tp_size=args.tp_size,
            nnodes=args.nnodes,
            dp_attention=args.dp_attention,
            attn_cp_size=args.attn_cp_size,
            moe_a2a_backend=args.moe_a2a_backend,
            deterministic=args.deterministic,
            fusion_choice=args.fusion_choice,
        )
    except PolicyInputError as error:
        print(f"fi-compat policy: {error}", file=sys.stderr)
        return 2
    decision = decide_fusion(deployment)
    if args.json:
        payload = {"deployment": deployment.as_dict(), "decision": decision.as_dict()}
        print(json.dumps(payload, indent=2))
    else:
        sys.stdout.write(render_text(decision))
    return 0
