"""``fi-compat scan`` on five engines it was never tuned to, graded from FlashInfer's files.

lmdeploy 0.18.0, tokenspeed-kernel 0.1.4, aphrodite-engine 0.24.1, SGLang 0.5.10 and 0.5.15
(their published wheels, fetched at test time and cached, never committed; skipped with the
reason when neither cache nor registry has them) are scanned from the FlashInfer release
each pins to the newest, and from the newest down to 0.6.5. Every verdict is checked against
the two releases' own wheels and an independent reading of the engine's tree
(:mod:`tests.support.unseen_engines`), never against fi-compat's records:

- every ``breaks`` finding is real: 0 false breaks;
- on the downgrade, every import, call and keyword that works on 0.7.2.post1 and fails on
  0.6.5 is a ``breaks`` finding at its line, or ``changes behaviour`` where the engine
  catches it;
- every use the independent reading finds gets a finding at its line, and at least 95 % of
  them a verdict (the rest ``unverified``, with the reason).

The unpacking, the scans, the inventory and the grading from the wheels run in a fresh
interpreter made once per input (:mod:`tests.support.engine_scans`); the tests assert on the
verdicts and the findings it prints, read back.
"""

from __future__ import annotations

import ast

import pytest

from fi_compat.upgrade import Category, Finding, ScanResult
from tests.support.engine_scans import Graded, graded
from tests.support.engine_uses import EngineUse
from tests.support.release_files import release_files
from tests.support.unseen_engines import (
    NEWEST,
    OLDEST,
    UNSEEN,
    coverage,
    false_breaks,
    fetch,
    silent_misses,
    source,
)
from tools.releases import DownloadError, RegistryUnreachableError

_SCANNED: dict[str, Graded] = {}
#: The engines whose wheels (or a FlashInfer wheel they are graded from) are not here.
_NOT_HERE: dict[str, Exception] = {}


def _scanned(requirement: str) -> Graded:
    """The engine's independent inventory, its scans and their grading. Every engine whose
    wheels are here is graded in one run (:func:`tests.support.engine_scans.graded`), read
    once per process."""
    if requirement not in _SCANNED and requirement not in _NOT_HERE:
        here = []
        for each in sorted(UNSEEN):
            try:
                fetch(UNSEEN[each])
            except (RegistryUnreachableError, DownloadError) as error:  # pragma: no cover
                _NOT_HERE[each] = error
            else:
                here.append(each)
        if here:
            _SCANNED.update(graded(here))
    if requirement in _NOT_HERE:  # pragma: no cover - depends on the network
        pytest.skip(
            f"{requirement} or a FlashInfer wheel is not cached and not reachable: "
            f"{_NOT_HERE[requirement]}"
        )
    return _SCANNED[requirement]


@pytest.fixture(scope="module", params=sorted(UNSEEN))
def engine(request: pytest.FixtureRequest) -> Graded:
    return _scanned(str(request.param))


def _say(finding: Finding) -> str:
    return f"{finding.path}:{finding.line} {finding.rule} {finding.target}"


def test_every_break_is_real(engine: Graded) -> None:
    assert engine.false_breaks.keys() == engine.results.keys()  # every scan graded
    for pair, wrong in engine.false_breaks.items():
        assert not wrong, f"{pair}: " + "; ".join(f"{_say(f)}: {why}" for f, why in wrong)


def test_the_downgrade_misses_nothing_that_fails(engine: Graded) -> None:
    missed = engine.silent_misses[(NEWEST, OLDEST)]
    assert not missed, "; ".join(f"{u.path}:{u.line} {u.target}: {why}" for u, why in missed)


def test_every_use_gets_a_finding_and_most_a_verdict(engine: Graded) -> None:
    uses = engine.inventory
    assert uses, "the independent reading finds no use of FlashInfer"
    for pair, result in engine.results.items():
        covered = coverage(result, uses)
        assert not covered.unjudged, f"{pair}: no finding at " + ", ".join(
            f"{u.path}:{u.line} {u.target}" for u in covered.unjudged
        )
        assert covered.share >= 0.95, f"{pair}: {covered.judged}/{covered.total} judged"
        lines = {(u.path, u.line) for u in covered.unverified}
        for finding in result.findings:
            if (finding.path, finding.line) in lines and finding.category is Category.UNVERIFIED:
                assert len(finding.message) > len(finding.target) + 20  # says why


def test_lmdeploy_group_through_self_comm_is_the_readme_failure() -> None:
    """The README's first failure, in an engine's own code: lmdeploy keeps flashinfer.comm on
    ``self._comm``, calls its factory with ``group=`` inside a try, and turns fusion off when
    that raises TypeError. On 0.6.10 and older the keyword is refused."""
    requirement = "lmdeploy==0.18.0"
    results = _scanned(requirement).results
    path = "lmdeploy/pytorch/backends/cuda/comm/flashinfer_allreduce.py"
    tree = ast.parse(source(UNSEEN[requirement], path))
    lines = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func) == "self._comm.create_allreduce_fusion_workspace"
        and any(k.arg == "group" for k in node.keywords)
    ]
    assert len(lines) == 1
    found = [
        f
        for f in results[(NEWEST, OLDEST)].findings
        if f.line == lines[0] and f.rule == "keyword-missing"
    ]
    assert [f.category for f in found] == [Category.BEHAVIOUR]
    assert "group=" in found[0].message
    assert "TypeError" in found[0].message
    assert found[0].release == "0.6.10"


# ------------------------------------------------------------------ the graders can fail


def _finding(target: str, rule: str, message: str, line: int = 1) -> Finding:
    return Finding(
        "e.py", line, 1, line, 2, "<module>", "import", target, Category.BREAKS, rule, message
    )


def _result(old: str, new: str, *findings: Finding) -> ScanResult:
    return ScanResult(".", old, new, False, 1, findings, ())


def test_a_break_of_a_name_both_releases_have_is_called_false() -> None:
    fake = _finding("flashinfer.top_k", "name-missing", "flashinfer.top_k: raises ImportError")
    wrong = false_breaks(_result(NEWEST, OLDEST, fake), [])
    assert [why for _, why in wrong] == [f"flashinfer.top_k is not provably missing on {OLDEST}"]


def test_a_keyword_break_needs_the_keyword_refused_by_the_new_files() -> None:
    taken = _finding(
        "flashinfer.top_k", "keyword-missing", "flashinfer.top_k(sorted=...): raises TypeError"
    )
    refused = _finding(
        "flashinfer.top_k", "keyword-missing", "flashinfer.top_k(deterministic=...): raises"
    )
    wrong = false_breaks(_result(NEWEST, OLDEST, taken, refused), [])
    assert [f.message for f, _ in wrong] == [taken.message]


def test_a_caught_import_is_not_a_break() -> None:
    missing = _finding("flashinfer.TopKTieBreak", "name-missing", "raises ImportError", line=3)
    caught = EngineUse(
        "e.py",
        3,
        "import",
        "flashinfer.TopKTieBreak",
        (),
        0,
        False,
        frozenset({"ImportError"}),
        "<module>",
    )
    assert not false_breaks(_result(NEWEST, OLDEST, missing), [])
    assert false_breaks(_result(NEWEST, OLDEST, missing), [caught])


def test_a_refused_keyword_with_no_finding_is_a_silent_miss() -> None:
    call = EngineUse(
        "e.py", 5, "call", "flashinfer.top_k", ("deterministic",), 2, False, frozenset(), "f"
    )
    missed = silent_misses(_result(NEWEST, OLDEST), [call])
    assert [why for _, why in missed] == ["deterministic= is refused"]
    said = _finding("flashinfer.top_k", "keyword-missing", "(deterministic=...)", line=5)
    assert not silent_misses(_result(NEWEST, OLDEST, said), [call])


def test_the_files_say_what_python_would() -> None:
    new, old = release_files(NEWEST), release_files(OLDEST)
    assert new.is_module("flashinfer.mla")
    assert not old.is_module("flashinfer.mla._core")
    assert new.resolves("flashinfer.mla._sparse_mla_sm120") is True
    assert old.resolves("flashinfer.mla._sparse_mla_sm120") is False  # mla.py: no package
    assert old.resolves("flashinfer.__file__") is True
    assert old.asserts_cuda_runtime("flashinfer.comm")
    assert not new.asserts_cuda_runtime("flashinfer.comm")
    parameters = new.parameters("flashinfer.mamba.selective_state_update")
    assert parameters is not None
    assert parameters.takes_keyword("rand_seed")
