"""Every public module says what it exports, and one module holds every exception.

A public module is one whose dotted path has no segment starting with an underscore.
Each must have an ``__all__`` that names only things it has, a ``__dir__`` that shows
exactly those names, and must export every public function and class it defines. Every
exception class in the package is defined in :mod:`fi_compat.errors` and subclasses both
:class:`~fi_compat.errors.FiCompatError` and a built-in exception.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from pathlib import Path

import pytest

import fi_compat
from fi_compat import errors
from fi_compat.capabilities import get_capabilities
from fi_compat.errors import NameUnavailableError

PACKAGE = Path(fi_compat.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


PUBLIC = sorted(
    _module_name(path)
    for path in PACKAGE.rglob("*.py")
    if path.name != "__main__.py"
    and not any(part.startswith("_") and part != "__init__.py" for part in path.parts[-3:])
    and "signatures" not in path.parts
    and all(not part.startswith("_") for part in _module_name(path).split("."))
)


def test_the_public_modules_are_found() -> None:
    assert {"fi_compat", "fi_compat.comm", "fi_compat.errors", "fi_compat.testing"} <= set(PUBLIC)
    assert not any(part.startswith("_") for name in PUBLIC for part in name.split("."))


@pytest.mark.parametrize("name", PUBLIC)
def test_all_names_only_what_the_module_has_and_dir_shows_exactly_that(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(set(exported)) == len(exported), "duplicates in __all__"
    for item in exported:
        try:
            value = getattr(module, item)
        except NameUnavailableError:  # a FlashInfer class handed through: none installed here
            assert not get_capabilities().comm.available
            continue
        assert value is not None or item.isupper()
    assert sorted(set(dir(module)) - {"__version__"}) == sorted(set(exported) - {"__version__"})


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_function_and_class_defined_here_is_exported(name: str) -> None:
    module = importlib.import_module(name)
    defined = {
        item
        for item, value in vars(module).items()
        if not item.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and getattr(value, "__module__", None) == name
    }
    assert defined <= set(module.__all__), (
        f"defined but not exported: {defined - set(module.__all__)}"
    )


def _exception_classes() -> list[tuple[str, str]]:
    """``(module path, class name)`` of every class in the package that derives from an
    exception, judged by its bases' names (``...Error``, ``...Exception``, ``Warning``)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(base).rpartition(".")[2] for base in node.bases]
                if any(base.endswith(("Error", "Exception", "Warning")) for base in bases):
                    found.append((str(path.relative_to(PACKAGE)), node.name))
    return found


def test_every_exception_class_is_defined_in_the_errors_module() -> None:
    elsewhere = [item for item in _exception_classes() if item[0] != "errors.py"]
    assert elsewhere == []


def test_the_scan_sees_the_errors_module() -> None:
    assert ("errors.py", "WorkspaceMismatchError") in _exception_classes()


@pytest.mark.parametrize(
    "cls",
    [
        value
        for value in vars(errors).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value is not errors.FiCompatError
    ],
    ids=lambda cls: cls.__name__,
)
def test_every_error_is_a_fi_compat_error_and_a_builtin(cls: type[BaseException]) -> None:
    assert cls.__name__ in errors.__all__
    assert issubclass(cls, errors.FiCompatError)
    builtin = [
        base
        for base in cls.__mro__
        if base.__module__ == "builtins" and base not in (BaseException, Exception, object)
    ]
    assert builtin, f"{cls.__name__} subclasses no built-in exception besides Exception"
    assert all(getattr(builtins, base.__name__) is base for base in builtin)


def test_errors_are_reexported_where_users_meet_them_as_the_same_classes() -> None:
    from fi_compat import attention, policy, report, testing

    assert attention.PlannerConfigError is errors.PlannerConfigError
    assert attention.TensorCoresRequiredError is errors.TensorCoresRequiredError
    assert policy.PolicyInputError is errors.PolicyInputError
    assert report.UnknownRequirementError is errors.UnknownRequirementError
    assert testing.UnknownReleaseError is errors.UnknownReleaseError
    assert testing.FakeUninstalledError is errors.FakeUninstalledError
