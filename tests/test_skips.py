"""A skip is a finding (tests/support/skips.py): judged, printed, and a strict run failed."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest

from tests.support.skips import HONEST, ROOT, Environment, judge

pytest_plugins = ["pytester"]

#: Make test's Python 3.10 venv, its Python 3.11 venv, and root in a git checkout (CI).
PY310 = Environment(
    python=(3, 10),
    has_torch=False,
    has_flashinfer=False,
    root=True,
    git_checkout=True,
    platform="linux",
)
PY311 = dataclasses.replace(PY310, python=(3, 11), has_torch=True, has_flashinfer=True)


@pytest.mark.parametrize(
    "reason",
    [
        "needs torch",
        "could not import 'torch': No module named 'torch'",
        "flashinfer-python is not installed here (make test installs it)",
        "needs flashinfer-python 0.7.2.post1 installed",
        "griffe needs Python 3.11",
        "needs mkdocs (the docs extra)",
        "the charts need the docs extra (matplotlib)",
        "needs the release extra: build, twine, check-wheel-contents, uv",
        "make test measures coverage on Python 3.11 only: the workers' data is checked there",
    ],
)
def test_what_python_3_10_cannot_have_is_honest_there_and_removable_on_3_11(reason: str) -> None:
    assert judge(reason, PY310).honest
    on_311 = judge(reason, PY311)
    assert not on_311.honest
    assert on_311.why.startswith("honest only on Python 3.10")


@pytest.mark.parametrize(
    "reason",
    [
        # the skips the fresh machine showed: a wheel the suite can download
        "the sglang 0.5.23 wheel is not on this machine",
        "the vllm wheel is not cached and the registry is unreachable: ...",
        "package registry unreachable, real releases not run: ...",
        # a tool the project installs in the Python 3.10 venv
        "could not import 'jsonschema': No module named 'jsonschema'",
        "needs pytest-examples",
        "",
    ],
)
def test_what_the_suite_can_fetch_or_install_is_removable_everywhere(reason: str) -> None:
    for env in (PY310, PY311):
        verdict = judge(reason, env)
        assert not verdict.honest
        assert "could remove" in verdict.why


def test_conditions_are_checked_not_assumed() -> None:
    assert judge("root reads any file", PY311).honest
    assert not judge("root reads any file", dataclasses.replace(PY311, root=False)).honest
    assert not judge("not a git checkout (an sdist)", PY311).honest
    assert judge("not a git checkout (an sdist)", dataclasses.replace(PY311, git_checkout=False))
    assert not judge("needs a pseudo-terminal", PY311).honest
    assert judge("needs a pseudo-terminal", dataclasses.replace(PY311, platform="win32")).honest
    # a Python 3.10 that somehow has torch: a torch skip there is a bug, not a fact
    assert not judge("needs torch", dataclasses.replace(PY310, has_torch=True)).honest


def test_a_case_that_does_not_exist_is_honest_everywhere() -> None:
    for env in (PY310, PY311):
        assert judge("not on this release", env).honest
        assert judge("0.6.5 has every public name of 0.7.2.post1", env).honest
        # anchored: a longer sentence is not the same reason
        assert not judge("not on this release, and the registry is unreachable", env).honest


def test_every_honest_reason_says_why_and_where() -> None:
    for entry in HONEST:
        assert entry.why
        assert entry.where
        assert not entry.pattern.search("an unrelated reason")


def test_here_reads_this_machine() -> None:
    env = Environment.here()
    assert env.python == sys.version_info[:2]
    assert env.has_torch == (importlib.util.find_spec("torch") is not None)
    assert env.git_checkout == (ROOT / ".git").exists()


SKIPPING = """
import pytest

def test_runs():
    pass

def test_honest():
    pytest.skip("not on this release")

@pytest.mark.parametrize("n", [1, 2])
def test_removable(n):
    pytest.skip("the sglang 0.5.23 wheel is not on this machine")

@pytest.mark.xfail(reason="expected")
def test_xfail():
    raise AssertionError
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "tests.support.skips", "-p", "no:cacheprovider", "-q", *args
    )


MODULE_SKIP = """
import pytest

pytest.importorskip("fi_compat_no_such_module", reason="needs the no-such extra")


def test_never_collected():
    pass
"""


@pytest.fixture
def skipping(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_engine=SKIPPING, test_module_skip=MODULE_SKIP)
    return pytester


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs below load this repository's plugin by its module name."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def test_the_run_ends_with_its_skips_by_reason(skipping: pytest.Pytester) -> None:
    result = _run(skipping)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*- skips by reason -*",
            "    2  REMOVABLE  the sglang 0.5.23 wheel is not on this machine",
            "*could remove*",
            "    1  REMOVABLE  needs the no-such extra",
            "*could remove*",
            "    1  honest     not on this release",
            "*does not exist for this parameter*",
            "1 honest skips, 3 removable",
        ]
    )
    assert "xfail" not in result.stdout.str().split("skips by reason")[1].split("honest skips")[0]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_strict_run_fails_on_a_removable_skip(
    skipping: pytest.Pytester, workers: list[str]
) -> None:
    result = _run(skipping, "--strict-skips", *workers)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["1 honest skips, 3 removable: the run fails (--strict-skips)"])


def test_a_strict_run_passes_with_honest_skips_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_engine="import pytest\n\ndef test_honest():\n    pytest.skip('not on this release')\n"
    )
    result = _run(pytester, "--strict-skips")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["1 honest skips, 0 removable"])


def test_a_strict_run_that_already_failed_keeps_its_status(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_engine="import pytest\n\ndef test_x():\n    pytest.skip('removable')\n\n"
        "def test_y():\n    raise SystemExit(3)\n"
    )
    result = _run(pytester, "--strict-skips")
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_module_that_skips_itself_is_judged_too(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    pytester.makepyfile(test_module_skip=MODULE_SKIP, test_other="def test_ok():\n    pass\n")
    result = _run(pytester, "--strict-skips", *workers)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["    1  REMOVABLE  needs the no-such extra", "*0 honest*1 remov*"])
