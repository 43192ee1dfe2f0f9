"""``fi_compat.comm.<submodule>`` for every submodule of the installed ``flashinfer.comm``.

Engines import comm's submodules directly (``from flashinfer.comm.mapping import Mapping``),
so the drop-in ``fi_compat.comm`` has them too, at any depth
(``fi_compat.comm.mnnvl_cutedsl.kernel_ht``). :func:`install`, called when
``fi_compat.comm`` is imported, appends :class:`SubmoduleFinder` to ``sys.meta_path``; it
answers for ``fi_compat.comm.<name>`` only where no module of fi-compat's own has that name
(the path finder, earlier on ``sys.meta_path``, finds ``fi_compat.comm.mnnvl`` first) and
every part of ``<name>`` is public (an identifier, no keyword, no leading ``_``). Finding
asks the installed ``flashinfer.comm`` whether it has the module and raises
:class:`~fi_compat.errors.ModuleUnavailableError` where it does not; the loader imports
FlashInfer's module and hands out a :class:`HandedThroughModule` over it, or raises
:class:`~fi_compat.errors.FlashInferUnavailableError` where it raises on import.

A handed-through module looks every name up in FlashInfer's module on each access (never
cached, so a refreshed probe or another fake release is seen at once), with two exceptions:
a name of ``fi_compat.comm.__all__`` that FlashInfer's module binds (``allreduce_fusion`` in
``flashinfer.comm.allreduce``, ``AllReduceFusionPattern`` wherever it is re-exported) is
``fi_compat.comm``'s own object, and a submodule is fi-compat's handed-through one. The
allreduce-fusion guide, ``docs/guide/comm.md`` ("Drop-in names"), says which.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import importlib.abc

__all__ = [
    "PACKAGE",
    "HandedThroughModule",
    "SubmoduleFinder",
    "forget",
    "install",
]

#: The drop-in package whose submodules this module hands out.
PACKAGE = __name__.rpartition(".")[0]
_PREFIX = f"{PACKAGE}."


def flashinfer_name(name: str) -> str:
    """FlashInfer's module for fi-compat's ``name``: ``fi_compat.comm.mapping`` ->
    ``flashinfer.comm.mapping``."""
    from fi_compat._surface import COMM  # not on import: fi_compat.comm stays light

    return f"{COMM}.{name.removeprefix(_PREFIX)}"


class HandedThroughModule(ModuleType):
    """``fi_compat.comm.<name>``: FlashInfer's ``flashinfer.comm.<name>``, handed through.

    Every public name is FlashInfer's object, looked up on each access, except the names
    of ``fi_compat.comm.__all__``, which are ``fi_compat.comm``'s, and submodules, which are
    fi-compat's. ``__all__`` and ``dir()`` are FlashInfer's module's public names (its
    ``__all__``, or what ``import *`` would take from it). A private name raises
    ``AttributeError`` without looking at FlashInfer.
    """

    def __getattr__(self, name: str) -> Any:
        from fi_compat.comm._names import hand_through

        owner = vars(self).get("__name__")
        if not isinstance(owner, str):  # __name__ deleted: nothing to hand through
            raise AttributeError(name)
        if name == "__all__":
            return _exported(owner)
        value = hand_through(flashinfer_name(owner), name, owner)
        # The package above, which imported this module's finder (read, not imported).
        package = sys.modules.get(PACKAGE)
        if package is not None and name in package.__all__:
            return getattr(package, name)  # the drop-in's own object where FlashInfer binds it
        return value

    def __dir__(self) -> list[str]:
        try:
            exported: list[str] = self.__getattr__("__all__")
        except Exception:  # FlashInfer's module is gone (another fake release): no names
            return []
        return exported


def _exported(owner: str) -> list[str]:
    """The public names FlashInfer's module for ``owner`` exports: its ``__all__``, or every
    public name it binds, as ``from <module> import *`` takes them."""
    from fi_compat.comm._names import installed_module, public_part

    installed = installed_module(flashinfer_name(owner), "__all__")
    listed = getattr(installed, "__all__", None)
    names = vars(installed) if listed is None else listed
    return [name for name in names if isinstance(name, str) and public_part(name)]


class _Loader:
    """Creates a :class:`HandedThroughModule` and imports FlashInfer's module behind it.

    The import system asks a loader for these two methods only; the ``importlib.abc``
    base classes (here and for :class:`SubmoduleFinder`) would make ``import fi_compat.comm``
    import ``importlib.resources`` too.
    """

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return HandedThroughModule(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        from fi_compat.comm._names import import_installed, module_unavailable

        owner = module.__name__
        source = flashinfer_name(owner)
        installed = import_installed(source)
        if installed.module is None:
            raise module_unavailable(source, owner, installed) from installed.error
        module.__doc__ = (
            f"FlashInfer's ``{source}``, handed through by fi-compat "
            "(the allreduce-fusion guide, docs/guide/comm.md, says how)."
        )
        if _is_package(installed.module):
            # Its submodules come through this finder too, never from FlashInfer's files
            # under a second name: an empty search path gives the path finder nothing.
            module.__path__ = []
            if module.__spec__ is not None:
                module.__spec__.submodule_search_locations = []


def _is_package(module: Any) -> bool:
    try:
        return getattr(module, "__path__", None) is not None
    except KeyboardInterrupt:
        raise
    except BaseException:  # a hostile module's __getattr__: not a package to descend into
        return False


_LOADER = cast("importlib.abc.Loader", _Loader())


class SubmoduleFinder:
    """Finds ``fi_compat.comm.<name>`` for :class:`_Loader`.

    Answers None (the import system then raises its plain ``ModuleNotFoundError``) for
    every other name, for a name with a part that is not public, and below a module that
    is not ``fi_compat.comm`` or a handed-through one (a package of fi-compat's own),
    without importing anything. Otherwise it asks the installed ``flashinfer.comm``
    (imported through the probe) whether it has the module, without importing the module:
    where it does not, it raises :class:`~fi_compat.errors.ModuleUnavailableError` (a
    ``ModuleNotFoundError``, which ``importlib.util.find_spec`` raises too, as for a
    submodule of a missing package); where it does, or cannot tell, it returns the spec.
    """

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        from fi_compat.comm._names import Installed, module_unavailable, public_part, ships

        if not fullname.startswith(_PREFIX):
            return None
        if not all(public_part(part) for part in fullname[len(_PREFIX) :].split(".")):
            return None
        parent = fullname.rpartition(".")[0]
        if parent != PACKAGE and not isinstance(sys.modules.get(parent), HandedThroughModule):
            return None
        source = flashinfer_name(fullname)
        if ships(source) is False:
            raise module_unavailable(source, fullname, Installed(None, source, missing=True))
        return importlib.machinery.ModuleSpec(fullname, _LOADER, origin=source)


def _is_finder(finder: object) -> bool:
    """``finder`` is a :class:`SubmoduleFinder`, of this import of this module or an earlier
    one (``fi_compat`` taken out of ``sys.modules`` and imported again)."""
    kind = type(finder)
    return kind.__module__ == __name__ and kind.__qualname__ == SubmoduleFinder.__qualname__


def install() -> None:
    """Put one :class:`SubmoduleFinder` at the end of ``sys.meta_path`` (after the path
    finder, which finds fi-compat's own modules), replacing any earlier one."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if not _is_finder(finder)]
    sys.meta_path.append(SubmoduleFinder())


def forget() -> None:
    """Take every handed-through module out of ``sys.modules`` and off its parent, so that
    the next import asks the installed release again (whether it has the module at all):
    for a test that changes the installed FlashInfer, such as a fake of another release."""
    for name, module in list(sys.modules.items()):
        if isinstance(module, HandedThroughModule):
            del sys.modules[name]
            parent = sys.modules.get(name.rpartition(".")[0])
            child = name.rpartition(".")[2]
            if parent is not None and vars(parent).get(child) is module:
                delattr(parent, child)
