"""A faster :func:`ast.walk`: the same nodes in the same order, for the builder's hot loops.

Modelling a 0.7 release walks tens of millions of nodes (every import-time statement for the
values it changes and the calls it runs, every method for what it does with ``self``).
:func:`ast.walk` spends most of that time in two nested generators per node
(:func:`ast.iter_child_nodes` over :func:`ast.iter_fields`); :func:`walk` reads each node's
fields in one loop, which makes a walk about a third cheaper and changes nothing else.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

__all__ = ["children", "walk"]


def walk(root: ast.AST) -> Iterator[ast.AST]:
    """``root`` and every node under it, breadth first, in exactly :func:`ast.walk`'s order
    (each node's children in the order of its ``_fields``, a list field's in list order).
    Lazy, like :func:`ast.walk`: a caller that stops early walks no further."""
    todo = [root]
    append = todo.append
    for node in todo:  # grows while it is read: each node's children go to the back
        for field in node._fields:
            value = getattr(node, field, None)  # a field left unset has no children
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        append(item)
            elif isinstance(value, ast.AST):
                append(value)
        yield node


def children(node: ast.AST) -> list[ast.AST]:
    """The nodes directly under ``node``, in :func:`ast.iter_child_nodes`'s order."""
    found: list[ast.AST] = []
    for field in node._fields:
        value = getattr(node, field, None)
        if isinstance(value, list):
            found += [item for item in value if isinstance(item, ast.AST)]
        elif isinstance(value, ast.AST):
            found.append(value)
    return found
