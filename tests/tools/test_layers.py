"""The layers tool's pure parts (``tools/layers.py``) and the probe's source matching.

No release is imported and no subprocess started: :func:`tools.layers.classify` gets probe
documents rebuilt from the shipped ``layers.json`` entries (which must classify back to
exactly those entries), then the same documents with one thing wrong at a time, each of
which must keep the release on the public call with a detail naming the reason. The file
itself, ``main()`` and ``--check`` run against a fake ``measure``. The last section checks
:func:`fi_compat._measured.layers_probe.source_of` on hand-made tensors (it needs torch).
"""

from __future__ import annotations

import copy
import json
import os
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from fi_compat._measured.layers import HANDLES_ATTACHED, SOURCES
from fi_compat._measured.layers_probe import (
    HIDDEN,
    MAX_TOKENS,
    RANK,
    RUNS,
    TOKENS,
    WORLD,
    source_of,
)
from fi_compat._surface import LEGACY_FUSION, UNIFIED_FUSION
from tools import layers
from tools.layers import CATALOGUE, OUTPUT, build_document, classify, dump_document

SHIPPED_TEXT = OUTPUT.read_text(encoding="utf-8")
SHIPPED: dict[str, Any] = json.loads(SHIPPED_TEXT)["releases"]
LEGACY_RELEASES = sorted(
    (version for version, entry in SHIPPED.items() if entry["layer"] == "legacy"), key=Version
)
PUBLIC_RELEASES = sorted(
    (version for version, entry in SHIPPED.items() if entry["layer"] == "public"), key=Version
)
SHIPPED_STATEMENTS = sorted(
    {statement for version in LEGACY_RELEASES for statement in SHIPPED[version]["statements"]}
)
#: The statements 0.7.4's public call runs on the measured path beyond 0.7.2.post1's (its
#: MXFP8 patterns), each with what the catalogue must decide of it; they are shipped
#: statements (test_the_0_7_4_statements_are_shipped).
STATEMENTS_0_7_4 = (
    "if pattern in (AllReduceFusionPattern.kARResidualRMSNormMXFP8Quant, "
    "AllReduceFusionPattern.kARResidualRMSNormOutMXFP8Quant)",
    "if output is None and pattern not in (*dynamic_fp8_patterns, "
    "AllReduceFusionPattern.kARResidualRMSNormMXFP8Quant, "
    "AllReduceFusionPattern.kARResidualRMSNormOutMXFP8Quant)",
    "if pattern == AllReduceFusionPattern.kARResidualRMSNormOutMXFP8Quant",
)
#: The release whose entry the mutations start from: API wrapper, @deprecated, handles check.
RELEASE = "0.7.2.post1"
HANDLES_STATEMENT = (
    "if any((isinstance(handle, SymmDeviceMemory) and (not handle.mapped) "
    "for handle in workspace.mem_handles))"
)
#: ``AllReduceFusionPattern.kARResidualRMSNorm`` as the probe passes it.
PATTERN_CODE = 1
KERNEL = [LEGACY_FUSION.key]


def _layer(
    module: str,
    qualname: str,
    code_file: str,
    code_name: str,
    *,
    deprecated: bool = False,
    wrapped: bool = False,
) -> dict[str, Any]:
    """One element of ``chain``/``legacy_chain``, as ``layers_probe.describe`` reports it."""
    return {
        "module": module,
        "qualname": qualname,
        "code_name": code_name,
        "code_file": code_file,
        "deprecated": deprecated,
        "wrapped": wrapped,
    }


TRACE_WRAPPER = _layer(
    "flashinfer.comm.allreduce",
    "allreduce_fusion",
    "api_logging.py",
    "_auto_dump_wrapper",
    wrapped=True,
)
PUBLIC_FUNCTION = _layer(
    "flashinfer.comm.allreduce", "allreduce_fusion", "allreduce.py", "allreduce_fusion"
)
DEPRECATED = _layer(
    "flashinfer.comm.trtllm_ar",
    "trtllm_allreduce_fusion",
    "typing_extensions.py",
    "wrapper",
    deprecated=True,
    wrapped=True,
)
LEGACY_FUNCTION = _layer(
    "flashinfer.comm.trtllm_ar",
    "trtllm_allreduce_fusion",
    "trtllm_ar.py",
    "trtllm_allreduce_fusion",
)
#: What the probe records for a per-run value that is not a plain scalar.
PLAIN: dict[str, Any] = {
    "tokens": TOKENS,
    "hidden": HIDDEN,
    "pattern": PATTERN_CODE,
    "workspace.world_size": WORLD,
    "workspace.rank": RANK,
    "workspace.metadata": "<dict>",
}


def _values(source: Any) -> list[Any]:
    """What the probe records in ``values`` for a parameter with this shipped argument."""
    if isinstance(source, dict):
        return [source["constant"]] * len(RUNS)
    if source in RUNS[0]:
        return [run[source] for run in RUNS]
    return [PLAIN.get(source, "<Tensor>")] * len(RUNS)


def _document(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The probe document a release with this shipped ``legacy`` entry would print."""
    arguments: Mapping[str, Any] = entry["arguments"]
    return {
        "probe": 1,
        "version": "0.0.0",
        "location": "/site/flashinfer",
        "chain": [TRACE_WRAPPER, PUBLIC_FUNCTION],
        "fusion_source": entry["fusion_source"],
        "legacy_chain": [DEPRECATED, LEGACY_FUNCTION],
        "legacy_source": entry["legacy_source"],
        "legacy_parameters": list(arguments),
        "pattern": PATTERN_CODE,
        "runs": [
            {
                "switches": dict(switches),
                "error": None,
                "statements": list(entry["statements"]),
                "legacy_calls": 1,
                "kernel_calls": list(KERNEL),
            }
            for switches in RUNS
        ],
        "sources": {
            name: [] if isinstance(source, dict) else [source] for name, source in arguments.items()
        },
        "values": {name: _values(source) for name, source in arguments.items()},
    }


@pytest.fixture
def document() -> dict[str, Any]:
    """A fresh probe document for :data:`RELEASE`, to mutate."""
    return _document(SHIPPED[RELEASE])


def _public_detail(document: Mapping[str, Any]) -> str:
    """Classify, require the public call, and return why."""
    entry = classify(document)
    assert entry["layer"] == "public", entry
    assert "arguments" not in entry
    detail: str = entry["detail"]
    return detail


# ---------------------------------------------------------------------- classification


def test_the_reconstructed_document_classifies_to_the_shipped_entry(
    document: dict[str, Any],
) -> None:
    """0.7.2.post1: trace wrapper, @deprecated, every source known, handles checked."""
    entry = classify(document)
    assert entry == SHIPPED[RELEASE]
    # The argument order is the legacy function's, not sorted.
    assert list(entry["arguments"]) == list(SHIPPED[RELEASE]["arguments"])
    assert entry["checks"] == [HANDLES_ATTACHED]


@pytest.mark.parametrize("version", LEGACY_RELEASES)
def test_every_shipped_legacy_entry_round_trips(version: str) -> None:
    """classify(document rebuilt from the entry) is the entry, key for key and in order."""
    entry = classify(_document(SHIPPED[version]))
    assert entry == SHIPPED[version]
    assert list(entry) == list(SHIPPED[version])
    assert list(entry["arguments"]) == list(SHIPPED[version]["arguments"])


def test_every_shipped_release_is_measured() -> None:
    """Every release from 0.6.0 has a measured layer: 0.6.16 to 0.6.16.post3, whose
    ``flashinfer.comm`` does not import below Python 3.12, are measured with the harness
    deferring fd_exchange.py's annotations (``tools.reach.deferred_annotations``)."""
    assert PUBLIC_RELEASES == []
    assert {"0.6.16", "0.6.16.post3"} <= set(LEGACY_RELEASES)


def test_a_probe_error_classifies_to_an_unmeasured_public_entry() -> None:
    """A release the probe cannot import keeps the public call, saying why."""
    error = "import flashinfer.comm: TypeError: type 'array.array' is not subscriptable"
    entry = classify({"error": error})
    assert entry == {"layer": "public", "detail": f"not measured: {error}"}


def test_a_release_without_the_handles_statement_has_no_checks(
    document: dict[str, Any],
) -> None:
    for run in document["runs"]:
        run["statements"].remove(HANDLES_STATEMENT)
    entry = classify(document)
    assert entry["layer"] == "legacy"
    assert entry["checks"] == []
    assert HANDLES_ATTACHED not in entry["detail"]
    assert HANDLES_STATEMENT not in entry["statements"]


def test_the_handles_statement_in_one_run_is_a_check(document: dict[str, Any]) -> None:
    """Statements are the union over the runs: one run checking the handles is enough."""
    for run in document["runs"][1:]:
        run["statements"].remove(HANDLES_STATEMENT)
    entry = classify(document)
    assert entry["checks"] == [HANDLES_ATTACHED]
    assert entry["statements"].count(HANDLES_STATEMENT) == 1


def test_statements_are_not_repeated_across_runs(document: dict[str, Any]) -> None:
    entry = classify(document)
    assert entry["statements"] == SHIPPED[RELEASE]["statements"]
    assert len(entry["statements"]) == len(set(entry["statements"]))


def test_the_wrappers_may_be_absent() -> None:
    """0.6.0: no trace wrapper above the public function; still legacy."""
    document = _document(SHIPPED["0.6.0"])
    document["chain"] = [PUBLIC_FUNCTION]
    document["legacy_chain"] = [LEGACY_FUNCTION]
    assert classify(document) == SHIPPED["0.6.0"]


def test_a_default_source_is_known(document: dict[str, Any]) -> None:
    """A parameter left to its default in every run is ``default``, a runtime source."""
    document["sources"]["weight_bias"] = ["default"]
    entry = classify(document)
    assert entry["layer"] == "legacy"
    assert entry["arguments"]["weight_bias"] == "default"


def test_an_error_document_is_not_measured() -> None:
    entry = classify({"error": "import flashinfer.comm: ImportError: no triton"})
    assert entry == {
        "layer": "public",
        "detail": "not measured: import flashinfer.comm: ImportError: no triton",
    }


def test_a_public_entry_keeps_the_source_hashes_it_has() -> None:
    """The probe stops after hashing the public function when the legacy one is missing."""
    entry = classify({"error": "no legacy", "fusion_source": "f" * 64})
    assert entry == {
        "layer": "public",
        "detail": "not measured: no legacy",
        "fusion_source": "f" * 64,
    }


def test_a_public_verdict_keeps_both_source_hashes(document: dict[str, Any]) -> None:
    document["runs"][0]["error"] = "RuntimeError: boom"
    entry = classify(document)
    assert entry["layer"] == "public"
    assert entry["fusion_source"] == SHIPPED[RELEASE]["fusion_source"]
    assert entry["legacy_source"] == SHIPPED[RELEASE]["legacy_source"]
    assert set(entry) == {"layer", "detail", "fusion_source", "legacy_source"}


def test_a_run_that_failed_is_public(document: dict[str, Any]) -> None:
    document["runs"][2]["error"] = "ValueError: hidden_dim mismatch"
    detail = _public_detail(document)
    assert detail == "the public call failed on the CPU: ValueError: hidden_dim mismatch"


@pytest.mark.parametrize("calls", [0, 2])
def test_not_exactly_one_legacy_call_is_public(document: dict[str, Any], calls: int) -> None:
    document["runs"][1]["legacy_calls"] = calls
    detail = _public_detail(document)
    assert f"made {calls} {LEGACY_FUSION.key} call(s)" in detail


@pytest.mark.parametrize(
    "kernel_calls",
    [[], [LEGACY_FUSION.key, LEGACY_FUSION.key], ["trtllm_custom_all_reduce"]],
    ids=["none", "twice", "another"],
)
def test_other_kernel_calls_are_public(document: dict[str, Any], kernel_calls: list[str]) -> None:
    document["runs"][0]["kernel_calls"] = kernel_calls
    detail = _public_detail(document)
    assert f"kernel calls {kernel_calls}" in detail


def test_api_logging_above_the_public_function_is_public(document: dict[str, Any]) -> None:
    """FlashInfer's API logging wrapper (``wrapper`` in api_logging.py) is not the trace one."""
    logging = _layer(
        "flashinfer.comm.allreduce", "allreduce_fusion", "api_logging.py", "wrapper", wrapped=True
    )
    document["chain"] = [logging, TRACE_WRAPPER, PUBLIC_FUNCTION]
    detail = _public_detail(document)
    assert detail == f"{UNIFIED_FUSION.key} is wrapped by wrapper (api_logging.py)"


def test_a_patch_above_the_public_function_is_public(document: dict[str, Any]) -> None:
    patch = _layer("mine", "patched", "mine.py", "_auto_dump_wrapper", wrapped=True)
    document["chain"] = [patch, PUBLIC_FUNCTION]
    assert "wrapped by _auto_dump_wrapper (mine.py)" in _public_detail(document)


def test_a_legacy_wrapper_that_is_not_deprecated_is_public(document: dict[str, Any]) -> None:
    document["legacy_chain"][0] = {**DEPRECATED, "deprecated": False}
    detail = _public_detail(document)
    assert detail == f"{LEGACY_FUSION.key} is wrapped by wrapper, not @deprecated"


def test_a_deprecated_marker_on_another_wrapper_is_public(document: dict[str, Any]) -> None:
    """``__deprecated__`` alone is not enough: the wrapper must be typing_extensions'/warnings'."""
    document["legacy_chain"][0] = {**DEPRECATED, "code_file": "functools.py"}
    assert "not @deprecated" in _public_detail(document)


def test_a_legacy_function_wrapped_twice_is_public(document: dict[str, Any]) -> None:
    document["legacy_chain"] = [DEPRECATED, DEPRECATED, LEGACY_FUNCTION]
    detail = _public_detail(document)
    assert detail == f"{LEGACY_FUSION.key} is wrapped more than once"


def test_a_statement_outside_the_catalogue_is_public(document: dict[str, Any]) -> None:
    document["runs"][1]["statements"].insert(3, "if workspace.rank > 7")
    detail = _public_detail(document)
    assert detail == "a statement fi-compat does not account for: if workspace.rank > 7"


def test_an_ambiguous_source_is_public(document: dict[str, Any]) -> None:
    document["sources"]["rms_eps"] = ["rms_eps", "tokens"]
    detail = _public_detail(document)
    assert "rms_eps" in detail
    assert "['rms_eps', 'tokens']" in detail


def test_a_source_the_runtime_does_not_know_is_public(document: dict[str, Any]) -> None:
    """The caller's 2-D input itself (not its flat view) has no runtime recipe."""
    document["sources"]["allreduce_in"] = ["input"]
    detail = _public_detail(document)
    assert "allreduce_in" in detail
    assert "'input'" in detail


def test_a_constant_that_varies_is_public(document: dict[str, Any]) -> None:
    document["values"]["weight_bias"] = [0.0, 0.0, 1.0]
    detail = _public_detail(document)
    assert "weight_bias has no source the runtime knows" in detail
    assert "[0.0, 0.0, 1.0]" in detail


def test_a_constant_whose_type_varies_is_public(document: dict[str, Any]) -> None:
    """0, 0.0 and False are equal, but not the same constant."""
    document["values"]["weight_bias"] = [0.0, 0, False]
    assert "weight_bias has no source" in _public_detail(document)


@pytest.mark.parametrize("value", ["<Tensor>", "cake", [1, 2]], ids=["tensor", "str", "list"])
def test_a_constant_that_is_not_a_plain_scalar_is_public(
    document: dict[str, Any], value: Any
) -> None:
    document["values"]["quant_out"] = [value] * len(RUNS)
    detail = _public_detail(document)
    assert "quant_out has no source the runtime knows" in detail


def test_a_parameter_with_no_source_and_no_values_is_public(document: dict[str, Any]) -> None:
    del document["values"]["scale_out"]
    assert "scale_out has no source" in _public_detail(document)


# ------------------------------------------------------------------- the shipped file


@pytest.mark.parametrize("statement", SHIPPED_STATEMENTS)
def test_every_shipped_statement_is_in_the_catalogue(statement: str) -> None:
    """Each statement has a meaning, and the patterns it matches agree on it."""
    meanings = {meaning for pattern, meaning in CATALOGUE if pattern.match(statement)}
    assert len(meanings) == 1, meanings


@pytest.mark.parametrize(
    "pattern", [pattern for pattern, _ in CATALOGUE], ids=[p.pattern[:60] for p, _ in CATALOGUE]
)
def test_no_catalogue_pattern_is_dead(pattern: Any) -> None:
    """Every pattern is used by a measured statement (or it accepts code nobody measured)."""
    assert any(pattern.match(statement) for statement in SHIPPED_STATEMENTS)


def test_the_0_7_4_statements_are_shipped() -> None:
    assert set(STATEMENTS_0_7_4) <= set(SHIPPED["0.7.4"]["statements"])


@pytest.mark.parametrize(
    ("statement", "meaning"),
    [
        (STATEMENTS_0_7_4[0], "fixed"),
        (STATEMENTS_0_7_4[1], "argument"),
        (STATEMENTS_0_7_4[2], "fixed"),
    ],
)
def test_0_7_4_s_new_pattern_tests_are_decided_by_the_pattern(statement: str, meaning: str) -> None:
    """0.7.4 tests the pattern against a tuple of its MXFP8 members: decided when the
    workspace is made, as the list tests of earlier releases are."""
    assert [m for pattern, m in CATALOGUE if pattern.match(statement)] == [meaning]


@pytest.mark.parametrize(
    "statement",
    [
        "if pattern in (AllReduceFusionPattern.kARResidualRMSNorm, other)",
        "if output is None and pattern not in (*dynamic_fp8_patterns, other)",
        "if output is None and pattern not in (*other_patterns, AllReduceFusionPattern.kAllReduce)",
    ],
)
def test_a_tuple_with_anything_but_pattern_members_is_not_accounted_for(statement: str) -> None:
    assert not any(pattern.match(statement) for pattern, _ in CATALOGUE)


@pytest.mark.parametrize("version", LEGACY_RELEASES)
def test_shipped_checks_are_what_the_statements_imply(version: str) -> None:
    entry = SHIPPED[version]
    implied = {
        meaning
        for statement in entry["statements"]
        for pattern, meaning in CATALOGUE
        if pattern.match(statement)
    } - {"fixed", "validated", "argument", "result"}
    assert entry["checks"] == sorted(implied)
    assert (HANDLES_STATEMENT in entry["statements"]) == (HANDLES_ATTACHED in entry["checks"])


@pytest.mark.parametrize("version", LEGACY_RELEASES)
def test_shipped_arguments_are_runtime_sources_or_plain_constants(version: str) -> None:
    arguments: dict[str, Any] = SHIPPED[version]["arguments"]
    assert arguments
    assert next(iter(arguments)) == "allreduce_in"
    for name, source in arguments.items():
        if isinstance(source, dict):
            assert list(source) == ["constant"], name
            constant = source["constant"]
            assert constant is None or isinstance(constant, (bool, int, float)), name
        else:
            assert source in SOURCES, (name, source)


def test_the_shipped_file_has_the_schema_and_the_first_release() -> None:
    document = json.loads(SHIPPED_TEXT)
    assert document["schema"] == 1
    assert document["tool"] == "tools/layers.py"
    assert min(SHIPPED, key=Version) == str(layers.FIRST_RELEASE)
    assert RELEASE in LEGACY_RELEASES


# ----------------------------------------------------------------------------- the file


def _entry(detail: str = "x") -> dict[str, Any]:
    return {"layer": "public", "detail": detail}


def test_the_document_sorts_releases_by_version() -> None:
    releases = {"0.6.10": _entry(), "0.6.9": _entry(), "0.7.0": _entry(), "0.6.10.post1": _entry()}
    text = dump_document(build_document(releases))
    assert list(json.loads(text)["releases"]) == ["0.6.9", "0.6.10", "0.6.10.post1", "0.7.0"]
    assert text.endswith("}\n")
    assert not text.endswith("\n\n")


def test_the_document_does_not_depend_on_the_order_releases_arrive() -> None:
    one = build_document({"0.6.10": _entry("a"), "0.6.9": _entry("b")})
    other = build_document({"0.6.9": _entry("b"), "0.6.10": _entry("a")})
    assert dump_document(one) == dump_document(other)
    assert dump_document(one) == dump_document(copy.deepcopy(one))


def test_the_document_keeps_argument_and_statement_order() -> None:
    entry = {
        "layer": "legacy",
        "arguments": {"zeta": "tokens", "alpha": "hidden"},
        "statements": ["z = 1", "a = 2"],
    }
    text = dump_document(build_document({"0.6.0": entry}))
    assert text.index('"zeta"') < text.index('"alpha"')
    assert text.index('"z = 1"') < text.index('"a = 2"')


def test_the_shipped_file_is_the_dump_of_its_releases() -> None:
    assert dump_document(build_document(SHIPPED)) == SHIPPED_TEXT


# ----------------------------------------------------------------------------- main()


def _fake_measure(results: Mapping[str, Any]) -> Callable[[str], dict[str, Any]]:
    def measure(version: str) -> dict[str, Any]:
        result = results[version]
        if isinstance(result, Exception):
            raise result
        return copy.deepcopy(dict(result))

    return measure


def test_main_writes_then_leaves_an_equal_file_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "layers.json"
    measure = _fake_measure({"0.6.10": SHIPPED["0.6.10"], "0.6.9": SHIPPED["0.6.9"]})
    assert layers.main(["0.6.10", "0.6.9"], output=output, measure=measure) == 0
    written = output.read_text(encoding="utf-8")
    assert written == dump_document(
        build_document({"0.6.9": SHIPPED["0.6.9"], "0.6.10": SHIPPED["0.6.10"]})
    )
    assert "measured 2 release(s)" in capsys.readouterr().err
    # A second run with the same measurements does not rewrite the file.
    os.utime(output, ns=(1_000_000_000, 1_000_000_000))
    assert layers.main(["0.6.9", "0.6.10"], output=output, measure=measure) == 0
    assert output.stat().st_mtime_ns == 1_000_000_000
    assert output.read_text(encoding="utf-8") == written


def test_main_keeps_the_entries_of_releases_it_did_not_measure(tmp_path: Path) -> None:
    output = tmp_path / "layers.json"
    output.write_text(
        dump_document(build_document({"0.6.0": _entry("old"), "0.6.1": _entry("kept")})),
        encoding="utf-8",
    )
    assert layers.main(["0.6.0"], output=output, measure=_fake_measure({"0.6.0": _entry()})) == 0
    releases = json.loads(output.read_text(encoding="utf-8"))["releases"]
    assert releases == {"0.6.0": _entry(), "0.6.1": _entry("kept")}


def test_check_passes_when_equal_and_fails_when_an_entry_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "layers.json"
    measure = _fake_measure({"0.6.0": SHIPPED["0.6.0"], "0.7.0": SHIPPED["0.7.0"]})
    assert layers.main(["0.6.0", "0.7.0"], output=output, measure=measure) == 0
    written = output.read_text(encoding="utf-8")
    capsys.readouterr()
    assert layers.main(["--check", "0.6.0", "0.7.0"], output=output, measure=measure) == 0
    assert "differs" not in capsys.readouterr().err

    changed = _fake_measure({"0.6.0": SHIPPED["0.6.0"], "0.7.0": _entry("now public")})
    assert layers.main(["--check", "0.6.0", "0.7.0"], output=output, measure=changed) == 1
    err = capsys.readouterr().err
    assert "differs: 0.7.0" in err
    assert "differs: 0.6.0" not in err
    assert output.read_text(encoding="utf-8") == written  # --check never writes


def test_check_counts_a_release_missing_from_the_file_as_a_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "layers.json"
    output.write_text(dump_document(build_document({})), encoding="utf-8")
    assert (
        layers.main(["--check", "0.6.0"], output=output, measure=_fake_measure({"0.6.0": _entry()}))
        == 1
    )
    assert "differs: 0.6.0: shipped None" in capsys.readouterr().err


def test_a_release_that_cannot_be_measured_fails_but_the_others_are_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "layers.json"
    measure = _fake_measure(
        {"0.6.0": SHIPPED["0.6.0"], "0.6.1": RuntimeError("the probe exited 1")}
    )
    assert layers.main(["0.6.0", "0.6.1"], output=output, measure=measure) == 1
    err = capsys.readouterr().err
    assert "error: flashinfer-python 0.6.1 not measured: RuntimeError: the probe exited 1" in err
    assert json.loads(output.read_text(encoding="utf-8"))["releases"] == {"0.6.0": SHIPPED["0.6.0"]}
    # --check fails too when a release cannot be measured, even with nothing differing.
    assert layers.main(["--check", "0.6.0", "0.6.1"], output=output, measure=measure) == 1
    assert "not measured" in capsys.readouterr().err


# --------------------------------------------------------------- the probe's source_of


class _Given:
    """``given`` and the workspace stand-in as the probe builds them for one run."""

    def __init__(self, switches: Mapping[str, Any]) -> None:
        torch = pytest.importorskip("torch")
        torch.manual_seed(0)
        x = torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16)
        self.given: dict[str, Any] = {
            "input": x,
            "residual_in": torch.randn_like(x),
            "residual_out": torch.empty_like(x),
            "norm_out": torch.empty_like(x),
            "rms_gamma": torch.randn(HIDDEN, dtype=torch.bfloat16),
            "pattern": PATTERN_CODE,
            "tokens": TOKENS,
            "hidden": HIDDEN,
            **switches,
        }
        self.workspace = types.SimpleNamespace(
            world_size=WORLD,
            rank=RANK,
            workspace_tensor=torch.zeros(WORLD * 3, dtype=torch.int64),
            metadata={
                "max_token_num": MAX_TOKENS,
                "tp_size": WORLD,
                "hidden_dim": HIDDEN,
                "use_fp32_lamport": False,
            },
            mem_handles=[],
        )

    def source(self, value: Any) -> set[str]:
        return source_of(value, self.given, self.workspace)


@pytest.fixture
def run0() -> _Given:
    """Run 0: launch_with_pdl True, the others False, use_oneshot None, eps 1.5e-5."""
    return _Given(RUNS[0])


def test_a_flat_view_of_a_caller_tensor_is_that_view(run0: _Given) -> None:
    assert run0.source(run0.given["input"].view(-1)) == {"view:input"}
    assert run0.source(run0.given["residual_out"].view(-1)) == {"view:residual_out"}


def test_the_caller_tensor_itself_is_its_name_not_a_view(run0: _Given) -> None:
    assert run0.source(run0.given["input"]) == {"input"}


def test_part_of_a_caller_tensor_is_nothing(run0: _Given) -> None:
    """A shorter view on the input's storage is neither its view nor new scratch."""
    assert run0.source(run0.given["input"].view(-1)[:HIDDEN]) == set()


def test_the_weight_is_rms_gamma(run0: _Given) -> None:
    assert run0.source(run0.given["rms_gamma"]) == {"rms_gamma"}


def test_a_new_flat_tensor_like_the_input_is_scratch(run0: _Given) -> None:
    torch = pytest.importorskip("torch")
    x = run0.given["input"]
    assert run0.source(torch.empty(x.numel(), dtype=x.dtype)) == {"scratch"}
    assert run0.source(torch.empty_like(x).view(-1)) == {"scratch"}


def test_a_tensor_like_the_input_on_caller_storage_is_not_scratch(run0: _Given) -> None:
    """Input-sized, flat, same dtype, but on the weight's (or input's) storage: not new."""
    torch = pytest.importorskip("torch")
    numel = run0.given["input"].numel()
    on_weight = torch.as_strided(run0.given["rms_gamma"], (numel,), (0,))
    on_input = torch.as_strided(run0.given["input"], (numel,), (0,))
    assert run0.source(on_weight) == set()
    assert run0.source(on_input) == set()


def test_a_new_tensor_of_another_dtype_or_shape_is_nothing(run0: _Given) -> None:
    torch = pytest.importorskip("torch")
    x = run0.given["input"]
    assert run0.source(torch.empty(x.numel(), dtype=torch.float32)) == set()
    assert run0.source(torch.empty_like(x)) == set()  # 2-D: not flat


def test_workspace_attributes_are_matched_by_identity(run0: _Given) -> None:
    workspace = run0.workspace
    assert run0.source(workspace.workspace_tensor) == {"workspace.workspace_tensor"}
    assert run0.source(workspace.metadata) == {"workspace.metadata"}
    assert run0.source(dict(workspace.metadata)) == set()  # an equal copy is not it


def test_true_is_the_switches_set_to_true_and_never_an_int(run0: _Given) -> None:
    assert run0.source(True) == {"launch_with_pdl"}
    run1 = _Given(RUNS[1])
    assert run1.source(True) == {"trigger_completion_at_end", "fp32_acc", "use_oneshot"}
    assert run1.source(False) == {"launch_with_pdl"}
    # The pattern code is the int 1: it matches 1, and True does not match it.
    assert run0.source(PATTERN_CODE) == {"pattern"}


def test_eps_is_matched_by_value(run0: _Given) -> None:
    run = _Given({**RUNS[0], "rms_eps": 1e-5})
    assert run.source(1e-5) == {"rms_eps"}
    assert run.source(2e-5) == set()
    assert run0.source(1e-5) == set()  # run 0's eps is 1.5e-5


def test_ints_are_the_workspace_sizes_and_the_shape(run0: _Given) -> None:
    assert run0.source(WORLD) == {"workspace.world_size"}
    assert run0.source(RANK) == {"workspace.rank"}
    assert run0.source(TOKENS) == {"tokens"}
    assert run0.source(HIDDEN) == {"hidden"}
    assert run0.source(float(WORLD)) == set()  # 4.0 is not the int world size


def test_none_is_the_switches_that_are_none(run0: _Given) -> None:
    assert run0.source(None) == {"use_oneshot"}
    assert _Given(RUNS[1]).source(None) == set()
