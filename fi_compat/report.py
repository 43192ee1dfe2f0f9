"""The probe's findings as a report: a JSON-ready dict, readable text, and ``--require``.

Data flows one way: :mod:`fi_compat.capabilities` probes, this module describes, and
:mod:`fi_compat.cli` prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fi_compat._gates import GATES
from fi_compat._signature import Shape, Status, Support
from fi_compat.capabilities import ATTENTION_WRAPPERS, Capabilities
from fi_compat.hazards import hazards

__all__ = [
    "FLAGS",
    "REQUIREMENTS",
    "UnknownRequirementError",
    "build_report",
    "missing",
    "render_text",
]

#: ``--require`` names and the probed items each one stands for. A qualified
#: ``<callable>.<keyword>`` (for example ``allreduce_fusion.trigger_completion_at_end`` or
#: ``BatchDecodeWithPagedKVCacheWrapper.plan.fixed_split_size``) is accepted as well.
REQUIREMENTS: Mapping[str, tuple[tuple[str, str, str], ...]] = {
    "group": (("comm", "create_allreduce_fusion_workspace", "group"),),
    "comm_backend": (("comm", "create_allreduce_fusion_workspace", "comm_backend"),),
    "trigger_completion_at_end": (("comm", "allreduce_fusion", "trigger_completion_at_end"),),
    "fixed_split_size": tuple(
        ("attention", f"{wrapper}.plan", "fixed_split_size") for wrapper in ATTENTION_WRAPPERS
    ),
    "disable_split_kv": tuple(
        ("attention", f"{wrapper}.plan", "disable_split_kv") for wrapper in ATTENTION_WRAPPERS
    ),
}

#: ``--require`` names that are flags rather than keyword arguments.
FLAGS = ("flashinfer", "comm", "unified_api", "legacy_api")


class UnknownRequirementError(ValueError):
    """A ``--require`` name that the report does not know."""


def _shape_dict(shape: Shape) -> dict[str, Any]:
    return {
        "keywords": sorted(shape.keywords) if shape.keywords is not None else None,
        "via": list(shape.via),
        "open_ended": shape.open_ended,
        "error": shape.error,
    }


def _answers(table: Mapping[str, Mapping[str, Support]]) -> dict[str, dict[str, dict[str, str]]]:
    return {
        owner: {keyword: support.to_dict() for keyword, support in answers.items()}
        for owner, answers in table.items()
    }


def build_report(capabilities: Capabilities) -> dict[str, Any]:
    """Everything the probe found, as plain JSON-ready data."""
    info = capabilities.flashinfer
    comm = capabilities.comm
    return {
        "fi_compat": {"version": capabilities.fi_compat_version},
        "flashinfer": {
            "installed": info.installed,
            "version": info.version,
            "source_build": info.source_build,
            "import_error": info.import_error,
            "location": info.location,
        },
        "torch": {
            "version": capabilities.torch.version,
            "cuda_available": capabilities.torch.cuda_available,
            "cuda_version": capabilities.torch.cuda_version,
        },
        "comm": {
            "available": comm.available,
            "error": comm.error,
            "unified_api": comm.unified_api,
            "legacy_api": comm.legacy_api,
            "kwargs": _answers(comm.kwargs),
            "torch_dist_backend": comm.torch_dist_backend,
            "bcast_root_is_group_local": comm.bcast_root_is_group_local.to_dict(),
        },
        "attention": _answers(capabilities.attention),
        "signatures": {
            **{f"flashinfer.comm.{name}": _shape_dict(s) for name, s in comm.shapes.items()},
            **{
                f"flashinfer.{name}": _shape_dict(s)
                for name, s in capabilities.attention_shapes.items()
            },
        },
        "hazards": [hazard.to_dict() for hazard in hazards(capabilities)],
    }


def _lookup(capabilities: Capabilities, section: str, owner: str, keyword: str) -> Support:
    table = capabilities.comm.kwargs if section == "comm" else capabilities.attention
    return table[owner][keyword]


def _resolve_requirement(name: str) -> tuple[tuple[str, str, str], ...]:
    if name in REQUIREMENTS:
        return REQUIREMENTS[name]
    owner, _, keyword = name.rpartition(".")
    for items in REQUIREMENTS.values():
        for item in items:
            if item[1:] == (owner, keyword) or item[1:] == (owner.split(".")[-1], keyword):
                return (item,)
    known = ", ".join([*REQUIREMENTS, *FLAGS])
    raise UnknownRequirementError(
        f"unknown requirement {name!r}; expected one of {known}, "
        "or <callable>.<keyword> such as BatchDecodeWithPagedKVCacheWrapper.plan.fixed_split_size"
    )


def missing(capabilities: Capabilities, names: Iterable[str]) -> list[str]:
    """The requirements among ``names`` that the installed FlashInfer does not meet.

    Each entry says what is missing and why. ``unknown`` counts as missing: CI that
    requires a capability must not pass on a guess.

    Raises
    ------
    UnknownRequirementError
        For a name that is neither a known requirement nor ``<callable>.<keyword>``.
    """
    comm = capabilities.comm
    flags = {
        "flashinfer": (capabilities.flashinfer.importable, capabilities.flashinfer.import_error),
        "comm": (comm.available, comm.error),
        "unified_api": (comm.unified_api, comm.error or "no create_allreduce_fusion_workspace"),
        "legacy_api": (comm.legacy_api, comm.error or "no trtllm_allreduce_fusion"),
    }
    lacking: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in flags:
            present, why = flags[name]
            if not present:
                lacking.append(f"{name}: unavailable ({why})")
            continue
        for section, owner, keyword in _resolve_requirement(name):
            support = _lookup(capabilities, section, owner, keyword)
            if support.status is not Status.SUPPORTED:
                gate = GATES.get(keyword)
                since = f"; needs FlashInfer {gate.introduced_in}+" if gate else ""
                lacking.append(
                    f"{owner}({keyword}=): {support.status.value} ({support.reason}{since})"
                )
    return lacking


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def render_text(capabilities: Capabilities) -> str:
    """The report for people."""
    info = capabilities.flashinfer
    comm = capabilities.comm
    torch = capabilities.torch
    lines = [f"fi-compat {capabilities.fi_compat_version}", ""]
    if not info.installed:
        lines.append("flashinfer        not installed")
    else:
        version = info.version or "unknown version"
        if info.source_build:
            version += " (source build: version not trusted)"
        lines.append(f"flashinfer        {version}")
        if info.location:
            lines.append(f"                  {info.location}")
        if info.import_error:
            lines.append(f"  import error:   {info.import_error}")
    lines.append(
        f"torch             {torch.version or 'not installed'}"
        f"  (CUDA available: {_yes(torch.cuda_available)}"
        + (f", CUDA {torch.cuda_version}" if torch.cuda_version else "")
        + ")"
    )
    lines += ["", f"flashinfer.comm   {'available' if comm.available else 'unavailable'}"]
    if comm.error:
        lines.append(f"  error:          {comm.error}")
    lines.append(
        f"  unified API: {_yes(comm.unified_api)}    legacy API: {_yes(comm.legacy_api)}"
        f"    TorchDistBackend: {comm.torch_dist_backend or 'none'}"
    )
    for title, table in (("", comm.kwargs), ("attention", capabilities.attention)):
        if title:
            lines += ["", title]
        for owner, answers in table.items():
            lines.append(f"  {owner}")
            for keyword, support in answers.items():
                lines.append(f"    {keyword:<26} {support.status.value:<12} {support.reason}")
    found = hazards(capabilities)
    lines += ["", "hazards" if found else "hazards           none known"]
    lines += [f"  [{hazard.severity.value}] {hazard.id}: {hazard.message}" for hazard in found]
    return "\n".join(lines) + "\n"
