"""What a wrapper holds after ``plan`` and what ``run`` returns: the fake against the release.

The installed release's own ``plan`` and ``run`` run in a subprocess with its compiled
modules replaced by recorders (``tests/support/wrapper_probe.py``, the reach probe's CPU
workarounds); the same calls (:data:`tests.support.wrapper_cases.CASES`: vLLM's settings,
a sliding window with a soft cap, the defaults) run on ``fake_flashinfer`` of that
release. Every attribute the release's recorded planning methods keep
(:attr:`fi_compat._records.FunctionRecord.keeps`) must hold the release's value, and
``run`` must return what the release returns (shape, dtype, device, the very ``out``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

from fi_compat._records import load_release
from fi_compat.testing import fake_flashinfer
from tests.support.wrapper_cases import CASES, DECODE, outcome

ROOT = Path(__file__).resolve().parents[2]

#: What vLLM 0.33.0's forward asserts of the wrapper it planned (prefill also ``_causal``).
VLLM_READS = ("_window_left", "_logits_soft_cap", "_sm_scale")


def _kept(release: str, family: str) -> set[str]:
    """The attributes the release's planning methods of ``family`` keep, per its record."""
    found = load_release(release).attention_family(family)
    assert found is not None, family
    return {
        store.attribute
        for method in found.methods.values()
        if method is not None
        for store in method.keeps
    }


#: Releases of the real-release matrix run besides the installed one: the oldest with the
#: split settings (the wrappers' older ``plan``), one with ``plan(**kwargs)`` forwarding to
#: ``_plan_impl``, and the newest 0.7.0.
MATRIX = ("0.6.5", "0.6.15", "0.7.0.post1")


def _run_cases(environment: Any) -> dict[str, Any]:
    from fi_compat._measured import reach as verdicts
    from tools.reach import run_in_release

    document = run_in_release(
        environment,
        [sys.executable, str(ROOT / "tests" / "support" / "wrapper_probe.py")],
        env={verdicts.NAMES_ENV: json.dumps(verdicts.probe_names())},
        path=[ROOT],
    )
    cases: dict[str, Any] = document["cases"]
    return cases


@pytest.fixture(scope="module")
def installed() -> tuple[str, dict[str, Any]]:
    """The installed release and each case's outcome on it."""
    from tools.reach import SITE_TEMPLATE, ReleaseEnvironment

    if importlib.util.find_spec("flashinfer") is None:
        pytest.skip("flashinfer-python is not installed here (make test installs it)")
    version = importlib.metadata.version("flashinfer-python")
    spec = importlib.util.find_spec("flashinfer")
    assert spec is not None
    assert spec.origin is not None
    installed = Path(spec.origin).resolve().parent.parent
    with tempfile.TemporaryDirectory() as scratch:
        site = Path(scratch) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITE_TEMPLATE.read_text(encoding="utf-8"))
        return version, _run_cases(ReleaseEnvironment(version, installed, site, cudart=None))


def _on_the_fake(release: str, name: str) -> dict[str, Any]:
    with fake_flashinfer(release):
        import flashinfer

        return outcome(torch, flashinfer, CASES[name])


def _check_kept(release: str, name: str, found: dict[str, Any]) -> None:
    """The fake keeps what the release kept, every attribute its record names, and those
    include what vLLM's forward reads."""
    assert "plan_error" not in found, found
    fake = _on_the_fake(release, name)
    assert "plan_error" not in fake, fake
    kept = _kept(release, CASES[name]["family"])
    wanted = set(VLLM_READS) | ({"_causal"} if CASES[name]["family"] != DECODE else set())
    assert wanted <= kept
    assert wanted <= set(found["attributes"])
    for attribute in sorted(kept & set(found["attributes"])):
        assert fake["attributes"].get(attribute, "unset") == found["attributes"][attribute], (
            attribute
        )


@pytest.mark.real_flashinfer
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fake_keeps_what_the_installed_release_plan_keeps(
    installed: tuple[str, dict[str, Any]], name: str
) -> None:
    release, cases = installed
    _check_kept(release, name, cases[name])


@pytest.mark.real_flashinfer
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fake_run_returns_what_the_installed_release_run_returns(
    installed: tuple[str, dict[str, Any]], name: str
) -> None:
    release, cases = installed
    assert isinstance(cases[name]["run"], (dict, list)), cases[name]["run"]
    assert _on_the_fake(release, name)["run"] == cases[name]["run"]


@pytest.mark.release_matrix
@pytest.mark.parametrize("release", MATRIX)
def test_the_fake_keeps_and_runs_as_older_releases_do(release: str) -> None:
    """The same cases on older releases of the real-release matrix, from the release cache:
    every kept attribute and every ``run`` result the release gives, the fake gives."""
    from tools.reach import release_environment
    from tools.releases import RegistryUnreachableError

    try:
        environment = release_environment(release)
    except RegistryUnreachableError as error:
        pytest.skip(f"the registry is unreachable and the release is not cached: {error}")
    cases = _run_cases(environment)
    for name, found in sorted(cases.items()):
        _check_kept(release, name, found)
        assert _on_the_fake(release, name)["run"] == found["run"], (release, name)
