"""``fi-compat scan`` on an engine that rebinds FlashInfer names to fallbacks: vLLM 0.11.2.

vLLM 0.11.2 (its published wheel, fetched at test time and cached, never committed; skipped
with the reason when neither cache nor registry has it) writes both idioms:
``compilation/collective_fusion.py`` keeps ``flashinfer.comm`` only where it has
``trtllm_allreduce_fusion`` (``flashinfer_comm = flashinfer_comm if hasattr(...) else
None``), and ``v1/attention/backends/mla/common.py`` puts ``object`` in place of
``BatchPrefillWithRaggedKVCacheWrapper`` where its import fails. The uses behind them are
found here by a reading of their own (:func:`tests.support.engine_fallbacks.fallback_uses`),
and each must get a verdict, with the engine graded as :mod:`tests.support.unseen_engines`
grades the others: no false break, no silent miss, every use of the independent inventory
found.

The unpacking, the readings, the scans and the grading from the wheels run in a fresh
interpreter made once per input (:mod:`tests.support.engine_scans`); the tests assert on what
it prints, read back.
"""

from __future__ import annotations

import pytest

from tests.support.engine_fallbacks import ENGINE, FILES
from tests.support.engine_scans import Graded, graded
from tests.support.unseen_engines import NEWEST, OLDEST, coverage
from tools.releases import DownloadError, RegistryUnreachableError


@pytest.fixture(scope="module")
def engine() -> Graded:
    """The independent inventory, the uses behind the fallbacks, both scans and their
    grading."""
    try:
        return graded([ENGINE.requirement])[ENGINE.requirement]
    except (RegistryUnreachableError, DownloadError) as error:  # pragma: no cover
        pytest.skip(f"{ENGINE.requirement} or a FlashInfer wheel is not cached: {error}")


# ------------------------------------------------------------------ the verdicts


def test_the_reading_finds_the_uses_behind_both_idioms(engine: Graded) -> None:
    behind = engine.behind
    for name, least in FILES.items():
        found = [use for use in behind if use.path == name]
        assert len(found) >= least, (name, found)


def test_every_use_behind_a_fallback_gets_a_verdict(engine: Graded) -> None:
    behind = engine.behind
    for pair, result in engine.results.items():
        covered = coverage(result, behind)
        assert not covered.unjudged, f"{pair}: no finding at " + ", ".join(
            f"{u.path}:{u.line} {u.target}" for u in covered.unjudged
        )
        assert not covered.unverified, pair
        targets = {(f.path, f.line): f.target for f in result.findings}
        for use in behind:
            assert targets[use.path, use.line].startswith(use.target.rpartition(".")[0])


def test_the_engine_is_graded_as_the_unseen_ones_are(engine: Graded) -> None:
    uses = engine.uses  # the inventory, then the uses behind the fallbacks: what was graded
    assert engine.false_breaks.keys() == engine.results.keys()  # every scan graded
    for pair, result in engine.results.items():
        assert not engine.false_breaks[pair], pair
        covered = coverage(result, uses)
        assert not covered.unjudged, pair
        assert covered.share >= 0.95, f"{pair}: {covered.judged}/{covered.total} judged"
    assert not engine.silent_misses[(NEWEST, OLDEST)]
