"""The module map of ``docs/contributing.md``, rendered from the modules' own docstrings.

A newcomer reads the package from this map: one line a module, the first sentence of its
docstring, grouped by subpackage in the order data flows. It lives between
``<!-- module-map:start -->`` and ``<!-- module-map:end -->``, and
``tests/docs/test_module_map.py`` compares it with this rendering::

    python -m tests.support.module_map --write   # rewrite the map
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.marked import block, with_block

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fi_compat"
PAGE = ROOT / "docs" / "contributing.md"
START, END = "<!-- module-map:start -->", "<!-- module-map:end -->"


def summary(path: Path) -> str:
    """The first sentence of the module's docstring, on one line ("" without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=[.:;])\s(?=[A-Z`(])", paragraph, maxsplit=1)[0]
    # Sphinx roles read as code in Markdown: :mod:`fi_compat.x` -> `fi_compat.x`
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", sentence).rstrip(".:;")


def _entry(path: Path, depth: int) -> str:
    name = path.parent.name + "/" if path.name == "__init__.py" else path.name
    return f"{'  ' * depth}- `{name}`: {summary(path)}"


def render() -> str:
    """The map: the top-level modules, then each subpackage with its modules."""
    lines = []
    top = sorted(p for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    lines.append(f"- `fi_compat/`: {summary(PACKAGE / '__init__.py')}")
    lines += [_entry(path, 1) for path in top]
    for package in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        lines.append(_entry(package / "__init__.py", 1))
        modules = sorted(p for p in package.glob("*.py") if p.name != "__init__.py")
        lines += [_entry(path, 2) for path in modules]
    return "\n".join(lines) + "\n"


def map_in(text: str) -> str:
    """The map between the markers of ``text``."""
    return block(text, START, END)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the map in the page")
    args = parser.parse_args(argv)
    if not args.write:
        sys.stdout.write(render())
        return 0
    text = PAGE.read_text(encoding="utf-8")
    PAGE.write_text(with_block(text, START, END, render()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
