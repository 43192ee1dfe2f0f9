"""The API reference's Sphinx roles: ``docs/griffe_roles.py`` and the build hook's guard.

Needs griffe (the ``docs`` extra; not in the Python 3.10 venv).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

griffe = pytest.importorskip("griffe", reason="needs griffe (the docs extra)")

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", ROOT / "docs" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


roles = _load("griffe_roles")


@pytest.fixture(scope="module")
def package() -> Any:
    """fi_compat as griffe reads it for the reference, without the extension."""
    return griffe.load("fi_compat", search_paths=[str(ROOT)], resolve_aliases=False)


def _reference(package: Any, where: str, text: str) -> str:
    obj = package[where.removeprefix("fi_compat.")] if where != "fi_compat" else package
    result: str = roles.rewrite(obj, text, roles.public_paths(package))
    return result


@pytest.mark.parametrize(
    ("where", "text", "identifier", "title"),
    [
        # absolute, last component only
        (
            "fi_compat",
            ":class:`~fi_compat.comm.FusionWorkspace`",
            "fi_compat.comm.FusionWorkspace",
            "FusionWorkspace",
        ),
        # relative to the module the docstring is in
        (
            "fi_compat.comm._workspace",
            ":func:`create_workspace`",
            "fi_compat.comm.create_workspace",
            "create_workspace",
        ),
        # a private home maps to the public path the reference documents
        (
            "fi_compat",
            ":class:`fi_compat.comm._workspace.FusionWorkspace`",
            "fi_compat.comm.FusionWorkspace",
            "fi_compat.comm._workspace.FusionWorkspace",
        ),
        # a member of a re-exported class too
        (
            "fi_compat",
            ":attr:`~fi_compat.comm._workspace.FusionWorkspace.decisions`",
            "fi_compat.comm.FusionWorkspace.decisions",
            "decisions",
        ),
        # py: domain prefix and call parentheses
        (
            "fi_compat",
            ":py:func:`~fi_compat.determinism.set_deterministic()`",
            "fi_compat.determinism.set_deterministic",
            "set_deterministic",
        ),
        # an explicit title
        (
            "fi_compat",
            ":meth:`FusionWorkspace.prepare <fi_compat.comm.FusionWorkspace.prepare>`",
            "fi_compat.comm.FusionWorkspace.prepare",
            "FusionWorkspace.prepare",
        ),
        # not fi-compat's: kept as written, shown in code font without a link
        ("fi_compat", ":class:`torch.Tensor`", "torch.Tensor", "torch.Tensor"),
    ],
)
def test_a_role_becomes_an_optional_reference(
    package: Any, where: str, text: str, identifier: str, title: str
) -> None:
    assert _reference(package, where, f"See {text}.") == (
        f'See <autoref identifier="{identifier}" optional><code>{title}</code></autoref>.'
    )


def test_text_without_roles_is_unchanged(package: Any) -> None:
    text = "Plain ``code``, a :term: and `ticks`."
    assert _reference(package, "fi_compat", text) == text


def test_the_extension_leaves_no_role_in_any_docstring() -> None:
    extensions = griffe.load_extensions(f"{ROOT / 'docs' / 'griffe_roles.py'}:SphinxRoles")
    package = griffe.load("fi_compat", search_paths=[str(ROOT)], extensions=extensions)
    seen, left = 0, []
    for obj in roles._objects(package):
        if obj.docstring is not None:
            seen += obj.docstring.value.count("<autoref ")
            if re.search(r":(?:py:)?[a-z]+:`", obj.docstring.value):
                left.append(obj.path)
    assert seen > 100  # the docstrings do use roles
    assert left == []


def test_versionadded_becomes_a_line_and_keeps_its_continuation() -> None:
    text = "Summary.\n\n.. versionadded:: 0.3.0\n   Named ``Hazard`` in\n   0.2.0.\n\nAttributes\n"
    assert roles.added(text) == (
        "Summary.\n\n*Added in fi-compat 0.3.0. Named ``Hazard`` in 0.2.0.*\n\nAttributes\n"
    )
    assert roles.added("Summary.\n\n.. versionadded:: 0.2.0") == (
        "Summary.\n\n*Added in fi-compat 0.2.0.*\n"
    )


def test_the_build_fails_on_a_role_left_in_a_page(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mkdocs", reason="needs mkdocs (the docs extra)")
    monkeypatch.syspath_prepend(str(ROOT))
    hooks = _load("hooks")
    page: Any = type("Page", (), {"file": type("File", (), {"src_uri": "reference/x.md"})()})()
    assert hooks.on_page_content("<p><code>X</code></p>", page=page) == "<p><code>X</code></p>"
    with pytest.raises(Exception, match="Sphinx role is shown literally"):
        hooks.on_page_content("<p>See :class:`X`.</p>", page=page)
    with pytest.raises(Exception, match="shown literally"):
        hooks.on_page_content("<p>.. versionadded:: 0.2.0</p>", page=page)


def test_the_reference_uses_the_extension() -> None:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "docs/griffe_roles.py:SphinxRoles" in text
    assert sys.modules.get("griffe") is not None
