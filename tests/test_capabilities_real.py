"""The probe and the report against the real flashinfer-python the test set-up installs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.support.release_harness import NINE, reported_answers

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]


def test_report_json_answers_supported_for_all_nine() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fi_compat",
            "report",
            "--json",
            "--require",
            "group,comm_backend,trigger_completion_at_end,fixed_split_size,disable_split_kv",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["flashinfer"]["installed"] is True
    assert report["flashinfer"]["import_error"] is None
    assert report["comm"]["available"] is True, report["comm"]["error"]
    assert report["comm"]["unified_api"] is True
    assert reported_answers(report) == dict.fromkeys(NINE, "supported")
    assert len(NINE) == 9
    assert report["require"]["missing"] == []
    # The decode wrapper's plan forwards **kwargs (0.6.15+); the answer comes from the target.
    decode = report["signatures"]["flashinfer.BatchDecodeWithPagedKVCacheWrapper.plan"]
    assert decode["open_ended"] is False
    assert decode["via"][-1].endswith("_plan_impl")


def test_probe_in_process_matches_inspect() -> None:
    import inspect

    import flashinfer
    import flashinfer.comm

    from fi_compat.capabilities import get_capabilities

    caps = get_capabilities(refresh=True)
    declared = set(inspect.signature(flashinfer.comm.allreduce_fusion).parameters)
    shape = caps.comm.shapes["allreduce_fusion"]
    assert shape.keywords is not None
    assert set(shape.keywords) == declared - {
        name
        for name, p in inspect.signature(flashinfer.comm.allreduce_fusion).parameters.items()
        if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    assert caps.flashinfer.version == flashinfer.__version__
