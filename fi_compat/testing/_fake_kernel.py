"""The fake's kernel boundary: what an attention ``plan`` hands the kernel, from measured data.

When a fake wrapper's ``plan`` has bound its arguments, :func:`kernel_plan` turns what
:mod:`fi_compat.attention._reach` measured for that release, family and backend into a
:class:`KernelPlan` (or the exception the release raises), kept in
:attr:`~fi_compat.testing.FakeFlashInfer.kernel_plans`. Nothing here imports torch or
FlashInfer. The testing guide, ``docs/guide/testing.md`` ("What the fake does"), describes
the kernel boundary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fi_compat._surface import SPLIT_KEYWORDS
from fi_compat.attention import _reach

__all__ = ["TENSOR_CORE_MESSAGE", "KernelPlan", "kernel_plan"]

_FIXED, _DISABLE = SPLIT_KEYWORDS
#: What the decode wrapper's ``plan`` raises (``ValueError``) for a ``fixed_split_size``
#: other than None on a wrapper without tensor cores: FlashInfer's own text, the same in
#: every release from 0.4.0 (``flashinfer/decode.py``).
TENSOR_CORE_MESSAGE = "fixed_split_size is only supported by tensor core decode for now."
#: What FlashInfer passes the kernel for ``fixed_split_size=None``: no fixed split.
_NO_FIXED_SPLIT = -1
#: A measured refusal whose detail names this exception type is raised as one.
_VALUE_ERROR = re.compile(r"\bValueError\b")
#: What reading ``reach.json`` can raise when it is missing, malformed or of another schema.
_DATA_ERRORS = (OSError, RuntimeError, ValueError, KeyError, TypeError, AttributeError)


@dataclass(frozen=True)
class KernelPlan:
    """What one fake ``plan`` call handed the kernel, as the measured data says.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    wrapper
        The wrapper planned (the one given to ``fast_decode_plan`` for the fast plan).
    family
        Its family in :data:`fi_compat._surface.ATTENTION_FAMILIES`, or
        ``"fast_decode_plan"``.
    backend
        The backend the wrapper requested, as measured data keys it (``"default"`` for a
        family without ``backend=``; the ``repr`` of a backend attribute holding no str).
    fixed_split_size
        What the kernel's plan received (None as ``-1``); None when :attr:`dropped`, as
        passed when :attr:`unmeasured`.
    disable_split_kv
        The same for ``disable_split_kv`` (default False).
    dropped
        True when ``plan`` took the settings (or none were passed) and the kernel got none.
    unmeasured
        True when nothing was measured for this (release, family, backend).
    detail
        Why: the measurement's own detail, or the fake's reason.
    """

    wrapper: Any
    family: str
    backend: str
    fixed_split_size: Any
    disable_split_kv: Any
    dropped: bool = False
    unmeasured: bool = False
    detail: str = ""


def kernel_plan(
    release: str,
    wrapper: Any,
    family: str,
    passed: Mapping[str, Any],
    defaults: Mapping[str, Any],
    *,
    fallback_backend: Any = None,
    tensor_cores: bool | None = None,
    refuse_without_tensor_cores: bool = True,
) -> KernelPlan:
    """The :class:`KernelPlan` of one bound ``plan`` call, or the exception it raises.

    The testing guide, ``docs/guide/testing.md`` ("What the fake does"), describes the
    kernel boundary.

    Parameters
    ----------
    release
        The imitated release (``"0.7.2.post1"``).
    wrapper
        The wrapper being planned.
    family
        Its family key in the measured data.
    passed
        The split keywords the caller passed, with their values.
    defaults
        The planning function's defaults for the split keywords it declares.
    fallback_backend
        The constructor's backend, for an empty backend attribute (None: the default).
    tensor_cores
        For a decode family, whether the wrapper runs on tensor cores; None otherwise.
    refuse_without_tensor_cores
        Raise for a fixed split size without tensor cores (``plan``, not the fast plan).

    Raises
    ------
    ValueError
        A decode wrapper without tensor cores was given a ``fixed_split_size``
        (:data:`TENSOR_CORE_MESSAGE`), or the measured refusal was a ``ValueError``.
    RuntimeError
        The measured refusal was another exception.
    """
    facts, problem = _family_facts(release, family)
    backend = _backend(wrapper, facts, fallback_backend)
    shown = backend if isinstance(backend, str) else repr(backend)
    if tensor_cores is False:
        if refuse_without_tensor_cores and passed.get(_FIXED) is not None:
            raise ValueError(TENSOR_CORE_MESSAGE)
        return KernelPlan(
            wrapper,
            family,
            shown,
            None,
            None,
            dropped=True,
            detail="decode without tensor cores: the kernel's plan takes no split settings",
        )
    if not isinstance(backend, str):
        detail = f"the wrapper's backend attribute holds {shown} (not a str): nothing measured"
        return _unmeasured(wrapper, family, shown, passed, detail)
    if problem is not None:
        return _unmeasured(wrapper, family, backend, passed, problem)
    answer = _reach.reach(release, family, backend)
    if answer.verdict is _reach.Verdict.REACHES:
        fixed = passed.get(_FIXED, defaults.get(_FIXED))
        disable = passed.get(_DISABLE, defaults.get(_DISABLE, False))
        fixed = _NO_FIXED_SPLIT if fixed is None else fixed
        return KernelPlan(wrapper, family, backend, fixed, disable, detail=answer.detail)
    if answer.verdict is _reach.Verdict.REFUSED and any(key in passed for key in SPLIT_KEYWORDS):
        if _VALUE_ERROR.search(answer.detail):
            raise ValueError(answer.detail)
        raise RuntimeError(answer.detail)
    if answer.verdict in (_reach.Verdict.DROPPED, _reach.Verdict.REFUSED):
        return KernelPlan(wrapper, family, backend, None, None, dropped=True, detail=answer.detail)
    return _unmeasured(wrapper, family, backend, passed, answer.detail)


def _unmeasured(
    wrapper: Any, family: str, backend: str, passed: Mapping[str, Any], detail: str
) -> KernelPlan:
    return KernelPlan(
        wrapper,
        family,
        backend,
        passed.get(_FIXED),
        passed.get(_DISABLE),
        unmeasured=True,
        detail=detail,
    )


def _family_facts(release: str, family: str) -> tuple[_reach.FamilyReach | None, str | None]:
    """What was measured for ``family`` in ``release``, or None and why not."""
    try:
        facts = _reach.family_reach(release, family)
    except _DATA_ERRORS as error:
        return None, f"the measured reach data could not be read: {type(error).__name__}"
    if facts is None:
        return None, f"fi-compat has no measurement of {family} in flashinfer {release}"
    return facts, None


def _backend(wrapper: Any, facts: _reach.FamilyReach | None, fallback: Any) -> Any:
    """The backend ``wrapper`` requested: the measured backend attribute's value; where it
    holds None (or nothing is measured), ``fallback``; else the family's default."""
    if facts is not None and facts.backend_attribute is None:
        return _reach.DEFAULT_BACKEND
    value = None
    if facts is not None and isinstance(facts.backend_attribute, str):
        value = read_attribute(wrapper, (facts.backend_attribute,))
    if value is None:
        value = fallback
    if value is None and facts is not None and facts.default_backend is not None:
        value = facts.default_backend
    return _reach.DEFAULT_BACKEND if value is None else value


def inherited_backend(release: str, cls: type) -> str | None:
    """The backend an instance of ``cls``, a family without ``backend=``, holds after the
    real ``__init__`` (``reach.json``'s ``default_backend``: the CUDA-graph decode wrapper
    hands its base ``"auto"``); None for anything else or where nothing was measured."""
    family = read_attribute(cls, ("_fi_family",))
    if not isinstance(family, str):
        return None
    facts, _problem = _family_facts(release, family)
    if facts is None or facts.backend_attribute is not None:
        return None
    return facts.default_backend


def read_attribute(obj: Any, names: Sequence[str]) -> Any:
    """The first of ``names`` that ``obj`` has a value other than None for, else None
    (a descriptor that raises counts as none)."""
    for name in names:
        try:
            value = getattr(obj, name)
        except Exception:  # a hostile or broken descriptor: nothing stored
            continue
        if value is not None:
            return value
    return None


def truth(value: Any) -> bool | None:
    """``bool(value)`` as the release's ``if`` reads it; None when it cannot be read."""
    try:
        return bool(value)
    except Exception:  # a hostile __bool__
        return None
