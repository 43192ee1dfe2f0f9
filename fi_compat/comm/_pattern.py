"""``AllReduceFusionPattern``: the fusion pattern codes, as in the newest FlashInfer.

FlashInfer keeps these as plain ``int`` class attributes (not an ``enum``), so a value
taken from here is interchangeable with one taken from ``flashinfer.comm``. Every recorded
release that has a member gives it the same value (a test checks that against the
recorded signatures). Whether the *installed* release can run a pattern is checked when the
pattern is used, not here.
"""

from __future__ import annotations

__all__ = ["PATTERN_NAMES", "AllReduceFusionPattern"]


class AllReduceFusionPattern:
    """Fusion pattern codes of ``allreduce_fusion`` (FlashInfer 0.7.2.post1 names and values).

    ``kARResidualRMSNorm`` (all-reduce, residual add, RMSNorm) exists in every release with
    allreduce fusion (0.2.9+); the MoE patterns arrived in 0.6.8 and the dynamic and
    per-token-group FP8 patterns later.
    """

    kAllReduce = 0
    kARResidualRMSNorm = 1
    kARResidualRMSNormFP8Quant = 2
    kARResidualRMSNormFP4Quant = 3
    kARResidualRMSNormOutFP8Quant = 4
    kARResidualRMSNormOutFP4Quant = 5
    kMoEReductionARResidualRMSNorm = 6
    kMoEFinalizeARResidualRMSNorm = 7
    kARResidualRMSNormPerTokenGroupFP8PackedQuant = 8
    kARResidualRMSNormOutPerTokenGroupFP8PackedQuant = 9
    kARResidualRMSNormDynamicFP8Quant = 10
    kARResidualRMSNormOutDynamicFP8Quant = 11
    kMoEFinalizeARResidualRMSNormFP8Quant = 12


#: Member name -> value, for messages and checks.
PATTERN_NAMES: dict[int, str] = {
    value: name
    for name, value in vars(AllReduceFusionPattern).items()
    if name.startswith("k") and isinstance(value, int)
}
