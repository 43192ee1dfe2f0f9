"""The module map of docs/contributing.md is the modules' own docstrings, and every module
has one a newcomer can read."""

from __future__ import annotations

from pathlib import Path

from tests.support import module_map


def test_the_map_is_the_modules_docstrings() -> None:
    page = module_map.PAGE.read_text(encoding="utf-8")
    assert module_map.map_in(page) == module_map.render(), (
        "docs/contributing.md's module map is stale: run python -m tests.support.module_map --write"
    )


def test_every_module_says_what_it_is_in_one_sentence() -> None:
    modules = [
        path
        for path in sorted(module_map.PACKAGE.rglob("*.py"))
        if path.name != "__main__.py" and "__pycache__" not in path.parts
    ]
    assert len(modules) > 50
    for path in modules:
        sentence = module_map.summary(path)
        assert 10 < len(sentence) <= 160, f"{path}: {sentence!r}"


def test_the_summary_is_the_first_sentence(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text('"""Read by :mod:`fi_compat.x`. More text.\\n\\nA second paragraph."""\n')
    assert module_map.summary(module) == "Read by `fi_compat.x`"
