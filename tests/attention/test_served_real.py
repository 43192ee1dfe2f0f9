"""The installed FlashInfer, its fake and ``--require deterministic:...`` agree on every wrapper.

Real wrappers of the installed release (built on the CPU as in ``test_wrapper_real.py``) of
the prefill, decode and CUDA-graph decode families, on every backend the release's
constructor takes, are served or refused by the deterministic wrapper exactly as the fake of
the same release's wrappers are, with the same ``feature``; and that is what
``fi-compat report --require deterministic:<Family>:<backend>`` answers. In particular the
CUDA-graph decode wrapper holds ``_backend == "auto"`` after ``__init__`` in both, and is
refused in both.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from fi_compat import determinism
from fi_compat.attention import (
    DeterminismUnavailableError,
    Settings,
    deterministic_wrapper,
    family_reach,
)
from fi_compat.capabilities import get_capabilities
from fi_compat.report import missing
from fi_compat.testing import fake_flashinfer
from tests.attention.test_wrapper_real import build, kernel, tensors, workspace
from tests.attention.test_wrapper_releases import make

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]

__all__ = ["kernel"]  # the fixture, used by name below

GRAPH = "CUDAGraphBatchDecodeWithPagedKVCacheWrapper"
FAMILIES = (
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchDecodeWithPagedKVCacheWrapper",
    GRAPH,
)


def _real(family: str, backend: str) -> Any:
    import flashinfer

    if family == GRAPH:
        t = tensors()
        cls = getattr(flashinfer, family)
        return cls(
            workspace(), t["kv"].clone(), t["indices"].clone(), t["last"].clone(), "NHD", True
        )
    return build(family, backend=backend)


def _outcome(wrapper: Any, family: str, caps: Any) -> tuple[str, str | None]:
    settings = Settings(cuda_graph=True) if family == GRAPH else Settings()
    try:
        deterministic_wrapper(wrapper, settings, capabilities=caps)
    except DeterminismUnavailableError as error:
        return "refused", error.feature
    return "served", None


def test_the_installed_release_and_its_fake_agree(kernel: list[Any]) -> None:
    caps = get_capabilities()
    release = caps.flashinfer.version
    assert release is not None
    real: dict[tuple[str, str], tuple[str, str | None]] = {}
    with determinism.deterministic(True):
        for family in FAMILIES:
            facts = family_reach(release, family)
            assert facts is not None, family
            for backend in facts.backends:
                try:
                    wrapper = _real(family, backend)
                except Exception:  # a backend this CPU cannot build: compared on the fake only
                    continue
                if family == GRAPH:
                    assert wrapper._backend == "auto"
                real[family, backend] = _outcome(wrapper, family, caps)
                name = f"deterministic:{family}:{backend}"
                assert (missing(caps, [name]) == []) is (real[family, backend][0] == "served")
        assert real[GRAPH, "default"] == ("refused", f"deterministic:{GRAPH}:default")
        assert ("served", None) in real.values()
        assert {family for family, _ in real} == set(FAMILIES)
        assert len(real) >= 8, real
        with fake_flashinfer(release) as fi:
            fake_caps = get_capabilities()
            for (family, backend), outcome in real.items():
                wrapper = make(fi, family, backend)
                if family == GRAPH:
                    assert wrapper._backend == "auto"
                assert _outcome(wrapper, family, fake_caps) == outcome, (family, backend)
    assert kernel == []
