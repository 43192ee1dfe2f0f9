"""The sizes tool (``tools/sizes.py``): its classifier on made-up observations, the shipped
``sizes.json``, the file it writes, and (marker ``release_matrix``, where the layers wheel
tests run) a fresh measurement of one real release of each distinct rule.

The pure part gets probe documents made up here: shapes admitted by one rule must classify
as that rule, shapes no rule explains as ``unexplained``, failures as ``unmeasured``. The
shipped entries are rebuilt into probe documents, which must classify back to them.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from fi_compat._measured.sizes_probe import BACKENDS, HIDDEN, MAX_TOKENS, PATTERNS, SHAPES
from tools import sizes
from tools.sizes import (
    OUTPUT,
    RULES,
    admits,
    build_document,
    classify,
    classify_backend,
    dump_document,
    fit,
)

SHIPPED_TEXT = OUTPUT.read_text(encoding="utf-8")
SHIPPED: dict[str, Any] = json.loads(SHIPPED_TEXT)["releases"]
#: MNNVL's buffer for the probe's workspace (250 x 4096 bf16 on 4 ranks), as measured.
BUFFER = 4128768
KERNEL = "trtllm_allreduce_fusion"


def _raw_shape(
    name: str, admitted: bool, *, reached: list[int] | None = None, error: str = "ValueError: x"
) -> dict[str, Any]:
    tokens, hidden = SHAPES[name]
    if admitted:
        return {
            "shape": [tokens, hidden],
            "kernel": [KERNEL],
            "reached": [reached if reached is not None else [tokens, hidden]],
        }
    return {
        "shape": [tokens, hidden],
        "kernel": [],
        "reached": [],
        "error": error,
        "raised_in": "trtllm_ar.py:check",
    }


def _raw_backend(
    rule: str,
    *,
    buffer_bytes: int | None = None,
    patterns: tuple[str, ...] = PATTERNS,
    reaches: str = "call",
    sufficient_rule: str | None = None,
) -> dict[str, Any]:
    """A probe document for one backend whose public call admits what ``rule`` admits."""

    def admitted(name: str, which: str) -> bool:
        tokens, hidden = SHAPES[name]
        answer = admits(which, tokens, hidden, buffer_bytes=buffer_bytes)
        assert answer is not None
        return answer

    workspace: dict[str, Any] = {"class": "Workspace", "sufficient_signature": "(a, b)"}
    if buffer_bytes is not None:
        workspace["buffer_size_bytes"] = buffer_bytes
    return {
        "workspace": workspace,
        "sufficient": {name: admitted(name, sufficient_rule or rule) for name in SHAPES},
        "patterns": {
            pattern: {
                "code": number,
                "shapes": {
                    name: _raw_shape(
                        name,
                        admitted(name, rule),
                        reached=[MAX_TOKENS, HIDDEN] if reaches == "workspace" else None,
                    )
                    for name in SHAPES
                },
            }
            for number, pattern in enumerate(patterns)
        },
    }


# ------------------------------------------------------------------------- the rules


def _admitted_set(rule: str) -> frozenset[str]:
    return frozenset(
        name for name, (t, h) in SHAPES.items() if admits(rule, t, h, buffer_bytes=BUFFER)
    )


@pytest.mark.parametrize(("first", "second"), list(itertools.combinations(RULES, 2)))
def test_the_shapes_tell_every_two_rules_apart(first: str, second: str) -> None:
    assert _admitted_set(first) != _admitted_set(second)


@pytest.mark.parametrize("rule", RULES)
def test_each_rule_is_found_from_what_it_admits(rule: str) -> None:
    admitted = {name: name in _admitted_set(rule) for name in SHAPES}
    assert fit(admitted, SHAPES, buffer_bytes=BUFFER) == rule


def test_the_workspace_shape_is_admitted_by_every_rule() -> None:
    for rule in RULES:
        assert admits(rule, MAX_TOKENS, HIDDEN, buffer_bytes=BUFFER)


def test_bytes_needs_a_buffer_size() -> None:
    assert admits("bytes", 1, 1) is None
    admitted = {name: name in _admitted_set("bytes") for name in SHAPES}
    assert fit(admitted, SHAPES) is None


def test_the_bytes_rule_admits_more_tokens_than_max_when_two_shot_rounding_leaves_room() -> None:
    # 251 tokens: two-shot needs ceil(251 / 4) * 4 = 252 rows, which the buffer sized for
    # ceil(250 / 4) * 4 = 252 rows holds; a product rule refuses it.
    assert admits("bytes", MAX_TOKENS + 1, HIDDEN, buffer_bytes=BUFFER)
    assert not admits("product", MAX_TOKENS + 1, HIDDEN)


def test_an_unknown_rule_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown rule"):
        admits("bogus", 1, 1)


@pytest.mark.parametrize(
    "refused",
    [{"fewer_tokens"}, {"same"}, {"zero_tokens"}, {"narrower_hidden", "double_tokens"}],
    ids=lambda refused: "+".join(sorted(refused)),  # stable across processes (for xdist)
)
def test_refusals_no_rule_explains_fit_nothing(refused: set[str]) -> None:
    admitted = {name: name not in refused for name in SHAPES}
    assert fit(admitted, SHAPES, buffer_bytes=BUFFER) is None


# ----------------------------------------------------------------------- the classifier


@pytest.mark.parametrize("rule", [r for r in RULES if r != "bytes"])
def test_a_backend_obeying_a_rule_is_that_rule(rule: str) -> None:
    entry = classify_backend(_raw_backend(rule))
    assert (entry["check"], entry["reaches"]) == (rule, "call")
    assert entry["sufficient"] == {"signature": "(a, b)", "rule": rule, "agrees": True}
    assert {p: e["check"] for p, e in entry["patterns"].items()} == dict.fromkeys(PATTERNS, rule)


def test_a_bytes_backend_needs_its_buffer_size() -> None:
    raw = _raw_backend("bytes", buffer_bytes=BUFFER)
    assert classify_backend(raw)["check"] == "bytes"
    del raw["workspace"]["buffer_size_bytes"]
    assert classify_backend(raw)["check"] == "unexplained"


def test_the_workspace_values_reaching_the_kernel_are_workspace() -> None:
    assert classify_backend(_raw_backend("product", reaches="workspace"))["reaches"] == "workspace"


def test_some_calls_reaching_with_workspace_values_is_mixed() -> None:
    raw = _raw_backend("product")
    raw["patterns"]["kAllReduce"]["shapes"]["fewer_tokens"]["reached"] = [[MAX_TOKENS, HIDDEN]]
    entry = classify_backend(raw)
    assert entry["patterns"]["kAllReduce"]["reaches"] == "mixed"
    assert entry["reaches"] == "mixed"


def test_patterns_with_different_rules_are_mixed() -> None:
    raw = _raw_backend("product")
    raw["patterns"]["kAllReduce"] = _raw_backend("separate")["patterns"]["kAllReduce"]
    entry = classify_backend(raw)
    assert entry["check"] == "mixed"
    assert entry["patterns"]["kAllReduce"]["check"] == "separate"
    assert entry["sufficient"]["agrees"] is False


def test_a_sufficient_answer_unlike_the_call_does_not_agree() -> None:
    entry = classify_backend(_raw_backend("product", sufficient_rule="separate"))
    assert entry["check"] == "product"
    assert entry["sufficient"]["rule"] == "separate"
    assert entry["sufficient"]["agrees"] is False


def test_a_sufficient_that_raises_is_unmeasured() -> None:
    raw = _raw_backend("product")
    raw["sufficient"]["same"] = "TypeError: takes 4 positional arguments"
    assert classify_backend(raw)["sufficient"]["rule"] == "unmeasured"


def test_refusals_no_rule_explains_are_unexplained() -> None:
    raw = _raw_backend("product")
    raw["patterns"]["kAllReduce"]["shapes"]["fewer_tokens"] = _raw_shape("fewer_tokens", False)
    entry = classify_backend(raw)
    assert entry["patterns"]["kAllReduce"]["check"] == "unexplained"
    assert "fewer_tokens" in entry["patterns"]["kAllReduce"]["detail"]
    assert entry["check"] == "mixed"


def test_a_pattern_refusing_the_workspace_shape_is_unmeasured_and_left_out() -> None:
    raw = _raw_backend("bytes", buffer_bytes=BUFFER)
    raw["patterns"]["kARResidualRMSNormFP8Quant"]["shapes"] = {
        name: _raw_shape(name, False, error="ValueError: does not support pattern 2")
        for name in SHAPES
    }
    entry = classify_backend(raw)
    pattern = entry["patterns"]["kARResidualRMSNormFP8Quant"]
    assert pattern["check"] == "unmeasured"
    assert "does not support pattern 2" in pattern["detail"]
    assert (entry["check"], entry["sufficient"]["agrees"]) == ("bytes", True)


@pytest.mark.parametrize(
    "change",
    [
        lambda shape: shape.update(kernel=[KERNEL, KERNEL], reached=[[1, 1], [1, 1]]),
        lambda shape: shape.update(error="RuntimeError: after the kernel"),
    ],
    ids=["two_kernel_calls", "kernel_then_raised"],
)
def test_a_call_that_is_neither_refused_nor_one_kernel_call_is_unmeasured(
    change: Callable[[dict[str, Any]], None],
) -> None:
    raw = _raw_backend("product")
    change(raw["patterns"]["kAllReduce"]["shapes"]["fewer_tokens"])
    entry = classify_backend(raw)
    assert entry["patterns"]["kAllReduce"]["check"] == "unmeasured"
    assert entry["check"] == "product"


def test_no_pattern_measured_is_unmeasured() -> None:
    raw = _raw_backend("product")
    for pattern in raw["patterns"].values():
        pattern["shapes"]["same"] = _raw_shape("same", False)
    entry = classify_backend(raw)
    assert (entry["check"], entry["reaches"]) == ("unmeasured", "unmeasured")
    assert entry["sufficient"]["agrees"] is False


def test_a_workspace_that_cannot_be_created_is_unmeasured() -> None:
    entry = classify_backend({"workspace": {"error": "RuntimeError: no multicast"}})
    assert entry["check"] == "unmeasured"
    assert "no multicast" in entry["detail"]


def test_an_error_document_leaves_every_backend_unmeasured() -> None:
    entry = classify({"error": "import flashinfer.comm: boom"})
    assert set(entry) == set(BACKENDS)
    assert all(e["check"] == "unmeasured" and "boom" in e["detail"] for e in entry.values())


def test_a_backend_the_probe_left_out_is_unmeasured() -> None:
    entry = classify({"backends": {"trtllm": _raw_backend("product")}})
    assert entry["trtllm"]["check"] == "product"
    assert entry["mnnvl"]["check"] == "unmeasured"


# ------------------------------------------------------------------- the shipped file


def _rebuilt(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The probe document a shipped backend entry was classified from (as far as kept)."""
    workspace: dict[str, Any] = dict(entry["workspace"])
    workspace["sufficient_signature"] = entry["sufficient"]["signature"]
    observations = entry["observations"]
    patterns: dict[str, Any] = {}
    for pattern in entry["patterns"]:
        shapes: dict[str, Any] = {}
        for name, observation in observations[pattern].items():
            raw: dict[str, Any] = {"shape": observation["shape"]}
            if observation["outcome"] == "kernel":
                raw.update(kernel=["kernel"], reached=[observation["reached"]])
            elif observation["outcome"] == "raised":
                raw.update(
                    kernel=[],
                    reached=[],
                    error=observation["error"],
                    raised_in=observation["raised_in"],
                )
            else:
                raw.update(
                    kernel=observation["kernel"], reached=[None] * len(observation["kernel"])
                )
                if "error" in observation:
                    raw["error"] = observation["error"]
            shapes[name] = raw
        patterns[pattern] = {"code": 0, "shapes": shapes}
    return {"workspace": workspace, "sufficient": observations["sufficient"], "patterns": patterns}


MEASURED = sorted(
    (
        (version, backend)
        for version, entry in SHIPPED.items()
        for backend in BACKENDS
        if "patterns" in entry[backend]
    ),
    key=lambda item: (Version(item[0]), item[1]),
)


@pytest.mark.parametrize(("version", "backend"), MEASURED)
def test_every_shipped_entry_classifies_back_from_its_observations(
    version: str, backend: str
) -> None:
    entry = SHIPPED[version][backend]
    assert classify_backend(_rebuilt(entry)) == entry


def test_the_shipped_file_covers_every_release_from_0_6_0() -> None:
    document = json.loads(SHIPPED_TEXT)
    assert (document["schema"], document["tool"]) == (1, "tools/sizes.py")
    assert sorted(SHIPPED, key=Version) == sizes.recorded_releases()
    assert document["shapes"] == {name: list(size) for name, size in SHAPES.items()}


def test_the_shipped_trtllm_rule_is_the_product_wherever_it_was_measured() -> None:
    measured = {v: e["trtllm"] for v, e in SHIPPED.items() if e["trtllm"]["check"] != "unmeasured"}
    assert measured
    assert {(e["check"], e["reaches"], e["sufficient"]["rule"]) for e in measured.values()} == {
        ("product", "call", "product")
    }


def test_the_shipped_file_is_the_dump_of_its_releases() -> None:
    assert dump_document(build_document(SHIPPED)) == SHIPPED_TEXT


def test_the_package_ships_only_what_the_runtime_reads_of_the_measurement() -> None:
    """``fi_compat/_measured/sizes.json`` is the measurement's projection, byte for byte, and
    holds per backend only the keys ``fi_compat.comm._sizes`` reads."""
    text = sizes.SHIPPED.read_text(encoding="utf-8")
    assert text == dump_document(sizes.shipped_document(SHIPPED))
    runtime = json.loads(text)["releases"]
    assert set(runtime) == set(SHIPPED)
    keys = {key for backends in runtime.values() for entry in backends.values() for key in entry}
    assert keys <= set(sizes.SHIPPED_KEYS)
    assert len(text) < len(SHIPPED_TEXT) / 50


def test_the_document_sorts_releases_by_version() -> None:
    text = dump_document(build_document({"0.10.0": {}, "0.6.2": {}, "0.6.10": {}}))
    assert list(json.loads(text)["releases"]) == ["0.6.2", "0.6.10", "0.10.0"]


# --------------------------------------------------------------------------- main()


def _fake(entries: Mapping[str, Any]) -> Callable[[str], dict[str, Any]]:
    def measure(version: str) -> dict[str, Any]:
        if version not in entries:
            raise RuntimeError(f"no such release {version}")
        return copy.deepcopy(dict(entries[version]))

    return measure


def test_main_writes_then_check_passes_and_fails_on_a_difference(tmp_path: Path) -> None:
    output, shipped = tmp_path / "sizes.json", tmp_path / "shipped.json"
    entries = {
        "0.7.2.post1": {
            "trtllm": {"check": "product", "reaches": "call", "sufficient": {"rule": "product"}},
            "mnnvl": {"check": "bytes"},
        }
    }

    def main(argv: list[str], found: Mapping[str, Any]) -> int:
        return sizes.main(argv, output=output, shipped=shipped, measure=_fake(found))

    assert main(["0.7.2.post1"], entries) == 0
    written = output.read_text(encoding="utf-8")
    assert json.loads(written)["releases"] == entries
    # the shipped file: what the runtime reads of it
    assert json.loads(shipped.read_text(encoding="utf-8"))["releases"] == {
        "0.7.2.post1": {
            "trtllm": {"check": "product", "reaches": "call"},
            "mnnvl": {"check": "bytes"},
        }
    }
    assert main(["--check", "0.7.2.post1"], entries) == 0
    changed = {"0.7.2.post1": {"trtllm": {"check": "none"}, "mnnvl": {"check": "bytes"}}}
    assert main(["--check", "0.7.2.post1"], changed) == 1
    assert output.read_text(encoding="utf-8") == written
    # a shipped file that is not the measurement's projection fails the check
    shipped.write_text(shipped.read_text(encoding="utf-8").replace("product", "none"))
    assert main(["--check", "0.7.2.post1"], entries) == 1


def test_main_keeps_other_releases_and_fails_on_an_unmeasurable_one(tmp_path: Path) -> None:
    output, shipped = tmp_path / "sizes.json", tmp_path / "shipped.json"
    first = {"0.6.0": {"trtllm": {"check": "product"}}}
    assert sizes.main(["0.6.0"], output=output, shipped=shipped, measure=_fake(first)) == 0
    second = {"0.7.0": {"trtllm": {"check": "product"}}}
    assert (
        sizes.main(["0.7.0", "9.9.9"], output=output, shipped=shipped, measure=_fake(second)) == 1
    )
    assert set(json.loads(shipped.read_text(encoding="utf-8"))["releases"]) == {"0.6.0", "0.7.0"}
    assert set(json.loads(output.read_text(encoding="utf-8"))["releases"]) == {"0.6.0", "0.7.0"}


# ------------------------------------------------------- the real releases (release_matrix)


def _rules(entry: Mapping[str, Any]) -> tuple[tuple[str, ...], ...]:
    """Every backend's rules, and which patterns it measured (the key of a combination)."""
    return tuple(
        (
            backend,
            value["check"],
            str(value.get("reaches")),
            str(value.get("sufficient", {}).get("rule")),
            *(f"{p}={e['check']}" for p, e in sorted(value.get("patterns", {}).items())),
        )
        for backend, value in sorted(entry.items())
    )


def _newest_per_rule() -> list[str]:
    """The newest release of each distinct combination of every backend's rules."""
    newest: dict[tuple[tuple[str, ...], ...], str] = {}
    for version, entry in SHIPPED.items():
        key = _rules(entry)
        if key not in newest or Version(version) > Version(newest[key]):
            newest[key] = version
    return sorted(newest.values(), key=Version)


RULE_RELEASES = _newest_per_rule()


@pytest.fixture(scope="module")
def remeasured() -> dict[str, Any]:
    """Each release's fresh entry, two at a time; an exception is kept as the result."""
    pytest.importorskip("torch", reason="needs torch")
    from concurrent.futures import ThreadPoolExecutor

    from tools.releases import RegistryUnreachableError, ReleaseCache

    def attempt(version: str) -> Any:
        try:
            return sizes.measure_release(version, ReleaseCache())
        except Exception as error:
            return error

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip(RULE_RELEASES, pool.map(attempt, RULE_RELEASES), strict=True))
    for result in results.values():
        if isinstance(result, RegistryUnreachableError):
            pytest.skip(f"package registry unreachable, real releases not run: {result}")
    return results


def test_every_rule_combination_has_a_release() -> None:
    assert len(RULE_RELEASES) == len({_rules(entry) for entry in SHIPPED.values()})


@pytest.mark.release_matrix
@pytest.mark.parametrize("version", RULE_RELEASES)
def test_a_fresh_measurement_gives_the_shipped_entry(
    remeasured: dict[str, Any], version: str
) -> None:
    result = remeasured[version]
    if isinstance(result, BaseException):
        raise result
    assert result == SHIPPED[version]
