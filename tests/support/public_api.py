"""fi-compat's public API as text, read statically with griffe: what we promise to keep.

One line per public name of each public module (a module whose dotted path has no
segment starting with ``_``), as its ``__all__`` lists it: a function's signature, a
class's bases and then each member it declares, a constant's annotation (and its value
when it is a number, a bool or a short string). Re-exported names are listed under every
public path. ``public_api.txt`` beside this file is the snapshot of the working tree and
``public_api-<release>.txt`` the frozen snapshot of the last release;
``tests/test_public_api.py`` compares them with the code and with the CHANGELOG.

    python -m tests.support.public_api           # print the API
    python -m tests.support.public_api --write   # rewrite public_api.txt
    python -m tests.support.public_api --tree DIR --out FILE   # a checkout's API
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SNAPSHOT = HERE / "public_api.txt"
#: The fi-compat release whose API ``public_api-<release>.txt`` holds.
LAST_RELEASE = "0.2.0"
RELEASED = HERE / f"public_api-{LAST_RELEASE}.txt"
VERSIONADDED = re.compile(r"^\s*\.\. versionadded:: (?P<version>\S+)\s*$", re.MULTILINE)
_SHORT_VALUE = re.compile(r"^(?:-?\d[\d_.]*|True|False|None|'[^']{0,40}'|\"[^\"]{0,40}\")$")


@dataclass(frozen=True)
class Name:
    """One public name: where it is public, what it is, and what its docstring says."""

    path: str
    target: str
    lines: tuple[str, ...]
    docstring: str


def load(tree: Path = ROOT) -> griffe.Module:
    """The ``fi_compat`` package under ``tree``, aliases resolved within it."""
    loader = griffe.GriffeLoader(search_paths=[str(tree)])
    package = loader.load("fi_compat")
    loader.resolve_aliases(implicit=False, external=False)
    assert isinstance(package, griffe.Module)
    return package


def _modules(module: griffe.Module) -> Iterator[griffe.Module]:
    yield module
    for name, member in module.members.items():
        if not name.startswith("_") and not member.is_alias and member.is_module:
            yield from _modules(member)  # type: ignore[arg-type]


def _parameters(function: griffe.Function) -> str:
    parts: list[str] = []
    star = False
    for index, parameter in enumerate(function.parameters):
        kind = parameter.kind
        if kind is griffe.ParameterKind.var_positional:
            text, star = f"*{parameter.name}", True
        elif kind is griffe.ParameterKind.var_keyword:
            text = f"**{parameter.name}"
        else:
            if kind is griffe.ParameterKind.keyword_only and not star:
                parts.append("*")
                star = True
            text = parameter.name
        if parameter.annotation is not None:
            text += f": {parameter.annotation}"
        if parameter.default is not None and not text.startswith("*"):
            text += f" = {parameter.default}"
        parts.append(text)
        following = function.parameters[index + 1] if index + 1 < len(function.parameters) else None
        if kind is griffe.ParameterKind.positional_only and (
            following is None or following.kind is not griffe.ParameterKind.positional_only
        ):
            parts.append("/")
    returns = f" -> {function.returns}" if function.returns is not None else ""
    return f"({', '.join(parts)}){returns}"


def _attribute(attribute: griffe.Attribute) -> str:
    text = f": {attribute.annotation}" if attribute.annotation is not None else ""
    value = str(attribute.value) if attribute.value is not None else ""
    if _SHORT_VALUE.match(value) and not attribute.name.startswith("__"):
        text += f" = {value}"
    return text


def _member_lines(cls: griffe.Class) -> list[str]:
    lines = []
    for name, member in cls.members.items():
        if name.startswith("_") and name != "__init__" and name != "__call__":
            continue
        if member.is_alias:
            lines.append(f"    .{name} = {member.target_path}")  # type: ignore[union-attr]
        elif isinstance(member, griffe.Function):
            labels = sorted(member.labels - {"instance-attribute"})
            tag = f" [{', '.join(labels)}]" if labels else ""
            lines.append(f"    .{name}{tag}{_parameters(member)}")
        elif isinstance(member, griffe.Attribute):
            lines.append(f"    .{name}{_attribute(member)}")
        elif isinstance(member, griffe.Class):
            lines.append(f"    .{name} [class]")
    return lines


def _describe(path: str, obj: griffe.Object | griffe.Alias) -> tuple[str, ...]:
    if isinstance(obj, griffe.Function):
        return (f"def {path}{_parameters(obj)}",)
    if isinstance(obj, griffe.Class):
        bases = ", ".join(str(base) for base in obj.bases)
        return (f"class {path}({bases})", *_member_lines(obj))
    if isinstance(obj, griffe.Attribute):
        return (f"{path}{_attribute(obj)}",)
    if isinstance(obj, griffe.Module):
        return (f"module {path}",)
    raise TypeError(f"{path}: a {obj.kind.value} griffe cannot describe")


def names(package: griffe.Module) -> list[Name]:
    """Every public name of every public module, in module order then ``__all__`` order."""
    found = []
    for module in sorted(_modules(package), key=lambda module: module.path):
        text = module.docstring.value if module.docstring is not None else ""
        found.append(Name(module.path, module.path, (f"module {module.path}",), text))
        for export in module.exports or ():
            name = export if isinstance(export, str) else export.name
            member = module.members[name]
            target = member.final_target if isinstance(member, griffe.Alias) else member
            path = f"{module.path}.{name}"
            docstring = target.docstring.value if target.docstring is not None else ""
            found.append(Name(path, target.path, _describe(path, target), docstring))
    return found


def render(found: list[Name]) -> str:
    """The snapshot text of ``found``."""
    return "".join(line + "\n" for name in found for line in name.lines)


def parse(text: str) -> dict[str, tuple[str, ...]]:
    """A snapshot's text back as public path -> its lines."""
    entries: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("    "):
            entries[current].append(line)
            continue
        head = line.split("(", 1)[0].split(":", 1)[0].split(" = ", 1)[0]
        current = head.removeprefix("def ").removeprefix("class ").removeprefix("module ")
        entries[current] = [line]
    return {path: tuple(lines) for path, lines in entries.items()}


def versionadded(docstring: str) -> list[str]:
    """The versions every ``.. versionadded::`` directive in ``docstring`` names."""
    return [match["version"] for match in VERSIONADDED.finditer(docstring)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {SNAPSHOT.name}")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to read")
    parser.add_argument("--out", type=Path, help="write the snapshot here")
    args = parser.parse_args(argv)
    os.chdir(args.tree)  # griffe finds the package in the working directory first
    text = render(names(load(args.tree.resolve())))
    out = SNAPSHOT if args.write else args.out and args.out.resolve()
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
