"""The ``**kwargs`` follower on hostile forwarders: live probe and recorder must agree.

Each case is the source of a small ``decode.py`` holding a
``BatchDecodeWithPagedKVCacheWrapper`` whose ``plan(**kwargs)`` forwards (or fails to
forward) to ``_plan_impl``. It is read twice: imported from a file and probed live with
:func:`inspect_callable`, and recorded from a synthetic ``flashinfer/`` tree with the
recorder and answered by :meth:`ReleaseRecord.support`. Both must give the expected
answers for ``fixed_split_size`` and ``disable_split_kv``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import inspect
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fi_compat._forwarding import ALL, analyse
from fi_compat._recorder import record_release
from fi_compat._records import parse_record
from fi_compat._signature import Status, inspect_callable
from fi_compat.testing._generator import module_source as generated_module
from fi_compat.testing._registry import collect

S, U, N = "supported", "unknown", "unsupported"
KEYWORDS = ("fixed_split_size", "disable_split_kv")
WRAPPER = "BatchDecodeWithPagedKVCacheWrapper"

KW_ONLY_IMPL = """
def _plan_impl(self, indptr, *, fixed_split_size=None, disable_split_kv=False):
    return None
"""
# fixed_split_size can be bound positionally here; disable_split_kv cannot.
POSITIONAL_IMPL = """
def _plan_impl(self, indptr=None, fixed_split_size=None, *, disable_split_kv=False):
    return None
"""

# Written here in the shape 0.7.2.post1's decode plan has (read in flashinfer/decode.py, not
# copied): a second path that copies the dict in a module helper and only adds keys, each
# add guarded by a raise when the key is already there. The installed release's own code
# is checked by test_real_decode_plan_is_proven below.
REAL_MERGE = """
_OLD_POSITIONAL = ("fixed_split_size", "disable_split_kv")


def _with_positional(owner, extra, names, options):
    if len(extra) > len(names):
        raise TypeError(f"{owner}: {len(extra)} extra positional arguments, {len(names)} allowed")
    combined = dict(options)
    for key, item in zip(names, extra):
        if key in combined:
            raise TypeError(f"{owner}: {key} given twice")
        combined[key] = item
    return combined
"""

REAL_PLAN = '''
def plan(self, indptr, *extra, **kwargs):
    r"""Plan. ``kwargs.pop("fixed_split_size")`` in a docstring does not count."""
    if not extra:
        return self._plan_impl(
            indptr,
            **kwargs,
        )

    options = _with_positional("Wrapper", extra, _OLD_POSITIONAL, kwargs)
    return self._plan_impl(
        indptr,
        **options,
    )
'''


def _plan(body: str, signature: str = "self, indptr, *args, **kwargs") -> str:
    return f"def plan({signature}):\n" + textwrap.indent(textwrap.dedent(body).strip(), "    ")


# (id, module-level helpers, plan source, _plan_impl source, fixed_split_size, disable_split_kv)
CASES: list[tuple[str, str, str, str, str, str]] = [
    ("direct", "", _plan("return self._plan_impl(indptr, **kwargs)"), KW_ONLY_IMPL, S, S),
    (
        "pop",
        "",
        _plan("""
            kwargs.pop("fixed_split_size", None)
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        S,
    ),
    (
        "del",
        "",
        _plan("""
            if "fixed_split_size" in kwargs:
                del kwargs["fixed_split_size"]
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        S,
    ),
    (
        "setitem-constant",
        "",
        _plan("""
            kwargs["fixed_split_size"] = 64
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        S,
    ),
    (
        "setitem-variable",
        "",
        _plan("""
            name = "fixed_split_size"
            kwargs[name] = 64
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "add-only-idiom",
        "",
        _plan("""
            for name, value in zip(("fixed_split_size", "disable_split_kv"), args):
                if name in kwargs:
                    raise TypeError(name)
                kwargs[name] = value
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        S,
        S,
    ),
    (
        "guard-not-adjacent",
        "",
        _plan("""
            for name, value in zip(("fixed_split_size", "disable_split_kv"), args):
                if name in kwargs:
                    raise TypeError(name)
                name = "fixed_split_size"
                kwargs[name] = value
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "setdefault",
        "",
        _plan("""
            kwargs.setdefault("fixed_split_size", 64)
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        S,
        S,
    ),
    (
        "update",
        "",
        _plan("""
            kwargs.update(args[0] if args else {})
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "ior",
        "",
        _plan("""
            kwargs |= {"fixed_split_size": None}
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "clear",
        "",
        _plan("""
            kwargs.clear()
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "display-later-entry-wins",
        "",
        _plan("""
            merged = {**kwargs, "fixed_split_size": None}
            return self._plan_impl(indptr, **merged)
        """),
        KW_ONLY_IMPL,
        U,
        S,
    ),
    (
        "display-earlier-entry-loses",
        "",
        _plan("""
            merged = {"fixed_split_size": None, **kwargs}
            return self._plan_impl(indptr, **merged)
        """),
        KW_ONLY_IMPL,
        S,
        S,
    ),
    (
        "dict-call-override",
        "",
        _plan("""
            merged = dict(kwargs, fixed_split_size=None)
            return self._plan_impl(indptr, **merged)
        """),
        KW_ONLY_IMPL,
        U,
        S,
    ),
    (
        "dict-copy",
        "",
        _plan("""
            merged = dict(kwargs)
            again = merged.copy()
            return self._plan_impl(indptr, **again)
        """),
        KW_ONLY_IMPL,
        S,
        S,
    ),
    (
        "dict-shadowed",
        "def dict(mapping):\n    return {}\n",
        _plan("""
            merged = dict(kwargs)
            return self._plan_impl(indptr, **merged)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    ("shaped-like-0.7.2.post1", REAL_MERGE, REAL_PLAN, KW_ONLY_IMPL, S, S),
    (
        "helper-drops",
        "def _strip(kwargs):\n    out = dict(kwargs)\n"
        "    out.pop('fixed_split_size', None)\n    return out\n",
        _plan("""
            merged = _strip(kwargs)
            return self._plan_impl(indptr, **merged)
        """),
        KW_ONLY_IMPL,
        U,
        S,
    ),
    (
        "helper-updates",
        "def _merge(kwargs, extra):\n    merged = dict(kwargs)\n"
        "    merged.update(extra)\n    return merged\n",
        _plan("""
            merged = _merge(kwargs, {})
            return self._plan_impl(indptr, **merged)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "helper-decorated",
        "def _same(func):\n    return func\n\n\n@_same\n"
        "def _copy(kwargs):\n    return dict(kwargs)\n",
        _plan("""
            merged = _copy(kwargs)
            return self._plan_impl(indptr, **merged)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "opaque-call",
        "def _audit(kwargs):\n    print(len(kwargs))\n",
        _plan("""
            _audit(kwargs)
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "stored-on-self",
        "",
        _plan("""
            self.saved = kwargs
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "alias-pop",
        "",
        _plan("""
            alias = kwargs
            alias.pop("fixed_split_size", None)
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        S,
    ),
    (
        "nested-scope",
        "",
        _plan("""
            drop = lambda: kwargs.pop("disable_split_kv")
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "locals",
        "",
        _plan("""
            frame = locals()
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "explicit-duplicate",
        "",
        _plan("return self._plan_impl(indptr, fixed_split_size=None, **kwargs)"),
        KW_ONLY_IMPL,
        U,
        S,
    ),
    (
        "second-splat",
        "",
        _plan("return self._plan_impl(indptr, **kwargs, **(args[0] if args else {}))"),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "positional-binding",
        "",
        _plan("return self._plan_impl(indptr, None, **kwargs)"),
        POSITIONAL_IMPL,
        U,
        S,
    ),
    (
        "starred-splat",
        "",
        _plan("return self._plan_impl(*args, **kwargs)", "self, *args, **kwargs"),
        POSITIONAL_IMPL,
        U,
        S,
    ),
    (
        "early-return",
        "",
        _plan("""
            if indptr is None:
                return None
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "raise-is-not-dropping",
        "",
        _plan("""
            if indptr is None:
                raise ValueError("indptr")
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        S,
        S,
    ),
    (
        "one-branch",
        "",
        _plan("""
            if args:
                self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "both-branches",
        "",
        _plan("""
            if args:
                result = self._plan_impl(indptr, **kwargs)
            else:
                result = self._plan_impl(indptr, **dict(kwargs))
            return result
        """),
        KW_ONLY_IMPL,
        S,
        S,
    ),
    (
        "handler-returns",
        "",
        _plan("""
            try:
                return self._plan_impl(indptr, **kwargs)
            except TypeError:
                return None
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "conditional-expression",
        "",
        _plan("return self._plan_impl(indptr, **kwargs) if args else None"),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "carrier-rebound",
        "",
        _plan("""
            merged = dict(kwargs)
            if args:
                merged = {}
            return self._plan_impl(indptr, **merged)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "two-targets",
        "",
        _plan("""
            if args:
                return self._plan_impl(indptr, **kwargs)
            return self.__init__(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "parameter-shadows-global",
        "def _impl(indptr, *, fixed_split_size=None, disable_split_kv=False):\n    return None\n",
        _plan("return _impl(indptr, **kwargs)", "self, indptr, _impl=None, **kwargs"),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "local-shadows-global",
        "def _impl(indptr, *, fixed_split_size=None, disable_split_kv=False):\n    return None\n",
        _plan("""
            _impl = self._plan_impl
            return _impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "local-def-target",
        "",
        _plan("""
            def impl(indptr, *, fixed_split_size=None, disable_split_kv=False):
                return None
            return impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "attribute-of-instance-attribute",
        "",
        _plan("return self.inner._plan_impl(indptr, **kwargs)"),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "method-replaced-on-instance",
        "",
        _plan("""
            self._plan_impl = print
            return self._plan_impl(indptr, **kwargs)
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "comment-and-string-only",
        "",
        _plan("""
            # return self._plan_impl(indptr, **kwargs)
            "self._plan_impl(indptr, **kwargs)"
            return None
        """),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "comment-claims-a-drop",
        "",
        _plan("""
            # kwargs.pop("fixed_split_size")
            return self._plan_impl(indptr, **kwargs)  # del kwargs["disable_split_kv"]
        """),
        KW_ONLY_IMPL,
        S,
        S,
    ),
    (
        "no-forward",
        "",
        _plan("return None"),
        KW_ONLY_IMPL,
        U,
        U,
    ),
    (
        "target-lacks-keyword",
        "",
        _plan("return self._plan_impl(indptr, **kwargs)"),
        "def _plan_impl(self, indptr, *, disable_split_kv=False):\n    return None\n",
        N,
        S,
    ),
]


def module_source(helpers: str, plan: str, impl: str) -> str:
    methods = "\n\n".join(
        textwrap.indent(textwrap.dedent(text).strip(), "    ")
        for text in (
            "def __init__(self, float_workspace_buffer):\n    pass",
            plan,
            impl,
        )
    )
    return f"{textwrap.dedent(helpers)}\n\nclass {WRAPPER}:\n{methods}\n"


def _import(path: Path) -> ModuleType:
    name = f"_fi_forwarding_case_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


def _live(tmp_path: Path, source: str) -> dict[str, str]:
    path = tmp_path / "live_case.py"
    path.write_text(source, encoding="utf-8")
    cls = _import(path).BatchDecodeWithPagedKVCacheWrapper
    shape = inspect_callable(f"{WRAPPER}.plan", cls.plan, owner=cls)
    return {keyword: shape.acceptance(keyword).status.value for keyword in KEYWORDS}


def _recorded(tmp_path: Path, source: str) -> dict[str, str]:
    package = tmp_path / "tree" / "flashinfer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"from .decode import {WRAPPER}\n", encoding="utf-8")
    (package / "decode.py").write_text(source, encoding="utf-8")
    record = parse_record(record_release(tmp_path / "tree", release="0.0.1"))
    return {keyword: record.acceptance(f"{WRAPPER}.plan", keyword) for keyword in KEYWORDS}


@pytest.mark.parametrize(
    ("helpers", "plan", "impl", "fixed", "disable"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_live_and_recorded_agree(
    tmp_path: Path, helpers: str, plan: str, impl: str, fixed: str, disable: str
) -> None:
    source = module_source(helpers, plan, impl)
    expected = {"fixed_split_size": fixed, "disable_split_kv": disable}
    assert _live(tmp_path, source) == expected
    assert _recorded(tmp_path, source) == expected


def test_reason_names_the_construct_and_line(tmp_path: Path) -> None:
    source = module_source("", {c[0]: c[2] for c in CASES}["pop"], KW_ONLY_IMPL)
    path = tmp_path / "reason_case.py"
    path.write_text(source, encoding="utf-8")
    cls = _import(path).BatchDecodeWithPagedKVCacheWrapper
    shape = inspect_callable(f"{WRAPPER}.plan", cls.plan, owner=cls)
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "kwargs.pop" in text)
    reason = shape.acceptance("fixed_split_size").reason
    assert f"kwargs.pop('fixed_split_size', None) at line {line} of {WRAPPER}.plan" in reason
    assert "may drop it" in reason
    # Still accepted without TypeError, so comm-style checks see it; only the answer doubts.
    assert shape.keywords is not None
    assert "fixed_split_size" in shape.keywords
    assert shape.acceptance("disable_split_kv").status is Status.SUPPORTED


def test_module_function_target_is_followed_live(tmp_path: Path) -> None:
    # Live only: a recorded release answers "unknown" for a non-method target (the
    # loader follows methods of the same class only), which is safe.
    helpers = "def _impl(indptr, *, fixed_split_size=None):\n    return None\n"
    source = module_source(helpers, _plan("return _impl(indptr, **kwargs)"), KW_ONLY_IMPL)
    assert _live(tmp_path, source) == {"fixed_split_size": S, "disable_split_kv": N}
    assert _recorded(tmp_path, source) == {"fixed_split_size": U, "disable_split_kv": U}


# ------------------------------------------------------------------- never raises


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _HostileSignature:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    @property
    def __signature__(self) -> Any:
        raise self.error

    def __call__(self, **kwargs: Any) -> None:
        return None


@pytest.mark.parametrize(
    "error", [SystemExit(3), _Unprintable(), GeneratorExit(), ValueError("plain")]
)
def test_inspect_callable_never_raises(error: BaseException) -> None:
    shape = inspect_callable("hostile", _HostileSignature(error))
    assert shape.keywords is None
    support = shape.acceptance("fixed_split_size")
    assert support.status is Status.UNKNOWN
    assert type(error).__name__ in support.reason


def test_keyboard_interrupt_is_not_swallowed() -> None:
    with pytest.raises(KeyboardInterrupt):
        inspect_callable("hostile", _HostileSignature(KeyboardInterrupt()))


# ------------------------------------------------------------------- the fake


def test_fake_forwarder_reproduces_recorded_drops(tmp_path: Path) -> None:
    source = module_source("", {c[0]: c[2] for c in CASES}["pop"], KW_ONLY_IMPL)
    package = tmp_path / "tree" / "flashinfer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"from .decode import {WRAPPER}\n", encoding="utf-8")
    (package / "decode.py").write_text(source, encoding="utf-8")
    record = parse_record(record_release(tmp_path / "tree", release="0.0.1"))
    plan = record.function(f"{WRAPPER}.plan")
    assert plan is not None
    assert plan.forwards_kwargs_drops == ("fixed_split_size",)
    generated = generated_module(
        record, collect(record), str(tmp_path), "flashinfer.decode", cuda_runtime=True
    )
    path = tmp_path / "fake_decode.py"
    path.write_text(generated, encoding="utf-8")
    cls = _import(path).BatchDecodeWithPagedKVCacheWrapper
    shape = inspect_callable(f"{WRAPPER}.plan", cls.plan, owner=cls)
    live = {keyword: shape.acceptance(keyword).status.value for keyword in KEYWORDS}
    assert live == {keyword: record.acceptance(f"{WRAPPER}.plan", keyword) for keyword in KEYWORDS}
    assert live == {"fixed_split_size": U, "disable_split_kv": S}


# ------------------------------------------------------------------- property


class _NoHelpers:
    def function(self, name: str) -> None:
        return None

    def is_builtin(self, name: str) -> bool:
        return True


_HARMLESS = [
    "kwargs.get('fixed_split_size')",
    "seen = 'fixed_split_size' in kwargs",
    "copy = dict(kwargs)",
    "size = len(kwargs)",
    "if not kwargs:\n    raise TypeError('empty')",
]
_CLOBBERS = [
    "kwargs.pop('fixed_split_size')",
    "kwargs.pop('fixed_split_size', None)",
    "del kwargs['fixed_split_size']",
    "kwargs['fixed_split_size'] = 1",
    "kwargs['fixed_split_size'] += 1",
    "kwargs.update(fixed_split_size=1)",
    "kwargs.update({'fixed_split_size': 1})",
    "kwargs.clear()",
    "kwargs.popitem()",
    "kwargs |= {'fixed_split_size': 1}",
    "kwargs = {**kwargs, 'fixed_split_size': 1}",
    "kwargs = dict(kwargs, fixed_split_size=1)",
    "alias = kwargs\nalias.pop('fixed_split_size')",
    "key = 'fixed_split_size'\nkwargs[key] = 1",
    "kwargs.__setitem__('fixed_split_size', 1)",
    "getattr(kwargs, 'pop')('fixed_split_size')",
    "print(kwargs)",
    "if indptr:\n    return None",
    "stash = [kwargs]",
]
_FORWARDS = [
    "return self._plan_impl(indptr, **kwargs)",
    "return self._plan_impl(indptr, fixed_split_size=2, **kwargs)",
    "self._plan_impl(indptr, **kwargs)",
]


def _statements(draw_harmless: list[str], clobber: str, position: int) -> Iterator[str]:
    statements = list(draw_harmless)
    statements.insert(min(position, len(statements)), clobber)
    yield from statements


@settings(max_examples=200, deadline=None)
@given(
    harmless=st.lists(st.sampled_from(_HARMLESS), max_size=3),
    clobber=st.sampled_from(_CLOBBERS),
    position=st.integers(min_value=0, max_value=3),
    forward=st.sampled_from(_FORWARDS[:1] + _FORWARDS[2:]),
)
def test_a_clobbered_keyword_is_never_proven(
    harmless: list[str], clobber: str, position: int, forward: str
) -> None:
    body = "\n".join([*_statements(harmless, clobber, position), forward])
    source = "def plan(self, indptr, **kwargs):\n" + textwrap.indent(body, "    ")
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    analysis = analyse(node, "kwargs", _NoHelpers(), where="plan", method="instance")
    doubted = {doubt.keyword for doubt in analysis.doubts}
    assert analysis.problem is not None or {"fixed_split_size", ALL} & doubted, body


@settings(max_examples=50, deadline=None)
@given(harmless=st.lists(st.sampled_from(_HARMLESS), max_size=4))
def test_harmless_statements_keep_the_keyword(harmless: list[str]) -> None:
    body = "\n".join([*harmless, _FORWARDS[0]])
    source = "def plan(self, indptr, **kwargs):\n" + textwrap.indent(body, "    ")
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.FunctionDef)
    analysis = analyse(node, "kwargs", _NoHelpers(), where="plan", method="instance")
    assert analysis.problem is None, body
    assert not analysis.doubts, body


# ------------------------------------------------------------------- real release


@pytest.mark.real_flashinfer
@pytest.mark.skipif(
    importlib.util.find_spec("flashinfer") is None, reason="flashinfer-python is not installed"
)
def test_real_decode_plan_is_proven() -> None:
    if importlib.metadata.version("flashinfer-python") != "0.7.2.post1":
        pytest.skip("needs flashinfer-python 0.7.2.post1")
    from flashinfer.decode import BatchDecodeWithPagedKVCacheWrapper as Decode

    source = inspect.getsource(Decode.plan)
    assert "_merge_deprecated_plan_kwargs(" in source
    assert "if not deprecated_positional_args:" in source
    shape = inspect_callable(f"{WRAPPER}.plan", Decode.plan, owner=Decode)
    for keyword in KEYWORDS:
        support = shape.acceptance(keyword)
        assert support.status is Status.SUPPORTED, support.reason
        assert "_plan_impl" in support.reason
    assert not shape.doubts
    assert shape.doubt_all is None
    assert not shape.open_ended


# Shapes whose end a def's last instruction may or may not mark: parse_def must read each
# whole, exactly as the tokenizing inspect.getsource does.
PARSE_SHAPES = '''
import functools


def ends_in_pass(x):
    if x:
        return 1
    else:
        pass


def ends_in_a_string(x):
    return """
    several
    lines
    """


@functools.lru_cache(
    maxsize=None,
)
def decorated(x):
    return x  # a comment after the last instruction


def nested(x):
    def inner(y):
        class Local:
            value = (
                y
            )
        return Local
    return inner


def only_a_docstring():
    """Nothing else."""


class Owner:
    def method(self, **kwargs):
        return self.other(
            **kwargs,
        )

    def other(self, *, fixed_split_size=None):
        while True:
            break
        # trailing comment

    async def later(self):
        await self.other()
'''


@pytest.mark.parametrize(
    "name",
    [
        "ends_in_pass",
        "ends_in_a_string",
        "decorated",
        "nested",
        "only_a_docstring",
        "Owner.method",
        "Owner.other",
        "Owner.later",
    ],
)
def test_parse_def_reads_the_whole_def_with_file_line_numbers(tmp_path: Path, name: str) -> None:
    from fi_compat._signature import parse_def

    path = tmp_path / "shapes.py"
    path.write_text(PARSE_SHAPES)
    module = _import(path)
    func: Any = module
    for part in name.split("."):
        func = getattr(func, part)
    node = parse_def(func)
    expected = ast.parse(textwrap.dedent(inspect.getsource(func))).body[0]
    assert ast.dump(node) == ast.dump(expected)
    lines, first = inspect.getsourcelines(func)
    assert node.lineno == first + next(
        index for index, line in enumerate(lines) if line.lstrip().startswith(("def ", "async "))
    )
    assert node.end_lineno == first + len(lines) - 1 - sum(
        1 for line in reversed(lines) if not line.strip() or line.strip().startswith("#")
    )
