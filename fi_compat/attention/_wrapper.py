"""The deterministic wrapper: an engine's FlashInfer wrapper whose every plan carries the settings.

:func:`deterministic_wrapper` returns an instance of a subclass of the wrapper's own class,
made once per class and settings, that shares the wrapper's attribute dictionary. Only
``plan`` (and its alias ``begin_forward``), assigning either, and :func:`fast_decode_plan`
differ; every check runs when wrapping. The deterministic-attention guide,
``docs/guide/attention.md`` ("The deterministic wrapper"), explains each.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Callable, Mapping
from types import MethodType
from typing import TYPE_CHECKING, Any, TypeVar

from fi_compat import _surface
from fi_compat._arguments import describe
from fi_compat._requirements.names import deterministic_feature
from fi_compat._surface import PLAN, SPLIT_KEYWORDS
from fi_compat.attention import _reach, _vouch
from fi_compat.attention._settings import Settings, same_split
from fi_compat.attention._vouch import (
    DECODE_FAMILIES,
    backend_of,
    check_options,
    check_reach,
    check_signature,
    check_tensor_cores,
    flag,
    refuse_reach,
    release_of,
    vouch,
)
from fi_compat.errors import (
    DeterminismUnavailableError,
    PlannerConfigError,
    UnsupportedOperationError,
    explain,
)

if TYPE_CHECKING:
    from fi_compat.capabilities import Capabilities

__all__ = ["deterministic_wrapper", "fast_decode_plan", "is_deterministic_wrapper"]

W = TypeVar("W")

#: The name FlashInfer gives ``plan``'s older spelling (``begin_forward = plan``).
BEGIN_FORWARD = "begin_forward"
_FAST_PLAN = _surface.FAST_DECODE_PLAN
_FIXED, _DISABLE = SPLIT_KEYWORDS


def _no_fast_plan(settled: _Settled) -> _reach.Reach:
    """The answer for a wrapper of a release without ``fast_decode_plan`` (or a prefill
    wrapper), keyed by the wrapper's backend."""
    return _reach.Reach(
        "unknown",
        _reach.FAST_DECODE_PLAN,
        settled.backend,
        _reach.Verdict.UNKNOWN,
        f"the installed flashinfer has no {_FAST_PLAN.key} for this wrapper",
    )


class _Settled:
    """What one deterministic wrapper class adds: fixed when the class is made."""

    __slots__ = (
        "backend",
        "fast",
        "fast_reach",
        "names",
        "positional",
        "settings",
        "signature",
        "split",
    )

    def __init__(
        self,
        split: Mapping[str, object],
        settings: Settings,
        signature: inspect.Signature | None,
        fast: Callable[..., Any] | None,
        fast_reach: _reach.Reach | None,
        backend: str = "unreadable",
    ) -> None:
        self.backend = backend
        self.split = dict(split)
        self.settings = settings
        self.signature = signature
        self.fast = fast
        self.fast_reach = fast_reach
        # plan(self, a, b, ...): positional arguments past this many may be split settings
        self.positional = _first_split_position(signature)
        self.names = _positional_names(signature)

    def settle(
        self, what: str, args: tuple[Any, ...], kwargs: dict[str, Any], positional: bool
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``args``/``kwargs`` without split settings that agree with ours; refuse others.

        The slow path: taken only when the engine passed a split setting itself (by keyword,
        or, for ``plan`` when ``positional``, as one of the positional arguments).
        """
        kwargs = dict(kwargs)
        given = {k: kwargs.pop(k) for k in SPLIT_KEYWORDS if k in kwargs}
        if positional and len(args) > self.positional:
            cut = self.positional
            named = self.names[cut:]
            for name, value in zip(named, args[cut:], strict=False):
                if name in SPLIT_KEYWORDS:
                    given[name] = value
                else:
                    kwargs[name] = value
            # more arguments than plan has positional parameters: left for Python to refuse
            args = args[:cut] + args[cut + len(named) :]
        fixed = given.get(_FIXED, self.split[_FIXED])
        disable = given.get(_DISABLE, self.split[_DISABLE])
        if not same_split(fixed, disable, self.split):
            raise PlannerConfigError(
                explain(
                    f"{what}'s split settings to agree with the ones chosen when it was "
                    f"wrapped: fixed_split_size={self.split[_FIXED]!r}, "
                    f"disable_split_kv={self.split[_DISABLE]!r}",
                    ", ".join(f"{k}={v!r}" for k, v in given.items()),
                    fix="drop the split keywords from the call (the wrapper adds them), or "
                    "wrap with Settings.from_split(...) of the pair the engine passes",
                )
            )
        return args, kwargs


def _positional_names(signature: inspect.Signature | None) -> tuple[str, ...]:
    """``plan``'s positional parameters after ``self``, in order."""
    if signature is None:
        return ()
    return tuple(
        p.name
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    )[1:]


def _first_split_position(signature: inspect.Signature | None) -> int:
    """How many positional arguments (after ``self``) ``plan`` takes before a split setting.

    Unbounded when there is no signature or ``plan`` takes ``*args``: then no positional
    argument can be a split setting.
    """
    if signature is None or any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values()):
        return 1 << 30
    positional = [
        p
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ][1:]
    for index, parameter in enumerate(positional):
        if parameter.name in SPLIT_KEYWORDS:
            return index
    return len(positional)


class _SettledFastPlan(functools.partial):  # type: ignore[type-arg]
    """``partial(fast_decode_plan, wrapper)`` that adds the wrapper's split settings.

    Still a ``functools.partial`` whose ``func`` is the release's ``fast_decode_plan`` (SGLang
    tests ``wrapper.begin_forward.func == fast_decode_plan`` to choose its arguments).
    """

    __slots__ = ("settled",)
    settled: _Settled

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        settled = self.settled
        if _FIXED in kwargs or _DISABLE in kwargs:
            args, kwargs = settled.settle(_FAST_PLAN.key, args, kwargs, False)
        return self.func(*self.args, *args, **self.keywords, **kwargs, **settled.split)


def _slot_key(name: str) -> str:
    """Where a deterministic wrapper keeps what its ``name`` answers, in the shared dict."""
    return f"_fi_compat_{name}"


def _plan_slot(name: str) -> property:
    """``plan`` / ``begin_forward`` of a deterministic wrapper: a data descriptor.

    Reading is C code end to end (``property`` over ``operator.attrgetter``): it gives the
    bound settled ``plan`` stored when wrapping, or the fast plan installed in its place.
    Assigning installs a fast plan (or refuses it); deleting restores the settled ``plan``.
    """
    key = _slot_key(name)

    def install(obj: Any, value: Any) -> None:
        settled: _Settled = type(obj)._fi_compat_settled
        fast = settled.fast
        if (
            isinstance(value, functools.partial)
            and fast is not None
            and value.func is fast
            and len(value.args) == 1
            and getattr(value.args[0], "__dict__", None) is obj.__dict__
        ):
            answer = settled.fast_reach or _no_fast_plan(settled)
            if not answer.reaches:
                raise refuse_reach(
                    answer,
                    f"{_FAST_PLAN.dotted} installed as {name} of a "
                    f"deterministic {type(obj).__name__}",
                    "the decode wrapper",
                )
            keywords = dict(value.keywords)
            if _FIXED in keywords or _DISABLE in keywords:
                # frozen split settings: refused now unless they agree, then left to ours
                _, keywords = settled.settle(
                    f"{_FAST_PLAN.key} installed as {name}", (), keywords, False
                )
            served = _SettledFastPlan(value.func, *value.args, **keywords)
            served.settled = settled
            vars(obj)[key] = served
            return
        raise DeterminismUnavailableError(
            explain(
                f"{name} of a deterministic {type(obj).__name__} to stay its plan, or "
                f"to be functools.partial({_FAST_PLAN.dotted}, wrapper) of the "
                "installed release",
                f"{describe(value)}: fi-compat cannot see which split settings it hands the kernel",
                fix="plan replays through wrapper.plan(...), or install "
                f"functools.partial({_FAST_PLAN.key}, wrapper) (SGLang's decode fast plan); "
                "with deterministic inference off, the wrapper is FlashInfer's own and takes "
                "any replacement",
            ),
            feature=deterministic_feature(_reach.FAST_DECODE_PLAN, settled.backend),
        )

    def restore(obj: Any) -> None:
        attributes = vars(obj)
        if not isinstance(attributes.get(key), _SettledFastPlan):
            raise AttributeError(name)
        attributes[key] = MethodType(type(obj)._fi_compat_plan, obj)

    return property(operator.attrgetter(key), install, restore, f"The settled {name}.")


#: (wrapper class, split items, fast plan, fast reach, backend) -> the deterministic subclass.
_CLASSES: dict[tuple[Any, ...], type[Any]] = {}


def _deterministic_class(
    cls: type[Any], settled: _Settled, base_plan: Callable[..., Any]
) -> type[Any]:
    key = (cls, tuple(settled.split.items()), settled.fast, settled.fast_reach, settled.backend)
    made = _CLASSES.get(key)
    if made is not None:
        return made
    split = settled.split
    positional = settled.positional
    name = cls.__name__

    def _fi_compat_plan(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _FIXED in kwargs or _DISABLE in kwargs or len(args) > positional:
            args, kwargs = settled.settle(f"{name}.plan", args, kwargs, True)
        kwargs.update(split)  # the call's own dict: nothing else sees it
        return base_plan(self, *args, **kwargs)

    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": name,
        "__doc__": f"A deterministic {name}: every plan carries {split}.",
        "_fi_compat_settled": settled,
        "_fi_compat_plan": _fi_compat_plan,
        PLAN: _plan_slot(PLAN),
        "__copy__": _copy,
        "__deepcopy__": _deepcopy,
        "__reduce_ex__": _not_picklable,
    }
    if hasattr(cls, BEGIN_FORWARD):
        namespace[BEGIN_FORWARD] = _plan_slot(BEGIN_FORWARD)
    made = type(name, (cls,), namespace)
    _CLASSES[key] = made
    return made


#: Where a deterministic wrapper keeps its settled ``plan`` and ``begin_forward``.
_SLOT_KEYS = (_slot_key(PLAN), _slot_key(BEGIN_FORWARD))


def _rebound(original: Any, copy: Any) -> None:
    """Give ``copy`` its own settled ``plan`` (and installed fast plans): what ``original``
    holds is bound to ``original``, and would plan it instead."""
    attributes = vars(copy)
    for key in _SLOT_KEYS:
        held = vars(original).get(key)
        if held is None:
            continue
        if isinstance(held, _SettledFastPlan):
            served = _SettledFastPlan(held.func, copy, *held.args[1:], **held.keywords)
            served.settled = held.settled
            attributes[key] = served
        else:
            attributes[key] = MethodType(type(copy)._fi_compat_plan, copy)


def _copy(self: Any) -> Any:
    """``copy.copy``: a deterministic wrapper of its own, as a copy of FlashInfer's wrapper
    is one (its attributes a shallow copy), planning itself with the same settings."""
    made = object.__new__(type(self))
    made.__dict__ = {k: v for k, v in vars(self).items() if k not in _SLOT_KEYS}
    _rebound(self, made)
    return made


def _deepcopy(self: Any, memo: dict[int, Any]) -> Any:
    """``copy.deepcopy``: as :func:`_copy`, its attributes deep-copied."""
    import copy

    made = object.__new__(type(self))
    memo[id(self)] = made
    state = {k: v for k, v in vars(self).items() if k not in _SLOT_KEYS}
    made.__dict__ = copy.deepcopy(state, memo)
    _rebound(self, made)
    return made


def _not_picklable(self: Any, protocol: Any) -> Any:
    raise UnsupportedOperationError(
        explain(
            "a deterministic wrapper to stay in the process that made it",
            f"pickle of a deterministic {type(self).__name__}: its class is made at run "
            "time for the installed release and settings, and would not unpickle elsewhere",
            fix="pickle what the engine needs to rebuild the FlashInfer wrapper, and wrap "
            "the rebuilt one with deterministic_wrapper()",
        )
    )


def is_deterministic_wrapper(wrapper: object) -> bool:
    """True for an object :func:`deterministic_wrapper` made.

    .. versionadded:: 0.2.0
    """
    return getattr(type(wrapper), "_fi_compat_settled", None) is not None


def _check_wrapper(wrapper: object) -> None:
    if wrapper is None:
        problem = "None"
    elif isinstance(wrapper, type):
        problem = f"the class {wrapper.__name__} itself, not an instance of it"
    elif not callable(getattr(wrapper, PLAN, None)) and not callable(
        getattr(wrapper, BEGIN_FORWARD, None)
    ):
        problem = f"{describe(wrapper)}, which has no callable plan (or begin_forward)"
    elif not isinstance(getattr(wrapper, "__dict__", None), dict):
        problem = f"{describe(wrapper)}, which has no attribute dictionary to share"
    else:
        return
    raise PlannerConfigError(
        explain(
            "a FlashInfer attention wrapper object (with a callable plan or begin_forward)",
            problem,
            fix="pass the wrapper the engine built, e.g. "
            f"{_surface.DECODE.key}(workspace, 'NHD', use_tensor_cores=True)",
        )
    )


def deterministic_wrapper(
    wrapper: W,
    settings: Settings | None = None,
    *,
    capabilities: Capabilities | None = None,
) -> W:
    """An object that behaves as ``wrapper`` and whose every plan carries the split settings.

    The deterministic-attention guide, ``docs/guide/attention.md`` ("The deterministic
    wrapper"), says what the object is and what is refused.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    wrapper
        A FlashInfer attention wrapper the engine built (any family, any subclass).
    settings
        Defaults to ``Settings(cuda_graph=True)`` for a wrapper built with
        ``use_cuda_graph=True`` and ``Settings()`` otherwise.
    capabilities
        The installed release's; probed when needed.

    Returns
    -------
    The wrapper itself when determinism is off; otherwise an object of a subclass of
    ``type(wrapper)`` sharing ``wrapper``'s attributes.

    Raises
    ------
    BackendNotDeterministicError
        Deterministic, and the wrapper's class and backend were not measured to hand the
        split settings to the kernel (or it is no FlashInfer wrapper).
    DeterminismUnavailableError
        Deterministic, and its ``plan`` does not take the split keywords (before 0.4.0).
    TensorCoresRequiredError
        Deterministic, and a decode wrapper was built without tensor cores.
    PlannerConfigError
        A wrong ``wrapper``, ``settings`` or ``capabilities``, a CUDA-graph wrapper with
        eager settings, or a deterministic wrapper wrapped again with other settings.
    """
    _check_wrapper(wrapper)
    check_options(settings, capabilities)
    graph = bool(flag(wrapper, ("is_cuda_graph_enabled", "_use_cuda_graph")))
    resolved = (settings if settings is not None else Settings(cuda_graph=graph)).resolved()
    if not resolved.deterministic:
        return wrapper
    release = release_of(capabilities)
    if is_deterministic_wrapper(wrapper):
        return _rewrapped(wrapper, resolved)
    family = check_reach(wrapper, "wrapped", release)
    decode = family in DECODE_FAMILIES
    if graph and not resolved.cuda_graph:
        raise PlannerConfigError(
            explain(
                "eager settings for an eager wrapper; a CUDA-graph wrapper needs "
                "fixed_split_size unset and disable_split_kv=True",
                f"a {family} built with use_cuda_graph=True and Settings(cuda_graph=False)",
                fix="leave settings out (CUDA-graph mode is the default for it), or pass "
                "Settings(cuda_graph=True)",
            )
        )
    check_signature(wrapper, family, "wrapped", release)
    if decode:
        check_tensor_cores(wrapper, "wrapped", release)
    split = resolved.split_kwargs("decode" if decode else "prefill")
    cls = type(wrapper)
    base_plan: Any = inspect.getattr_static(cls, PLAN)
    if isinstance(base_plan, staticmethod | classmethod):  # not FlashInfer's; bind as given
        base_plan = getattr(cls, PLAN)
    try:
        signature: inspect.Signature | None = inspect.signature(base_plan)
    except (TypeError, ValueError):
        signature = None
    fast = _vouch.fast_plan_of_release() if decode else None
    fast_reach = None
    backend = backend_of(wrapper, family, release) or "unreadable"
    if fast is not None:
        fast_reach = vouch(release, _reach.FAST_DECODE_PLAN, backend)
    settled = _Settled(split, resolved, signature, fast, fast_reach, backend)
    made = _deterministic_class(cls, settled, base_plan)
    attributes = vars(wrapper)
    names = (PLAN, BEGIN_FORWARD) if hasattr(cls, BEGIN_FORWARD) else (PLAN,)
    for name in names:
        held = _settled_of(attributes.get(_slot_key(name)))
        if held is not None and held is not settled and held.split != settled.split:
            raise PlannerConfigError(
                explain(
                    "a FlashInfer wrapper to be wrapped deterministically once",
                    f"a {family} already wrapped to carry {held.split}, now asked to carry "
                    f"{settled.split}",
                    fix="wrap each FlashInfer wrapper once, with the settings it should carry",
                )
            )
    obj: W = object.__new__(made)
    obj.__dict__ = attributes  # one dictionary: state set through either is seen by both
    bound = MethodType(made._fi_compat_plan, obj)
    for name in names:
        if not isinstance(attributes.get(_slot_key(name)), _SettledFastPlan):
            attributes[_slot_key(name)] = bound
    return obj


def _settled_of(held: object) -> _Settled | None:
    """The settings a slot value carries: a settled ``plan`` or an installed fast plan."""
    if isinstance(held, _SettledFastPlan):
        return held.settled
    owner = type(getattr(held, "__self__", None))
    settled: _Settled | None = getattr(owner, "_fi_compat_settled", None)
    return settled


def _rewrapped(wrapper: W, settings: Settings) -> W:
    settled: _Settled = type(wrapper)._fi_compat_settled  # type: ignore[attr-defined]
    family = type(wrapper).__name__
    split = settings.split_kwargs("decode" if family in DECODE_FAMILIES else "prefill")
    if dict(split) == settled.split:
        return wrapper
    raise PlannerConfigError(
        explain(
            "a wrapper to be made deterministic once",
            f"a deterministic {family} carrying {settled.split}, wrapped again with {dict(split)}",
            fix="wrap the FlashInfer wrapper itself once, with the settings it should carry",
        )
    )


def fast_decode_plan(wrapper: Any, *args: Any, **kwargs: Any) -> Any:
    """``flashinfer.decode.fast_decode_plan`` of the installed release, settings included.

    A drop-in for ``from flashinfer.decode import fast_decode_plan``: given a deterministic
    wrapper it adds that wrapper's split settings (and refuses contradicting ones, or a
    release whose fast plan was not measured to hand them to the kernel); given anything
    else it is the release's own call.

    .. versionadded:: 0.2.0

    Raises
    ------
    BackendNotDeterministicError
        A deterministic wrapper, and the release's fast plan drops the settings for its
        backend (or was not measured).
    PlannerConfigError
        ``wrapper`` is not a FlashInfer decode wrapper, or a deterministic one and the call
        passes split settings that disagree with its.
    ImportError
        The installed release has no ``fast_decode_plan`` (before 0.4.0), as FlashInfer's
        own import would fail.
    """
    if _vouch.family_of(wrapper) not in DECODE_FAMILIES:
        raise PlannerConfigError(
            explain(
                f"a FlashInfer decode wrapper as {_FAST_PLAN.key}'s first argument",
                describe(wrapper),
                fix=f"pass the {_surface.DECODE.key} (or its CUDA-graph class) the engine "
                "built, as FlashInfer's own fast plan expects",
            )
        )
    settled: _Settled | None = getattr(type(wrapper), "_fi_compat_settled", None)
    if settled is None:
        fast = _vouch.fast_plan_of_release()
        if fast is None:
            raise ImportError(
                f"cannot import name '{_FAST_PLAN.key}' from '{_FAST_PLAN.module}': "
                f"the installed flashinfer has none (it arrived in {_FAST_PLAN.introduced_in})"
            )
        return fast(wrapper, *args, **kwargs)
    answer = settled.fast_reach or _no_fast_plan(settled)
    if settled.fast is None or not answer.reaches:
        raise refuse_reach(
            answer,
            f"{_FAST_PLAN.key} for a deterministic {type(wrapper).__name__}",
            "the decode wrapper",
        )
    if _FIXED in kwargs or _DISABLE in kwargs:
        args, kwargs = settled.settle(_FAST_PLAN.key, args, kwargs, False)
    return settled.fast(wrapper, *args, **kwargs, **settled.split)
