"""What a deterministic run gets, per measured family and backend: ``served`` or ``refused``.

``fi-compat report`` names each (family, backend) that ``reach.json`` measures in some
release ``deterministic:<Family>:<backend>`` (``default`` for a class without ``backend=``,
``fast_decode_plan`` for the decode fast plan). The answer comes from the function the
deterministic wrapper and the planner ask, :func:`fi_compat.attention._vouch.vouch` (the
measurement, and ``auto`` never), plus what they check on the wrapper itself: its ``plan``
takes both split keywords (here: the probe's answer for that ``plan``), and a decode wrapper
is built with ``use_tensor_cores=True`` (here: said in the reason of a served answer). A
refusal of the wrapper carries the same name as its ``feature``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fi_compat._requirements.names import deterministic_feature
from fi_compat._signature import Status, Support
from fi_compat._surface import DECODE, FAST_DECODE_PLAN, PLAN, SPLIT_KEYWORDS
from fi_compat.attention import _reach
from fi_compat.attention._reach import Verdict
from fi_compat.attention._vouch import AUTO, DECODE_FAMILIES, vouch
from fi_compat.capabilities import Capabilities

__all__ = [
    "Served",
    "deterministic_answers",
    "deterministic_names",
    "deterministic_support",
    "fast_plan_support",
]

#: The few words per verdict the report prints after ``refused``.
_WHY = {
    Verdict.DROPPED: "the split settings are dropped before the kernel",
    Verdict.REFUSED: "plan refuses the split settings",
    Verdict.UNMEASURED: "the backend could not be measured on a CPU",
    Verdict.UNKNOWN: "not measured",
}
#: Families whose ``plan`` is another probed family's (the CUDA-graph decode wrapper
#: inherits the decode wrapper's ``plan`` in every recorded release).
_PLAN_OF = {"CUDAGraphBatchDecodeWithPagedKVCacheWrapper": DECODE.key}


@dataclass(frozen=True)
class Served:
    """What a deterministic run of one (family, backend) gets on the installed release.

    ``served`` is what :func:`fi_compat.attention.deterministic_wrapper` does with a wrapper
    of that family built with that backend (and ``use_tensor_cores=True`` for decode);
    ``why`` says it in a few words, ``detail`` in full (the measurement's own sentence).
    """

    family: str
    backend: str
    served: bool
    status: Status
    why: str
    detail: str

    @property
    def name(self) -> str:
        """The ``--require`` name, ``deterministic:<Family>:<backend>``."""
        return deterministic_feature(self.family, self.backend)

    def support(self) -> Support:
        """The answer as the report's requirements give it."""
        word = "served" if self.served else "refused"
        return Support(self.status, f"{word}: {self.why} ({self.detail})")


def deterministic_names() -> tuple[str, ...]:
    """Every ``deterministic:<Family>:<backend>`` name, in the report's order."""
    return tuple(deterministic_feature(f, b) for f, b in _reach.measured_pairs())


def _refused(family: str, backend: str, status: Status, why: str, detail: str) -> Served:
    return Served(family, backend, False, status, why, detail)


def _plan_refusal(caps: Capabilities, family: str) -> tuple[Status, str] | None:
    """Why the probed ``plan`` of ``family`` does not surely take both split keywords, or
    None (it does, or the probe does not read it: then the measurement saw it bind)."""
    owner = f"{_PLAN_OF.get(family, family)}.{PLAN}"
    answers = caps.attention.get(owner)
    if answers is None:
        return None
    for keyword in SPLIT_KEYWORDS:
        support = answers.get(keyword)
        if support is not None and not support.supported:
            return support.status, f"{owner}({keyword}=) {support.status}: {support.reason}"
    return None


def _answer(caps: Capabilities, family: str, backend: str) -> Served:
    release = caps.flashinfer.version
    info = caps.flashinfer
    if not info.importable:
        status = Status.UNKNOWN if info.probe_in_progress else Status.UNSUPPORTED
        why = info.import_error or ("not installed" if not info.installed else "not importable")
        return _refused(family, backend, status, "flashinfer does not import", why)
    answer = vouch(release, family, backend)
    measured = _reach.reach(release, family, backend)
    if not answer.reaches:
        status = Status.UNKNOWN if answer.verdict is Verdict.UNKNOWN else Status.UNSUPPORTED
        if answer != measured and measured.verdict in (Verdict.REACHES, Verdict.UNMEASURED):
            # the auto rule refuses what one measurement could not refuse for every call
            why = "auto resolves per run" if backend == AUTO else "it resolves auto per run"
        else:
            why = _WHY.get(measured.verdict, str(measured.verdict))
        return _refused(family, backend, status, why, answer.detail)
    if family == _reach.FAST_DECODE_PLAN:
        decode = _answer(caps, DECODE.key, backend)
        if not decode.served:
            why = f"the decode wrapper is refused: {decode.why}"
            return _refused(family, backend, decode.status, why, decode.detail)
        return Served(family, backend, True, Status.SUPPORTED, decode.why, answer.detail)
    refusal = _plan_refusal(caps, family)
    if refusal is not None:
        status, detail = refusal
        return _refused(family, backend, status, "plan may not take the split settings", detail)
    why = "the split settings reach the kernel"
    if family in DECODE_FAMILIES:
        why += "; build it with use_tensor_cores=True"
    return Served(family, backend, True, Status.SUPPORTED, why, answer.detail)


def deterministic_answers(caps: Capabilities) -> dict[str, Served]:
    """Each ``deterministic:<Family>:<backend>`` name -> what a deterministic run gets."""
    return {
        deterministic_feature(family, backend): _answer(caps, family, backend)
        for family, backend in _reach.measured_pairs()
    }


def deterministic_support(caps: Capabilities) -> Mapping[str, Support]:
    """Each ``deterministic:<Family>:<backend>`` name -> its answer as a requirement: met
    exactly where the deterministic wrapper serves that family and backend."""
    return {name: served.support() for name, served in deterministic_answers(caps).items()}


def fast_plan_support(caps: Capabilities) -> Support:
    """``fast_decode_plan``: whether the installed release has FlashInfer's
    ``flashinfer.decode.fast_decode_plan`` (0.4.0+), which
    :class:`~fi_compat.attention.AttentionPlanner` built with ``fast_decode=True`` needs.

    Read from the installed release's record; a release that was not recorded (a source
    build) answers unknown.
    """
    from fi_compat._records import load_release  # the recorded data, once

    info = caps.flashinfer
    if not info.importable:
        status = Status.UNKNOWN if info.probe_in_progress else Status.UNSUPPORTED
        return Support(status, info.import_error or "flashinfer is not installed")
    release = info.version
    if release is None:
        return Support(Status.UNKNOWN, "flashinfer's version could not be read")
    try:
        record = load_release(release)
    except Exception:  # not recorded, or a version no Version parses (a hostile __version__)
        return Support(
            Status.UNKNOWN,
            f"flashinfer {release} is not a recorded release, so its {FAST_DECODE_PLAN.module} "
            "was not read",
        )
    if record.fast_decode_plan is None:
        return Support(
            Status.UNSUPPORTED,
            f"flashinfer {release} has no {FAST_DECODE_PLAN.dotted} (added in "
            f"{FAST_DECODE_PLAN.introduced_in})",
        )
    return Support(Status.SUPPORTED, f"{FAST_DECODE_PLAN.dotted} of flashinfer {release}")
