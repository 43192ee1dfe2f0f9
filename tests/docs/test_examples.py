"""Every Python example in README.md and docs/**/*.md runs, and prints what it says it prints.

Each fenced ``python`` block is run as a module with pytest-examples' ``run_print_check``:
every ``print(...)`` must be followed by ``#>`` lines holding exactly its output, so a
wrong example or a wrong claimed output fails. Conventions, all visible in the Markdown
source:

- ``<!-- fake-flashinfer: VERSION -->`` on the line before a block runs it inside
  ``fi_compat.testing.fake_flashinfer(VERSION)``: the block shows engine code as it runs on
  a GPU machine with that release, and here runs against the fake on a CPU.
- A block that defines ``test_*`` functions has each of them called afterwards, with the
  pytest fixtures its parameters name (``fake_flashinfer``, ``tmp_path``, ...). One marked
  ``@pytest.mark.flashinfer(...)`` is called on the oldest and the newest release its
  marker allows, under that release's fake (``tests/testing/test_release_matrix.py`` runs
  the marker itself under pytest).
- A block that mentions torch skips where torch is not installed (``make test-py310``).

Shell, JSON and console blocks are not Python and are not run here (``test_pages.py`` checks
the report's JSON shape and that no Python block hides under another language).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fi_compat import determinism

pytest_examples = pytest.importorskip("pytest_examples", reason="needs pytest-examples")
from pytest_examples import CodeExample, EvalExample, find_examples  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FAKE = re.compile(r"<!-- fake-flashinfer: (\S+) -->\n$")


def _examples() -> list[CodeExample]:
    return [
        example
        for example in find_examples(ROOT / "README.md", ROOT / "docs")
        if example.prefix == "python"
    ]


def _id(example: CodeExample) -> str:
    return f"{example.path.relative_to(ROOT)}:{example.start_line}"


def _fake_version(example: CodeExample) -> str | None:
    """The release named by the comment on the line just before the block's fence."""
    text = example.path.read_text(encoding="utf-8")
    fence = text.rfind("\n", 0, text.rfind("```", 0, example.start_index)) + 1
    before = text[:fence]
    line_start = before.rfind("\n", 0, len(before) - 1) + 1
    match = FAKE.search(before[line_start:])
    return match.group(1) if match else None


@pytest.fixture(autouse=True)
def _switch_off() -> Iterator[None]:
    """Each example starts and ends with deterministic inference off."""
    determinism.set_deterministic(False)
    yield
    determinism.set_deterministic(False)


def _call(function: Any, request: pytest.FixtureRequest, **given: Any) -> None:
    arguments = {
        parameter: given[parameter] if parameter in given else request.getfixturevalue(parameter)
        for parameter in inspect.signature(function).parameters
    }
    function(**arguments)


def _run(eval_example: EvalExample, example: CodeExample, request: pytest.FixtureRequest) -> None:
    from fi_compat.testing import FlashInferRelease, fake_flashinfer
    from fi_compat.testing._matrix import matches_of_marker

    namespace: dict[str, Any] = eval_example.run_print_check(example)
    for name, function in namespace.items():
        if not (name.startswith("test_") and inspect.isfunction(function)):
            continue
        marks = [mark for mark in getattr(function, "pytestmark", []) if mark.name == "flashinfer"]
        if not marks:
            _call(function, request)
            continue
        releases = matches_of_marker(marks[0].args).releases
        for release in dict.fromkeys((releases[0], releases[-1])):
            with fake_flashinfer(release, **marks[0].kwargs) as fake:
                _call(function, request, flashinfer_release=FlashInferRelease(release, fake))


@pytest.mark.parametrize("example", _examples(), ids=_id)
def test_example(
    example: CodeExample, eval_example: EvalExample, request: pytest.FixtureRequest
) -> None:
    if "torch" in example.source:
        pytest.importorskip("torch")
    version = _fake_version(example)
    if version is None:
        _run(eval_example, example, request)
        return
    from fi_compat.testing import fake_flashinfer

    with fake_flashinfer(version):
        _run(eval_example, example, request)


def test_examples_are_found_in_the_readme_and_every_guide() -> None:
    files = {example.path.relative_to(ROOT).as_posix() for example in _examples()}
    assert "README.md" in files
    for page in ("report", "comm", "attention", "policy", "testing"):
        assert f"docs/guide/{page}.md" in files, page


def test_the_fake_comment_is_read(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n<!-- fake-flashinfer: 0.6.5 -->\n```python\nx = 1\n```\n\n"
        "```python\ny = 2\n```\n",
        encoding="utf-8",
    )
    first, second = find_examples(page)
    assert _fake_version(first) == "0.6.5"
    assert _fake_version(second) is None


def test_a_wrong_example_fails(eval_example: EvalExample) -> None:
    wrong = CodeExample.create("print(1 + 1)\n#> 3\n", path=Path("wrong.md"))
    with pytest.raises(pytest.fail.Exception):
        eval_example.run_print_check(wrong)
    raising = CodeExample.create("import fi_compat\nfi_compat.no_such_name\n")
    with pytest.raises(AttributeError):
        eval_example.run_print_check(raising)
