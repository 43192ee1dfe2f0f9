"""The README's FlashInfer compatibility table, generated from the recorded releases."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fi_compat._arguments import require_strs
from fi_compat.errors import InvalidArgumentError, explain
from fi_compat.testing._releases import ReleaseRecord, available_releases, load_release

__all__ = ["CAPABILITIES", "TABLE_END", "TABLE_START", "Capability", "compat_table"]

TABLE_START = "<!-- compat-table:start -->"
TABLE_END = "<!-- compat-table:end -->"

_WRAPPERS = (
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchDecodeWithPagedKVCacheWrapper",
)


@dataclass(frozen=True)
class Capability:
    """One row: a label (Markdown) and the test on a recorded release."""

    label: str
    present: Callable[[ReleaseRecord], bool]


def _backend_in(module: str) -> Callable[[ReleaseRecord], bool]:
    def present(record: ReleaseRecord) -> bool:
        backend = record.torch_dist_backend
        return backend is not None and backend.module == module

    return present


def _plan_accepts(wrapper: str, keyword: str) -> Callable[[ReleaseRecord], bool]:
    return lambda record: record.accepts(f"{wrapper}.plan", keyword)


def _rows() -> tuple[Capability, ...]:
    rows = [
        Capability(
            "Unified API: `comm.create_allreduce_fusion_workspace` + `comm.allreduce_fusion`",
            lambda r: r.unified_api,
        ),
        Capability(
            "Legacy API: `comm.trtllm_create_ipc_workspace_for_all_reduce_fusion` + "
            "`comm.trtllm_allreduce_fusion`",
            lambda r: r.legacy_api,
        ),
        Capability(
            "`comm_backend=` on `create_allreduce_fusion_workspace`",
            lambda r: r.accepts("create_allreduce_fusion_workspace", "comm_backend"),
        ),
        Capability(
            "`group=` on `create_allreduce_fusion_workspace`",
            lambda r: r.accepts("create_allreduce_fusion_workspace", "group"),
        ),
        Capability(
            "`trigger_completion_at_end=` on `allreduce_fusion`",
            lambda r: r.accepts("allreduce_fusion", "trigger_completion_at_end"),
        ),
    ]
    for keyword in ("fixed_split_size", "disable_split_kv"):
        for wrapper in _WRAPPERS:
            rows.append(
                Capability(f"`{keyword}=` on `{wrapper}.plan`", _plan_accepts(wrapper, keyword))
            )
    rows += [
        Capability(
            "`BatchDecodeWithPagedKVCacheWrapper.plan(**kwargs)` forwards to `_plan_impl`",
            lambda r: (
                (w := r.wrapper("BatchDecodeWithPagedKVCacheWrapper")) is not None
                and w.plan_forwards_to == "_plan_impl"
            ),
        ),
        Capability(
            "`TorchDistBackend` in `flashinfer.comm.mnnvl`", _backend_in("flashinfer.comm.mnnvl")
        ),
        Capability(
            "`TorchDistBackend` in `flashinfer.comm.comm_backend`",
            _backend_in("flashinfer.comm.comm_backend"),
        ),
        Capability(
            "`TorchDistBackend.bcast` treats `root` as group-local",
            lambda r: bool(
                r.torch_dist_backend is not None and r.torch_dist_backend.bcast_root_is_group_local
            ),
        ),
        Capability(
            "Hazard: `import flashinfer.comm` needs a loaded CUDA runtime (`AssertionError`)",
            lambda r: r.comm_requires_cuda_runtime.value,
        ),
        Capability(
            "Hazard: `import flashinfer` queries GPU 0", lambda r: r.import_queries_gpu.value
        ),
        Capability(
            "Hazard: `import flashinfer.comm` needs `triton`",
            lambda r: r.comm_requires_triton.value,
        ),
    ]
    return tuple(rows)


#: The rows of the table, in order.
CAPABILITIES: tuple[Capability, ...] = _rows()


def _runs(flags: Sequence[bool], releases: Sequence[str]) -> list[tuple[str, str]]:
    runs: list[tuple[str, str]] = []
    start: int | None = None
    for index, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = index
        elif not flag and start is not None:
            runs.append((releases[start], releases[index - 1]))
            start = None
    return runs


def compat_table(releases: Sequence[str] | None = None) -> str:
    """The Markdown table (with a one-line legend), ending in a newline.

    Parameters
    ----------
    releases
        Releases to consider; by default every shipped record.

    Raises
    ------
    InvalidArgumentError
        ``releases`` is empty, a str, or holds something that is not one.
    UnknownReleaseError
        A release is not recorded.
    """
    names = list(require_strs("releases", releases)) if releases is not None else []
    if releases is None:
        names = available_releases()
    elif not names:
        raise InvalidArgumentError(
            explain("at least one release", "an empty list", fix="leave releases out for all")
        )
    records = [load_release(name) for name in names]
    newest = names[-1]
    lines = [
        f"Derived from the recorded signatures of {len(names)} flashinfer-python releases "
        f"({names[0]} to {newest}). *First* is the first release that has it, *last* the "
        f"last one (— when {newest} still has it).",
        "",
        "| Capability | First | Last |",
        "| --- | --- | --- |",
    ]
    for capability in CAPABILITIES:
        flags = [capability.present(record) for record in records]
        runs = _runs(flags, names)
        if not runs:
            lines.append(f"| {capability.label} | never | — |")
            continue
        first = runs[0][0]
        last = "—" if runs[-1][1] == newest else runs[-1][1]
        span = slice(names.index(first), names.index(runs[-1][1]) + 1)
        gaps = _runs([not flag for flag in flags[span]], names[span])
        note = "".join(f" (absent from {start} to {end})" for start, end in gaps)
        lines.append(f"| {capability.label} | {first} | {last}{note} |")
    return "\n".join(lines) + "\n"
