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


#: The questions a newcomer asks of the layout, each with what the answer must name: the
#: module (a path under fi_compat/ or the repository) and the name that does the job there.
QUESTIONS = {
    "where a comm call's per-call check lives": ("comm/_call_checks.py", "make_validator"),
    "what does release R have and take": ("_records/__init__.py", "load_release"),
    "where a scan finding's verdict is decided": ("upgrade/_judge.py", "verdict is decided"),
    "how to add a FlashInfer release": ("../tools/add_release.py", "make add-release"),
}


def _development(page: str) -> str:
    start = page.index("## Development")
    return page[start : page.index("<!-- module-map:start -->", start)]


def test_each_question_is_answered_in_one_hop() -> None:
    """The Development paragraph names, for each question, the module that answers it and
    the name that does it there, and both exist: no second page or module to open first."""
    prose = " ".join(_development(module_map.PAGE.read_text(encoding="utf-8")).split())
    for question, (path, name) in QUESTIONS.items():
        module = (module_map.PACKAGE / path).resolve()
        assert module.is_file(), (question, module)
        spelled = str(module.relative_to(module_map.PACKAGE.parent))
        if spelled.startswith("fi_compat/"):
            spelled = spelled.removeprefix("fi_compat/")
        stem = spelled.removesuffix(".py").removesuffix("/__init__")
        assert f"`{stem}" in prose or f"({stem}" in prose or spelled in prose, (question, stem)
        assert name in prose, (question, name)
        if not name.startswith(("make ", "verdict")):
            assert f"def {name}(" in module.read_text(encoding="utf-8"), (question, name)
