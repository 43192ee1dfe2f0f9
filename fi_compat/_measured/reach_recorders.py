"""The reach probe's recorders: what stands in for a release's compiled code, and records.

Every compiled-module loader of the release (each ``get_*module*`` / ``gen_*module*``
function in a ``flashinfer`` module, and ``setup_cubin_loader``) is replaced by one
returning a :class:`Stub`: any attribute of it is a function that records its call in
:data:`CALLS`. That call is the *kernel boundary*: what FlashInfer hands to its compiled
planner. A loader that builds a FlashInfer Python class instead (trtllm-gen decode's
``TrtllmGenDecodeModule``, whose ``plan`` is a no-op) runs for real, so the boundary is the
compiled module that class loads; a wrapper attribute holding another FlashInfer object
with a ``plan`` method (the CuTe-DSL wrappers) gets that ``plan`` replaced by a recorder too
(:func:`wrap_sub_planners`).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "CALLS",
    "LOADER",
    "Stub",
    "flashinfer_modules",
    "function_source",
    "plain",
    "replace_loaders",
    "wrap_sub_planners",
]

#: Functions that load compiled code: the module loaders, and the cubin loader hook-up.
LOADER = re.compile(r"^(get|gen)_\w*module\w*$|^setup_cubin_loader$")

#: The calls recorded since the last reset: ``(boundary, args, kwargs)``.
CALLS: list[dict[str, Any]] = []


def plain(value: Any) -> Any:
    """A JSON-able picture of an argument: scalars as they are, anything else by its type."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and len(value) <= 8:
        return [plain(item) for item in value]
    module = type(value).__module__
    if module.startswith("torch") and type(value).__name__ == "dtype":
        return f"<{value}>"
    return f"<{type(value).__name__}>"


class Stub:
    """A compiled module, or anything it returned: attributes are recording functions.

    Calling a stub records ``(its dotted path, the plain arguments)`` in :data:`CALLS` and
    returns another stub, so whatever FlashInfer does with a plan's result works.
    """

    def __init__(self, path: str) -> None:
        self._path = path

    def __getattr__(self, name: str) -> Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{self._path}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Stub:
        CALLS.append(
            {
                "boundary": self._path,
                "args": [plain(arg) for arg in args],
                "kwargs": {key: plain(value) for key, value in sorted(kwargs.items())},
            }
        )
        return Stub(f"{self._path}()")

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __getitem__(self, key: Any) -> Stub:
        return Stub(f"{self._path}[]")

    def __len__(self) -> int:
        return 0

    def __int__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return True


def _loader(name: str) -> Callable[..., Stub]:
    def load(*args: Any, **kwargs: Any) -> Stub:
        return Stub(f"{name}(...)")

    load.__name__ = name
    return load


def _recording_plan(path: str) -> Callable[..., Stub]:
    def plan(*args: Any, **kwargs: Any) -> Stub:
        return Stub(path)(*args, **kwargs)

    return plan


def flashinfer_modules() -> list[Any]:
    """The imported ``flashinfer`` modules, by name."""
    return [
        module
        for name, module in sorted(sys.modules.items())
        if module is not None and (name == "flashinfer" or name.startswith("flashinfer."))
    ]


def function_source(func: Any) -> ast.AST | None:
    """The parsed source of ``func``; None when it has none that parses."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None


def replace_loaders() -> list[str]:
    """Replace every compiled-module loader in every imported flashinfer module."""
    replaced: set[str] = set()
    for module in flashinfer_modules():
        for name, value in list(vars(module).items()):
            function = inspect.unwrap(value) if callable(value) else None
            if not (LOADER.match(name) and inspect.isfunction(function)):
                continue
            if _builds_python_module(function):
                continue  # its module is Python code: it runs, and loads compiled code itself
            setattr(module, name, _loader(name))
            replaced.add(name)
    return sorted(replaced)


def _builds_python_module(function: Any) -> bool:
    """Whether a loader instantiates a FlashInfer Python class (``TrtllmGenDecodeModule()``).

    Such a "module" is Python code whose ``plan`` may ignore what it is given (trtllm-gen
    decode's is a no-op): the loader is kept so that the kernel boundary is the compiled
    module that Python class loads, not the class.
    """
    tree = function_source(function)
    if tree is None:
        return False
    names = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    scope = getattr(function, "__globals__", {})
    return any(
        inspect.isclass(scope.get(name))
        and (getattr(scope[name], "__module__", "") or "").startswith("flashinfer")
        for name in names
    )


def wrap_sub_planners(wrapper: Any) -> list[str]:
    """Replace ``plan`` of FlashInfer objects the wrapper holds by recorders."""
    wrapped: list[str] = []
    for name, value in sorted(vars(wrapper).items()):
        module = type(value).__module__ or ""
        if isinstance(value, Stub) or not module.startswith("flashinfer"):
            continue
        if callable(getattr(value, "plan", None)):
            with contextlib.suppress(AttributeError, TypeError):
                value.plan = _recording_plan(f"self.{name}.plan")
                wrapped.append(name)
    return wrapped
