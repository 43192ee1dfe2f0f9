"""The FlashInfer compatibility table: which recorded release has what fi-compat relies on.

:func:`compat_table` draws it from the recorded releases, one row per capability. The
documentation's copy (``docs/releases.md``, between ``<!-- compat-table:start -->`` /
``<!-- compat-table:end -->``) is written by ``scripts/gen_compat_table.py --write`` with
the maintainer tooling in ``tools/doc_tables.py``, which draws the other generated tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from packaging.version import Version

from fi_compat._arguments import require_strs
from fi_compat._records import ReleaseRecord, available_releases, load_release
from fi_compat._surface import (
    COMM,
    DECODE,
    FLASHINFER,
    GATES,
    PLAN,
    PLAN_IMPL,
    TORCH_DIST_BACKEND,
)
from fi_compat.errors import InvalidArgumentError, explain

__all__ = [
    "CAPABILITIES",
    "Capability",
    "compat_table",
]


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


def _has(gate: str) -> Callable[[ReleaseRecord], bool]:
    return lambda record: record.has(gate)


def _accepts(owner: str, keyword: str) -> Callable[[ReleaseRecord], bool]:
    return lambda record: record.accepts(owner, keyword)


def _forwards(record: ReleaseRecord) -> bool:
    wrapper = record.wrapper(DECODE.key)
    return wrapper is not None and wrapper.plan_forwards_to == PLAN_IMPL


def _bcast_local(record: ReleaseRecord) -> bool:
    backend = record.torch_dist_backend
    return bool(backend is not None and backend.bcast_root_is_group_local)


def _gate_rows() -> list[Capability]:
    """A row per API gate and per item of every keyword gate, in the order of the gates."""
    rows: list[Capability] = []
    for gate in GATES.values():
        if gate.hazard is not None:
            continue
        if not gate.keyword:
            rows.append(Capability(gate.summary, _has(gate.key)))
            continue
        for owner, keyword in gate.items:
            assert keyword is not None  # a keyword gate's items all name one
            rows.append(Capability(f"`{keyword}=` on `{owner}`", _accepts(owner, keyword)))
    return rows


def _rows() -> tuple[Capability, ...]:
    rows = _gate_rows()
    rows.append(Capability(f"`{DECODE.key}.{PLAN}(**kwargs)` forwards to `{PLAN_IMPL}`", _forwards))
    rows += [
        Capability(f"`{TORCH_DIST_BACKEND.key}` in `{home.module}`", _backend_in(home.module))
        for home in reversed(TORCH_DIST_BACKEND.homes)
    ]
    rows += [
        Capability(f"`{TORCH_DIST_BACKEND.key}.bcast` treats `root` as group-local", _bcast_local),
        Capability(
            f"Hazard: `import {COMM}` needs a loaded CUDA runtime (`AssertionError`)",
            lambda r: r.comm_requires_cuda_runtime.value,
        ),
        Capability(
            f"Hazard: `import {FLASHINFER}` queries GPU 0", lambda r: r.import_queries_gpu.value
        ),
        Capability(
            f"Hazard: `import {COMM}` needs `triton`", lambda r: r.comm_requires_triton.value
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

    .. versionadded:: 0.2.0

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
    if releases is None:  # every final release: a pre-release is not a row of its own
        names = [name for name in available_releases() if not Version(name).is_prerelease]
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
