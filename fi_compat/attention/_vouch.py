"""Build-time checks: may this wrapper be planned deterministically on the installed release?

The planner and the deterministic wrapper ask the same questions once, when they are
built, and never per ``plan``:

1. Does its ``plan`` take ``fixed_split_size=`` and ``disable_split_kv=``
   (:func:`check_signature`, read from the very function that will be called)?
2. Is a decode wrapper built with tensor cores (:func:`check_tensor_cores`)?
3. Does its (class, backend) hand the settings to the kernel on the installed release
   (:func:`check_reach`, from the measured data of :mod:`fi_compat.attention._reach`)?

Question 3 has one answer function, :func:`vouch`, which ``fi-compat report`` asks as well
(``deterministic:<Family>:<backend>``, :mod:`fi_compat._requirements.attention`), so the report
and the wrapper cannot disagree. Every refusal is a
:class:`~fi_compat.errors.DeterminismUnavailableError` whose message names the wrapper, the
backend, the release and the fix, and whose ``feature`` is that ``--require`` name (or a
split keyword's, for a ``plan`` that does not take it).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fi_compat import _surface
from fi_compat._arguments import require_instance
from fi_compat._measured import why_unmeasured
from fi_compat._requirements.names import deterministic_feature, gate_feature
from fi_compat._signature import Status, Support, inspect_callable
from fi_compat._surface import ATTENTION_FAMILIES, GATES, PLAN, SPLIT_KEYWORDS
from fi_compat.attention import _reach
from fi_compat.attention._reach import Verdict
from fi_compat.attention._settings import Settings
from fi_compat.errors import (
    BackendNotDeterministicError,
    DeterminismUnavailableError,
    PlannerConfigError,
    TensorCoresRequiredError,
    explain,
)

if TYPE_CHECKING:
    from fi_compat.capabilities import Capabilities

__all__ = [
    "backend_of",
    "check_options",
    "check_reach",
    "check_signature",
    "check_tensor_cores",
    "family_of",
    "fast_plan_of_release",
    "flag",
    "release_of",
    "vouch",
]

DECODE = _surface.DECODE.key
_FAMILIES = frozenset(ATTENTION_FAMILIES)
#: The decode families: tensor cores are required, and they plan with the decode sizes.
DECODE_FAMILIES = frozenset({DECODE, "CUDAGraphBatchDecodeWithPagedKVCacheWrapper"})


def check_options(settings: object, capabilities: object) -> None:
    """Refuse ``settings`` that is not a :class:`Settings` and ``capabilities`` that is not
    a :class:`~fi_compat.capabilities.Capabilities` (``None`` is fine for both)."""
    require_instance(
        "settings",
        settings,
        Settings,
        "a fi_compat.attention.Settings",
        optional=True,
        error=PlannerConfigError,
        fix="pass Settings(...) or leave settings out",
    )
    if capabilities is not None:
        from fi_compat.capabilities import Capabilities

        require_instance(
            "capabilities",
            capabilities,
            Capabilities,
            "a fi_compat.capabilities.Capabilities",
            optional=True,
            error=PlannerConfigError,
            fix="pass fi_compat.capabilities.get_capabilities() or leave it out",
        )


def release_of(capabilities: Capabilities | None) -> str | None:
    """The installed FlashInfer release, probed when ``capabilities`` is None."""
    if capabilities is None:
        from fi_compat.capabilities import get_capabilities

        capabilities = get_capabilities()
    return capabilities.flashinfer.version


def _name(release: str | None) -> str:
    return release or "unknown"


def family_of(wrapper: object) -> str | None:
    """The most derived FlashInfer attention class ``wrapper`` is an instance of, or None.

    Only classes defined in ``flashinfer`` count: an engine's subclass of a FlashInfer
    wrapper is that wrapper's family, a look-alike of another package is nobody's.
    """
    for cls in type(wrapper).__mro__:
        if cls.__name__ in _FAMILIES and cls.__module__.partition(".")[0] == "flashinfer":
            return cls.__name__
    return None


def backend_of(wrapper: object, family: str, release: str | None) -> str | None:
    """The backend ``wrapper`` was built with, as the measurement keys it; None if unreadable.

    Read from the attribute the measurement found the requested backend in
    (``_backend``; ``_requested_backend`` where a release rewrites ``_backend`` when it
    resolves ``auto``); :data:`~fi_compat.attention._reach.DEFAULT_BACKEND` for a class
    without a ``backend=``.
    """
    for attribute in _backend_attributes(release, family):
        if attribute is None:
            return _reach.DEFAULT_BACKEND
        try:
            value = getattr(wrapper, attribute)
        except Exception:  # a property that raises counts as unreadable
            continue
        if type(value) is str:
            return value
    return None


def _backend_attributes(release: str | None, family: str) -> tuple[str | None, ...]:
    """Where ``backend_of`` looks, in turn: the measured attribute (None: the class takes
    no ``backend=``); for a release that was not measured, the newest measurement's, then
    ``_backend``, so that its refusal names the backend as ``--require`` spells it."""
    facts = _reach.family_reach(release, family)
    if facts is not None:
        return (facts.backend_attribute,)
    newest = _newest_facts(family)
    if newest is None:
        return ("_backend",)
    if newest.backend_attribute is None:
        return (None,)
    return tuple(dict.fromkeys((newest.backend_attribute, "_backend")))


def _newest_facts(family: str) -> _reach.FamilyReach | None:
    """``family`` as the newest release that measures it keys it: for a release that was not
    measured, so that its refusal names the backend as ``--require`` spells it."""
    for measured in reversed(_reach.measured_releases()):
        facts = _reach.family_reach(measured, family)
        if facts is not None:
            return facts
    return None


def flag(wrapper: Any, names: tuple[str, ...]) -> bool | None:
    """The first of ``names`` that reads as a bool on ``wrapper``; None when none does."""
    for name in names:
        try:
            value = getattr(wrapper, name)
        except Exception:  # a property that raises counts as unreadable
            continue
        if isinstance(value, bool):
            return value
    return None


def fast_plan_of_release() -> Callable[..., Any] | None:
    """The installed release's ``flashinfer.decode.fast_decode_plan``, or None."""
    home = _surface.FAST_DECODE_PLAN.homes[0]
    try:
        module = importlib.import_module(home.module)
    except Exception:  # an old release whose import fails: it has no fast plan to serve
        return None
    found = getattr(module, home.name, None)
    return found if callable(found) else None


# ---------------------------------------------------------------------------- 1. the signature

#: ``(class, plan function) -> answers``: engines build many planners over the same classes
#: (one per captured batch size), and following ``**kwargs`` means parsing source.
_ACCEPTANCE_CACHE: dict[tuple[type[object], object], tuple[Support, ...]] = {}


def _declared_acceptance(owner: type[object], func: Callable[..., Any]) -> tuple[Support, ...]:
    """Answers for :data:`SPLIT_KEYWORDS` on one ``plan``, computed once per function."""
    try:
        return _ACCEPTANCE_CACHE[owner, func]
    except (KeyError, TypeError):  # not seen yet, or an unhashable callable
        pass
    shape = inspect_callable(f"{owner.__name__}.plan", func, owner=owner)
    answers = tuple(shape.acceptance(keyword) for keyword in SPLIT_KEYWORDS)
    with contextlib.suppress(TypeError):
        _ACCEPTANCE_CACHE[owner, func] = answers
    return answers


def plan_acceptance(wrapper: Any) -> dict[str, Support]:
    """What the ``plan`` that will actually be called declares, following ``**kwargs``."""
    owner: type[object] = type(wrapper)
    name = f"{owner.__name__}.plan"
    func: Any = inspect.getattr_static(wrapper, PLAN, None)
    if func is None:
        missing = Support(Status.UNSUPPORTED, f"{owner.__name__} has no plan method")
        return dict.fromkeys(SPLIT_KEYWORDS, missing)
    if isinstance(func, staticmethod | classmethod):
        func = func.__func__
    if not callable(func):
        broken = Support(Status.UNKNOWN, f"{name} is not callable: {func!r}")
        return dict.fromkeys(SPLIT_KEYWORDS, broken)
    return dict(zip(SPLIT_KEYWORDS, _declared_acceptance(owner, func), strict=True))


def check_signature(wrapper: Any, kind: str, role: str, release: str | None) -> None:
    """Refuse a ``plan`` that does not (or may not) take both split keywords."""
    answers = plan_acceptance(wrapper)
    missing = {keyword: support for keyword, support in answers.items() if not support.supported}
    if not missing:
        return
    keyword, support = next(iter(missing.items()))
    gate = GATES[keyword]
    found = "; ".join(f"{k}: {s.status} ({s.reason})" for k, s in missing.items())
    if support.status is Status.UNKNOWN:
        fix = (
            "install a flashinfer-python release whose plan declares the split settings "
            f"(any release from {gate.introduced_in} on), or turn deterministic inference off; "
            "fi-compat will not guess whether an unresolvable **kwargs honours them"
        )
    else:
        fix = (
            f"upgrade flashinfer-python to {gate.introduced_in} or later "
            f"(pip install 'flashinfer-python>={gate.introduced_in}'), "
            "or turn deterministic inference off"
        )
    raise DeterminismUnavailableError(
        explain(
            f"{kind}.plan (the {role} wrapper) to accept fixed_split_size= and "
            "disable_split_kv= for deterministic attention",
            f"{found} on flashinfer {_name(release)}",
            changed_in=gate.introduced_in,
            fix=fix,
        ),
        feature=gate_feature(keyword),
        introduced_in=gate.introduced_in,
    )


# ---------------------------------------------------------------------------- 2. tensor cores


def check_tensor_cores(wrapper: Any, role: str, release: str | None) -> None:
    """Refuse a decode wrapper built without tensor cores."""
    # FlashInfer records use_tensor_cores= on the instance as ``_use_tensor_cores`` and
    # exposes it as the read-only property ``use_tensor_cores`` (0.2.x to 0.7.x; in
    # 0.7.x the trtllm-gen and cute-dsl backends switch it on too).
    value = flag(wrapper, ("use_tensor_cores", "_use_tensor_cores"))
    if value:
        return
    found = (
        "use_tensor_cores=False"
        if value is False
        else "a wrapper whose use_tensor_cores cannot be read "
        f"({type(wrapper).__name__} has neither use_tensor_cores nor _use_tensor_cores)"
    )
    family = family_of(wrapper) or DECODE
    backend = backend_of(wrapper, family, release) or "unreadable"
    raise TensorCoresRequiredError(
        explain(
            f"the {role} {DECODE} to be built with use_tensor_cores=True: FlashInfer "
            "takes fixed_split_size only on tensor-core decode (plan raises ValueError "
            "otherwise) and ignores disable_split_kv without tensor cores",
            f"{found} on flashinfer {_name(release)}",
            fix=f"build the decode wrappers with {DECODE}(..., use_tensor_cores=True) when "
            "deterministic inference is on (SGLang and vLLM both do)",
        ),
        feature=deterministic_feature(family, backend),
    )


# ---------------------------------------------------------------------------- 3. the kernel


def _honest_backends(release: str | None, family: str) -> list[str]:
    facts = _reach.family_reach(release, family)
    if facts is None:
        return []
    honest = [n for n in facts.backends if vouch(release, family, n).reaches]
    return sorted(honest, key=lambda name: (name != "fa2", name))  # fa2 first: every release


def refuse_reach(answer: _reach.Reach, what: str, fix_subject: str) -> BackendNotDeterministicError:
    """The error for a (family, backend) whose settings do not reach the kernel."""
    honest = _honest_backends(answer.release, answer.family)
    if answer.verdict is Verdict.UNKNOWN and not _reach.family_reach(answer.release, answer.family):
        releases = _reach.measured_releases()
        span = f"{releases[0]} .. {releases[-1]}" if releases else "none"
        fix = (
            f"install a flashinfer-python release fi-compat has measured ({span}), or turn "
            "deterministic inference off"
        )
        hint = why_unmeasured(answer.release)
        if hint:
            fix = f"{hint}, {fix}"
    elif honest:
        fix = (
            f"build {fix_subject} with backend={honest[0]!r} "
            f"(measured to reach the kernel in {answer.release}: {', '.join(honest)}), or "
            "turn deterministic inference off"
        )
    else:
        fix = (
            f"no backend of {answer.family} in flashinfer {answer.release} hands the split "
            f"settings to the kernel: use {_surface.PREFILL_PAGED.key} / "
            f"{DECODE} with backend='fa2' for deterministic "
            "inference, or turn it off"
        )
    return BackendNotDeterministicError(
        explain(
            f"{what} to hand fixed_split_size= and disable_split_kv= to the kernel for "
            "deterministic attention",
            f"{answer.verdict}: {answer.detail} (flashinfer {answer.release}, "
            f"backend {answer.backend!r})",
            fix=fix,
        ),
        family=answer.family,
        backend=answer.backend,
        release=answer.release,
        verdict=str(answer.verdict),
    )


#: The backend FlashInfer resolves when ``plan`` runs, never vouched for under determinism.
AUTO = "auto"


def _auto(measured: _reach.Reach, inherited: bool = False) -> _reach.Reach:
    """``auto`` is refused whatever one measurement saw: its answer depends on the call.

    It resolves inside ``plan`` from the GPU and the call's data types: ``fa3`` on Hopper for
    prefill (which drops the settings in every measured release), ``fa3`` for fp8 decode,
    ``cudnn``/``cutlass``/``fmha_v2`` on Blackwell and SM120 in recent releases. The
    measurement runs one device and one shape, so a "reaches" there does not hold for every
    call an engine makes; ``fa2`` honours the settings in every measured release.
    ``inherited``: the class takes no ``backend=`` and hands ``"auto"`` to its base (the
    CUDA-graph decode wrapper); the answer keeps the measured backend key.
    """
    how = (
        f"{measured.family} takes no backend= and hands backend='auto' to its base; it"
        if inherited
        else "backend='auto'"
    )
    return _reach.Reach(
        measured.release,
        measured.family,
        measured.backend,
        Verdict.DROPPED if measured.verdict is Verdict.DROPPED else Verdict.UNMEASURED,
        f"{how} is resolved inside plan from the GPU and the data types (fa3 on "
        "Hopper and for fp8 decode, cudnn/cutlass/fmha_v2 on newer GPUs), which can drop the "
        f"settings; measured for one device and shape: {measured.verdict} ({measured.detail})",
    )


def _inherits_auto(release: str | None, family: str) -> bool:
    """True when the measurement saw ``family`` (a class without ``backend=``) hold
    ``"auto"`` after ``__init__``: it resolves ``auto`` itself, in every ``plan``."""
    facts = _reach.family_reach(release, family)
    return facts is not None and facts.backend_attribute is None and facts.default_backend == AUTO


def vouch(
    release: str | None, family: str, backend: str, *, resolves_auto: bool = False
) -> _reach.Reach:
    """What a deterministic run of ``family`` built with ``backend`` gets on ``release``.

    The measured answer (:func:`fi_compat.attention._reach.reach`), except that ``auto``
    is never vouched for (:func:`_auto`): a wrapper built with ``backend="auto"``, a class
    the measurement saw hand ``"auto"`` to its base, and (``resolves_auto``) a wrapper
    whose own ``_backend`` reads ``"auto"``. :func:`check_reach` serves exactly what this
    answers ``reaches`` for, and the report's ``deterministic:<Family>:<backend>`` says
    the same.
    """
    answer = _reach.reach(release, family, backend)
    if backend == AUTO:
        return _auto(answer)
    if resolves_auto or _inherits_auto(release, family):
        return _auto(answer, inherited=backend == _reach.DEFAULT_BACKEND)
    return answer


def _resolves(wrapper: Any) -> bool:
    """True when the wrapper resolves ``auto`` itself (a class without ``backend=`` whose
    ``__init__`` hands ``"auto"`` on, e.g. the CUDA-graph decode wrapper)."""
    try:
        return getattr(wrapper, "_backend", None) == AUTO
    except Exception:  # a property that raises: nothing to say
        return False


def check_reach(wrapper: Any, role: str, release: str | None) -> str:
    """Refuse a wrapper whose (class, backend) was not measured to reach the kernel.

    Returns the family. A wrapper of no FlashInfer attention class is refused: fi-compat
    can vouch only for what it measured.
    """
    family = family_of(wrapper)
    if family is None:
        raise BackendNotDeterministicError(
            explain(
                "a FlashInfer attention wrapper (an instance of one of "
                f"{', '.join(ATTENTION_FAMILIES)}, or of a subclass) as the {role} wrapper",
                f"a {type(wrapper).__module__}.{type(wrapper).__qualname__}, which fi-compat "
                "has no measurement for",
                fix="hand fi-compat the FlashInfer wrapper object itself (wrap the engine's "
                "own classes around it afterwards), or turn deterministic inference off",
            ),
            family=type(wrapper).__qualname__,
            backend="unknown",
            release=_name(release),
            verdict=str(Verdict.UNKNOWN),
        )
    backend = backend_of(wrapper, family, release)
    if backend is None:
        attribute = " or ".join(str(a) for a in _backend_attributes(release, family))
        answer = _reach.Reach(
            _name(release),
            family,
            "unreadable",
            Verdict.UNKNOWN,
            f"its backend cannot be read ({attribute} is not a str)",
        )
        raise refuse_reach(answer, f"the {role} {family}", "it")
    answer = vouch(release, family, backend, resolves_auto=_resolves(wrapper))
    if not answer.reaches:
        raise refuse_reach(
            answer,
            f"the {role} {family} (backend={backend!r})",
            f"the {role} {family}",
        )
    return family
