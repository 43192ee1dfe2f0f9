"""What a planning method keeps on its object, read from source (``_recorder.plan_state``).

Each rule of the reader on a ``def`` written for it, then on the releases' own planning
methods: every recorded release's attention families keep vLLM's four settings where the
release's source assigns them from ``plan``'s arguments.
"""

from __future__ import annotations

import ast
import textwrap

import pytest

from fi_compat._recorder.plan_state import PLANNING, kept_arguments, written
from fi_compat._records import KeptArgument, available_releases, load_release


def _keeps(source: str) -> dict[str, KeptArgument]:
    func = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(func, ast.FunctionDef)
    return {store.attribute: store for store in kept_arguments(func)}


def test_an_argument_kept_as_passed() -> None:
    found = _keeps(
        """
        def plan(self, indptr, window_left=-1, *, causal=False):
            self._window_left = window_left
            self._causal = causal
        """
    )
    assert found == {
        "_window_left": KeptArgument("_window_left", "window_left"),
        "_causal": KeptArgument("_causal", "causal"),
    }


def test_none_replaced_by_a_literal_at_the_top_level() -> None:
    found = _keeps(
        """
        def plan(self, logits_soft_cap=None, rope_theta=None):
            if logits_soft_cap is None:
                logits_soft_cap = 0.0
            if rope_theta is None:
                rope_theta = 1e4
            self._logits_soft_cap = logits_soft_cap
            self._rope_theta = rope_theta
        """
    )
    assert found["_logits_soft_cap"].when_none == "0.0"
    assert found["_rope_theta"].when_none == "10000.0"
    assert not found["_logits_soft_cap"].none_computed


def test_none_replaced_by_a_computed_value() -> None:
    found = _keeps(
        """
        def plan(self, q_len_per_req=1, is_causal=None):
            if is_causal is None:
                is_causal = q_len_per_req > 1
            self._is_causal = is_causal
        """
    )
    assert found["_is_causal"] == KeptArgument("_is_causal", "is_causal", None, True)


@pytest.mark.parametrize(
    "body",
    [
        # reassigned unconditionally: the value is computed
        "q_data_type = canonicalize(q_data_type)\nself._q = q_data_type",
        # reassigned under another condition
        "if flag:\n    q_data_type = 1\nself._q = q_data_type",
        # an `if ... is None:` with an else branch
        "if q_data_type is None:\n    q_data_type = 1\nelse:\n    q_data_type = 2\n"
        "self._q = q_data_type",
        # augmented, or a loop target
        "q_data_type += 1\nself._q = q_data_type",
        "for q_data_type in ():\n    pass\nself._q = q_data_type",
        # the attribute also assigned from something else
        "self._q = q_data_type\nif flag:\n    self._q = None",
        "self._q = q_data_type\nself._q += 1",
        # from two parameters
        "self._q = q_data_type\nif flag:\n    self._q = flag",
        # not a parameter
        "local = 3\nself._q = local",
    ],
)
def test_what_is_no_store(body: str) -> None:
    source = "def plan(self, q_data_type=None, flag=False):\n" + textwrap.indent(body, "    ")
    assert "_q" not in _keeps(source)


def test_two_different_literals_for_none_read_as_computed() -> None:
    found = _keeps(
        """
        def plan(self, scale=None):
            if scale is None:
                scale = 1.0
            if scale is None:
                scale = 2.0
            self._scale = scale
        """
    )
    assert found["_scale"].none_computed
    assert found["_scale"].when_none is None


def test_nested_scopes_are_not_the_method_s_code() -> None:
    found = _keeps(
        """
        def plan(self, window_left=-1):
            def helper(self, window_left):
                self._other = window_left
                window_left = 5
            self._window_left = window_left
            return lambda window_left=0: window_left
        """
    )
    assert set(found) == {"_window_left"}
    assert found["_window_left"].when_none is None
    assert not found["_window_left"].none_computed


def test_another_object_s_attributes_are_not_keeps() -> None:
    assert _keeps("def plan(self, other, x):\n    other.y = x\n    self.z = other\n") == {
        "z": KeptArgument("z", "other")
    }


def test_a_function_without_parameters_keeps_nothing() -> None:
    assert _keeps("def plan():\n    pass\n") == {}


def test_the_files_spell_defaults_out() -> None:
    func = ast.parse(
        "def plan(self, a=None, b=None, c=0):\n"
        "    if a is None:\n        a = 1\n"
        "    if b is None:\n        b = c + 1\n"
        "    self._a = a\n    self._b = b\n    self._c = c\n"
    ).body[0]
    assert isinstance(func, ast.FunctionDef)
    assert written(func) == [
        {"attribute": "_a", "parameter": "a", "when_none": "1"},
        {"attribute": "_b", "parameter": "b", "none_computed": True},
        {"attribute": "_c", "parameter": "c"},
    ]


def test_only_planning_methods_are_read() -> None:
    assert {"plan", "begin_forward", "_plan_impl", "fast_decode_plan"} == PLANNING


#: Where every release from 0.2.6 keeps vLLM's settings: the decode and prefill wrappers.
_FAMILIES = (
    "BatchDecodeWithPagedKVCacheWrapper",
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
)


def _kept(release: str, family: str) -> dict[str, KeptArgument]:
    record = load_release(release).attention_family(family)
    assert record is not None, (release, family)
    return {
        store.attribute: store
        for method in record.methods.values()
        if method is not None
        for store in method.keeps
    }


@pytest.mark.parametrize("release", ["0.6.5", "0.7.0", "0.7.2", "0.7.2.post1", "0.7.4"])
@pytest.mark.parametrize("family", _FAMILIES)
def test_the_releases_keep_vllm_s_settings_from_plan(release: str, family: str) -> None:
    kept = _kept(release, family)
    assert {"_window_left", "_logits_soft_cap", "_sm_scale"} <= set(kept)
    assert kept["_window_left"] == KeptArgument("_window_left", "window_left")
    assert kept["_logits_soft_cap"] == KeptArgument(
        "_logits_soft_cap", "logits_soft_cap", when_none="0.0"
    )
    if family != "BatchDecodeWithPagedKVCacheWrapper":
        assert kept["_causal"] == KeptArgument("_causal", "causal")


def test_every_recorded_release_keeps_arguments_on_its_decode_wrapper() -> None:
    """From the first release with a decode wrapper's ``plan``, the records say what it
    keeps: an empty table would mean the reader stopped seeing the releases' code."""
    missing = [
        release
        for release in available_releases()
        if load_release(release).attention_family("BatchDecodeWithPagedKVCacheWrapper") is not None
        and not _kept(release, "BatchDecodeWithPagedKVCacheWrapper")
    ]
    assert missing == []
