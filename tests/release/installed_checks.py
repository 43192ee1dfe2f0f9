"""Run by pytest inside the fresh virtual environment that the built wheel is installed into.

``tests/release/test_dist.py`` copies this file, as ``test_installed.py``, into an empty
directory and runs the fresh venv's pytest there: no conftest, no configuration, the
repository off ``sys.path``. The ``fake_flashinfer`` fixture can only come from the
installed wheel's ``pytest11`` entry point, and every data file from its site-packages.
(Not collected from the repository: its name does not start with ``test_``.)
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import inspect
import json
import os
import sys
import sysconfig
from pathlib import Path

import pytest

import fi_compat
import fi_compat.attention
import fi_compat.comm as comm
from fi_compat.testing import available_releases, listed_releases
from fi_compat.testing.pytest_plugin import FakeFlashInferFactory

#: A release with the legacy API only, and the newest recorded one (unified API).
RELEASES = ("0.5.3", "0.7.2.post1")

TOKENS, HIDDEN = 4, 64


def test_fi_compat_comes_from_the_fresh_venv() -> None:
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert Path(fi_compat.__file__).resolve().is_relative_to(site_packages)
    assert sys.prefix != sys.base_prefix  # a virtual environment
    repository = Path(os.environ["FI_COMPAT_REPOSITORY"]).resolve()
    on_path = [entry for entry in sys.path if entry and Path(entry).resolve() == repository]
    assert on_path == [], "the repository is on sys.path"
    version = importlib.metadata.version("fi-compat")
    assert version == os.environ["FI_COMPAT_EXPECTED_VERSION"]
    assert fi_compat.__version__ == version
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("flashinfer-python")


def test_the_plugin_comes_from_the_entry_point(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.has_plugin("fi_compat")


def test_the_recorded_data_is_installed() -> None:
    releases = listed_releases()
    assert len(releases) > 50
    assert available_releases() == releases
    package = importlib.resources.files("fi_compat")
    assert (package / "py.typed").is_file()
    assert (package / "_records" / "README.md").is_file()
    reach = json.loads((package / "_measured" / "reach.json").read_text(encoding="utf-8"))
    layers = json.loads((package / "_measured" / "layers.json").read_text(encoding="utf-8"))
    assert reach
    assert layers
    assert RELEASES[-1] in fi_compat.attention.measured_releases()


@pytest.mark.parametrize("version", RELEASES)
def test_the_fake_runs_the_comm_facade(
    fake_flashinfer: FakeFlashInferFactory, version: str
) -> None:
    import torch

    fi = fake_flashinfer(version)
    import flashinfer.comm

    record = fi.record
    fused = "allreduce_fusion" if record.unified_api else "trtllm_allreduce_fusion"
    function = record.comm_function(fused)
    assert function is not None
    parameters = inspect.signature(getattr(flashinfer.comm, fused)).parameters
    assert set(function.keyword_names) <= set(parameters)

    dtype = torch.bfloat16
    x = torch.randn(TOKENS, HIDDEN, dtype=dtype)
    residual = torch.randn(TOKENS, HIDDEN, dtype=dtype)
    gamma = torch.randn(HIDDEN, dtype=dtype)
    workspace = comm.create_workspace(2, 1, 16, HIDDEN, dtype, device="cpu")
    norm_out, residual_out = comm.allreduce_residual_rmsnorm(
        x, residual, gamma, workspace=workspace, eps=1e-5
    )
    assert norm_out.shape == residual_out.shape == x.shape
    assert workspace.api == ("unified" if record.unified_api else "legacy")
    reached = fi.calls_to("allreduce_fusion") + fi.calls_to("trtllm_allreduce_fusion")
    assert len(reached) == 1
