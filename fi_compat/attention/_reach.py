"""Whether a wrapper's split settings reach the kernel: measured per release, read here.

Whether ``fixed_split_size=`` and ``disable_split_kv=`` reach the kernel's scheduler
depends on the wrapper class and backend, so ``python -m tools.reach`` measures it per
release into ``reach.json`` (:mod:`fi_compat._measured`). The deterministic-attention guide,
``docs/guide/attention.md`` ("What reaches the kernel, measured"), says how.

The file is read once, on the first question, and only the asked release's entry is
turned into objects (cached); the per-``plan`` path never comes here. The installed
release fi-compat shipped no measurement for is measured on this machine on the first
question about it (:mod:`fi_compat._measured.installed`; ``fi-compat measure`` ahead of
time).

:func:`family_reach` and :func:`reach` are public (``fi_compat.attention.family_reach`` and
``split_reach``) and check their arguments before anything else: ``release`` is a str or
None, ``family`` a non-empty str, ``backend`` a str; anything else raises
:class:`~fi_compat.errors.InvalidArgumentError`. A str that names nothing measured (an
unmeasured or unparsable release, an unknown family or backend) is no error: it answers
"nothing measured", since the installed FlashInfer's own ``__version__`` and a wrapper's
backend attribute arrive here as they are. A str subclass is read as a copy of its
characters, so none of its methods runs.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from packaging.version import Version

from fi_compat import _surface
from fi_compat._arguments import describe
from fi_compat._deprecation import renamed_attribute, renamed_field
from fi_compat._frozen import picklable
from fi_compat._measured import load, releases, why_unmeasured
from fi_compat._signature import exact_text
from fi_compat.errors import InvalidArgumentError, explain

__all__ = ["FamilyReach", "Reach", "Verdict", "family_reach", "measured_releases", "reach"]

#: The schema of ``reach.json`` this module reads.
SCHEMA = 1
#: The key of a family whose constructor takes no ``backend=``.
DEFAULT_BACKEND = "default"
#: The family key of ``flashinfer.decode.fast_decode_plan``, bound to a decode wrapper.
FAST_DECODE_PLAN = _surface.FAST_DECODE_PLAN.key


class Verdict(str, enum.Enum):
    """What one (release, family, backend) does with the split settings.

    .. versionadded:: 0.2.0
    """

    #: The kernel's plan receives both settings as given (``None`` as ``-1``).
    REACHES = "reaches"
    #: ``plan`` takes them and the kernel never sees them.
    DROPPED = "dropped"
    #: ``plan`` raises on them, or takes no such keywords.
    REFUSED = "refused"
    #: The measurement could not run this backend on a CPU (the detail says why).
    UNMEASURED = "unmeasured"
    #: Nothing was measured: the release, the family or the backend is not in the data.
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


@picklable
@dataclass(frozen=True)
class Reach:
    """The measured answer for one (release, family, backend).

    .. versionadded:: 0.2.0
    """

    release: str
    family: str
    backend: str
    verdict: Verdict
    detail: str

    @property
    def reaches(self) -> bool:
        """True only when the measurement saw both settings arrive at the kernel."""
        return self.verdict is Verdict.REACHES


@renamed_field("plan_takes", "plan_accepts", until="0.4.0")
@picklable
@dataclass(frozen=True)
class FamilyReach:
    """Everything measured about one wrapper family in one release.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    plan_accepts
        ``plan`` accepts ``fixed_split_size=`` and ``disable_split_kv=`` (binds both when
        called with them). Named ``plan_takes`` before fi-compat 0.3.0: that name (and the
        constructor's ``plan_takes=``) still answers, with a ``DeprecationWarning``, until
        0.4.0.
    backend_attribute
        The instance attribute that holds the requested backend after ``__init__``
        (``"_backend"``), or None when the class takes no ``backend=``.
    default_backend
        The backend an instance built without ``backend=`` holds after ``__init__``: the
        constructor's default, or, for a class without ``backend=``, what it hands its base
        (the CUDA-graph decode wrapper: ``"auto"``); None when there is none.
    backends
        Backend name (:data:`DEFAULT_BACKEND` for a class without one) -> :class:`Reach`.
    """

    release: str
    family: str
    plan_accepts: bool
    backend_attribute: str | None
    default_backend: str | None
    backends: Mapping[str, Reach]

    plan_takes = renamed_attribute("plan_accepts", until="0.4.0")
    """Deprecated since fi-compat 0.3.0, goes in 0.4.0: :attr:`plan_accepts`."""


@functools.lru_cache(maxsize=1)
def reach_data() -> Mapping[str, Any]:
    """``reach.json``'s ``releases``, the installed release's measured on this machine where
    fi-compat shipped none (:func:`fi_compat._measured.releases`)."""
    loaded = load("reach")
    if not isinstance(loaded, dict) or loaded.get("schema") != SCHEMA:
        found = loaded.get("schema") if isinstance(loaded, dict) else type(loaded).__name__
        raise RuntimeError(
            f"fi_compat/_measured/reach.json has schema {found!r}, this fi-compat reads "
            f"schema {SCHEMA}: the installation is inconsistent; reinstall fi-compat"
        )
    return releases("reach")


@functools.lru_cache(maxsize=1)
def _measured() -> tuple[str, ...]:
    return tuple(sorted(reach_data(), key=Version))


def measured_releases() -> list[str]:
    """Every release ``reach.json`` has measurements for, oldest first (a new list).

    Like :func:`fi_compat.testing.available_releases`, it returns a list the caller may
    change; before fi-compat 0.3.0 it returned a tuple.

    .. versionadded:: 0.2.0
    """
    return list(_measured())


@functools.lru_cache(maxsize=64)
def _release(release: str) -> Mapping[str, FamilyReach]:
    raw = reach_data().get(release)
    if raw is None:
        return MappingProxyType({})
    families = {}
    for family, entry in raw.items():
        backends = {
            backend: Reach(release, family, backend, Verdict(answer["verdict"]), answer["detail"])
            for backend, answer in entry["backends"].items()
        }
        families[family] = FamilyReach(
            release,
            family,
            bool(entry["plan_takes"]),
            entry["backend_attribute"],
            entry["default_backend"],
            MappingProxyType(backends),
        )
    return MappingProxyType(families)


@functools.lru_cache(maxsize=1)
def measured_pairs() -> tuple[tuple[str, str], ...]:
    """Every (family, backend) ``reach.json`` measures in some release: the families in the
    report's order (:data:`fi_compat._surface.ATTENTION_FAMILIES`, then the decode fast
    plan), each family's backends sorted by name."""
    seen: dict[str, set[str]] = {}
    for entry in reach_data().values():
        for family, facts in entry.items():
            seen.setdefault(family, set()).update(facts["backends"])
    order = [*_surface.ATTENTION_FAMILIES, FAST_DECODE_PLAN]
    families = sorted(
        seen, key=lambda name: (order.index(name) if name in order else len(order), name)
    )
    return tuple((family, backend) for family in families for backend in sorted(seen[family]))


def _refuse(name: str, expected: str, value: object, fix: str) -> InvalidArgumentError:
    return InvalidArgumentError(explain(f"{name} to be {expected}", describe(value), fix=fix))


def _release_argument(release: object) -> str | None:
    """``release`` as an exact str or None; anything else is refused."""
    if release is None:
        return None
    text = exact_text(release)
    if text is None:
        raise _refuse(
            "release",
            "None or a str (the FlashInfer version, e.g. '0.7.2.post1'; None when it could "
            "not be read)",
            release,
            "pass the version string FlashInfer reports "
            "(fi_compat.get_capabilities().flashinfer.version; str(v) for a packaging "
            "Version), or None",
        )
    return text


def _family_argument(family: object) -> str:
    """``family`` as an exact, non-empty str; anything else is refused."""
    text = exact_text(family)
    if not text:
        raise _refuse(
            "family",
            "a non-empty str (a FlashInfer attention wrapper class name, e.g. "
            f"{_surface.PREFILL_PAGED.key!r}, or {FAST_DECODE_PLAN!r})",
            family,
            "pass the name of the FlashInfer class the wrapper is an instance of, as a str",
        )
    return text


def _backend_argument(backend: object) -> str:
    """``backend`` as an exact str; anything else is refused."""
    text = exact_text(backend)
    if text is None:
        raise _refuse(
            "backend",
            "a str (the backend the wrapper was built with, e.g. 'fa2'; "
            f"{DEFAULT_BACKEND!r} for a class that takes no backend=)",
            backend,
            f"pass the backend name as a str, e.g. 'fa2', or {DEFAULT_BACKEND!r}",
        )
    return text


def family_reach(release: str | None, family: str) -> FamilyReach | None:
    """What was measured for ``family`` in ``release``; None when nothing was.

    ``release`` None (FlashInfer's version could not be read), a release that was not
    measured, and a family that was not measured in it all answer None.

    .. versionadded:: 0.2.0

    Raises
    ------
    InvalidArgumentError
        ``release`` is neither None nor a str, or ``family`` is not a non-empty str
        (checked before anything is read).
    """
    if not ((release is None or type(release) is str) and type(family) is str and family):
        release, family = _release_argument(release), _family_argument(family)
    if release is None:
        return None
    return _release(release).get(family)


def reach(release: str | None, family: str, backend: str) -> Reach:
    """The measured answer for one (release, family, backend); :attr:`Verdict.UNKNOWN` if none.

    ``release`` None (FlashInfer's version could not be read) is unknown as well, and so
    are a release, a family or a backend (``""`` included) that was not measured.

    .. versionadded:: 0.2.0

    Raises
    ------
    InvalidArgumentError
        ``release`` is neither None nor a str, ``family`` is not a non-empty str, or
        ``backend`` is not a str (checked before anything is read).
    """
    if not (
        (release is None or type(release) is str)
        and type(family) is str
        and family
        and type(backend) is str
    ):
        release = _release_argument(release)
        family = _family_argument(family)
        backend = _backend_argument(backend)
    facts = family_reach(release, family)
    if facts is None:
        what = (
            "flashinfer's version could not be read"
            if release is None
            else f"fi-compat has no measurement of {family} in flashinfer {release}"
        )
        hint = why_unmeasured(release)
        if hint:
            what = f"{what} ({hint})"
        return Reach(release or "unknown", family, backend, Verdict.UNKNOWN, what)
    answer = facts.backends.get(backend)
    if answer is None:
        measured = ", ".join(sorted(facts.backends)) or "none"
        return Reach(
            release or "unknown",
            family,
            backend,
            Verdict.UNKNOWN,
            f"backend {backend!r} was not measured for {family} in flashinfer {release} "
            f"(measured: {measured})",
        )
    return answer
