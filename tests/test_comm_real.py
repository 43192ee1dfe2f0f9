"""The drop-in names against the real flashinfer-python installed by the test set-up."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Any

import pytest

import fi_compat.comm as comm

pytestmark = [
    pytest.mark.real_flashinfer,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer-python is not installed here (make test installs it)",
    ),
]


def _real_comm() -> Any:
    try:
        return importlib.import_module("flashinfer.comm")
    except Exception as error:  # e.g. no CUDA runtime before 0.6.14
        pytest.skip(f"flashinfer.comm does not import here: {error}")


@pytest.mark.parametrize("name", ["create_allreduce_fusion_workspace", "allreduce_fusion"])
def test_dropin_signature_is_the_installed_one(name: str) -> None:
    real = inspect.signature(getattr(_real_comm(), name)).parameters.values()
    ours = inspect.signature(getattr(comm, name)).parameters.values()
    assert [(p.name, p.kind, p.default) for p in ours] == [
        (p.name, p.kind, p.default) for p in real
    ]


def test_pattern_members_are_the_installed_ones() -> None:
    real = _real_comm().AllReduceFusionPattern
    members = {name: value for name, value in vars(real).items() if name.startswith("k")}
    ours = {
        name: value
        for name, value in vars(comm.AllReduceFusionPattern).items()
        if name.startswith("k")
    }
    assert ours == members
