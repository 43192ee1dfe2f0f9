"""SGLang's and vLLM's call shapes run unchanged on ``fi_compat.comm``, on every release.

The promise: an engine swaps ``import flashinfer.comm as comm`` for ``import fi_compat.comm
as comm`` (and ``from flashinfer.comm.mnnvl import X`` for ``from fi_compat.comm.mnnvl
import X``) and its code runs unchanged on every FlashInfer release from 0.5.3 on, or gets
a typed refusal that names the release to install. Each shape of
:mod:`tests.support.engine_shapes` runs against ``fi_compat.comm`` inside
``fake_flashinfer(V)`` for every recorded release V >= 0.5.3; each (shape, release) must
come out "runs", "mapped", "degrades safely" or "refused", the one the recorded release
implies, with the right FlashInfer function, the engine's own tensors, the release's
pattern code and only keywords the release takes reaching the fake. The summary test keeps
the counts, so that a regression shows as a changed count.

The two-process test runs SGLang-style code over a real gloo group in two CPU processes
(``tests/support/engine_worker.py``) for a few releases.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import warnings
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
import fi_compat.comm.mnnvl as mnnvl
from fi_compat._surface import (
    LEGACY_DESTROY,
    LEGACY_FACTORY,
    LEGACY_FUSION,
    MNNVL_MODULE,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
)
from fi_compat.comm._sizes import measured
from fi_compat.errors import (
    CallSizeUnsupportedError,
    FiCompatError,
    InvalidArgumentError,
    NameUnavailableError,
)
from fi_compat.report import REQUIREMENT_NAMES
from fi_compat.testing import (
    Call,
    FunctionRecord,
    ReleaseRecord,
    available_releases,
    fake_flashinfer,
    introduced_in,
    load_release,
)
from tests.support import release_classes
from tests.support.engine_shapes import (
    OUTCOMES,
    SHAPES,
    Asked,
    Engine,
    Group,
    Outcome,
    Trace,
    names_a_later_release,
    run_shape,
)
from tests.support.ranks import run_ranks

#: The oldest release the promise covers (the issue's floor).
FLOOR = Version("0.5.3")
#: Final releases only: the per-call sizes and layers are measured for those; a
#: pre-release is recorded, not measured.
RELEASES = [v for v in available_releases() if Version(v) >= FLOOR and not Version(v).is_prerelease]
#: The releases the tests below run on: the first and last of each 'names' class
#: (tests/support/release_classes.py; every one with --all-releases).
SWEPT = release_classes.releases("names", RELEASES)
NEWEST = RELEASES[-1]
TRTLLM_WORKSPACE = "TRTLLMAllReduceFusionWorkspace"
MNNVL_WORKSPACE = "MNNVLAllReduceFusionWorkspace"
TRIGGER = "trigger_completion_at_end"
BIAS = "weight_bias"
#: The first recorded release whose fused call takes ``weight_bias`` (Gemma's RMSNorm).
FIRST_BIAS = next(v for v in RELEASES if load_release(v).accepts(UNIFIED_FUSION.key, BIAS))
#: Tensor arguments the engines pass, checked by identity where they reach FlashInfer.
TENSORS = (
    "input",
    "output",
    "residual_out",
    "norm_out",
    "quant_out",
    "scale_out",
    "residual_in",
    "rms_gamma",
    "scale_factor",
)
LEGACY_NAMES = {"input": "allreduce_in", "output": "allreduce_out", "pattern": "pattern_code"}
DROPIN_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(comm.allreduce_fusion).parameters.items()
}

#: How many releases each shape runs on, is mapped on, degrades on, or is refused on
#: (recorded releases from 0.5.3 to 0.7.2.post1). A change here is a change of behaviour.
EXPECTED_COUNTS: Mapping[str, Mapping[str, int]] = {
    "sglang_probe": {"runs": 24, "mapped": 15, "degrades safely": 0, "refused": 1},
    "sglang_workspace": {"runs": 24, "mapped": 16, "degrades safely": 0, "refused": 0},
    "sglang_workspace_mnnvl": {"runs": 24, "mapped": 15, "degrades safely": 0, "refused": 1},
    "sglang_fused_rmsnorm": {"runs": 28, "mapped": 12, "degrades safely": 0, "refused": 0},
    "sglang_allreduce_only": {"runs": 28, "mapped": 1, "degrades safely": 11, "refused": 0},
    "vllm_workspace": {"runs": 16, "mapped": 0, "degrades safely": 23, "refused": 1},
    "vllm_workspace_mnnvl": {"runs": 16, "mapped": 0, "degrades safely": 23, "refused": 1},
    "vllm_fused_rmsnorm": {"runs": 39, "mapped": 0, "degrades safely": 0, "refused": 1},
    "vllm_fused_gemma_rmsnorm": {"runs": 19, "mapped": 0, "degrades safely": 0, "refused": 21},
    "vllm_fused_rmsnorm_fp8": {"runs": 39, "mapped": 0, "degrades safely": 0, "refused": 1},
    "vllm_fused_rmsnorm_fp4": {"runs": 39, "mapped": 0, "degrades safely": 0, "refused": 1},
    "vllm_allreduce": {"runs": 28, "mapped": 0, "degrades safely": 11, "refused": 1},
    # Refused on the legacy API (0.5.3) only: 0.6.16 to 0.6.16.post3, which do not import
    # below Python 3.12, are measured with fd_exchange.py's annotations deferred (served).
    "sglang_compile_narrower": {"runs": 28, "mapped": 0, "degrades safely": 11, "refused": 1},
    "vllm_draft_model": {"runs": 39, "mapped": 0, "degrades safely": 0, "refused": 1},
}


# ------------------------------------------------------------------------ the recorded data


def _has_dist_backend(record: ReleaseRecord) -> bool:
    return TORCH_DIST_BACKEND.key in record.public_names(MNNVL_MODULE)


def _methods(record: ReleaseRecord, class_name: str) -> Mapping[str, FunctionRecord | None]:
    name = record.public_names(UNIFIED_FACTORY.homes[0].module).get(class_name)
    if name is None or name.cls is None:
        return {}
    return name.cls.methods


def _checkpoints(record: ReleaseRecord, class_name: str) -> bool:
    return _methods(record, class_name).get("checkpoint_prepare") is not None


def _serves_other_widths(record: ReleaseRecord) -> bool:
    """A TRT-LLM workspace of ``record`` serves calls of another width (``sizes.json``:
    measured per release; never on the legacy API)."""
    facts = measured().get(record.release, {}).get("trtllm", {})
    return bool(record.unified_api) and facts.get("check") == "product"


def _takes(record: ReleaseRecord, function: str, keyword: str) -> bool:
    return record.accepts(function, keyword)


def expected_outcome(shape: str, record: ReleaseRecord) -> str:
    """What each shape must come out as on ``record``, from the recorded signatures alone."""
    group = _takes(record, UNIFIED_FACTORY.key, "group")
    trigger = _takes(record, UNIFIED_FUSION.key, TRIGGER)
    # A call of another width than its workspace's, where fi-compat serves only the
    # creation width (the legacy API, a release whose sizes were not measured): refused,
    # naming the release that serves it.
    other_width = _serves_other_widths(record)
    if shape.startswith("vllm_"):
        if not _has_dist_backend(record):
            return "refused"  # vLLM builds a TorchDistBackend for every workspace
        if shape == "vllm_draft_model":
            return "runs" if other_width else "refused"
        if shape.startswith("vllm_workspace"):
            kind = MNNVL_WORKSPACE if shape.endswith("mnnvl") else TRTLLM_WORKSPACE
            if not _checkpoints(record, kind):
                return "degrades safely"  # stays resident while suspended
            return "runs" if group else "mapped"
        if shape == "vllm_allreduce" and not trigger:
            return "degrades safely"  # 4 tokens ask for an early signal
        if shape == "vllm_fused_gemma_rmsnorm" and not _takes(record, UNIFIED_FUSION.key, BIAS):
            return "refused"  # no equivalent: the kernel adds no bias to the weight
        return "runs"  # one-shot TRT-LLM completes at the end: nothing to map
    if shape == "sglang_probe":
        if not _has_dist_backend(record):
            return "refused"
        return "runs" if group and trigger else "mapped"
    if shape == "sglang_compile_narrower" and not other_width:
        return "refused"
    if not record.unified_api:
        return "refused" if shape == "sglang_workspace_mnnvl" else "mapped"
    if shape.startswith("sglang_workspace"):
        return "runs" if group else "mapped"
    if shape == "sglang_fused_rmsnorm" and not trigger:
        # The TRT-LLM workspace's pointers run the legacy kernel, which takes the flag.
        return "mapped" if record.legacy_api else "degrades safely"
    if shape in ("sglang_allreduce_only", "sglang_compile_narrower") and not trigger:
        return "degrades safely"
    return "runs"


def _pattern_code(record: ReleaseRecord, code: int) -> int:
    """The installed release's code for fi-compat's pattern ``code`` (same member name)."""
    member = next(k for k, v in vars(comm.AllReduceFusionPattern).items() if v == code)
    enum = record.comm_enums["AllReduceFusionPattern"]
    assert enum is not None
    value = enum.members[member]
    assert isinstance(value, int)
    return value


def _keywords(record: ReleaseRecord, name: str) -> tuple[set[str], set[str]]:
    """What ``name`` takes by keyword, and what it requires."""
    func = record.comm_function(name)
    assert func is not None, name
    required = {p.name for p in func.parameters if p.accepts_keyword and not p.has_default}
    return set(func.keyword_names), required


# ----------------------------------------------------------------------- running the matrix


@dataclass
class ReleaseRun:
    """Every shape run under one fake release (one fake per release keeps the suite fast)."""

    record: ReleaseRecord
    outcomes: dict[str, Outcome]
    separate_groups: dict[str, Outcome]
    imports: dict[str, BaseException | None]
    attribute_errors: dict[str, BaseException | None]


def _import_line(name: str) -> BaseException | None:
    """``from fi_compat.comm.mnnvl import <name>``, as an engine writes it."""
    try:
        exec(f"from fi_compat.comm.mnnvl import {name}", {})
    except ImportError as error:
        return error
    return None


def _attribute(name: str) -> BaseException | None:
    try:
        getattr(mnnvl, name)
    except AttributeError as error:
        return error
    return None


@functools.cache
def release_run(version: str) -> ReleaseRun:
    with fake_flashinfer(version) as fake:
        outcomes = {name: run_shape(name, fake, Engine(comm, mnnvl)) for name in SHAPES}
        separate = {
            name: run_shape(
                name,
                fake,
                Engine(comm, mnnvl, device_group=Group("nccl"), cpu_group=Group("gloo")),
            )
            for name in ("sglang_workspace", "sglang_fused_rmsnorm")
        }
        names = (TORCH_DIST_BACKEND.key, "CommBackend")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            imports = {name: _import_line(name) for name in names}
            attributes = {name: _attribute(name) for name in names}
        return ReleaseRun(fake.record, outcomes, separate, imports, attributes)


def _shape_ids() -> list[tuple[str, str]]:
    return [(shape, version) for version in SWEPT for shape in SHAPES]


# ------------------------------------------------------------------------------- assertions


def _kernel(outcome: Outcome, asked: Asked) -> Call:
    kernels = [
        c for c in outcome.calls_of(asked) if c.name in (UNIFIED_FUSION.key, LEGACY_FUSION.key)
    ]
    assert len(kernels) == 1, [c.name for c in outcome.calls_of(asked)]
    return kernels[0]


def _check_fused_delivery(outcome: Outcome, asked: Asked, record: ReleaseRecord) -> None:
    """What reached FlashInfer for one fused call the engine made."""
    call = _kernel(outcome, asked)
    workspace = asked.kwargs["workspace"]
    assert isinstance(workspace, comm.FusionWorkspace)
    trigger = asked.kwargs.get(TRIGGER, True)
    legacy_route = workspace.api == "legacy" or (
        not record.accepts(UNIFIED_FUSION.key, TRIGGER)
        and trigger is False
        and asked.kwargs["pattern"] == comm.AllReduceFusionPattern.kARResidualRMSNorm
        and workspace.backend == "trtllm"
        and record.legacy_api
    )
    assert call.name == (LEGACY_FUSION.key if legacy_route else UNIFIED_FUSION.key)
    taken, required = _keywords(record, call.name)
    assert set(call.arguments) <= taken  # the fake raised TypeError otherwise
    assert required <= set(call.arguments)
    names = LEGACY_NAMES if legacy_route else {}
    pattern = call.arguments[names.get("pattern", "pattern")]
    assert pattern == _pattern_code(record, asked.kwargs["pattern"])
    for name in TENSORS:
        value = asked.kwargs.get(name)
        if isinstance(value, torch.Tensor):
            assert call.arguments[names.get(name, name)] is value, name
    if legacy_route:
        pointers = outcome.trace.made(workspace).pointers
        assert pointers is not None
        assert call.arguments["workspace_ptrs"] is pointers
        assert call.arguments[TRIGGER] is trigger
        assert call.arguments["launch_with_pdl"] is asked.kwargs["launch_with_pdl"]
        assert (call.arguments["world_size"], call.arguments["world_rank"]) == (2, 0)
    else:
        assert call.arguments["workspace"] is workspace.native
        assert call.arguments["launch_with_pdl"] is True
        if TRIGGER in call.arguments:
            assert call.arguments[TRIGGER] is trigger
        else:  # the default (True), or a release without the flag
            assert trigger is True or not record.accepts(UNIFIED_FUSION.key, TRIGGER)
        for name in ("fp32_acc", "use_oneshot", "layout_code", "rms_eps", "weight_bias"):
            if name not in asked.kwargs:
                continue
            value = asked.kwargs[name]
            if name in call.arguments:
                assert call.arguments[name] == value, name
                assert type(call.arguments[name]) is type(value), name
            else:  # left out only at the drop-in's default, which is the release's
                assert value == DROPIN_DEFAULTS[name], name


def _check_factory_delivery(outcome: Outcome, asked: Asked, record: ReleaseRecord) -> None:
    made = [
        c for c in outcome.calls_of(asked) if c.name in (UNIFIED_FACTORY.key, LEGACY_FACTORY.key)
    ]
    assert len(made) == 1
    (call,) = made
    taken, required = _keywords(record, call.name)
    assert set(call.arguments) <= taken
    assert required <= set(call.arguments)
    kwargs = asked.kwargs
    if record.unified_api:
        assert call.name == UNIFIED_FACTORY.key
        for name in ("backend", "world_size", "rank", "max_token_num", "hidden_dim"):
            assert call.arguments[name] == kwargs[name], name
        assert call.arguments["dtype"] is kwargs["dtype"]
        if "comm_backend" in kwargs:
            assert call.arguments["comm_backend"] is kwargs["comm_backend"]
        if record.accepts(UNIFIED_FACTORY.key, "group"):
            assert call.arguments["group"] is kwargs["group"]
        else:
            assert "group" not in call.arguments
    else:
        assert call.name == LEGACY_FACTORY.key
        assert (call.arguments["tp_rank"], call.arguments["tp_size"]) == (
            kwargs["rank"],
            kwargs["world_size"],
        )
        assert call.arguments["max_token_num"] == kwargs["max_token_num"]
        assert call.arguments["hidden_dim"] == kwargs["hidden_dim"]
        if record.accepts(LEGACY_FACTORY.key, "group"):
            assert call.arguments["group"] is kwargs["group"]


def _destroyed(workspace: Any) -> bool:
    result: bool = workspace.destroyed
    return result


def _check_destroyed(outcome: Outcome) -> None:
    names = [call.name for call in outcome.calls]
    for workspace in outcome.trace.workspaces:
        assert _destroyed(workspace)
        if workspace.api == "legacy":
            assert LEGACY_DESTROY.key in names
        else:
            assert f"{type(workspace.native).__name__}.destroy" in names


def _check_refusal(outcome: Outcome, record: ReleaseRecord) -> None:
    errors = [outcome.error] if outcome.error is not None else outcome.trace.refused
    assert errors
    for error in errors:
        assert isinstance(error, FiCompatError)
        assert names_a_later_release(error, record.release), str(error)
        if isinstance(error, NameUnavailableError):
            assert error.introduced_in is not None
            assert Version(error.introduced_in) > record.version
            assert error.introduced_in in str(error)
    # Nothing the refused call asked for reached a kernel (the calls before it may have:
    # vLLM's draft model runs the target's own width first).
    refused = outcome.trace.asked[-1:] if outcome.error is not None else []
    calls = outcome.calls_of(refused[0]) if refused else outcome.calls
    assert not [c for c in calls if c.name in (UNIFIED_FUSION.key, LEGACY_FUSION.key)]
    if shape_of_one_width(outcome.shape):
        assert not [c for c in outcome.calls if c.name in (UNIFIED_FUSION.key, LEGACY_FUSION.key)]


def shape_of_one_width(shape: str) -> bool:
    """Every call of ``shape`` is of its workspace's own sizes."""
    return shape not in ("vllm_draft_model", "sglang_compile_narrower")


# ------------------------------------------------------------------------------------ tests


def test_the_matrix_spans_the_promise() -> None:
    assert RELEASES[0] == str(FLOOR)
    assert any(not load_release(v).unified_api for v in RELEASES)
    assert any(not load_release(v).accepts(UNIFIED_FUSION.key, TRIGGER) for v in RELEASES[1:])
    assert available_releases()[-1] == NEWEST


@pytest.mark.parametrize(("shape", "version"), _shape_ids())
def test_shape_on_release(shape: str, version: str) -> None:
    run = release_run(version)
    outcome = run.outcomes[shape]
    record = run.record
    assert outcome.kind in OUTCOMES, outcome.reasons
    assert outcome.kind == expected_outcome(shape, record), outcome.reasons
    if outcome.kind == "refused":
        _check_refusal(outcome, record)
        if shape == "vllm_fused_gemma_rmsnorm" and _has_dist_backend(record):
            assert FIRST_BIAS in str(outcome.error)  # the release to install
        return
    for asked in outcome.trace.asked:
        if asked.name == UNIFIED_FUSION.key:
            _check_fused_delivery(outcome, asked, record)
        elif asked.name == UNIFIED_FACTORY.key:
            _check_factory_delivery(outcome, asked, record)
    _check_destroyed(outcome)


@pytest.mark.parametrize("version", SWEPT)
def test_sglang_probe_sees_the_newest_signatures(version: str) -> None:
    """fi-compat's drop-ins carry the newest signature on every release, so SGLang's
    feature flags read True everywhere; the subclasses build on what the release has."""
    run = release_run(version)
    outcome = run.outcomes["sglang_probe"]
    newest = load_release(NEWEST)
    probed = outcome.trace.probed
    assert probed == {
        (UNIFIED_FACTORY.key, "group"): newest.accepts(UNIFIED_FACTORY.key, "group"),
        (UNIFIED_FACTORY.key, "comm_backend"): newest.accepts(UNIFIED_FACTORY.key, "comm_backend"),
        (UNIFIED_FUSION.key, TRIGGER): newest.accepts(UNIFIED_FUSION.key, TRIGGER),
    }
    probe = outcome.trace.notes["probe"]
    assert probe.available
    assert (probe.dist_backend is not None) == _has_dist_backend(run.record)
    has_comm_backend = "CommBackend" in run.record.public_names(MNNVL_MODULE)
    assert (probe.comm_backend_class is not None) == has_comm_backend
    assert not outcome.calls  # probing calls nothing


@pytest.mark.parametrize("version", SWEPT)
@pytest.mark.parametrize("shape", ["sglang_workspace", "sglang_workspace_mnnvl"])
def test_sglang_reads_the_workspace_interface(shape: str, version: str) -> None:
    run = release_run(version)
    outcome = run.outcomes[shape]
    if outcome.kind == "refused":
        assert not run.record.unified_api
        return
    notes = outcome.trace.notes
    (workspace,) = outcome.trace.workspaces
    assert notes["backend"] == ("mnnvl" if shape.endswith("mnnvl") else "trtllm")
    if notes["backend"] == "trtllm":
        assert notes["use_fp32_lamport"] is False  # bfloat16
    assert notes["fits"] is True
    if workspace.fit.rule != "bytes":  # max_token_num + 1 tokens of hidden_dim: over the product
        assert notes["fits_too_many"] is False
    if workspace.api == "unified":
        kind = type(workspace.native).__name__
        check = _methods(run.record, kind)["is_buffer_size_sufficient"]
        assert check is not None
        expected = next(n for n in ("use_oneshot", "strategy") if n in check.keyword_names)
        assert notes["size_keyword"] == expected
        asked = [c for c in outcome.calls if c.name == f"{kind}.is_buffer_size_sufficient"]
        if workspace.fit.rule == "bytes":  # the bytes its buffer holds: the release answers
            assert [call.arguments["num_tokens"] for call in asked][:2] == [
                notes["tokens"],
                notes["tokens_too_many"],
            ]
            assert notes["fits_too_many"] is notes["native_fits_too_many"]
        if expected == "strategy":
            assert {call.arguments["strategy"].name for call in asked} == {"ONESHOT"}
    else:
        assert notes["size_keyword"] == "use_oneshot"
        assert any("gpus_per_node" in d for d in workspace.decisions)
        assert any("comm_backend not passed" in d for d in workspace.decisions)


@pytest.mark.parametrize("version", SWEPT)
@pytest.mark.parametrize("shape", ["vllm_workspace", "vllm_workspace_mnnvl"])
def test_vllm_reads_the_workspace_interface(shape: str, version: str) -> None:
    run = release_run(version)
    outcome = run.outcomes[shape]
    if outcome.kind == "refused":
        assert not _has_dist_backend(run.record)
        assert isinstance(outcome.error, NameUnavailableError)
        assert outcome.error.introduced_in == introduced_in(MNNVL_MODULE, TORCH_DIST_BACKEND.key)
        assert not outcome.calls
        return
    notes = outcome.trace.notes
    (workspace,) = outcome.trace.workspaces
    kind = type(workspace.native).__name__
    assert kind == (MNNVL_WORKSPACE if shape.endswith("mnnvl") else TRTLLM_WORKSPACE)
    assert isinstance(notes["mc_ptr"], int)
    if shape.endswith("mnnvl"):
        assert notes["mc_ptr"] > 0  # the fake's GPUs have multicast: the workspace is kept
    else:
        assert notes["mc_ptr"] == 0  # a TRT-LLM workspace has none: getattr's default
    assert notes["fits"] is True
    names = [call.name for call in outcome.calls]
    for method in ("checkpoint_prepare", "checkpoint_restore"):
        if _checkpoints(run.record, kind):
            assert notes[method] == "done"
            assert f"{kind}.{method}" in names
        else:
            assert notes[method] == "unsupported"
            assert f"{kind}.{method}" not in names
    for restore in [c for c in outcome.calls if c.name == f"{kind}.checkpoint_restore"]:
        assert type(restore.arguments["comm_backend"]).__name__.endswith(TORCH_DIST_BACKEND.key)


@pytest.mark.parametrize("version", SWEPT)
def test_sglang_with_separate_device_and_cpu_groups(version: str) -> None:
    """SGLang on a GPU node: NCCL device group and gloo CPU group, two objects over the same
    ranks. With no torch.distributed to compare them, fi-compat may refuse on the legacy API
    (the comm_backend's group is not the group=); it must never pass one it cannot honour."""
    run = release_run(version)
    for name, outcome in run.separate_groups.items():
        assert outcome.kind in OUTCOMES, (name, outcome.reasons)
        if outcome.kind == "refused":
            assert not run.record.unified_api
            _check_refusal(outcome, run.record)
            continue
        (factory,) = [a for a in outcome.trace.asked if a.name == UNIFIED_FACTORY.key]
        assert factory.kwargs["group"].label == "nccl"
        made = [c for c in outcome.calls if c.name in (UNIFIED_FACTORY.key, LEGACY_FACTORY.key)]
        (call,) = made
        if "group" in call.arguments:
            assert call.arguments["group"] is factory.kwargs["group"]


@pytest.mark.parametrize("version", SWEPT)
def test_engine_import_lines(version: str) -> None:
    """``from fi_compat.comm.mnnvl import X`` fails where ``from flashinfer.comm.mnnvl import
    X`` fails, with the ImportError engines catch; the attribute names the release."""
    run = release_run(version)
    for name, error in run.imports.items():
        present = name in run.record.public_names(MNNVL_MODULE)
        assert (error is None) == present, (name, error)
        attribute_error = run.attribute_errors[name]
        assert (attribute_error is None) == present
        if attribute_error is not None:
            assert isinstance(attribute_error, NameUnavailableError)
            first = introduced_in(MNNVL_MODULE, name)
            assert first is not None
            assert attribute_error.introduced_in == first
            assert first in str(attribute_error)


def _summary() -> dict[str, Counter[str]]:
    table: dict[str, Counter[str]] = {shape: Counter() for shape in SHAPES}
    for version in RELEASES:
        for shape, outcome in release_run(version).outcomes.items():
            table[shape][outcome.kind] += 1
    return table


def test_summary_counts(capsys: pytest.CaptureFixture[str]) -> None:
    table = _summary()
    width = max(map(len, SHAPES))
    columns = (*OUTCOMES, "failure")
    lines = [f"{'shape':<{width}}  " + "  ".join(f"{k:>15}" for k in columns)]
    for shape, counts in table.items():
        lines.append(f"{shape:<{width}}  " + "  ".join(f"{counts[k]:>15}" for k in columns))
    totals = sum(table.values(), Counter())
    lines.append(f"{'total':<{width}}  " + "  ".join(f"{totals[k]:>15}" for k in columns))
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    failures = {
        (shape, version): release_run(version).outcomes[shape].reasons
        for shape, version in _shape_ids()
        if release_run(version).outcomes[shape].kind not in OUTCOMES
    }
    assert not failures
    assert {shape: dict(counts) for shape, counts in table.items()} == {
        shape: {k: v for k, v in counts.items() if v} for shape, counts in EXPECTED_COUNTS.items()
    }
    assert all(sum(counts.values()) == len(RELEASES) for counts in EXPECTED_COUNTS.values())


# ----------------------------------------------------------------------- two processes (gloo)


def _gloo_releases() -> list[str]:
    """One legacy-only release, the first unified one without the trigger flag, the first
    whose factory takes group=, and the newest."""
    records = [load_release(v) for v in RELEASES]
    legacy = next(r for r in records if not r.unified_api)
    no_trigger = next(
        r for r in records if r.unified_api and not r.accepts(UNIFIED_FUSION.key, TRIGGER)
    )
    group = next(r for r in records if r.accepts(UNIFIED_FACTORY.key, "group"))
    return sorted({legacy.release, no_trigger.release, group.release, NEWEST}, key=Version)


def expected_session(record: ReleaseRecord) -> str:
    """SGLang's whole session over the world group (whole world: nothing to carry)."""
    if not record.unified_api:
        return "mapped"
    if not record.accepts(UNIFIED_FUSION.key, TRIGGER):
        return "degrades safely"
    if not record.accepts(UNIFIED_FACTORY.key, "group"):
        return "mapped"
    return "runs"


_WORKERS: dict[str, list[dict[str, Any]]] = {}


@pytest.fixture
def gloo_sessions(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Both ranks' results, from one run of the two workers shared by the tests."""
    if "results" not in _WORKERS:
        _WORKERS["results"] = _run_workers(tmp_path_factory.mktemp("engine_workers"))
    return _WORKERS["results"]


def _run_workers(directory: Path) -> list[dict[str, Any]]:
    versions = _gloo_releases()
    run_ranks(
        "tests.support.engine_worker",
        2,
        [str(directory), *versions],
        timeout=120,
    )
    results = [json.loads((directory / f"{rank}.json").read_text()) for rank in range(2)]
    for result in results:
        assert sorted(result, key=Version) == versions
    return results


def _session_problems(run: dict[str, Any], record: ReleaseRecord, rank: int) -> list[str]:
    """What is wrong with one rank's SGLang session on ``record`` (empty: nothing)."""
    problems = []
    expected = expected_session(record)
    if run["kind"] != expected:
        problems.append(f"{record.release}: {run['kind']} instead of {expected}: {run['reasons']}")
        if run["kind"] == "refused":
            return problems  # nothing reached FlashInfer to compare
    factory = UNIFIED_FACTORY.key if record.unified_api else LEGACY_FACTORY.key
    destroy = f"{TRTLLM_WORKSPACE}.destroy" if record.unified_api else LEGACY_DESTROY.key
    trigger = record.accepts(UNIFIED_FUSION.key, TRIGGER)
    if not record.unified_api:
        kernels = [LEGACY_FUSION.key] * 2
    elif not trigger:
        kernels = [LEGACY_FUSION.key, UNIFIED_FUSION.key]  # the pointers honour the flag
    else:
        kernels = [UNIFIED_FUSION.key] * 2
    fused_code = _pattern_code(record, comm.AllReduceFusionPattern.kARResidualRMSNorm)
    allreduce_code = _pattern_code(record, comm.AllReduceFusionPattern.kAllReduce)
    found = {
        "agreed": run["agreed"],
        "destroyed": run["destroyed"],
        "fits": run["fits"],
        "gpus per node": run["gpus_per_node"],
        "first call": run["calls"][0] if run["calls"] else None,
        "last call": run["calls"][-1] if run["calls"] else None,
        "rank": run["factory"]["rank"],
        "group= is the device group": run["factory"]["group_is_the_device_group"],
        "kernels": [k["name"] for k in run["kernels"]],
        "patterns": [k["pattern"] for k in run["kernels"]],
        "tensors": [k["tensors_are_the_engines"] for k in run["kernels"]],
        "triggers": [k["trigger"] for k in run["kernels"]],
    }
    wanted = {
        "agreed": True,
        "destroyed": True,
        "fits": True,
        "gpus per node": 2,
        "first call": factory,
        "last call": destroy,
        "rank": rank,
        "group= is the device group": record.accepts(factory, "group"),
        "kernels": kernels,
        "patterns": [fused_code, allreduce_code],
        "tensors": [True, True],
        # The legacy kernel takes the flag; a unified call without it completes at the end.
        "triggers": [
            "absent" if kernel == UNIFIED_FUSION.key and not trigger else False
            for kernel in kernels
        ],
    }
    problems += [
        f"{record.release}: {key} is {found[key]!r}, expected {wanted[key]!r}"
        for key in wanted
        if found[key] != wanted[key]
    ]
    return problems


@pytest.mark.multiprocess
def test_sglang_over_a_real_gloo_group(gloo_sessions: list[dict[str, Any]]) -> None:
    """SGLang-style code in two processes, one gloo group over both: workspace, fused call,
    all-reduce, destroy, on a legacy-only release, one without the trigger flag, the first
    with group= and the newest."""
    versions = _gloo_releases()
    assert len(versions) == 4
    problems = [
        problem
        for rank, result in enumerate(gloo_sessions)
        for version in versions
        for problem in _session_problems(result[version]["same"], load_release(version), rank)
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.multiprocess
def test_sglang_with_separate_device_and_cpu_groups_over_the_same_ranks(
    gloo_sessions: list[dict[str, Any]],
) -> None:
    """SGLang on a GPU node: its TorchDistBackend (or CommBackend) is over the CPU group,
    group= is the device group, two objects over the same ranks. An equivalent exists on
    every release (the same ranks), so no refusal is due."""
    problems = [
        problem
        for rank, result in enumerate(gloo_sessions)
        for version in _gloo_releases()
        for problem in _session_problems(result[version]["separate"], load_release(version), rank)
    ]
    assert not problems, "\n".join(problems)


class _Swapping:
    """``fi_compat.comm``, but ``allreduce_fusion`` hands FlashInfer a copy of the input."""

    def __getattr__(self, name: str) -> Any:
        return getattr(comm, name)

    @staticmethod
    def allreduce_fusion(**kwargs: Any) -> Any:
        kwargs["input"] = kwargs["input"].clone()
        return comm.allreduce_fusion(**kwargs)


def _untyped(engine: Engine, trace: Trace) -> None:
    raise RuntimeError("the kernel launch failed")


def _nameless(engine: Engine, trace: Trace) -> None:
    raise InvalidArgumentError("a refusal that names no release")


@pytest.mark.parametrize(
    ("shape", "swap", "why"),
    [
        (_untyped, False, "not a typed refusal"),
        (_nameless, False, "not a typed refusal naming a release"),
        (SHAPES["sglang_fused_rmsnorm"], True, "input reached FlashInfer as"),
    ],
)
def test_the_judge_fails_what_breaks_the_promise(shape: Any, swap: bool, why: str) -> None:
    with fake_flashinfer(NEWEST) as fake:
        engine = Engine(_Swapping() if swap else comm, mnnvl)
        outcome = run_shape("broken", fake, engine, shape)
    assert outcome.kind == "failure"
    assert any(why in reason for reason in outcome.reasons), outcome.reasons


def test_worker_module_is_importable() -> None:
    """The worker the gloo test starts imports without torch.distributed being set up."""
    module = importlib.import_module("tests.support.engine_worker")
    assert callable(module.main)


# ------------------------------------------------------- calls of another width (sizes.json)

#: Every recorded release from the first unified one: the width shapes run on each.
UNIFIED = [v for v in RELEASES if load_release(v).unified_api]


def _reached(call: Call) -> tuple[int, int]:
    """The token count and hidden size a fused call hands the kernel."""
    if call.name == LEGACY_FUSION.key:
        return call.arguments["token_num"], call.arguments["hidden_dim"]
    shape = call.arguments["input"].shape
    return int(shape[0]), int(shape[1])


#: ``(shape, release, backend)``: vLLM runs its quant patterns on a TRT-LLM workspace;
#: SGLang resolves ``auto`` to MNNVL on Blackwell and TRT-LLM on Hopper.
_WIDTH_CASES = [
    (shape, version, backend)
    for shape, backends in (
        ("vllm_draft_model", ("trtllm",)),
        ("sglang_compile_narrower", ("trtllm", "mnnvl")),
    )
    for version in UNIFIED
    for backend in backends
]


@pytest.mark.parametrize(("shape", "version", "backend"), _WIDTH_CASES)
def test_calls_of_another_width_run_where_the_release_runs_them(
    shape: str, version: str, backend: str
) -> None:
    """vLLM's draft model (one workspace of the wider width, RMSNorm, FP8 and NVFP4 calls
    of both) and SGLang's compile branch (a narrower all-reduce): served where the
    release's own call serves them, as measured, each call's own sizes reaching the
    kernel; refused before any launch, naming the release that serves them, elsewhere."""
    record = load_release(version)
    with fake_flashinfer(version) as fake:
        outcome = run_shape(shape, fake, Engine(comm, mnnvl, backend=backend))
    (workspace,) = outcome.trace.workspaces
    rule = measured().get(version, {}).get(backend, {}).get("check")
    assert workspace.fit.rule == (rule if rule in ("product", "bytes") else "exact")
    fused = [asked for asked in outcome.trace.asked if asked.name == UNIFIED_FUSION.key]
    own = {tuple(asked.kwargs["input"].shape) for asked in fused}
    if shape == "vllm_draft_model":  # the target's width (the workspace's), then the draft's
        assert outcome.trace.notes["widths"] == [workspace.hidden_dim, workspace.hidden_dim // 2]
    if workspace.fit.rule == "exact":
        assert outcome.kind == "refused", outcome.reasons
        assert isinstance(outcome.error, CallSizeUnsupportedError)
        assert outcome.error.feature == f"per_call_sizes:{backend}"
        assert outcome.error.feature in REQUIREMENT_NAMES  # fi-compat report --require names it
        assert outcome.error.introduced_in is not None
        assert Version(outcome.error.introduced_in) > record.version
        assert outcome.error.introduced_in in str(outcome.error)
        assert not [c for c in outcome.calls_of(fused[-1]) if c.name in _KERNELS]
    else:
        assert outcome.kind in ("runs", "degrades safely"), outcome.reasons
        widths = set()
        for asked in fused:
            (kernel,) = [c for c in outcome.calls_of(asked) if c.name in _KERNELS]
            assert _reached(kernel) == tuple(asked.kwargs["input"].shape)
            widths.add(int(asked.kwargs["input"].shape[1]))
        assert workspace.hidden_dim // 2 in widths  # narrower than the workspace
        assert len(own) == (2 if shape == "vllm_draft_model" else 1)
        if shape == "vllm_draft_model":  # three patterns per model
            assert len(fused) == 6
        assert workspace.destroyed


_KERNELS = (UNIFIED_FUSION.key, LEGACY_FUSION.key)


#: The releases the width shapes run on in two gloo processes: before the trigger flag,
#: the first whose factory takes group=, and the newest.
WIDTH_GLOO = ("0.6.5", "0.6.10.post1", NEWEST)


@pytest.mark.multiprocess
def test_calls_of_another_width_over_a_real_gloo_group(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """SGLang's compile branch and vLLM's draft model in two processes over one gloo group:
    every call of its own width reaches the kernel with its own sizes, on both ranks."""
    directory = tmp_path_factory.mktemp("width_workers")
    run_ranks(
        "tests.support.engine_worker", 2, [str(directory), "--widths", *WIDTH_GLOO], timeout=120
    )
    results = [json.loads((directory / f"{rank}.json").read_text()) for rank in range(2)]
    problems = []
    for rank, result in enumerate(results):
        for version in WIDTH_GLOO:
            for shape, run in result[version].items():
                where = f"rank {rank}, {version}, {shape}"
                if run["kind"] not in ("runs", "degrades safely") or not run["agreed"]:
                    problems.append(f"{where}: {run['kind']} {run['reasons']} {run['error']}")
                    continue
                (hidden,) = run["hidden_dim"]
                widths = {asked[1] for asked in (call["asked"] for call in run["calls"])}
                expected = {hidden, hidden // 2} if shape == "vllm_draft_model" else {hidden // 2}
                if widths != expected:
                    problems.append(f"{where}: widths {widths}, expected {expected}")
                problems += [
                    f"{where}: asked {call['asked']}, the kernel got {call['reached']}"
                    for call in run["calls"]
                    if call["asked"] != call["reached"]
                ]
                if not run["destroyed"]:
                    problems.append(f"{where}: the workspace was not destroyed")
    assert not problems, "\n".join(problems)
