"""The source generator: the Python text of a fake ``flashinfer`` package.

:func:`module_source` turns a release's registry (:mod:`fi_compat.testing._registry`) into
the source of one ``flashinfer`` module of :func:`module_names` (a build writes each module
when it is first needed): each recorded function, class and method as a ``def`` or
``class`` with the release's parameter names, kinds, annotations and defaults (a default
becomes a :class:`~fi_compat.testing.Default`, an enum member default that member), whose
body logs the call and hands over to :mod:`fi_compat.testing._runtime`, the one module
generated code imports (which body each gets: :mod:`fi_compat.testing._bodies`). So Python
itself raises the ``TypeError`` the release would raise, ``inspect.signature`` reports the
recorded signature and ``inspect.getsource`` works. The testing guide,
``docs/guide/testing.md``, says what the generated objects do.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fi_compat._records import ClassRecord, FunctionRecord, ParameterRecord, ReleaseRecord
from fi_compat._surface import (
    COMM,
    CUDART_MODULE,
    FLASHINFER,
)
from fi_compat.testing._bodies import forward_source, function_body, method_body, values_source
from fi_compat.testing._modules import Modules, Outline, Plan
from fi_compat.testing._objects import CUDART_MESSAGE, inside
from fi_compat.testing._registry import Entry, Registry, enum_base_of


def _kinds(func: FunctionRecord) -> str:
    return repr({p.name: p.kind for p in func.parameters})


def _deprecation_message(decorators: Sequence[str]) -> str | None:
    """The message of a ``@deprecated("...")`` decorator (typing_extensions/warnings)."""
    for text in decorators:
        message = _deprecation_of(text)
        if message is not None:
            return message
    return None


@functools.lru_cache(maxsize=1 << 12)
def _deprecation_of(text: str) -> str | None:
    """The message of one decorator's text if it is ``@deprecated(...)``, else None: parsed
    once per text, as the same decorators recur in every release's records."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or not node.args:
        return None
    name = ast.unparse(node.func).rpartition(".")[2]
    if name != "deprecated":
        return None
    try:
        message = ast.literal_eval(node.args[0])
    except ValueError:
        return "deprecated"
    return message if isinstance(message, str) else "deprecated"


def _method_kind(func: FunctionRecord) -> str:
    """``"property"``, ``"static"``, ``"class"`` or ``"method"``, from the decorators."""
    for text in func.decorators:
        name = text.partition("(")[0].rpartition(".")[2]
        if name in ("property", "cached_property"):
            return "property"
        if name == "staticmethod":
            return "static"
        if name == "classmethod":
            return "class"
    return "method"


_INT_ENUMS = ("_fi_enum.IntEnum", "_fi_enum.IntFlag", "_fi_enum.Flag")


_OPERATORS: Mapping[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.LShift: lambda a, b: a << b if 0 <= b < 256 else None,
    ast.RShift: lambda a, b: a >> b,
    ast.BitOr: lambda a, b: a | b,
    ast.BitAnd: lambda a, b: a & b,
    ast.BitXor: lambda a, b: a ^ b,
}


def _arithmetic(node: ast.expr) -> Any:
    """The value of an integer expression of literals (``1 << 4``), else None."""
    if isinstance(node, ast.Constant):
        value = node.value
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Invert):
        operand = _arithmetic(node.operand)
        if operand is None:
            return None
        return -operand if isinstance(node.op, ast.USub) else ~operand
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        if left is None or right is None:
            return None
        try:
            return _OPERATORS[type(node.op)](left, right)
        except ZeroDivisionError:
            return None
    return None


def _member_value(recorded: Any) -> Any:
    """A recorded member value: the record keeps a value that is not a literal as source
    text (``"1 << 1"``); an integer expression of literals is computed, as Python would."""
    if not isinstance(recorded, str):
        return recorded
    return _member_text_value(recorded)


@functools.lru_cache(maxsize=1 << 12)
def _member_text_value(recorded: str) -> Any:
    """:func:`_member_value` of source text (an int or the text itself), parsed once per
    text: the same enums recur in every release."""
    try:
        node = ast.parse(recorded, mode="eval").body
    except SyntaxError:
        return recorded
    if not isinstance(node, ast.BinOp | ast.UnaryOp):
        return recorded
    value = _arithmetic(node)
    return recorded if value is None else value


@functools.lru_cache(maxsize=1 << 14)
def _attribute_default(source: str) -> tuple[str, str] | None:
    """``(name, attribute)`` of a recorded default spelled ``Name.attribute`` (an enum
    member, perhaps), else None: parsed once per text, as the generator meets the same
    defaults in every signature of every release."""
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id, node.attr
    return None


class _Writer:
    """Writes one generated module: the objects the release defines there, then the names
    it binds there that are defined elsewhere; those the registry models, and those only
    the record lists (:class:`~fi_compat.testing._modules._Plan`), which with ``defer`` go
    to the module's later part instead (written by a writer made with ``later=True``)."""

    def __init__(
        self,
        registry: Registry,
        module: str,
        modules: Modules | None = None,
        *,
        defer: bool = False,
        later: bool = False,
    ) -> None:
        self.registry = registry
        self.module = module
        self.modules = modules
        #: What the module binds beyond the registry (nothing without ``modules``).
        self.outline = modules.outline(module) if modules is not None else Outline(module)
        #: Bind :attr:`outline`'s names in the module's later part (:meth:`later_source`),
        #: run on first access to one of them, not in the module itself.
        self.defer = defer
        #: Whether this writer writes that later part.
        self.later = later
        self.defaults_name = "_fi_later_defaults" if later else "_fi_defaults"
        #: How the module binds :attr:`outline`'s names (read only where they are written).
        self.plan = Plan(self.outline)
        if modules is not None and not defer:
            self.plan = modules.plan(module)
        #: The objects the registry and :attr:`plan` bind here, by each name they bind.
        self.local: dict[str, Entry] = {}
        for entry in [*registry.in_module(module), *self.plan.defined]:
            names = entry.bindings.get(module, set()) | entry.lazy.get(module, set())
            if entry.defined_in == module:
                names.add(entry.name)
            for name in sorted(names):
                self.local.setdefault(name, entry)
        for name, own in self.plan.aliases.items():
            if own in self.local:
                self.local.setdefault(name, self.local[own])
        #: What the module itself cannot name while its later part has not run.
        self.hidden: frozenset[str] = self.outline.names if defer else frozenset()
        self.defaults: list[str] = []
        self.lines: list[str] = []
        self.imports: dict[str, str] = {}
        self.written: set[str] = set()
        #: Name -> why the fake leaves it unbound (a value whose value the record cannot tell).
        self.unmodelled: dict[str, str] = {}
        #: Whether the module binds a name from outside the release, which the runtime may
        #: leave unbound (its module not imported): its ``__getattr__`` then says why.
        self.outside = False
        self.by_name = registry.classes_by_name()
        self.enums = registry.enums_by_name()

    def _reference(self, entry: Entry) -> str:
        """How this module's code names ``entry``: its name, or an import of it."""
        if entry.defined_in == self.module:
            return entry.name
        alias = entry.handle
        self.imports[alias] = f"from {entry.defined_in} import {entry.name} as {alias}"
        return alias

    # -- signatures ----------------------------------------------------------------------

    def _default(self, source: str) -> str:
        """The expression a recorded default becomes: an enum member, else a sentinel."""
        named = _attribute_default(source)
        if named is not None:
            owner, attribute = named
            known, found = self._named(owner)
            if not known:
                found = self.enums.get(owner)
            if (
                found is not None
                and enum_base_of(found) is not None
                and attribute in (found.members or {})
            ):
                return f"{self._reference(found)}.{attribute}"
        return f"_fi_runtime.Default({source!r})"

    def _named(self, name: str) -> tuple[bool, Entry | None]:
        """What ``name`` is in this module's namespace, as the release binds it: (True, the
        object, or None when it is not one the fake generates); (False, None) when the
        record does not tell (a module only the registry knows)."""
        if name in self.hidden:
            return False, None
        found = self.local.get(name)
        if found is not None:
            return True, found
        if self.modules is None:
            return False, None
        recorded = self.modules.record.module(self.module)
        if recorded is None or name not in recorded.names:
            return False, None
        return True, self.modules.lookup(self.module, name)

    def _signature(self, params: Sequence[ParameterRecord]) -> tuple[str, dict[str, str]]:
        """Parameter list source (each default ``_fi_defaults[<index>]``) and the resolved
        defaults."""
        parts: list[str] = []
        resolved: dict[str, str] = {}
        positional_only_done = False
        star_written = False
        defaulted = False
        for index, param in enumerate(params):
            if param.kind != "POSITIONAL_ONLY" and not positional_only_done:
                if index > 0 and params[index - 1].kind == "POSITIONAL_ONLY":
                    parts.append("/")
                positional_only_done = True
            if param.kind == "POSITIONAL_OR_KEYWORD" and not star_written:
                if param.default is None and defaulted:
                    # A required parameter after a defaulted one: a dataclass's keyword-only
                    # field recorded as positional. Python only allows it keyword-only.
                    parts.append("*")
                    star_written = True
                defaulted = defaulted or param.default is not None
            text = param.name
            if param.annotation is not None:
                text += f": {param.annotation}"
            if param.kind == "VAR_POSITIONAL":
                text = "*" + text
                star_written = True
            elif param.kind == "VAR_KEYWORD":
                text = "**" + text
            elif param.kind == "KEYWORD_ONLY" and not star_written:
                parts.append("*")
                star_written = True
            if param.default is not None:
                expression = self._default(param.default)
                self.defaults.append(expression)
                slot = f"{self.defaults_name}[{len(self.defaults) - 1}]"
                if not expression.startswith("_fi_runtime.Default("):
                    resolved[param.name] = slot
                text += f" = {slot}"
            parts.append(text)
        if params and params[-1].kind == "POSITIONAL_ONLY":
            parts.append("/")
        return ", ".join(parts), resolved

    def function(
        self,
        func: FunctionRecord,
        call_name: str,
        body: list[str],
        indent: str,
        *,
        name: str | None = None,
        values: str = "dict(locals())",
        bound: str | None = None,
        decorator: str | None = None,
    ) -> list[str]:
        params, resolved = self._signature(func.parameters)
        lines = []
        if decorator is not None:
            lines.append(f"{indent}@{decorator}")
        message = _deprecation_message(func.decorators)
        if message is not None:
            # The real release warns before binding the arguments; so does the fake.
            lines.append(f"{indent}@_fi_runtime._deprecated({message!r})")
        lines.append(f"{indent}def {name or func.name}({params}):")
        inner = indent + "    "
        defaults = "{" + ", ".join(f"{k!r}: {v}" for k, v in resolved.items()) + "}"
        lines.append(f"{inner}__values = {values}")
        lines.append(
            f"{inner}__call = _fi_runtime._kit(_fi_token)._record({call_name!r}, __values, "
            f"{_kinds(func)}, {bound!r}, {defaults})"
        )
        lines += [f"{inner}{line}" for line in body]
        return lines

    # -- objects -------------------------------------------------------------------------

    def _class(self, entry: Entry) -> list[str]:
        owner = entry.cls or ClassRecord(entry.name, entry.defined_in, (), {})
        enum_base = enum_base_of(entry)
        if enum_base is not None:
            lines = [f"class {entry.name}({enum_base}):"]
        else:
            handles = [self._reference(base) for base in self._bases(entry, owner)]
            bases = f"(*_fi_runtime._bases({', '.join(handles)}))" if handles else ""
            lines = [f"class {entry.name}{bases}:"]
            lines.append("    destroyed = False")
            attributes = tuple(owner.attributes) or None
            lines.append(f"    _fi_attributes = {attributes!r}")
            if entry.family is not None:
                lines.append(f"    _fi_family = {entry.family!r}")
                lines.append(f"    _fi_decode = {entry.decode!r}")
        members = entry.members or {}
        aliases = owner.aliases
        int_valued = enum_base in _INT_ENUMS
        for index, (member, recorded) in enumerate(members.items()):
            if not member.isidentifier() or member.startswith("_"):
                continue
            value = _member_value(recorded)
            if int_valued and isinstance(value, list) and len(value) == 1:
                # ``Name = (2,)``, a tuple the record keeps as a list: an int-valued enum
                # calls int(*value), so the member is 2, as in the release (0.6.9's
                # RoutingMethodType).
                value = _member_value(value[0])
            if int_valued and (not isinstance(value, int) or isinstance(value, bool)):
                value = 1 << (index + 16)
            lines.append(f"    {member} = {value!r}")
        for method_name in sorted(owner.methods):
            method = owner.methods[method_name]
            if method is None or method_name in members or method_name in aliases:
                continue
            if enum_base is not None and method_name.startswith("__"):
                continue
            lines += ["", *self._method(entry, owner, method_name, method)]
        for alias, target in sorted(aliases.items()):
            if alias not in members and enum_base is None:
                lines += ["", f"    {alias} = {target}"]
        if enum_base is None and owner.methods.get("__init__") is None and owner.attributes:
            # A class without a recorded __init__ (a dataclass): construction by keyword.
            lines += [
                "",
                "    def __init__(self, *args, **kwargs):",
                f"        _fi_runtime._kit(_fi_token)._record({entry.name + '.__init__'!r}, "
                "{'self': self, 'args': args, 'kwargs': kwargs}, "
                "{'self': 'POSITIONAL_OR_KEYWORD', 'args': 'VAR_POSITIONAL', "
                "'kwargs': 'VAR_KEYWORD'}, 'self')",
                "        _fi_runtime._init_object("
                f"_fi_token, self, {tuple(owner.attributes)!r}, kwargs)",
            ]
        if len(lines) == 1:
            lines.append("    pass")
        return lines

    def _method(
        self, entry: Entry, owner: ClassRecord, method_name: str, method: FunctionRecord
    ) -> list[str]:
        kind = _method_kind(method)
        call_name = f"{entry.name}.{method_name}"
        if kind == "property":
            return [
                "    @property",
                f"    def {method_name}(self):",
                f"        return _fi_runtime._property(self, {method_name!r}, "
                f"{method.returns_attribute!r})",
                "",
                f"    @{method_name}.setter",
                f"    def {method_name}(self, value):",
                f"        _fi_runtime._set_property(self, {method_name!r}, value)",
            ]
        body = method_body(entry, owner, method)
        values = "dict(locals())"
        if forward_source(owner, method) is not None:
            values = values_source(method)
        first = method.parameters[0].name if method.parameters else None
        bound = None if kind == "static" else first
        decorator = {"static": "staticmethod", "class": "classmethod"}.get(kind)
        return self.function(
            method,
            call_name,
            body,
            "    ",
            name=method_name,
            values=values,
            bound=bound,
            decorator=decorator,
        )

    def _bases(self, entry: Entry, owner: ClassRecord) -> list[Entry]:
        """The recorded base classes of ``entry`` that the fake has."""
        found: list[Entry] = []
        for base in owner.bases:
            text = base.partition("[")[0]
            if entry.defined_in == self.module and text.isidentifier():
                known, named = self._named(text)
                if known:  # the name as the defining module binds it, as Python reads it
                    if (
                        named is not None
                        and named.kind in ("class", "enum")
                        and named is not entry
                        and named not in found
                    ):
                        found.append(named)
                    continue
            name = text.rpartition(".")[2]
            candidates = [c for c in self.by_name.get(name, []) if c is not entry]
            if not candidates:
                continue
            same_module = [c for c in candidates if c.defined_in == entry.defined_in]
            chosen = (same_module or candidates)[0]
            if chosen not in found:
                found.append(chosen)
        return found

    def _emit(self, entry: Entry, chunk: list[str], start: int) -> None:
        if len(self.defaults) > start:
            defaults = ", ".join(self.defaults[start:])
            self.lines.append(f"{self.defaults_name}.extend(({defaults},))")
        self.lines += [*chunk, ""]
        self.written.add(entry.handle)

    def _write_class(self, entry: Entry, visiting: set[str]) -> None:
        if entry.handle in self.written or entry.handle in visiting:
            return
        visiting.add(entry.handle)
        owner = entry.cls or ClassRecord(entry.name, entry.defined_in, (), {})
        for base in self._bases(entry, owner):
            if base.defined_in == self.module:
                self._write_class(base, visiting)
        start = len(self.defaults)
        self._emit(entry, self._class(entry), start)

    def _write_function(self, entry: Entry) -> None:
        start = len(self.defaults)
        func = entry.function
        if func is None:
            chunk = [
                f"def {entry.name}(*args, **kwargs):",
                f"    _fi_runtime._kit(_fi_token)._record({entry.name!r}, "
                "{'args': args, 'kwargs': kwargs}, "
                "{'args': 'VAR_POSITIONAL', 'kwargs': 'VAR_KEYWORD'})",
                "    return None",
            ]
        else:
            body = function_body(entry, func)
            first = func.parameters[0].name if func.parameters else None
            bound = first if entry.takes_self else None
            chunk = self.function(func, entry.name, body, "", name=entry.name, bound=bound)
        self._emit(entry, chunk, start)

    def _lazy_bindings(self) -> list[str]:
        """A module ``__getattr__`` binding, on first access, each name this module binds
        lazily (:attr:`_Entry.lazy`, :attr:`_Plan.lazy`) and does not bind already, running
        the later part for a name of it, and serving what the release's ``__getattr__``
        serves (:attr:`_Outline.served`); for a module the recorder could not read, raising
        a clear error for every name."""
        outline = self.outline
        lazy: dict[str, tuple[str, str | None]] = dict(self.plan.lazy)
        eager: list[str] = []
        for entry in self.registry.in_module(self.module):
            bound = entry.bindings.get(self.module, set())
            for public in sorted(entry.lazy.get(self.module, set()) - bound):
                if entry.unmodelled is not None:
                    self.unmodelled[public] = entry.unmodelled
                elif entry.defined_in == self.module:
                    if public != entry.name:
                        eager.append(f"{public} = {entry.name}")
                else:
                    lazy[public] = (entry.defined_in, entry.name)
        modules = self.registry.module_names.get(self.module, {})
        for name, target in sorted(self.registry.lazy_module_names.get(self.module, {}).items()):
            if name not in modules and not self.module.startswith(target):
                lazy.setdefault(name, (target, None))
        served = outline.served
        later = sorted(self.hidden)
        if (
            not lazy
            and not later
            and not outline.getattr
            and outline.unreadable is None
            and not self.unmodelled
            and not self.outside
        ):
            return eager
        listed = f", *{served!r}" if isinstance(served, tuple) else ""
        listed += ", *_fi_later" if later else ""
        arguments = "__name__, globals(), _fi_lazy, name"
        if served is not None or outline.unreadable is not None:
            arguments += f", _fi_token, {served!r}, {outline.unreadable!r}"
        return [
            *eager,
            *([f"_fi_later = frozenset({later!r})"] if later else []),
            f"_fi_lazy = {dict(sorted(lazy.items()))!r}",
            "",
            "",
            "def __getattr__(name):",
            f"    return _fi_runtime._lazy({arguments})",
            "",
            "",
            "def __dir__():",
            f"    return sorted({{*globals(), *_fi_lazy{listed}}})",
        ]

    def _shadowed(self) -> set[str]:
        """The names this package binds to something other than its submodule of the same
        name (``flashinfer.cute_dsl.add_rmsnorm_fp4quant``, the function)."""
        children = self.modules.children.get(self.module, set()) if self.modules else set()
        if not children:
            return set()
        submodules = set(self.outline.submodules)
        for table in (self.registry.lazy_module_names, self.registry.module_names):
            for name, target in table.get(self.module, {}).items():
                if target == f"{self.module}.{name}":
                    submodules.add(name)
        bound = set(self.local) | set(self.outline.names)
        for table in (self.registry.lazy_module_names, self.registry.module_names):
            bound |= set(table.get(self.module, {}))
        return (bound & children) - submodules

    def _objects(self, here: Sequence[Entry]) -> None:
        """Write the objects of ``here``: enums, classes (bases first), functions, values."""
        for entry in here:  # enums first: defaults may name their members
            if enum_base_of(entry) is not None:
                self._emit(entry, self._class(entry), len(self.defaults))
        for entry in here:
            if entry.kind in ("class", "enum") and enum_base_of(entry) is None:
                self._write_class(entry, set())
        for entry in here:
            if entry.kind == "function":
                self._write_function(entry)
            elif entry.kind == "value" and entry.literal is not None:
                self.lines += [f"{entry.name} = {entry.literal}", ""]
            elif entry.kind == "value" and entry.unmodelled is None:
                self.outside = True
                self.lines += [
                    f"_fi_runtime._bind_outside(globals(), {entry.name!r}, "
                    f"{entry.outside!r}, {entry.outside_module!r})",
                    "",
                ]

    def later_source(self) -> str:
        """The module's later part (a writer made with ``later=True``): :attr:`plan`'s
        objects and aliases, run in the module's namespace on first access to one of them
        (see :func:`fi_compat.testing._runtime._lazy`)."""
        self._objects(self.plan.defined)
        aliases = [f"{name} = {own}" for name, own in sorted(self.plan.aliases.items())]
        lazy = dict(sorted(self.plan.lazy.items()))
        unmodelled = dict(sorted(self.plan.unmodelled.items()))
        lines = [
            "# Generated by fi_compat.testing: the rest of the module in the file beside it.",
            "from __future__ import annotations",
            "",
            f"{self.defaults_name} = []",
            *self.imports.values(),
            "",
            *self.lines,
            *aliases,
            *([f"_fi_lazy.update({lazy!r})"] if lazy else []),
            *(
                [f"globals().setdefault('_fi_unmodelled', {{}}).update({unmodelled!r})"]
                if unmodelled
                else []
            ),
        ]
        if not self.outline.annotations:
            lines.append("del annotations")
        return "\n".join(lines) + "\n"

    def source(self, head: Sequence[str]) -> str:
        """The module's source: ``head`` (header lines), then its objects and bindings (with
        ``defer``, :attr:`plan`'s objects only in its later part)."""
        relevant = self.registry.in_module(self.module)
        here = [e for e in relevant if e.defined_in == self.module]
        self._objects(here if self.defer else [*here, *self.plan.defined])
        bindings: list[str] = []
        for entry in relevant:
            for public in sorted(entry.bindings.get(self.module, ())):
                if entry.unmodelled is not None:
                    self.unmodelled[public] = entry.unmodelled
                elif entry.defined_in == self.module:
                    if public != entry.name:
                        bindings.append(f"{public} = {entry.name}")
                else:
                    self.outside = self.outside or entry.outside is not None
                    # Bound once the defining module has run (import cycles are fine).
                    bindings.append(
                        f"_fi_runtime._bind(_fi_token, globals(), {entry.defined_in!r}, "
                        f"{entry.name!r}, {public!r})"
                    )
        for name, target in sorted(self.registry.module_names.get(self.module, {}).items()):
            if not self.module.startswith(target):  # not the module itself or a parent
                bindings.append(f"import {target} as {name}")
        if not self.defer:
            bindings += [f"{name} = {own}" for name, own in sorted(self.plan.aliases.items())]
            self.unmodelled.update(self.plan.unmodelled)
        if self.outline.version is not None and self.module != FLASHINFER:
            bindings.append(f"__version__ = {self.outline.version!r}")
        if self.outline.all_names is not None:
            bindings.append(f"__all__ = {list(self.outline.all_names)!r}")
        lazy_bindings = self._lazy_bindings()  # adds the unmodelled names it leaves unbound
        if self.unmodelled:
            bindings.append(f"_fi_unmodelled = {dict(sorted(self.unmodelled.items()))!r}")
        bindings += lazy_bindings
        shadowed = self._shadowed()
        if shadowed:
            # Importing such a submodule later must not rebind the name (see _runtime._package).
            bindings.append(f"_fi_runtime._package(__name__, {sorted(shadowed)!r})")
        lines = [*head, "import enum as _fi_enum", "", "_fi_defaults = []"]
        lines += [*self.imports.values(), "", *self.lines, *bindings]
        if not self.outline.annotations:
            # The __future__ import binds "annotations", which this module does not bind.
            lines.append("del annotations")
        lines.append("_fi_runtime._loaded(_fi_token, __name__, globals())")
        return "\n".join(lines) + "\n"


def _header(directory: str) -> list[str]:
    return [
        "# Generated by fi_compat.testing from recorded flashinfer-python signatures.",
        "from __future__ import annotations",
        "",
        "import fi_compat.testing._runtime as _fi_runtime",
        "",
        f"_fi_token = _fi_runtime._token({directory!r})",
    ]


def module_names(record: ReleaseRecord, registry: Registry, *, cuda_runtime: bool) -> set[str]:
    """Every module of the fake package: every module the release records, those the
    registry's objects are defined or bound in, parent packages included (and the module
    whose ``cudart`` asserts, in a process imitated without a loaded CUDA runtime)."""
    modules = {FLASHINFER} | ({COMM} if record.comm_exists else set())
    modules |= {name for name in record.names if inside(name)}
    if record.comm_exists and not cuda_runtime:
        modules.add(CUDART_MODULE)
    for entry in registry.entries.values():
        modules |= {entry.defined_in, *entry.bindings, *entry.lazy}
    for table in (registry.module_names, registry.lazy_module_names):
        for module, names in table.items():
            modules |= {module, *names.values()}
    if not record.comm_exists:
        modules = {name for name in modules if name != COMM and not name.startswith(COMM + ".")}
    for name in list(modules):
        parts = name.split(".")
        modules |= {".".join(parts[:index]) for index in range(1, len(parts))}
    return modules


def module_source(
    record: ReleaseRecord,
    registry: Registry,
    directory: str,
    name: str,
    *,
    cuda_runtime: bool,
    planned: frozenset[str] = frozenset(),
    modules: Modules | None = None,
    defer: bool = False,
) -> str:
    """The source text of one module of the fake package (one of :func:`_module_names`);
    ``modules``, the build's reading of the recorded modules (made here when not given),
    says what the module binds beyond the registry. With ``defer`` (a module the registry
    models part of, which a fake may import on entry, and whose other names most tests never
    touch), those names are bound by its later part (:func:`_later_source`), run on first
    access to one of them: entering a fake then runs only what the registry models."""
    if modules is None:
        names = module_names(record, registry, cuda_runtime=cuda_runtime)
        modules = Modules(record, registry, frozenset(names))
    cudart = name == CUDART_MODULE and record.comm_exists and not cuda_runtime
    head = _header(directory)
    if name in planned:
        head.append(f"_fi_runtime._raise_planned(_fi_token, {name!r})")
    if name == COMM and not cuda_runtime and record.comm_exists:
        head.append(f"from {CUDART_MODULE} import cudart as cudart")
    if name == FLASHINFER:
        head.append(f"__version__ = {record.release!r}")
    # The imitated cudart below replaces the module's own: all of that module runs at import.
    source = _Writer(registry, name, modules, defer=defer and not cudart).source(head)
    if cudart:
        source += (
            "\n".join(
                [
                    "",
                    "",
                    "class CudaRTLibrary:",
                    "    def __init__(self, so_file=None):",
                    "        if so_file is None:",
                    "            so_file = None  # no libcudart mapped into this process",
                    f"            assert so_file is not None, {CUDART_MESSAGE!r}",
                    "",
                    "",
                    "cudart = CudaRTLibrary()",
                ]
            )
            + "\n"
        )
    return source


def later_source_of(registry: Registry, name: str, modules: Modules) -> str:
    """The later part of module ``name`` written with ``defer`` (see :func:`_module_source`
    and :meth:`_Writer.later_source`)."""
    return _Writer(registry, name, modules, later=True).later_source()
