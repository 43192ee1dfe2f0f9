"""Whether ``TorchDistBackend.bcast`` maps a group-local root to a global rank.

Read from the syntax tree of its source, as the recorder reads released sources.
"""

from __future__ import annotations

from typing import Any

from fi_compat._forwarding import calls_named
from fi_compat._probe_guard import attempt
from fi_compat._signature import Status, Support, parse_def
from fi_compat._surface import TORCH_DIST_BACKEND


def _calls_get_global_rank(func: Any) -> bool:
    """Does the body of ``func`` call ``get_global_rank`` (a name or an attribute)?

    Read from the syntax tree (:func:`fi_compat._forwarding.calls_named`), so a mention in
    a comment, a string or a docstring does not count. Raises when the source cannot be
    read or parsed.
    """
    return calls_named(parse_def(func), "get_global_rank")


def probe_bcast_root(cls: type) -> Support:
    """Does ``cls.bcast(data, root)`` translate a group-local root into a global rank?"""
    bcast, error = attempt(getattr, cls, "bcast")
    calls = None
    if error is None:
        calls, error = attempt(_calls_get_global_rank, bcast)
    if error is not None or calls is None:
        return Support(Status.UNKNOWN, f"cannot read {TORCH_DIST_BACKEND.key}.bcast: {error}")
    if calls:
        return Support(Status.SUPPORTED, "bcast maps a group-local root with get_global_rank")
    return Support(
        Status.UNSUPPORTED,
        "bcast passes root to torch.distributed as a global rank; "
        "with a group whose ranks are not 0..n-1 it broadcasts from the wrong process",
    )
