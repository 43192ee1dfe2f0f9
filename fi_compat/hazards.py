"""Known hazards of the installed FlashInfer, derived from what the probe found.

Most hazards follow from probed features (a missing ``group``, a ``flashinfer.comm`` that
asserts on import). A few concern what happens *during* ``import flashinfer`` on some
releases and cannot be detected once the import has succeeded; those are matched against
the release number, parsed with :mod:`packaging`, and never against a source build.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass

from packaging.version import Version

from fi_compat._arguments import require_instance
from fi_compat._records import HazardRecord, ReleaseRecord
from fi_compat._signature import Status
from fi_compat._surface import (
    COMM,
    GATES,
    IMPORT_HAZARDS,
    LEGACY_FUSION,
    SPLIT_KEYWORDS,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
    ImportHazard,
)
from fi_compat.capabilities import ATTENTION_WRAPPERS, Capabilities

__all__ = ["Hazard", "Severity", "hazards"]


def __dir__() -> list[str]:
    return list(__all__)


class Severity(str, enum.Enum):
    """How much a hazard matters to an engine.

    .. versionadded:: 0.2.0
    """

    ERROR = "error"  # a feature cannot work as the engine expects
    WARNING = "warning"  # works, with a trap an engine has fallen into before
    INFO = "info"  # worth knowing when reading a bug report

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Hazard:
    """One known hazard: a stable id, its severity and a message for people.

    .. versionadded:: 0.2.0
    """

    id: str
    severity: Severity
    message: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form used by ``fi-compat report --json``."""
        return {"id": self.id, "severity": self.severity.value, "message": self.message}


@dataclass(frozen=True)
class _ReleaseHazard:
    """A hazard of ``import flashinfer`` itself, not detectable once the import succeeded:
    read from the installed release's record (the :class:`ImportHazard`'s ``flag``, a
    :class:`HazardRecord`), so it holds exactly for the releases, pre-releases included,
    whose source shows it."""

    hazard: ImportHazard
    severity: Severity

    @property
    def id(self) -> str:
        return self.hazard.id

    @property
    def flag(self) -> str:
        return self.hazard.flag

    def applies_to(self, version: Version) -> bool | None:
        """Whether the recorded release ``version`` has the hazard; None when unrecorded."""
        record = _recorded(str(version))
        return None if record is None else self.holds(record)

    def holds(self, record: ReleaseRecord) -> bool:
        """Whether the release of ``record`` has the hazard."""
        found: HazardRecord = getattr(record, self.flag)
        return found.value

    def message(self, record: ReleaseRecord) -> str:
        """What the hazard does on the release of ``record``, with the evidence the
        recorder found and the next final release without it."""
        return _import_message(self.hazard, record)


def _import_message(hazard: ImportHazard, record: ReleaseRecord, python: str | None = None) -> str:
    found: HazardRecord = getattr(record, hazard.flag)
    later = _next_without(hazard.flag, record.release)
    evidence = f" ({found.evidence})" if found.evidence else ""
    upgrade = f"; {later} is the next release without it" if later else ""
    on = f"Python {python} with " if python else ""
    return (
        f"import {hazard.modules[0]} {hazard.raises(found.python)} "
        f"on {on}flashinfer-python {record.release}{evidence}"
        f"{upgrade}: {hazard.remedy}."
    )


def _next_without(flag: str, release: str) -> str | None:
    """The first recorded final release after ``release`` whose record lacks ``flag``."""
    from fi_compat._records import available_releases

    after = Version(release)
    for candidate in available_releases():
        version = Version(candidate)
        if version <= after or version.is_prerelease:
            continue
        record = _recorded(candidate)
        if record is not None and not getattr(record, flag).value:
            return candidate
    return None


def _recorded(version: str) -> ReleaseRecord | None:
    """The record of ``version``, or None for a release fi-compat has not recorded."""
    from fi_compat._records import load_release  # the recorded data, once
    from fi_compat.errors import UnknownReleaseError

    try:
        return load_release(version)
    except UnknownReleaseError:
        return None


#: Hazards of ``import flashinfer`` itself, by recorded release (not detectable afterwards).
RELEASE_HAZARDS: tuple[_ReleaseHazard, ...] = (
    _ReleaseHazard(IMPORT_HAZARDS["import_queries_gpu"], Severity.INFO),
    _ReleaseHazard(IMPORT_HAZARDS["comm_requires_triton"], Severity.INFO),
)


def _comm_hazards(capabilities: Capabilities) -> list[Hazard]:
    comm = capabilities.comm
    found: list[Hazard] = []
    if not comm.available:
        if capabilities.flashinfer.importable and comm.error and "libcudart" in comm.error:
            gate = GATES["comm_imports_without_cuda_runtime"]
            found.append(
                Hazard(
                    "comm-needs-cuda-runtime",
                    Severity.ERROR,
                    f"import {COMM} asserts that libcudart is loaded ({comm.error}). "
                    f"Releases before {gate.introduced_in} do this on machines without a "
                    "loaded CUDA runtime and raise AssertionError, not ImportError. Load the "
                    "CUDA runtime first (a CUDA build of torch, or libcudart from the "
                    f"nvidia-cuda-runtime-cu12 wheel) or upgrade to {gate.introduced_in}+.",
                )
            )
        elif capabilities.flashinfer.importable:
            found.append(
                Hazard(
                    "comm-unavailable",
                    Severity.ERROR,
                    f"import {COMM} fails ({comm.error}): allreduce fusion is "
                    "unavailable; fi_compat.comm falls back to the unfused reference path.",
                )
            )
        return found
    if comm.unified_api:
        group = comm.kwargs[UNIFIED_FACTORY.key]["group"]
        if group.status is not Status.SUPPORTED:
            gate = GATES["group"]
            found.append(
                Hazard(
                    "workspace-without-group",
                    Severity.WARNING,
                    f"{UNIFIED_FACTORY.key} takes no group= ({group.reason}); it "
                    f"arrived in {gate.introduced_in}. Dropping group makes the workspace "
                    "rendezvous span the whole world, which hangs when the tensor-parallel "
                    "group is smaller. fi_compat.comm routes the group through comm_backend "
                    "where it can and refuses otherwise; upgrading fixes it.",
                )
            )
        trigger = comm.kwargs[UNIFIED_FUSION.key]["trigger_completion_at_end"]
        if trigger.status is not Status.SUPPORTED:
            gate = GATES["trigger_completion_at_end"]
            found.append(
                Hazard(
                    "allreduce-without-trigger-completion",
                    Severity.WARNING,
                    f"{UNIFIED_FUSION.key} takes no trigger_completion_at_end= "
                    f"({trigger.reason}); it arrived in {gate.introduced_in}. Passing it "
                    "raises TypeError, which engines have caught and turned into fusion "
                    "silently switched off.",
                )
            )
    elif comm.legacy_api:
        gate = GATES["unified_api"]
        found.append(
            Hazard(
                "legacy-comm-api-only",
                Severity.INFO,
                f"only the legacy allreduce-fusion API ({LEGACY_FUSION.key}, ...) is present; "
                f"the unified {UNIFIED_FACTORY.key}/{UNIFIED_FUSION.key} arrived in "
                f"{gate.introduced_in}.",
            )
        )
    if comm.torch_dist_backend and comm.bcast_root_is_group_local.status is Status.UNSUPPORTED:
        found.append(
            Hazard(
                "torch-dist-backend-global-root",
                Severity.WARNING,
                f"{comm.torch_dist_backend}.bcast reads root as a global rank: "
                f"{comm.bcast_root_is_group_local.reason}.",
            )
        )
    return found


def _attention_hazards(capabilities: Capabilities) -> list[Hazard]:
    lacking = [
        f"{wrapper}.plan({keyword}=): {answer.status.value}, {answer.reason}"
        for wrapper in ATTENTION_WRAPPERS
        for keyword in SPLIT_KEYWORDS
        if (answer := capabilities.plan_acceptance(wrapper, keyword)).status is not Status.SUPPORTED
    ]
    if not lacking or not capabilities.flashinfer.importable:
        return []
    gate = GATES["fixed_split_size"]
    return [
        Hazard(
            "determinism-unavailable",
            Severity.WARNING,
            "deterministic attention cannot be guaranteed on every path; "
            f"fi_compat.attention refuses to plan deterministically (split settings arrived "
            f"in {gate.introduced_in}): " + "; ".join(lacking),
        )
    ]


def _release_hazards(capabilities: Capabilities) -> list[Hazard]:
    info = capabilities.flashinfer
    if info.parsed_version is None or info.source_build:
        return []
    record = _recorded(str(info.parsed_version))
    if record is None:
        return []
    found = [
        Hazard(entry.id, entry.severity, entry.message(record))
        for entry in RELEASE_HAZARDS
        if entry.holds(record)
    ]
    return found + _python_hazards(record)


def _python_hazards(record: ReleaseRecord) -> list[Hazard]:
    """The recorded hazards of the release that depend on this Python's version."""
    hazard = IMPORT_HAZARDS["comm_requires_python"]
    found: HazardRecord = getattr(record, hazard.flag)
    if not found.value or found.python is None:
        return []
    running = ".".join(str(part) for part in sys.version_info[:2])
    if Version(running) >= Version(found.python):
        return []
    return [Hazard(hazard.id, Severity.ERROR, _import_message(hazard, record, running))]


def hazards(capabilities: Capabilities) -> tuple[Hazard, ...]:
    """Every known hazard of the FlashInfer described by ``capabilities``.

    .. versionadded:: 0.2.0

    Raises
    ------
    InvalidArgumentError
        ``capabilities`` is not a :class:`~fi_compat.capabilities.Capabilities`.
    """
    require_instance(
        "capabilities",
        capabilities,
        Capabilities,
        "a Capabilities",
        fix="pass fi_compat.get_capabilities()",
    )
    found: list[Hazard] = []
    info = capabilities.flashinfer
    if info.probe_in_progress:
        # The placeholder answer for a re-entrant get_capabilities(): nothing is known yet.
        return (
            Hazard(
                "probe-in-progress",
                Severity.WARNING,
                "get_capabilities() was called while fi-compat was still importing FlashInfer "
                "(from flashinfer's own import, for example): every answer is unknown. Ask "
                "again once import flashinfer has finished.",
            ),
        )
    if not info.installed:
        found.append(
            Hazard(
                "flashinfer-not-installed",
                Severity.INFO,
                "flashinfer is not installed: fi_compat.comm runs the unfused reference path "
                "and attention planning is unavailable. Install flashinfer-python.",
            )
        )
    elif info.import_error:
        found.append(
            Hazard(
                "flashinfer-import-failed",
                Severity.ERROR,
                f"import flashinfer fails: {info.import_error}",
            )
        )
    if info.source_build:
        found.append(
            Hazard(
                "source-build",
                Severity.INFO,
                f"FlashInfer reports version {info.version!r}, which names no release: "
                "fi-compat decides from probed signatures, never from the version.",
            )
        )
    found += _release_hazards(capabilities)
    found += _comm_hazards(capabilities)
    found += _attention_hazards(capabilities)
    return tuple(found)
