"""The probe's answer tables: every keyword ``unknown`` or ``unsupported``, checked, frozen."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fi_compat._signature import Status, Support, exact_text


def unknown(keywords: tuple[str, ...], reason: str) -> dict[str, Support]:
    return dict.fromkeys(keywords, Support(Status.UNKNOWN, reason))


def all_unknown(names: Mapping[str, tuple[str, ...]], reason: str) -> dict[str, dict[str, Support]]:
    return {owner: unknown(keywords, reason) for owner, keywords in names.items()}


def checked(support: Support) -> Support:
    """The answer as plain data: a real :class:`Status` and an exact ``str`` reason."""
    reason = exact_text(support.reason)
    if not isinstance(support.status, Status) or reason is None:
        raise TypeError(f"malformed answer from the signature reader: {support!r}")
    return Support(support.status, reason)


def unsupported(keywords: tuple[str, ...], reason: str) -> dict[str, Support]:
    return dict.fromkeys(keywords, Support(Status.UNSUPPORTED, reason))


def freeze(nested: Mapping[str, Mapping[str, Support]]) -> Mapping[str, Mapping[str, Support]]:
    return MappingProxyType({key: MappingProxyType(dict(value)) for key, value in nested.items()})
