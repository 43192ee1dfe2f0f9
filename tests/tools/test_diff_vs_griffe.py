"""``fi-compat diff`` against griffe's breaking-change detection, on every recorded step.

griffe (the maintained library ``make compare-griffe`` and the docs already use) finds the
breaking changes between two versions of a Python API: parameters removed, moved, made
required, changed in kind or default. fi-compat cannot call it at run time (griffe needs
Python 3.11, fi-compat supports 3.10), so it compares parameters itself; this test runs
griffe on the same recorded signatures, for every pair of consecutive recorded releases,
and requires every parameter breakage griffe finds to be a change ``fi-compat diff``
lists for the same callable and parameter.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import pytest

from fi_compat._records import available_releases
from fi_compat._records._facts import Facts, facts_of
from fi_compat._records._history import changed_keys
from fi_compat.upgrade import diff_releases

griffe = pytest.importorskip("griffe", reason="griffe needs Python 3.11")

#: griffe's breakage kind -> the diff's change kinds that say the same (or more).
SAME = {
    "PARAMETER_REMOVED": {"keyword-missing", "keyword-unverified", "parameter-renamed"},
    "PARAMETER_CHANGED_REQUIRED": {"required-missing"},
    "PARAMETER_ADDED_REQUIRED": {"required-missing", "parameter-renamed"},
    "PARAMETER_CHANGED_KIND": {"parameter-kind"},
    "PARAMETER_CHANGED_DEFAULT": {"default-changed", "required-missing"},
    "PARAMETER_MOVED": {"positional-shift"},
    "VARIADIC_ADDED": {"keyword-added"},
}
RELEASES = available_releases()


def _kind(name: str) -> Any:
    return {
        "POSITIONAL_ONLY": griffe.ParameterKind.positional_only,
        "POSITIONAL_OR_KEYWORD": griffe.ParameterKind.positional_or_keyword,
        "VAR_POSITIONAL": griffe.ParameterKind.var_positional,
        "KEYWORD_ONLY": griffe.ParameterKind.keyword_only,
        "VAR_KEYWORD": griffe.ParameterKind.var_keyword,
    }[name]


def _module(facts: Facts, paths: set[str]) -> Any:
    """A griffe module with one function per callable path (its dots spelled ``_0_``; a
    path's own underscores are spelled ``_1_`` first, so dunder modules read back)."""
    module = griffe.Module("recorded")
    for path in sorted(paths):
        parameters = griffe.Parameters(
            *(
                griffe.Parameter(name, kind=_kind(kind), default=default)
                for name, kind, default in facts.get(("params", path))
            )
        )
        name = path.replace("_", "_1_").replace(".", "_0_")
        module.set_member(name, griffe.Function(name, parameters=parameters))
    return module


def _breakages(old: Facts, new: Facts) -> Iterator[tuple[str, str, str]]:
    """(griffe kind, callable path, parameter) for each parameter breakage griffe finds
    in the callables both releases record (return types aside: the records keep them as
    annotations, which the diff does not compare)."""
    # The callables whose records differ, at the path the diff lists each under (one path
    # per definition): an unchanged stored record cannot break, and griffe would otherwise
    # be asked about the tens of thousands of callables of every module.
    shared = {
        key[1]
        for key in changed_keys(old, new)
        if key[0] == "params" and old.get(key) is not None and new.get(key) is not None
    }
    for breakage in griffe.find_breaking_changes(_module(old, shared), _module(new, shared)):
        kind = breakage.kind.name
        if kind not in SAME:
            continue  # return types: the records keep annotations, which the diff skips
        value = breakage.old_value or breakage.new_value
        if kind == "PARAMETER_ADDED_REQUIRED" and value.kind in (
            griffe.ParameterKind.var_positional,
            griffe.ParameterKind.var_keyword,
        ):
            # griffe calls any parameter without a default required, a new *args too
            # (0.6.15's begin_forward gained *deprecated_positional_args): no call breaks,
            # and the diff lists it as added.
            kind = "VARIADIC_ADDED"
        yield kind, breakage.obj.name.replace("_0_", ".").replace("_1_", "_"), value.name


@pytest.mark.parametrize(("old", "new"), list(itertools.pairwise(RELEASES)))
def test_every_parameter_breakage_griffe_finds_is_in_the_diff(old: str, new: str) -> None:
    changes = diff_releases(old, new).changes
    listed = {(c.kind, c.subject) for c in changes}
    details: dict[tuple[str, str], list[str]] = {}
    for change in changes:
        details.setdefault((change.kind, change.subject), []).append(change.detail)
    for kind, path, parameter in _breakages(facts_of(old), facts_of(new)):
        matches = [(k, path) for k in SAME[kind] if (k, path) in listed]
        assert matches, f"griffe: {kind} {path}({parameter}); the diff does not list it"
        if kind != "PARAMETER_MOVED":
            said = [detail for match in matches for detail in details[match]]
            word = re.compile(rf"\b{re.escape(parameter)}\b")
            assert any(word.search(detail) for detail in said), (kind, path, parameter, said)


def test_griffe_finds_breakages_on_the_recorded_steps() -> None:
    # The comparison above is not vacuous: griffe does find parameter breakages there.
    found = {
        kind
        for old, new in itertools.pairwise(RELEASES)
        for kind, _, _ in _breakages(facts_of(old), facts_of(new))
    }
    assert {"PARAMETER_REMOVED", "PARAMETER_ADDED_REQUIRED", "PARAMETER_MOVED"} <= found
