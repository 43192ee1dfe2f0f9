"""The fake's attention families and its kernel boundary, driven by the measured reach data.

Every recorded family is in the fake where the release has it, with its recorded methods,
aliases and bases; a fake wrapper's ``plan`` records in ``kernel_plans`` exactly what the
reach data says reaches the kernel, for every measured (release, family, backend). The
data-driven tests run twice: on a synthetic ``reach.json`` (every verdict, every release
from 0.4.0) loaded in place of the shipped one, and on the shipped ``reach.json`` when it
exists.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import json
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from fi_compat._surface import ATTENTION_FAMILIES, DECODE, FAST_DECODE_PLAN, SPLIT_KEYWORDS
from fi_compat.attention import _reach
from fi_compat.testing import (
    FakeFlashInfer,
    KernelPlan,
    ReleaseRecord,
    StandIn,
    available_releases,
    fake_flashinfer,
    load_release,
)
from fi_compat.testing._fake_kernel import TENSOR_CORE_MESSAGE
from tests.support import release_classes
from tests.support.installed import import_installed
from tests.support.shapes import shape

FIRST = Version("0.4.0")
RELEASES = [release for release in available_releases() if Version(release) >= FIRST]
#: The releases the tests below run on: the first and last of each 'attention' class
#: (tests/support/release_classes.py; every one with --all-releases).
SWEPT = release_classes.releases("attention", RELEASES)
FAST = FAST_DECODE_PLAN.key
FIXED, DISABLE = SPLIT_KEYWORDS
#: The split settings every data-driven plan call passes.
SETTINGS = {FIXED: 64, DISABLE: True}
BACKEND_PARAMETER = "backend"
TENSOR_CORES_PARAMETER = "use_tensor_cores"
#: What the synthetic data measures, per backend of a family that takes ``backend=``.
SYNTHETIC = {
    "fa2": ("reaches", "the kernel's plan receives both settings"),
    "fa3": ("dropped", "no boundary call carries them"),
    "cudnn": ("refused", "plan raised ValueError: not on cudnn with fixed_split_size=7919"),
    "cutlass": ("refused", "plan raised NotImplementedError: no with fixed_split_size=7919"),
    "trtllm-gen": ("unmeasured", "plan fails without the settings too"),
}
_DEFAULT_ROTATION = ("reaches", "dropped", "refused", "unmeasured")


def _shipped_reach() -> Path | None:
    path = Path(str(resources.files("fi_compat._measured").joinpath("reach.json")))
    return path if path.is_file() else None


# ----------------------------------------------------------------------- the reach data


def _family(record: ReleaseRecord, family: str) -> Any:
    found = record.attention_family(family)
    if found is None and family == FAST:
        found = record.attention_family(DECODE.key)
    return found


def _init_parameter(record: ReleaseRecord, family: str, name: str) -> Any:
    cls = _family(record, family)
    init = cls.method("__init__") if cls is not None else None
    return init.parameter(name) if init is not None else None


def _plan_accepts(record: ReleaseRecord, family: str) -> bool:
    if family == FAST:
        plan = record.fast_decode_plan
        return plan is not None and all(key in plan.keyword_names for key in SPLIT_KEYWORDS)
    return all(
        record.accepts(f"{family}.{method}", key) for key in SPLIT_KEYWORDS for method in ("plan",)
    )


def _synthetic_family(record: ReleaseRecord, family: str, index: int) -> dict[str, Any]:
    backend = _init_parameter(record, family, BACKEND_PARAMETER)
    if not _plan_accepts(record, family):
        refused = {"verdict": "refused", "detail": "plan takes no fixed_split_size"}
        return {
            "plan_takes": False,
            "backend_attribute": None,
            "default_backend": None,
            "backends": {_reach.DEFAULT_BACKEND: refused},
        }
    if backend is None:
        verdict = _DEFAULT_ROTATION[index % len(_DEFAULT_ROTATION)]
        detail = "plan raised ValueError: synthetic" if verdict == "refused" else "synthetic"
        backends = {_reach.DEFAULT_BACKEND: {"verdict": verdict, "detail": detail}}
        return {
            "plan_takes": True,
            "backend_attribute": None,
            "default_backend": None,
            "backends": backends,
        }
    return {
        "plan_takes": True,
        "backend_attribute": "_backend",
        "default_backend": json.loads(backend.default.replace("'", '"')),
        "backends": {
            name: {"verdict": verdict, "detail": detail}
            for name, (verdict, detail) in SYNTHETIC.items()
        },
    }


def _synthetic_releases() -> dict[str, Any]:
    releases: dict[str, Any] = {}
    for release in RELEASES:
        record = load_release(release)
        families = list(record.attention_families)
        if record.fast_decode_plan is not None:
            families.append(FAST)
        releases[release] = {
            family: _synthetic_family(record, family, index)
            for index, family in enumerate(families)
        }
    return releases


@pytest.fixture
def synthetic_reach(monkeypatch: pytest.MonkeyPatch) -> Iterator[Mapping[str, Any]]:
    """The synthetic measurements, served by ``fi_compat.attention._reach`` for the test."""
    releases = _synthetic_releases()
    _reach._release.cache_clear()
    monkeypatch.setattr(_reach, "reach_data", lambda: releases)
    yield releases
    monkeypatch.undo()
    _reach._release.cache_clear()


def _load(data: Mapping[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _reach._release.cache_clear()
    monkeypatch.setattr(_reach, "reach_data", lambda: data)


# --------------------------------------------------------------- building and planning


def _placeholder(name: str) -> Any:
    return StandIn(name)


def _required(func: Any) -> tuple[list[Any], dict[str, Any]]:
    """StandIns for every parameter of ``func`` (a fake function) that has no default."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for index, parameter in enumerate(inspect.signature(func).parameters.values()):
        if index == 0 or parameter.default is not parameter.empty:
            continue
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            args.append(_placeholder(parameter.name))
        elif parameter.kind is parameter.KEYWORD_ONLY:
            kwargs[parameter.name] = _placeholder(parameter.name)
    return args, kwargs


def _build(fi: FakeFlashInfer, family: str, backend: str, facts: _reach.FamilyReach) -> Any:
    """A fake wrapper of ``family`` (the decode wrapper for the fast plan) asking for
    ``backend``, on tensor cores where it has the switch (as the data was measured)."""
    cls = getattr(fi.flashinfer, DECODE.key if family == FAST else family)
    args, kwargs = _required(cls.__init__)
    parameters = inspect.signature(cls.__init__).parameters
    takes_backend = BACKEND_PARAMETER in parameters
    if takes_backend and backend != _reach.DEFAULT_BACKEND:
        kwargs[BACKEND_PARAMETER] = backend
    if TENSOR_CORES_PARAMETER in parameters:
        kwargs[TENSOR_CORES_PARAMETER] = True
    wrapper = cls(*args, **kwargs)
    if not takes_backend and facts.backend_attribute and backend != _reach.DEFAULT_BACKEND:
        setattr(wrapper, facts.backend_attribute, backend)
    return wrapper


def _fast(fi: FakeFlashInfer) -> Any:
    """The fake ``fast_decode_plan``, from the module the release defines it in."""
    record = fi.record.fast_decode_plan
    assert record is not None
    return getattr(importlib.import_module(record.defined_in), FAST)


def _planner(fi: FakeFlashInfer, family: str, wrapper: Any) -> Any:
    """A callable planning ``wrapper`` with the given split keywords only added."""
    if family == FAST:
        plan = _fast(fi)
        args, kwargs = _required(plan)
        return lambda **extra: plan(wrapper, *args, **kwargs, **extra)
    method = getattr(wrapper, "plan", None) or wrapper.begin_forward
    args, kwargs = _required(method.__func__)
    return lambda **extra: method(*args, **kwargs, **extra)


def _binds(wrapper: Any, family: str, fi: FakeFlashInfer) -> bool:
    """Whether the fake's planning function binds the split keywords."""
    if family == FAST:
        func = _fast(fi)
    else:
        func = getattr(type(wrapper), "plan", None) or type(wrapper).begin_forward
    parameters = inspect.signature(func).parameters
    return all(key in parameters for key in SPLIT_KEYWORDS) or any(
        p.kind is p.VAR_KEYWORD for p in parameters.values()
    )


def _expected(
    answer: _reach.Reach, wrapper: Any, family: str, settings: Mapping[str, Any]
) -> KernelPlan | None:
    """The kernel record the data says one plan call makes (None: it raises)."""
    verdict = answer.verdict
    fields = {"wrapper": wrapper, "family": family, "backend": answer.backend}
    if verdict is _reach.Verdict.REACHES:
        fixed = settings.get(FIXED)
        return KernelPlan(
            **fields,
            fixed_split_size=-1 if fixed is None else fixed,
            disable_split_kv=settings.get(DISABLE, False),
            detail=answer.detail,
        )
    if verdict is _reach.Verdict.REFUSED and settings:
        return None
    if verdict in (_reach.Verdict.DROPPED, _reach.Verdict.REFUSED):
        return KernelPlan(
            **fields,
            fixed_split_size=None,
            disable_split_kv=None,
            dropped=True,
            detail=answer.detail,
        )
    return KernelPlan(
        **fields,
        fixed_split_size=settings.get(FIXED),
        disable_split_kv=settings.get(DISABLE),
        unmeasured=True,
        detail=answer.detail,
    )


def _check_release(release: str) -> int:
    """Plan every measured (family, backend) of ``release`` with and without the settings;
    returns how many kernel records were compared."""
    record = load_release(release)
    measured = [
        family
        for family in (*ATTENTION_FAMILIES, FAST)
        if _reach.family_reach(release, family) is not None
    ]
    compared = 0
    with fake_flashinfer(release) as fi:
        for family in measured:
            facts = _reach.family_reach(release, family)
            assert facts is not None
            if family == FAST:
                assert record.fast_decode_plan is not None, release
            else:
                assert family in record.attention_families, (release, family)
            for backend in facts.backends:
                answer = _reach.reach(release, family, backend)
                wrapper = _build(fi, family, backend, facts)
                plan = _planner(fi, family, wrapper)
                for settings in (dict(SETTINGS), {FIXED: None, DISABLE: False}, {}):
                    where = (release, family, backend, settings, answer.verdict)
                    fi.clear_calls()
                    if settings and not _binds(wrapper, family, fi):
                        # The release's own signature refuses them, as Python does.
                        assert answer.verdict is _reach.Verdict.REFUSED, where
                        with pytest.raises(TypeError):
                            plan(**settings)
                        assert fi.kernel_plans == [], where
                        continue
                    expected = _expected(answer, wrapper, family, settings)
                    if expected is None:
                        error = ValueError if "ValueError" in answer.detail else RuntimeError
                        with pytest.raises(error) as raised:
                            plan(**settings)
                        assert type(raised.value) is error, where
                        assert str(raised.value) == answer.detail, where
                        assert fi.kernel_plans == [], where
                        continue
                    plan(**settings)
                    assert fi.kernel_plans == [expected], where
                    compared += 1
    return compared


@pytest.mark.parametrize("release", SWEPT)
def test_kernel_records_follow_synthetic_reach_data(
    release: str, synthetic_reach: Mapping[str, Any]
) -> None:
    assert release in synthetic_reach
    assert _check_release(release) > 0


def _shipped_releases() -> list[str]:
    path = _shipped_reach()
    if path is None:
        return []
    loaded = json.loads(path.read_text(encoding="utf-8"))
    return [release for release in loaded.get("releases", {}) if release in RELEASES]


@pytest.mark.skipif(_shipped_reach() is None, reason="fi_compat/_measured/reach.json not written")
@pytest.mark.parametrize("release", _shipped_releases() or ["none"])
def test_kernel_records_follow_the_shipped_reach_data(release: str) -> None:
    _reach._release.cache_clear()
    assert _check_release(release) > 0


def test_the_synthetic_data_covers_every_verdict(synthetic_reach: Mapping[str, Any]) -> None:
    verdicts = {
        answer["verdict"]
        for families in synthetic_reach.values()
        for family in families.values()
        for answer in family["backends"].values()
    }
    assert verdicts == {"reaches", "dropped", "refused", "unmeasured"}
    families = {family for families in synthetic_reach.values() for family in families}
    assert families == {*ATTENTION_FAMILIES, FAST}


# ------------------------------------------------------------------ specific behaviour


def _decode(fi: FakeFlashInfer, **options: Any) -> Any:
    cls = getattr(fi.flashinfer, DECODE.key)
    args, kwargs = _required(cls.__init__)
    return cls(*args, **kwargs, **options)


def _plan_decode(wrapper: Any, **settings: Any) -> None:
    args, kwargs = _required(type(wrapper).plan)
    wrapper.plan(*args, **kwargs, **settings)


def test_decode_without_tensor_cores_refuses_a_fixed_split_and_drops_the_rest(
    synthetic_reach: Mapping[str, Any],
) -> None:
    for release in ("0.4.0", "0.6.15", "0.7.2.post1"):
        with fake_flashinfer(release) as fi:
            wrapper = _decode(fi, use_tensor_cores=False, backend="fa2")
            with pytest.raises(ValueError, match="tensor core") as raised:
                _plan_decode(wrapper, fixed_split_size=64, disable_split_kv=True)
            assert str(raised.value) == TENSOR_CORE_MESSAGE
            assert fi.kernel_plans == []
            _plan_decode(wrapper, fixed_split_size=None, disable_split_kv=True)
            assert fi.kernel_plans == [
                KernelPlan(
                    wrapper,
                    DECODE.key,
                    "fa2",
                    None,
                    None,
                    dropped=True,
                    detail=fi.kernel_plans[0].detail,
                )
            ]
            # The fast plan ignores both settings there, without raising.
            fi.clear_calls()
            assert fi.kernel_plans == []
            fast = _fast(fi)
            args, kwargs = _required(fast)
            fast(wrapper, *args, **kwargs, fixed_split_size=64, disable_split_kv=True)
            (plan,) = fi.kernel_plans
            assert (plan.family, plan.dropped, plan.fixed_split_size) == (FAST, True, None)


def test_backends_that_force_tensor_cores_plan_as_measured(
    synthetic_reach: Mapping[str, Any],
) -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        wrapper = _decode(fi, use_tensor_cores=False, backend="trtllm-gen")
        _plan_decode(wrapper, fixed_split_size=64, disable_split_kv=True)
        (plan,) = fi.kernel_plans
        assert plan.unmeasured  # what the synthetic data says of trtllm-gen
        assert (plan.fixed_split_size, plan.disable_split_kv) == (64, True)


def test_begin_forward_is_plan_and_plans_the_kernel(synthetic_reach: Mapping[str, Any]) -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        cls = getattr(fi.flashinfer, DECODE.key)
        assert cls.begin_forward is cls.plan
        wrapper = _decode(fi, use_tensor_cores=True, backend="fa2")
        args, kwargs = _required(cls.plan)
        wrapper.begin_forward(*args, **kwargs, fixed_split_size=8)
        assert [call.name for call in fi.calls][-2:] == [
            f"{DECODE.key}.plan",
            f"{DECODE.key}._plan_impl",
        ]
        assert fi.kernel_plans == [
            KernelPlan(wrapper, DECODE.key, "fa2", 8, False, detail=SYNTHETIC["fa2"][1])
        ]


def test_a_subclass_plans_as_its_own_family(synthetic_reach: Mapping[str, Any]) -> None:
    graph = ATTENTION_FAMILIES[3]
    with fake_flashinfer("0.7.2.post1") as fi:
        cls = getattr(fi.flashinfer, graph)
        assert issubclass(cls, getattr(fi.flashinfer, DECODE.key))
        args, kwargs = _required(cls.__init__)
        wrapper = cls(*args, **kwargs, use_tensor_cores=True)
        plan_args, plan_kwargs = _required(cls.plan)
        wrapper.plan(*plan_args, **plan_kwargs)
        (plan,) = fi.kernel_plans
        assert plan.family == graph
        assert plan.backend == _reach.DEFAULT_BACKEND


def test_clear_calls_forgets_the_kernel_plans(synthetic_reach: Mapping[str, Any]) -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        _plan_decode(_decode(fi, use_tensor_cores=True, backend="fa2"))
        assert fi.kernel_plans
        fi.clear_calls()
        assert fi.kernel_plans == []
        assert fi.calls == []


# ------------------------------------------------------------------------ hostile input


@pytest.mark.parametrize("backend", [5, None, ["fa2"], {"fa2": 1}, b"fa2", 2.5, StandIn("x")])
def test_a_backend_attribute_that_is_no_str_is_unmeasured(
    backend: Any, synthetic_reach: Mapping[str, Any]
) -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        wrapper = _decode(fi, use_tensor_cores=True, backend="fa2")
        wrapper._backend = backend
        wrapper._requested_backend = backend
        _plan_decode(wrapper, fixed_split_size=64, disable_split_kv=True)
        (plan,) = fi.kernel_plans
        if backend is None:  # nothing stored: the family's default backend
            assert plan.backend == "auto"
            return
        assert plan.unmeasured
        assert plan.backend == repr(backend)
        assert (plan.fixed_split_size, plan.disable_split_kv) == (64, True)


def test_a_backend_attribute_that_raises_is_read_as_unset(
    synthetic_reach: Mapping[str, Any],
) -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        cls = getattr(fi.flashinfer, DECODE.key)

        class Hostile(cls):  # type: ignore[misc, valid-type]
            @property
            def _backend(self) -> str:
                raise RuntimeError("boom")

            @_backend.setter
            def _backend(self, value: Any) -> None:
                del value

        args, kwargs = _required(cls.__init__)
        wrapper = Hostile(*args, **kwargs, use_tensor_cores=True, backend="fa2")
        _plan_decode(wrapper, fixed_split_size=64)
        (plan,) = fi.kernel_plans
        assert plan.family == DECODE.key
        assert plan.backend == "fa2"  # the constructor's argument, stored under its name


def test_an_unknown_backend_is_unmeasured(synthetic_reach: Mapping[str, Any]) -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        wrapper = _decode(fi, use_tensor_cores=True, backend="no-such-backend")
        _plan_decode(wrapper, fixed_split_size=64, disable_split_kv=True)
        (plan,) = fi.kernel_plans
        assert plan.unmeasured
        assert plan.backend == "no-such-backend"
        assert "no-such-backend" in plan.detail


def test_a_release_missing_from_the_data_is_unmeasured(monkeypatch: pytest.MonkeyPatch) -> None:
    _load({}, monkeypatch)
    try:
        with fake_flashinfer("0.7.2.post1") as fi:
            wrapper = _decode(fi, use_tensor_cores=True, backend="fa2")
            _plan_decode(wrapper)
            assert fi.kernel_plans == [
                KernelPlan(
                    wrapper,
                    DECODE.key,
                    "fa2",
                    None,
                    None,
                    unmeasured=True,
                    detail=(
                        f"fi-compat has no measurement of {DECODE.key} in flashinfer 0.7.2.post1"
                    ),
                )
            ]
    finally:
        _reach._release.cache_clear()


@pytest.mark.parametrize("error", [FileNotFoundError, RuntimeError, KeyError, ValueError])
def test_unreadable_reach_data_is_unmeasured(
    error: type[Exception], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> Mapping[str, Any]:
        raise error("no data")

    _reach._release.cache_clear()
    monkeypatch.setattr(_reach, "reach_data", broken)
    try:
        with fake_flashinfer("0.7.2.post1") as fi:
            _plan_decode(_decode(fi, use_tensor_cores=True, backend="fa2"), fixed_split_size=3)
            (plan,) = fi.kernel_plans
            assert plan.unmeasured
            assert plan.fixed_split_size == 3
            assert error.__name__ in plan.detail
    finally:
        _reach._release.cache_clear()


def test_a_malformed_family_entry_is_unmeasured(monkeypatch: pytest.MonkeyPatch) -> None:
    _load({"0.7.2.post1": {DECODE.key: {"backends": {}}}}, monkeypatch)
    try:
        with fake_flashinfer("0.7.2.post1") as fi:
            _plan_decode(_decode(fi, use_tensor_cores=True, backend="fa2"))
            (plan,) = fi.kernel_plans
            assert plan.unmeasured
    finally:
        _reach._release.cache_clear()


# ---------------------------------------------------------------- where the families are


@pytest.mark.parametrize("release", available_releases())
def test_families_are_where_the_release_has_them(release: str) -> None:
    record = load_release(release)
    with fake_flashinfer(release) as fi:
        for family in ATTENTION_FAMILIES:
            cls = record.attention_family(family)
            assert hasattr(fi.flashinfer, family) is (cls is not None), (release, family)
            if cls is None:
                continue
            fake = getattr(fi.flashinfer, family)
            assert getattr(importlib.import_module(cls.defined_in), family) is fake
            assert fake._fi_family == family
            for base in cls.family_bases:
                assert issubclass(fake, getattr(fi.flashinfer, base)), (release, family, base)
            for name, method in cls.methods.items():
                assert hasattr(fake, name) is (method is not None), (release, family, name)
            for alias, target in cls.aliases.items():
                assert getattr(fake, alias) is getattr(fake, target), (release, family, alias)


# --------------------------------------------------------------- the real 0.7.2.post1


@pytest.fixture(scope="module")
def real_flashinfer() -> Any:
    return import_installed("flashinfer")[0]


@pytest.mark.real_flashinfer
def test_recorded_families_match_the_real_072(real_flashinfer: Any) -> None:
    record = load_release("0.7.2.post1")
    with fake_flashinfer("0.7.2.post1") as fi:
        fake = fi.flashinfer
        for family in ATTENTION_FAMILIES:
            real_cls = getattr(real_flashinfer, family, None)
            cls = record.attention_family(family)
            assert (real_cls is not None) is (cls is not None), family
            if real_cls is None or cls is None:
                continue
            assert real_cls.__module__ == cls.defined_in, family
            real_bases = [base.__name__ for base in real_cls.__bases__]
            assert list(cls.family_bases) == [b for b in real_bases if b in ATTENTION_FAMILIES]
            for name, method in cls.methods.items():
                real_method = getattr(real_cls, name, None)
                assert (real_method is not None) is (method is not None), (family, name)
                if real_method is None or method is None:
                    continue
                recorded = [(p.name, p.kind, p.has_default) for p in method.parameters]
                assert recorded == shape(real_method), (family, name)
                assert shape(getattr(getattr(fake, family), name)) == recorded, (family, name)
                assert real_method.__name__ == method.name, (family, name)
            real_aliases = {
                name: target
                for name in cls.methods
                for target in cls.methods
                if name != target
                and getattr(real_cls, name, None) is not None
                and getattr(real_cls, name, None) is getattr(real_cls, target, None)
                and getattr(real_cls, name).__name__ == target
            }
            assert dict(cls.aliases) == real_aliases, family


class _NoTruth:
    """A value whose truth cannot be read."""

    def __bool__(self) -> bool:
        raise RuntimeError("no truth")


def test_a_tensor_core_switch_without_a_truth_value_plans_as_measured(
    synthetic_reach: Mapping[str, Any],
) -> None:
    with fake_flashinfer("0.7.2.post1") as fi:
        wrapper = _decode(fi, use_tensor_cores=True, backend="fa2")
        wrapper._use_tensor_cores = _NoTruth()
        _plan_decode(wrapper, fixed_split_size=64, disable_split_kv=True)
        assert fi.kernel_plans == [
            KernelPlan(wrapper, DECODE.key, "fa2", 64, True, detail=SYNTHETIC["fa2"][1])
        ]
