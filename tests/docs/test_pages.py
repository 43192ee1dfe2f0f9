"""The documentation's non-Python parts: fence languages, the report's JSON, the navigation.

Runs without torch and without the documentation tools (Python 3.10 too).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.support.fresh import fresh_python

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^ *```(\S*)", re.MULTILINE)

#: Fence languages that are not run as Python: shell commands, output, data, and the
#: migration guides' one-line import changes (``diff``).
NOT_PYTHON = {"sh", "console", "json", "text", "diff"}


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _fenced(path: Path, language: str) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("path", [ROOT / "README.md", *PAGES], ids=_name)
def test_every_code_block_names_a_known_language(path: Path) -> None:
    """A block is ``python`` (run by test_examples.py) or one of NOT_PYTHON (not Python)."""
    languages = FENCE.findall(path.read_text(encoding="utf-8"))[::2]
    for language in languages:
        assert language in NOT_PYTHON | {"python"}, language


def test_the_documented_report_json_matches_the_real_report() -> None:
    (documented,) = _fenced(ROOT / "docs" / "guide" / "report.md", "json")
    shape: dict[str, Any] = json.loads(documented)
    done = fresh_python(["-m", "fi_compat", "report", "--json"])
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert set(shape) <= set(report)
    for section, fields in shape.items():
        if isinstance(fields, dict) and isinstance(report[section], dict):
            named = {key for key in fields if key != "..."}
            if section in ("fi_compat", "flashinfer", "torch", "comm"):
                assert named <= set(report[section]), section
    assert shape["comm"]["kwargs"].keys() <= report["comm"]["kwargs"].keys()


def _console_sessions() -> list[tuple[str, list[str], str]]:
    """``(page, arguments, output)`` for every ``$ fi-compat ...`` line of a console block."""
    sessions = []
    for path in PAGES:
        for block in _fenced(path, "console"):
            for command in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]:
                line, _, output = command.partition("\n")
                arguments = shlex.split(line)
                assert arguments[0] == "fi-compat", line
                sessions.append((_name(path), arguments[1:], output))
    return sessions


@pytest.mark.parametrize(("page", "arguments", "output"), _console_sessions())
def test_console_sessions_print_what_they_show(
    page: str, arguments: list[str], output: str
) -> None:
    done = fresh_python(["-m", "fi_compat", *arguments])
    assert done.returncode == 0, (page, done.stderr)
    assert done.stdout == output, page


def _shell_commands() -> list[tuple[str, list[str]]]:
    """``(pages, arguments)`` for every distinct ``fi-compat ...`` line of an ``sh`` block."""
    commands: dict[tuple[str, ...], list[str]] = {}
    for path in [ROOT / "README.md", *PAGES]:
        for block in _fenced(path, "sh"):
            for line in block.splitlines():
                command = line.partition(" #")[0].strip()
                if command.startswith("fi-compat "):
                    commands.setdefault(tuple(shlex.split(command)[1:]), []).append(_name(path))
    return [(", ".join(pages), list(arguments)) for arguments, pages in commands.items()]


@pytest.mark.parametrize(("page", "arguments"), _shell_commands())
def test_documented_commands_run(page: str, arguments: list[str]) -> None:
    """Each ``fi-compat`` command a page shows is accepted and runs; ``--require`` may exit 1
    (something required is missing here), nothing else may fail."""
    done = fresh_python(["-m", "fi_compat", *arguments])
    allowed = {0, 1} if "--require" in arguments else {0}
    if arguments[0] in ("record", "measure") and importlib.util.find_spec("flashinfer") is None:
        allowed = {1}  # they model and measure the installed release: none here, said so
    assert done.returncode in allowed, (page, arguments, done.stderr)
    if allowed == {1}:
        assert "flashinfer-python" in done.stderr, (page, arguments, done.stderr)
    else:
        assert done.stdout, (page, arguments)


def test_every_page_is_in_the_navigation() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES:
        assert page.relative_to(ROOT / "docs").as_posix() in config, _name(page)


def test_api_reference_covers_every_public_module() -> None:
    reference = "".join(
        path.read_text(encoding="utf-8") for path in (ROOT / "docs" / "reference").glob("*.md")
    )
    for module in (
        "fi_compat",
        "fi_compat.capabilities",
        "fi_compat.errors",
        "fi_compat.determinism",
        "fi_compat.comm",
        "fi_compat.comm.mnnvl",
        "fi_compat.attention",
        "fi_compat.policy",
        "fi_compat.testing",
        "fi_compat.report",
        "fi_compat.hazards",
    ):
        assert f"::: {module}\n" in reference, module


def test_no_benchmark_figures_in_prose() -> None:
    """Figures come from `make bench` (bench/results.md); only targets (< or ≤) are typed."""
    # a number that starts a word (not ``b12x``, a FlashInfer package name)
    figure = re.compile(r"(?<![<≤\d.] )(?<![<≤\w.])\d+(\.\d+)? ?(µs|us|ns|ms|x)\b")
    for path in [ROOT / "README.md", ROOT / "CHANGELOG.md", *PAGES]:
        found = figure.findall(path.read_text(encoding="utf-8"))
        assert not found, (_name(path), found)


def test_readme_links_point_at_files() -> None:
    """README.md is read outside the site (GitHub, the sdist): its relative links must resolve.

    The pages' own links are checked by `mkdocs build --strict`.
    """
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links
    for link in links:
        assert "://" in link or (ROOT / link).is_file(), link


def test_the_changelog_has_a_dated_section_for_this_version() -> None:
    """Keep a Changelog: ``[Unreleased]`` first, then one dated section per release, newest
    first, the newest being the version the package says it is."""
    from fi_compat import __version__

    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.*)$", text, flags=re.MULTILINE)
    assert headings[0] == "[Unreleased]"
    released = [re.fullmatch(r"\[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})", h) for h in headings[1:]]
    assert released
    assert all(released), headings
    versions = [
        tuple(int(part) for part in match.group(1).split(".")) for match in released if match
    ]
    assert versions == sorted(versions, reverse=True)
    assert released[0] is not None
    assert released[0].group(1) == __version__
    kinds = set(re.findall(r"^### (.*)$", text, flags=re.MULTILINE))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kinds


def test_the_readme_is_a_front_page() -> None:
    """README.md stays a front page (``packaging``'s is 81 lines): the tables and the details
    live on the docs site."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail to docs/"
