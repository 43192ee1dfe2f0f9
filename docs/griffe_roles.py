"""Griffe extension for the API reference: Sphinx roles become links, ``versionadded`` a line.

fi-compat's docstrings are NumPy style and name other objects with Sphinx roles
(``:class:`FusionWorkspace```, ``:func:`~fi_compat.comm.create_workspace```), which read
well in ``help()`` and in editors. Markdown has no such roles, so mkdocstrings would print
them literally. Before the docstrings are parsed, this extension rewrites every role to an
optional mkdocs-autorefs reference: a link where the target is documented on the site, the
name in code font where it is not (a FlashInfer or torch object, a private helper). ``~``
keeps the last component only, as in Sphinx. ``docs/hooks.py`` fails the build if a role is
left in a rendered page.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

#: ``:role:`target```, ``:role:`~target``` or ``:role:`title <target>```, with an optional
#: ``py:`` domain: the roles Python's Sphinx domain defines.
ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const|type):"
    r"`(?:(?P<title>[^`<]+?)\s*<)?(?P<short>~?)(?P<target>[\w.]+)(?:\(\))?(?(title)>)`"
)


def _find(obj: griffe.Object, target: str) -> griffe.Object | griffe.Alias | None:
    """The object ``target`` names as Sphinx would look it up from ``obj``, if loaded."""
    package = obj.package
    root, _, rest = target.partition(".")
    if root == package.name:
        scopes: list[griffe.Object | griffe.Alias] = [package]
        target = rest
    else:
        scopes = [obj, *([obj.parent] if obj.parent is not None else []), obj.module, package]
    for scope in scopes:
        if not target:
            return scope
        try:
            return scope[target]
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
    return None


def public_paths(package: griffe.Module) -> dict[str, str]:
    """Where each object re-exported by a public module is documented: canonical -> public.

    ``fi_compat.comm`` re-exports ``FusionWorkspace`` from ``fi_compat.comm._workspace``; the
    reference documents it (and its members) under the public path only.
    """
    paths: dict[str, str] = {}

    def visit(module: griffe.Module) -> None:
        for name, member in module.members.items():
            if name.startswith("_"):
                continue
            if member.is_alias:
                try:
                    target = member.final_target
                except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                    continue  # from __future__ import annotations, a FlashInfer name, ...
                if not target.is_module:
                    paths.setdefault(target.path, member.path)
            elif member.is_module:
                visit(member)  # type: ignore[arg-type]

    visit(package)
    return paths


def _documented(path: str, public: dict[str, str]) -> str:
    """``path`` under its public name, for it or the object it is a member of."""
    head, tail = path, ""
    while head:
        if head in public:
            return public[head] + tail
        head, dot, last = head.rpartition(".")
        tail = f"{dot}{last}{tail}"
    return path


def rewrite(obj: griffe.Object, text: str, public: dict[str, str]) -> str:
    """``text`` with every Sphinx role replaced by an optional autorefs reference."""

    def reference(match: re.Match[str]) -> str:
        target = match["target"]
        title = match["title"] or (target.rsplit(".", 1)[-1] if match["short"] else target)
        found = _find(obj, target)
        identifier = _documented(found.path, public) if found is not None else target
        return f'<autoref identifier="{identifier}" optional><code>{title}</code></autoref>'

    return ROLE.sub(reference, text)


#: A ``.. versionadded:: X`` directive and its indented continuation lines.
VERSIONADDED = re.compile(
    r"^\.\. versionadded:: (?P<version>\S+)[ \t]*\n?(?P<more>(?:[ \t]+\S.*\n?)*)", re.M
)


def added(text: str) -> str:
    """``text`` with each ``.. versionadded::`` directive written as a line of Markdown."""

    def line(match: re.Match[str]) -> str:
        more = " ".join(match["more"].split())
        return f"*Added in fi-compat {match['version']}.{' ' + more if more else ''}*\n"

    return VERSIONADDED.sub(line, text)


def _objects(obj: griffe.Object) -> list[griffe.Object]:
    """``obj`` and every object defined in it (aliases are visited where they are defined)."""
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found += _objects(member)  # type: ignore[arg-type]
    return found


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of the loaded package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Runs once the package is complete, so relative and re-exported targets are known."""
        public = public_paths(pkg)
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = added(rewrite(obj, obj.docstring.value, public))
