"""Doubles of FlashInfer's attention wrappers for tests that need no real or fake release.

fi-compat vouches for a wrapper under determinism only when it is an instance of one of
FlashInfer's classes (by name, defined in a ``flashinfer`` module) whose backend the
measurement of the installed release saw hand the split settings to the kernel. The doubles
here are such classes, on ``fa2``; :func:`measured_capabilities` gives the probe's answer
with the release replaced by a measured one (the newest, by default), so a deterministic
planner or wrapper built over them is accepted on any machine, FlashInfer installed or not.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fi_compat.attention import measured_releases
from fi_compat.capabilities import Capabilities, get_capabilities

__all__ = ["DecodeDouble", "PagedDouble", "RaggedDouble", "measured_capabilities"]


def measured_capabilities(release: str | None = None) -> Capabilities:
    """The installed capabilities, but reporting ``release`` (default: newest measured)."""
    real = get_capabilities()
    version = release if release is not None else measured_releases()[-1]
    return dataclasses.replace(
        real, flashinfer=dataclasses.replace(real.flashinfer, version=version)
    )


class _Double:
    _backend = "fa2"
    _requested_backend = "fa2"  # where 0.7.x ragged and decode keep the requested backend
    _use_tensor_cores = True
    use_tensor_cores = True

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def plan(
        self, *args: Any, fixed_split_size: Any = None, disable_split_kv: Any = False, **kw: Any
    ) -> None:
        self.calls.append(
            (
                args,
                {**kw, "fixed_split_size": fixed_split_size, "disable_split_kv": disable_split_kv},
            )
        )


def _named(name: str, module: str) -> type[_Double]:
    return type(name, (_Double,), {"__module__": module})


PagedDouble = _named("BatchPrefillWithPagedKVCacheWrapper", "flashinfer.prefill")
RaggedDouble = _named("BatchPrefillWithRaggedKVCacheWrapper", "flashinfer.prefill")
DecodeDouble = _named("BatchDecodeWithPagedKVCacheWrapper", "flashinfer.decode")
