"""The ``flashinfer`` marker, ``--flashinfer-releases`` and the per-release report lines.

An engine-shaped test module runs under ``pytester`` (in process, and once in a subprocess
with ``-n 2``), with each selection of the option; the ids, the outcome of every test and
the summary lines are checked. The selection itself is checked directly, without pytest.
"""

from __future__ import annotations

import inspect
import re

import pytest
from packaging.version import Version

from fi_compat.testing import available_releases, fake_flashinfer
from fi_compat.testing._matrix import (
    FAKE_OPTIONS,
    FlashInferRelease,
    matches_of_marker,
    parse_selection,
    select,
)

pytest_plugins = ["pytester"]

ENGINE = """
import pytest


@pytest.mark.flashinfer(">=0.6.4,<0.6.6")
def test_fused(flashinfer_release):
    import flashinfer

    assert flashinfer.__version__ == flashinfer_release.release
    assert flashinfer_release.fake.record.release == flashinfer_release.release
    assert flashinfer_release.release != "0.6.5", "the engine breaks on 0.6.5"


@pytest.mark.flashinfer(["0.7.2.post1", "0.6.5"], cuda_runtime=False)
@pytest.mark.parametrize("tokens", [1, 2])
def test_without_cuda(tokens):  # the fake is installed without asking for the fixture
    import flashinfer

    if flashinfer.__version__ == "0.6.5":
        with pytest.raises(AssertionError, match="libcudart"):
            import flashinfer.comm


@pytest.mark.flashinfer("==0.7.2.post1")
def test_skips(flashinfer_release):
    pytest.skip("not on this release")


def test_unmarked(request):
    assert request.node.user_properties == []  # outside the matrix
"""

RESULT = re.compile(
    r"(?:(?P<before>PASSED|FAILED|SKIPPED|ERROR) )?(?P<id>test_engine\.py::\S+)"
    r"(?: (?P<after>PASSED|FAILED|SKIPPED|ERROR))?"
)


def _outcomes(lines: list[str]) -> dict[str, str]:
    """Test id (after ``::``) -> outcome, from ``-v`` lines (plain or xdist's)."""
    found = {}
    for line in lines:
        match = RESULT.search(line)
        if match and (match["before"] or match["after"]):
            found[match["id"].split("::", 1)[1]] = match["before"] or match["after"]
    return found


def _summary(lines: list[str]) -> list[str]:
    """The lines of the plugin's summary section, up to the next section's ``===`` rule.

    Under ``CI=true`` pytest prints the short test summary's messages untruncated, over
    several lines, so the section ends at the rule, not at the first FAILED/SKIPPED line.
    """
    start = next(i for i, line in enumerate(lines) if re.match(r"=+ flashinfer releases =+", line))
    section = []
    for line in lines[start + 1 :]:
        if line.startswith("="):
            break
        section.append(line)
    return section


ALL = {
    "test_fused[flashinfer-0.6.4]": "PASSED",
    "test_fused[flashinfer-0.6.5]": "FAILED",
    "test_without_cuda[flashinfer-0.6.5-1]": "PASSED",
    "test_without_cuda[flashinfer-0.6.5-2]": "PASSED",
    "test_without_cuda[flashinfer-0.7.2.post1-1]": "PASSED",
    "test_without_cuda[flashinfer-0.7.2.post1-2]": "PASSED",
    "test_skips[flashinfer-0.7.2.post1]": "SKIPPED",
    "test_unmarked": "PASSED",
}
ALL_SUMMARY = ["0.6.4: 1 passed", "0.6.5: 1 failed, 2 passed", "0.7.2.post1: 2 passed, 1 skipped"]

SELECTIONS = {
    "all": (ALL, ALL_SUMMARY, "0.2.0.post1, 0.2.0.post2, ..., 0.7.4 (74)"),
    "newest": (
        {
            "test_fused[flashinfer-0.6.5]": "FAILED",
            "test_without_cuda[flashinfer-0.7.2.post1-1]": "PASSED",
            "test_without_cuda[flashinfer-0.7.2.post1-2]": "PASSED",
            "test_skips[flashinfer-0.7.2.post1]": "SKIPPED",
            "test_unmarked": "PASSED",
        },
        ["0.6.5: 1 failed", "0.7.2.post1: 2 passed, 1 skipped"],
        "0.7.4,",
    ),
    "oldest-per-minor": (
        {
            "test_fused[flashinfer-0.6.4]": "PASSED",
            "test_without_cuda[flashinfer-0.6.5-1]": "PASSED",
            "test_without_cuda[flashinfer-0.6.5-2]": "PASSED",
            "test_without_cuda[flashinfer-0.7.2.post1-1]": "PASSED",
            "test_without_cuda[flashinfer-0.7.2.post1-2]": "PASSED",
            "test_skips[flashinfer-0.7.2.post1]": "SKIPPED",
            "test_unmarked": "PASSED",
        },
        ["0.6.4: 1 passed", "0.6.5: 2 passed", "0.7.2.post1: 2 passed, 1 skipped"],
        "0.2.0.post1, 0.3.0, 0.4.0, 0.5.0, 0.6.0, 0.7.0,",
    ),
    ">=0.6.5,<0.7": (
        {
            "test_fused[flashinfer-0.6.5]": "FAILED",
            "test_without_cuda[flashinfer-0.6.5-1]": "PASSED",
            "test_without_cuda[flashinfer-0.6.5-2]": "PASSED",
            "test_skips[flashinfer-none]": "SKIPPED",
            "test_unmarked": "PASSED",
        },
        ["0.6.5: 1 failed, 2 passed"],  # test_skips: none of its releases, not counted
        "0.6.5, 0.6.6, ..., 0.6.18.post1 (28)",
    ),
    "installed": (
        {
            "test_fused[flashinfer-installed]": "SKIPPED",  # 0.7.2.post1 is not >=0.6.4,<0.6.6
            "test_without_cuda[flashinfer-installed-1]": "PASSED",
            "test_without_cuda[flashinfer-installed-2]": "PASSED",
            "test_skips[flashinfer-installed]": "SKIPPED",
            "test_unmarked": "PASSED",
        },
        ["installed 0.7.2.post1: 2 passed, 2 skipped"],
        "installed flashinfer-python 0.7.2.post1 (real;",
    ),
}


@pytest.mark.parametrize("selection", list(SELECTIONS))
def test_each_selection_runs_its_matrix(pytester: pytest.Pytester, selection: str) -> None:
    if selection == "installed":
        pytest.importorskip("flashinfer", reason="installed runs the real flashinfer-python")
    expected, summary, header = SELECTIONS[selection]
    pytester.makepyfile(test_engine=ENGINE)
    arguments = ["-v", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"]
    if selection != "all":  # all is the default
        arguments.append(f"--flashinfer-releases={selection}")
    result = pytester.runpytest(*arguments)
    lines = result.outlines
    assert _outcomes(lines) == expected
    assert _summary(lines) == summary
    source = f"--flashinfer-releases={selection}" if selection != "all" else "default: all"
    result.stdout.fnmatch_lines([f"flashinfer releases: {header}*{source})"])


def test_the_ini_setting_is_the_default_and_the_option_wins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_engine=ENGINE)
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nflashinfer_releases = "newest"\n')
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    assert _outcomes(result.outlines) == SELECTIONS["newest"][0]
    result.stdout.fnmatch_lines(["flashinfer releases: *flashinfer_releases = 'newest' (ini))"])
    result = pytester.runpytest("-v", "-p", "no:cacheprovider", "--flashinfer-releases=all")
    assert _outcomes(result.outlines) == ALL


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("bogus", "'bogus' is neither a release nor a version specifier"),
        (">=0.6,<<0.7", "'>=0.6,<<0.7' is neither a release nor a version specifier"),
        ("0.6.99", "'0.6.99' is not a recorded flashinfer-python release"),
        (">=9", "'>=9' matches no recorded flashinfer-python release"),
    ],
)
def test_a_bad_selection_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, given: str, says: str
) -> None:
    pytester.makepyfile(test_engine=ENGINE)
    result = pytester.runpytest(f"--flashinfer-releases={given}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --flashinfer-releases={given}: {says}*"])


def test_a_bad_marker_fails_collection_naming_what_was_given(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_spec='import pytest\n@pytest.mark.flashinfer(">=0.6,<<0.7")\ndef test_a(): pass\n',
        test_unknown=(
            "import pytest\n@pytest.mark.flashinfer(['0.6.5', '0.6.99'])\ndef test_b(): pass\n"
        ),
        test_option="import pytest\n@pytest.mark.flashinfer(cuda=False)\ndef test_c(): pass\n",
        test_unmarked="def test_d(flashinfer_release): pass\n",
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines_random(
        [
            "test_spec.py::test_a: @pytest.mark.flashinfer('>=0.6,<<0.7'): '>=0.6,<<0.7' is "
            "neither a release nor a version specifier*",
            "test_unknown.py::test_b: @pytest.mark.flashinfer([[]'0.6.5', '0.6.99'[]]): "
            "'0.6.99' is not a recorded flashinfer-python release*",
            "test_option.py::test_c: @pytest.mark.flashinfer(): cuda: not an option of "
            "fake_flashinfer*",
            "test_unmarked.py::test_d: the flashinfer_release fixture needs "
            "@pytest.mark.flashinfer(...)",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_the_matrix_splits_across_xdist_workers(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_engine=ENGINE)
    result = pytester.runpytest_subprocess(
        "-n", "2", "-v", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning"
    )
    lines = result.outlines
    assert _outcomes(lines) == ALL
    assert _summary(lines) == ALL_SUMMARY
    assert {"[gw0]", "[gw1]"} <= {line.split()[0] for line in lines if line.startswith("[gw")}


# --- the selection, without pytest ------------------------------------------------------------


def test_the_marker_options_are_fake_flashinfers_keywords() -> None:
    parameters = inspect.signature(inspect.unwrap(fake_flashinfer)).parameters
    assert set(parameters) - {"release"} == FAKE_OPTIONS


def test_selections_pick_from_the_markers_matches() -> None:
    matches = matches_of_marker([">=0.6.0,<0.7.1"])
    assert matches.releases[0] == "0.6.0"
    assert matches.releases[-1] == "0.7.0.post1"
    assert select(matches, parse_selection("newest")) == ["0.7.0.post1"]
    assert select(matches, parse_selection("oldest-per-minor")) == ["0.6.0", "0.7.0"]
    assert select(matches, parse_selection("all")) == list(matches.releases)
    later = ["0.6.18", "0.6.18.post1", "0.7.0", "0.7.0.post1"]
    assert select(matches, parse_selection(">=0.6.18")) == later
    assert select(matches, parse_selection("0.6.5")) == ["0.6.5"]
    assert select(matches, parse_selection(">=0.7.2")) == []
    everything = matches_of_marker([])
    # every final release; a pre-release runs where a marker or selection names one
    assert list(everything.releases) == [
        r for r in available_releases() if not Version(r).is_prerelease
    ]
    assert matches_of_marker([">=0.7.1rc1,<=0.7.1rc5"]).releases == (
        "0.7.1rc1",
        "0.7.1rc2",
        "0.7.1rc4",
        "0.7.1rc5",
    )
    oldest_per_minor = select(everything, parse_selection("oldest-per-minor"))
    assert [Version(r).minor for r in oldest_per_minor] == [2, 3, 4, 5, 6, 7]


def test_a_list_marker_is_canonical_and_sorted() -> None:
    matches = matches_of_marker([["0.7.2.post1", "0.6.05"]])
    assert matches.releases == ("0.6.5", "0.7.2.post1")
    assert matches.allows("0.6.5")
    assert not matches.allows("0.6.6")
    assert matches.allows("a-source-build")  # no version to compare: it runs
    assert matches_of_marker(["<0.6"]).allows("0.5.99")


@pytest.mark.parametrize(
    "args",
    [["a", "b"], [[]], [3], [""], [["0.6.5", 1]]],
    ids=["two-arguments", "empty-list", "a-number", "empty-string", "list-with-a-number"],
)
def test_a_bad_marker_argument_is_a_value_error(args: list[object]) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(args[-1]))):
        matches_of_marker(args)


def test_a_release_object_says_whether_it_is_installed() -> None:
    with fake_flashinfer("0.6.5") as fake:
        assert not FlashInferRelease("0.6.5", fake).installed
    assert FlashInferRelease("0.7.2.post1").installed
    assert FlashInferRelease("0.6.5", fake) == FlashInferRelease("0.6.5")
    assert repr(FlashInferRelease("0.6.5", fake)) == "FlashInferRelease(release='0.6.5')"
