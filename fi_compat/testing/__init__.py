"""Test FlashInfer integrations against the recorded signatures of real releases, on a CPU.

``fi_compat.testing`` ships the parameter lists of every flashinfer-python release from
0.2.9 on (read from each release's source, never imported) and builds a fake
``flashinfer`` package from any of them::

    from fi_compat.testing import fake_flashinfer

    with fake_flashinfer("0.6.5") as fi:
        import flashinfer.comm
        flashinfer.comm.create_allreduce_fusion_workspace(...)
        assert fi.calls[0].name == "create_allreduce_fusion_workspace"

With pytest the same is available as the ``fake_flashinfer`` fixture (a factory), and the
``flashinfer`` marker runs a test once per matching recorded release (its
``flashinfer_release`` fixture gives a :class:`FlashInferRelease`). Importing this package
imports neither torch nor flashinfer.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import warnings

from fi_compat._lazy import attribute

# typing is not imported at run time: the names below exist for type checkers only (mypy
# treats a TYPE_CHECKING constant specially). The pytest plugin imports this package in every
# pytest session of a project that installs fi-compat, so it loads nothing until asked.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from fi_compat._records import (
        ClassRecord,
        EnumRecord,
        FunctionRecord,
        HazardRecord,
        KeptArgument,
        ModuleRecord,
        NameRecord,
        ParameterRecord,
        ReleaseRecord,
        available_releases,
        introduced_in,
        listed_releases,
        load_release,
        module_introduced_in,
    )
    from fi_compat.errors import FakeUninstalledError, RecordingError, UnknownReleaseError
    from fi_compat.testing._fake import (
        CUDART_MESSAGE,
        Call,
        Default,
        FakeFlashInfer,
        KernelPlan,
        StandIn,
        fake_flashinfer,
    )
    from fi_compat.testing._matrix import FlashInferRelease
    from fi_compat.testing._table import compat_table

__all__ = [
    "CUDART_MESSAGE",
    "Call",
    "ClassRecord",
    "Default",
    "EnumRecord",
    "FakeFlashInfer",
    "FakeUninstalledError",
    "FlashInferRelease",
    "FunctionRecord",
    "HazardRecord",
    "KeptArgument",
    "KernelPlan",
    "ModuleRecord",
    "NameRecord",
    "ParameterRecord",
    "RecordingError",
    "ReleaseRecord",
    "StandIn",
    "UnknownReleaseError",
    "available_releases",
    "compat_table",
    "fake_flashinfer",
    "introduced_in",
    "listed_releases",
    "load_release",
    "module_introduced_in",
]


_LAZY: dict[str, str] = {
    **dict.fromkeys(
        (
            "ClassRecord",
            "EnumRecord",
            "FunctionRecord",
            "HazardRecord",
            "ModuleRecord",
            "NameRecord",
            "ParameterRecord",
            "ReleaseRecord",
            "KeptArgument",
            "available_releases",
            "introduced_in",
            "listed_releases",
            "load_release",
            "module_introduced_in",
        ),
        "fi_compat._records",
    ),
    **dict.fromkeys(
        ("FakeUninstalledError", "RecordingError", "UnknownReleaseError"), "fi_compat.errors"
    ),
    **dict.fromkeys(
        ("CUDART_MESSAGE", "Call", "Default", "FakeFlashInfer", "KernelPlan", "StandIn"),
        "fi_compat.testing._fake",
    ),
    "fake_flashinfer": "fi_compat.testing._fake",
    "FlashInferRelease": "fi_compat.testing._matrix",
    "compat_table": "fi_compat.testing._table",
}


def __dir__() -> list[str]:
    return list(__all__)


def __getattr__(name: str) -> Any:
    # fi-compat 0.2.0 named HazardRecord "Hazard", like the unrelated fi_compat.hazards.Hazard.
    if name == "Hazard":
        warnings.warn(
            "fi_compat.testing.Hazard is now fi_compat.testing.HazardRecord (the recorded "
            "import hazard of a release; fi_compat.hazards.Hazard is the hazard fi-compat "
            "reports): import HazardRecord instead; the old name goes in fi-compat 0.4.0",
            DeprecationWarning,
            stacklevel=2,
        )
        name = "HazardRecord"
    return attribute(globals(), _LAZY, __name__, name)
