"""What the names of a file hold from FlashInfer while it is read, scoped as Python scopes them.

:class:`Bindings` is the reading's memory (:mod:`fi_compat._engine_source.read` reads on
top of it): which names are FlashInfer modules (``import flashinfer.comm as fc``), objects
built from FlashInfer (``wrapper = BatchDecodeWithPagedKVCacheWrapper(...)``,
``self.workspace = ...``), containers of such objects of one kind, a function of the file
that returns one, what another scanned module passes on (:class:`Bound`); and what a dotted
expression names from FlashInfer (:meth:`Bindings.resolve`). A function's names are its
own: what its body binds is forgotten at its end, but what it stores on an object or
declares global.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import NamedTuple

from fi_compat._engine_source.fallbacks import is_none

__all__ = ["CONTAINER", "Bindings", "Bound", "text_of", "under"]

_ROOT = "flashinfer"
#: What ``importlib.import_module`` is called as (``from importlib import import_module``).
_IMPORT_MODULE = ("importlib.import_module", "import_module")
#: How :meth:`Bindings.made` marks a container of FlashInfer objects of one kind.
CONTAINER = "[]"
#: The names a method's first parameter goes by.
_SELVES = ("self", "cls")


class Bound(NamedTuple):
    """What a module binds from FlashInfer at its top level, as another module importing
    the name gets it: the FlashInfer path, the FlashInfer module it came from, and whether
    the name holds an object built from it (``workspace = Workspace(...)``) rather than the
    name itself."""

    path: str
    module: str
    instance: bool = False


#: What :meth:`Bindings.enter_function` saves of the bindings around a function.
_Saved = tuple[
    dict[str, str],
    dict[str, str],
    dict[str, str],
    dict[str, str],
    dict[str, str],
    set[str],
    set[str],
]


class Bindings:
    """What each name of one file holds from FlashInfer, at the point the reading is at."""

    def __init__(
        self,
        members: dict[tuple[str, str], str] | None = None,
        returns: dict[str, str] | None = None,
        *,
        module: str = "",
        package: bool = False,
        exports: Mapping[str, Mapping[str, Bound]] | None = None,
    ) -> None:
        #: The file's dotted module name (``""`` when not known) and whether it is a
        #: package's ``__init__``: where its relative imports start.
        self.module = module
        self.package = package
        #: What the other scanned modules bind from FlashInfer at their top level, by module:
        #: ``from <engine module> import X`` and ``<engine module>.X`` resolve through it.
        self.exports: Mapping[str, Mapping[str, Bound]] = exports or {}
        #: (class, ``self.<attribute>``) -> the FlashInfer module or object stored there, from
        #: any method of the class: a first reading of the file learns them, and a second
        #: one, given them, follows reads that come before the store in the file.
        self.members: dict[tuple[str, str], str] = dict(members or {})
        #: A function of the file -> the FlashInfer object it returns (``def
        #: get_workspace(): ... return workspace``), learned the same way, so that
        #: ``workspace = get_workspace(...)`` holds one too; and what this reading saw.
        self.returns: dict[str, str] = dict(returns or {})
        self.returned: dict[str, set[str]] = {}
        #: The functions being read, innermost last, with the names each declares global.
        self.functions: list[tuple[str, set[str]]] = []
        self.classes: list[str] = []
        self.aliases: dict[str, str] = {}
        #: Names bound by an import statement.
        self.imported: set[str] = set()
        #: Names (and ``self.x``) that hold a guard's answer, tested later by an ``if``.
        self.guard_names: set[str] = set()
        self.modules: set[str] = set()
        self.instances: dict[str, str] = {}
        #: Names (and ``self.x``) holding a list, tuple, set or dict of FlashInfer objects of
        #: one kind -> that kind (``""`` once two kinds were put in).
        self.containers: dict[str, str] = {}
        #: Names holding ``inspect.signature(f)``, and names holding its ``.parameters``:
        #: name -> ``f``'s path.
        self.signatures: dict[str, str] = {}
        self.parameters: dict[str, str] = {}

    def forget(self, name: str) -> None:
        """``name`` is bound anew (an assignment, a loop, a parameter): whatever FlashInfer
        module, object or container it meant, it no longer does."""
        self.aliases.pop(name, None)
        self.instances.pop(name, None)
        self.containers.pop(name, None)

    def note_module(self, dotted: str) -> None:
        """``dotted`` is a module of the file's imports, and so is each package above it."""
        parts = dotted.split(".")
        self.modules.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))

    def module_of(self, target: str) -> str:
        """The longest part of ``target`` the file's imports know as a module."""
        parts = target.split(".")
        for end in range(len(parts), 0, -1):
            prefix = ".".join(parts[:end])
            if prefix in self.modules:
                return prefix
        return _ROOT

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted FlashInfer path ``node`` names, or None."""
        if isinstance(node, ast.Name):
            found = self.aliases.get(node.id)
            return found if found is not None and under(found) else None
        if isinstance(node, ast.Attribute):
            member = self._member(node)
            if member is not None:
                return member
            instance = self.instances.get(text_of(node.value)) or self.element(node.value)
            if instance is not None:
                return f"{instance}.{node.attr}"
            base = self.resolve(node.value)
            if base is not None:
                return f"{base}.{node.attr}"
            return self._through(node) if self.exports else None
        return None

    def _through(self, node: ast.Attribute) -> str | None:
        """The FlashInfer path a chain through a scanned module names (``kernels.
        BatchDecodeWithPagedKVCacheWrapper`` after ``import engine.kernels as kernels``,
        where that module imports the class from FlashInfer), or None."""
        parts = [node.attr]
        value = node.value
        while isinstance(value, ast.Attribute):
            parts.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in self.aliases:
            return None
        parts.extend(reversed(self.aliases[value.id].split(".")))
        parts.reverse()
        for end in range(len(parts) - 1, 0, -1):
            found = self.exports.get(".".join(parts[:end]), {}).get(parts[end])
            if found is not None:
                return ".".join((found.path, *parts[end + 1 :]))
        return None

    def member_key(self, node: ast.AST) -> tuple[str, str] | None:
        """``(class, "self.x")`` for ``self.x`` (or ``cls.x``) read or written in a method."""
        if (
            self.classes
            and isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in _SELVES
        ):
            return self.classes[-1], f"self.{node.attr}"
        return None

    def _member(self, node: ast.Attribute) -> str | None:
        key = self.member_key(node)
        return None if key is None else self.members.get(key)

    def python_path(self, node: ast.AST) -> str | None:
        """The dotted standard-library path ``node`` names (``inspect.signature``)."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.python_path(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    # ------------------------------------------------------------------ scopes

    def enter_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> _Saved:
        """Enter a function: each parameter annotated with a FlashInfer class (``wrapper:
        BatchDecodeWithPagedKVCacheWrapper``, also as a string or in ``Optional[...]``) is
        an instance of it in the body, as SGLang hands its wrappers to ``call_begin_forward``;
        what the names around it held, to give back at :meth:`leave_function`."""
        arguments = node.args
        annotated: dict[str, str] = {}
        for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
            found = self._annotated(argument.annotation)
            if found is not None:
                annotated[argument.arg] = found
        # a parameter defaulting to a FlashInfer class or function (``wrapper_cls=
        # BatchDecodeWithPagedKVCacheWrapper``) is that name in the body, unless replaced
        positional = (*arguments.posonlyargs, *arguments.args)
        with_defaults = positional[len(positional) - len(arguments.defaults) :]
        defaulted = {
            argument.arg: self.resolve(default)
            for argument, default in (
                *zip(with_defaults, arguments.defaults, strict=True),
                *zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True),
            )
            if default is not None and argument.arg not in annotated
        }
        # What the body binds is its own: a name a function binds (an import, an instance,
        # a probe's answer) means nothing in the next function, as Python scopes it.
        saved = (
            dict(self.aliases),
            dict(self.instances),
            dict(self.containers),
            dict(self.signatures),
            dict(self.parameters),
            set(self.guard_names),
            set(self.imported),
        )
        for argument in (
            *arguments.posonlyargs,
            *arguments.args,
            *arguments.kwonlyargs,
            *(a for a in (arguments.vararg, arguments.kwarg) if a is not None),
        ):
            self.forget(argument.arg)  # a parameter shadows whatever it meant outside
        self.instances.update(annotated)
        self.aliases.update({name: path for name, path in defaulted.items() if path is not None})
        self.functions.append((node.name, set()))
        return saved

    def leave_function(self, saved: _Saved) -> None:
        """Leave the function :meth:`enter_function` entered (``saved``: what it gave)."""
        _, declared = self.functions.pop()
        # a name the body declares global is the module's: what it holds outlives the call
        globals_ = {
            name: (self.aliases.get(name), self.instances.get(name), self.containers.get(name))
            for name in declared
        }
        # what the body stored on an object (``self.workspace = ...``) outlives the call
        kept = [
            {key: value for key, value in mapping.items() if "." in key}
            for mapping in (self.instances, self.containers, self.signatures, self.parameters)
        ]
        (
            self.aliases,
            self.instances,
            self.containers,
            self.signatures,
            self.parameters,
            self.guard_names,
            self.imported,
        ) = saved
        for mapping, stored in zip(
            (self.instances, self.containers, self.signatures, self.parameters), kept, strict=True
        ):
            mapping.update(stored)
        for name, (alias, instance, container) in globals_.items():
            for mapping, value in (
                (self.aliases, alias),
                (self.instances, instance),
                (self.containers, container),
            ):
                if value is None:
                    mapping.pop(name, None)
                else:
                    mapping[name] = value

    # ------------------------------------------------------------------ objects

    def made(self, value: ast.expr) -> str | None:
        """The FlashInfer object ``value`` is: a name or attribute holding one, an element
        of a container of them, a FlashInfer constructor's or factory's result, or the
        result of a function of the file that returns one. A container of them is
        ``CONTAINER`` and the kind (``"[]flashinfer.BatchDecodeWithPagedKVCacheWrapper"``)."""
        if isinstance(value, (ast.Name, ast.Attribute)):
            held = self.instances.get(text_of(value))
            if held is None and self.containers.get(text_of(value)):
                return CONTAINER + self.containers[text_of(value)]
            return held
        if isinstance(value, ast.Subscript):
            return self.element(value)
        if isinstance(value, ast.Call):
            function = value.func
            if isinstance(function, ast.Name) and self.resolve(function) is None:
                return self.returns.get(function.id)
            return self.resolve(value.func)
        if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
            return self._of_one_kind(value.elts)
        if isinstance(value, ast.Dict):
            return self._of_one_kind([v for v in value.values if v is not None])
        if isinstance(value, (ast.ListComp, ast.SetComp)):
            return self._of_one_kind([value.elt])
        return None

    def meaning(self, value: ast.expr) -> str | None:
        """The FlashInfer module or object ``value`` means (a module ``importlib`` imports,
        what :meth:`made` finds, a name or chain :meth:`resolve` finds), or None."""
        imported = self.imported_module(value) if isinstance(value, ast.Call) else None
        named = self.resolve(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
        return imported or self.made(value) or named

    def _of_one_kind(self, elements: list[ast.expr]) -> str | None:
        """A container of these elements, when they are all one kind of FlashInfer object
        (``None`` placeholders aside); None otherwise (nested containers included)."""
        kinds = {self.made(element) for element in elements if not is_none(element)}
        if len(kinds) != 1:
            return None
        kind = kinds.pop()
        return None if kind is None or kind.startswith(CONTAINER) else CONTAINER + kind

    def element(self, node: ast.expr) -> str | None:
        """The FlashInfer object an element of a container is: ``wrappers[i]``,
        ``by_id[key]``; None otherwise."""
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            return self.containers.get(text_of(node.value)) or None
        return None

    def hold(self, target: ast.expr, made: str | None) -> None:
        """Note what ``target`` holds after it is assigned ``made`` (see :meth:`made`)."""
        key = text_of(target)
        if made is not None and made.startswith(CONTAINER):
            self.containers[key] = made[len(CONTAINER) :]
        elif made is not None:
            self.instances[key] = made

    def put(self, container: ast.expr, value: ast.expr) -> None:
        """``container.append(value)`` (or ``add``, ``insert``): a container of its kind."""
        made = self.made(value)
        if made is None or made.startswith(CONTAINER):
            return
        key = text_of(container)
        before = self.containers.get(key)
        self.containers[key] = made if before in (None, made) else ""

    def _annotated(self, annotation: ast.expr | None) -> str | None:
        """The FlashInfer class an annotation names: ``X``, ``"X"``, ``Optional[X]``,
        ``X | None``; None for anything else."""
        if annotation is None:
            return None
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                # not an expression, a NUL byte (ValueError on 3.10), or nesting the parser
                # cannot take: no annotation the reading knows
                return None
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            sides = [self._annotated(annotation.left), self._annotated(annotation.right)]
            named = [side for side in sides if side is not None]
            return named[0] if len(named) == 1 else None
        if isinstance(annotation, ast.Subscript) and text_of(annotation.value).endswith("Optional"):
            return self._annotated(annotation.slice)
        if isinstance(annotation, (ast.Name, ast.Attribute)):
            found = self.resolve(annotation)
            # a class by its name (``BatchDecodeWithPagedKVCacheWrapper``), not a module
            if found is not None and found.rpartition(".")[2][:1].isupper():
                return found
        return None

    def imported_module(self, call: ast.Call) -> str | None:
        """The FlashInfer module ``importlib.import_module("flashinfer....")`` imports."""
        if self.python_path(call.func) not in _IMPORT_MODULE or len(call.args) != 1:
            return None
        name = call.args[0]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return None
        parts = name.value.split(".")
        # a dotted module name only (not "flashinfer.", "flashinfer..comm", a NUL byte)
        return name.value if parts[0] == _ROOT and all(p.isidentifier() for p in parts) else None

    # ------------------------------------------------------------------ imports

    def absolute(self, node: ast.ImportFrom) -> str | None:
        """The module a from-import imports from; a relative one (``from ..ops import x``)
        from the file's own module, None when that is unknown or the import climbs above
        its top-level package."""
        if not node.level:
            return node.module or ""
        if not self.module:
            return None
        parts = self.module.split(".")
        package = parts if self.package else parts[:-1]
        if node.level > len(package):
            return None
        base = package[: len(package) - node.level + 1]
        return ".".join((*base, *([node.module] if node.module else [])))

    def bind(self, name: str, found: Bound) -> None:
        """``name`` is what another scanned module binds from FlashInfer (``found``)."""
        self.forget(name)
        self.imported.add(name)
        if found.instance:
            self.instances[name] = found.path
        else:
            self.aliases[name] = found.path
        self.note_module(found.module)

    def bound(self) -> dict[str, Bound]:
        """What this module binds from FlashInfer at its top level (read once the whole
        file has been: a function's names are its own), by name."""
        found = {
            name: Bound(path, self.module_of(path))
            for name, path in self.aliases.items()
            if under(path)
        }
        for name, path in self.instances.items():
            if name.isidentifier() and name not in found and under(path):
                found[name] = Bound(path, self.module_of(path), instance=True)
        return found


def under(path: str, prefix: str = _ROOT) -> bool:
    """Whether the dotted ``path`` is ``prefix`` or lies under it (by default: whether it is
    FlashInfer's)."""
    return path == prefix or path.startswith(f"{prefix}.")


def text_of(node: ast.AST) -> str:
    """``node`` as source text (what names and ``self.x`` are keyed by); a chain of names
    (``a``, ``self.a.b``), most of what is asked, is spelled without :func:`ast.unparse`,
    exactly as it spells them."""
    parts: list[str] = []
    chain = node
    while isinstance(chain, ast.Attribute):
        parts.append(chain.attr)
        chain = chain.value
    if isinstance(chain, ast.Name):
        parts.append(chain.id)
        return ".".join(reversed(parts))
    try:
        return ast.unparse(node)
    except Exception:  # an unparsable node never names an instance
        return f"<{id(node)}>"
