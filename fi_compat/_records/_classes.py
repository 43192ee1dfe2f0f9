"""The typed records of one recorded flashinfer-python release: what the loader returns.

Each record class is frozen; :class:`ReleaseRecord` answers questions about a release
(which names it has, what a callable accepts) from its tables. The loader in
:mod:`fi_compat._records` builds them from the shipped files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from packaging.version import Version

from fi_compat._arguments import require_choice, require_str
from fi_compat._deprecation import renamed_attribute
from fi_compat._frozen import picklable
from fi_compat._records._format import ParameterKind
from fi_compat._signature import Status
from fi_compat._surface import (
    ATTENTION_FAMILIES,
    FAST_DECODE_PLAN,
    GATES,
    TORCH_DIST_BACKEND,
    symbol_named,
)

if TYPE_CHECKING:  # the store's module imports this one
    from fi_compat._records._store import ModuleRecord

#: What a public name of a module is bound to: a ``def``; a class used for its constants
#: (``"enum"``: derived from a class of :mod:`enum`, or a plain class of constants such as
#: ``AllReduceFusionPattern``, as :mod:`fi_compat._surface` means the word); any other
#: ``"class"``; a module; or anything else (``"value"``: a constant, an instance, or a name
#: imported from outside the release, whose kind its source does not tell).
NameKind = Literal["function", "class", "enum", "module", "value"]
_PROPERTY_DECORATORS = frozenset({"property", "cached_property", "functools.cached_property"})

_KEYWORD_KINDS = ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")
_R = TypeVar("_R")
_MAX_FORWARDS = 4


@picklable
@dataclass(frozen=True)
class ParameterRecord:
    """One parameter as written in the release's ``def``.

    ``default`` and ``annotation`` are source text (``ast.unparse``), None when absent.

    .. versionadded:: 0.2.0
    """

    name: str
    kind: ParameterKind
    default: str | None = None
    annotation: str | None = None

    @property
    def has_default(self) -> bool:
        """True when the parameter has a default value."""
        return self.default is not None

    @property
    def accepts_keyword(self) -> bool:
        """True when the parameter can be passed by keyword."""
        return self.kind in _KEYWORD_KINDS


@picklable
@dataclass(frozen=True)
class KeptArgument:
    """What a planning method keeps on its object: ``self.<attribute> = <parameter>``.

    Recorded for ``plan``, ``begin_forward``, ``_plan_impl`` and ``fast_decode_plan`` where
    the attribute is assigned from that parameter and nothing else (vLLM's forward reads
    ``_window_left``, ``_logits_soft_cap``, ``_sm_scale`` and ``_causal`` back).
    ``when_none`` is the literal (source text) the method puts in place of a None argument
    (``if logits_soft_cap is None: logits_soft_cap = 0.0``); ``none_computed`` is true when
    it computes that value from other arguments instead. Recorded from fi-compat 0.3.0 on.

    .. versionadded:: 0.3.0
    """

    attribute: str
    parameter: str
    when_none: str | None = None
    none_computed: bool = False


@picklable
@dataclass(frozen=True)
class FunctionRecord:
    """The recorded ``def`` of one function or method.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    qualname
        ``"allreduce_fusion"`` or ``"BatchDecodeWithPagedKVCacheWrapper.plan"``.
    defined_in
        Module that holds the ``def`` (``"flashinfer.comm.allreduce"``).
    decorators
        Decorator expressions as source text, outermost first.
    parameters
        Parameters in order, ``self`` included for methods.
    returns
        The return annotation as source text, or None.
    forwards_kwargs_to
        Where a ``**kwargs`` is provably splatted: a method name of the same class
        (``"_plan_impl"``) or a callable's source text; None when there is no forward the
        analysis can prove (:mod:`fi_compat._forwarding`, the same one the live probe uses).
    forwards_kwargs_drops
        Keywords that may be dropped, replaced or rejected on the way to
        :attr:`forwards_kwargs_to` (``("*",)``: any keyword). Absent from the JSON when
        empty, so files recorded before this field existed read as "none dropped"; that
        holds for every recorded release (checked by re-running the recorder on their
        sources).
    returns_attribute
        For a method whose body is ``return self.<name>`` (a docstring aside): that name
        (``is_cuda_graph_enabled`` returns ``_use_cuda_graph``); None otherwise. Recorded
        from fi-compat 0.3.0 on.
    keeps
        For a planning method (``plan``, ``begin_forward``, ``_plan_impl``,
        ``fast_decode_plan``): the arguments it keeps on its object, by attribute
        (:class:`KeptArgument`); empty for every other function.
    """

    qualname: str
    defined_in: str
    decorators: tuple[str, ...]
    parameters: tuple[ParameterRecord, ...]
    returns: str | None = None
    forwards_kwargs_to: str | None = None
    forwards_kwargs_drops: tuple[str, ...] = ()
    returns_attribute: str | None = None
    keeps: tuple[KeptArgument, ...] = ()

    def drops(self, keyword: str) -> bool:
        """True when ``keyword`` may not survive the ``**kwargs`` forward unchanged."""
        return keyword in self.forwards_kwargs_drops or "*" in self.forwards_kwargs_drops

    @property
    def name(self) -> str:
        """The last part of :attr:`qualname`."""
        return self.qualname.rpartition(".")[2]

    @property
    def is_property(self) -> bool:
        """True for the getter of a ``@property`` (or ``@cached_property``) of a class."""
        return any(decorator in _PROPERTY_DECORATORS for decorator in self.decorators)

    def parameter(self, name: str) -> ParameterRecord | None:
        """The parameter called ``name``, or None."""
        return next((p for p in self.parameters if p.name == name), None)

    @property
    def keyword_names(self) -> tuple[str, ...]:
        """Names that can be passed by keyword, in order."""
        return tuple(p.name for p in self.parameters if p.accepts_keyword)

    @property
    def var_keyword(self) -> str | None:
        """The name of the ``**kwargs`` parameter, or None."""
        return next((p.name for p in self.parameters if p.kind == "VAR_KEYWORD"), None)


@picklable
@dataclass(frozen=True)
class ClassRecord:
    """A recorded class: where it is defined, its methods and its instance attributes.

    ``methods`` maps each recorded method name to its record, or None when the class (and
    its bases) do not define it: ``__init__`` and the methods fi-compat reads for the
    classes of ``comm.classes`` and the attention wrappers, ``__init__`` and every public
    method (properties included, see :attr:`FunctionRecord.is_property`) for a class of a
    :meth:`ReleaseRecord.public_names` table. ``attributes`` are the names an instance gets
    by construction (sorted; empty in files recorded before schema 2): those assigned as
    ``self.<name>`` in the ``__init__`` the class runs, in the methods that ``__init__``
    calls on ``self``, and along the ``super().__init__`` chain, plus a dataclass's fields.
    ``module`` is where the class was looked up (only for ``TorchDistBackend``);
    ``plan_forwards_to`` only for attention wrappers and families; ``bcast_root_is_group_local``
    only for ``TorchDistBackend``; ``exported`` only for the workspace classes (False for a
    concrete class the factory builds but ``flashinfer.comm`` does not export);
    ``family_bases`` only for attention families (:meth:`ReleaseRecord.attention_family`):
    its direct base classes that are attention families too, by family name
    (``CUDAGraphBatchDecodeWithPagedKVCacheWrapper`` -> the decode wrapper). ``has_getattr``
    is true where the class body defines ``__getattr__``: an instance hands out names the
    record does not list; ``delegates_to`` names the release's class whose names it hands out
    where the records can tell (0.7.x's ``flashinfer.comm.cuda_ipc.cudart``, a lazy proxy of a
    ``CudaRTLibrary``). Both recorded from fi-compat 0.3.0 on.

    ``aliases`` (attention families only) maps a method the class binds by a class-body
    alias to the method it names (``{"begin_forward": "plan"}``: the class attribute is that
    very function); ``methods`` lists the alias too, with the named method's record (whose
    :attr:`FunctionRecord.name` is therefore not its key).

    .. versionadded:: 0.2.0
    """

    name: str
    defined_in: str
    bases: tuple[str, ...]
    methods: Mapping[str, FunctionRecord | None]
    module: str | None = None
    plan_forwards_to: str | None = None
    bcast_root_is_group_local: bool | None = None
    exported: bool | None = None
    attributes: tuple[str, ...] = ()
    family_bases: tuple[str, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    has_getattr: bool = False
    delegates_to: str | None = None

    def method(self, name: str) -> FunctionRecord | None:
        """The recorded method ``name``, or None."""
        return self.methods.get(name)


@picklable
@dataclass(frozen=True)
class EnumRecord:
    """A constant-holder class such as ``AllReduceFusionPattern`` and its members.

    .. versionadded:: 0.2.0
    """

    name: str
    defined_in: str
    members: Mapping[str, Any]


@picklable
@dataclass(frozen=True)
class NameRecord:
    """One public name of a module as ``import`` binds it (:meth:`ReleaseRecord.public_names`).

    .. versionadded:: 0.2.0

    Attributes
    ----------
    name
        The name in the module's namespace (``"MoeAlltoAll"``).
    kind
        See :data:`NameKind`.
    defined_in
        The module whose ``def``, ``class`` or assignment binds it, re-exports followed
        (``"flashinfer.comm.trtllm_moe_alltoall"``); for a module, its own dotted name; for
        a name imported from outside the release, the module it is imported from; None
        when the release binds the name in a way its source does not show.
    function
        For a function: its recorded ``def``.
    cls
        For a class or an enum: its record, with ``__init__`` and every public method.
    enum
        For an enum: its members with their values (source text when not a literal).
    conditional
        The release binds the name only when a guarded statement succeeds: every binding
        of it, there or along the imports that bring it, sits in an ``if``, ``try`` or
        ``with`` (0.7.x's CuTe DSL MoE APIs, re-exported under
        ``contextlib.suppress(ImportError)``, are absent where the CuTe DSL does not import).
        Recorded from fi-compat 0.3.0 on.
    instance_of
        For a value built at import from one of the release's classes (``cudart =
        CudaRTLibrary()``): that class's dotted path where it is defined. Recorded from
        fi-compat 0.3.0 on.
    literal
        For a value the release assigns: what it is once the module is imported, as Python
        source :func:`ast.literal_eval` reads (``"{}"`` for ``flashinfer.utils._cache_buf``,
        ``"(9, 10, 11, 12)"``), where the source tells it. Recorded from fi-compat 0.3.0 on.
    opaque
        For a value the release assigns whose value the source cannot tell: why
        (``"computed at import"``, ``"bound by several statements"``, ``"bound in an if,
        try or with"``, ``"changed at import after it is bound"``, ``"too large to keep"``).
        Recorded from fi-compat 0.3.0 on.
    """

    name: str
    kind: NameKind
    defined_in: str | None
    function: FunctionRecord | None
    cls: ClassRecord | None
    enum: EnumRecord | None = None
    conditional: bool = False
    instance_of: str | None = None
    literal: str | None = None
    opaque: str | None = None


@picklable
@dataclass(frozen=True)
class HazardRecord:
    """A recorded import hazard of one release: whether it is present, and the evidence.

    ``evidence`` is the ``file:line`` that shows it. The hazards fi-compat warns about are
    :class:`fi_compat.hazards.Hazard`.

    .. versionadded:: 0.3.0
       Named ``Hazard`` in 0.2.0 (that name still works, with a ``DeprecationWarning``).
    """

    value: bool
    evidence: str | None
    #: For a hazard that depends on the Python version: the first Python it does not hold
    #: on (``"3.12"``); None for one that holds on every Python.
    python: str | None = None


@picklable
@dataclass(frozen=True)
class ReleaseRecord:
    """Everything recorded about one flashinfer-python release.

    Use :meth:`function` / :meth:`accepts` / :meth:`support` with a qualified name:
    ``"create_allreduce_fusion_workspace"`` (a ``flashinfer.comm`` function),
    ``"BatchDecodeWithPagedKVCacheWrapper.plan"`` (an attention wrapper method) or
    ``"TorchDistBackend.bcast"`` / ``"AllReduceFusionWorkspace.destroy"`` (comm classes);
    a method of an attention family (:meth:`attention_family`) is found the same way
    (``"BatchMLAPagedAttentionWrapper.plan"``).

    .. versionadded:: 0.2.0
    """

    release: str
    source_filename: str
    source_sha256: str | None
    comm_requires_cuda_runtime: HazardRecord
    import_queries_gpu: HazardRecord
    comm_requires_triton: HazardRecord
    comm_exists: bool
    comm_functions: Mapping[str, FunctionRecord | None]
    comm_enums: Mapping[str, EnumRecord | None]
    comm_classes: Mapping[str, ClassRecord | None]
    workspace_classes: tuple[str, ...]
    attention: Mapping[str, ClassRecord | None]
    names: Mapping[str, Mapping[str, NameRecord]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    decode_functions: Mapping[str, FunctionRecord | None] = field(
        default_factory=lambda: MappingProxyType({})
    )
    families: Mapping[str, ClassRecord | None] = field(default_factory=lambda: MappingProxyType({}))
    #: ``import flashinfer.comm`` raises below a Python version (0.6.16 to 0.6.16.post3:
    #: ``TypeError`` below 3.12); recorded from fi-compat 0.3.0 on.
    comm_requires_python: HazardRecord = HazardRecord(False, None)

    @property
    def version(self) -> Version:
        """The release as a :class:`packaging.version.Version`."""
        return Version(self.release)

    def comm_function(self, name: str) -> FunctionRecord | None:
        """``flashinfer.comm.<name>``, or None when the release does not export it.

        ``name`` is a FlashInfer name or a symbol key of :mod:`fi_compat._surface`; a key
        finds the symbol under whichever of its names the release has.
        """
        return _first_of(self.comm_functions, name)

    def comm_class(self, name: str) -> ClassRecord | None:
        """A recorded ``flashinfer.comm`` class (``TorchDistBackend`` included), or None."""
        return _first_of(self.comm_classes, name)

    def wrapper(self, name: str) -> ClassRecord | None:
        """A recorded attention wrapper exported from ``flashinfer``, or None."""
        return _first_of(self.attention, name)

    @property
    def attention_families(self) -> tuple[str, ...]:
        """The classes of :data:`~fi_compat._surface.ATTENTION_FAMILIES` top-level
        ``flashinfer`` exports in this release, in that order (empty in files recorded
        before families were)."""
        return tuple(name for name in ATTENTION_FAMILIES if self.families.get(name) is not None)

    def attention_family(self, name: str) -> ClassRecord | None:
        """The attention family ``name`` (a class name of
        :data:`~fi_compat._surface.ATTENTION_FAMILIES`) as the release defines it, or None.

        Its record holds ``__init__``, ``plan``, ``begin_forward``, ``run``, ``forward`` and
        ``_plan_impl`` (None where absent; aliases see :attr:`ClassRecord.aliases`), its
        instance attributes, ``plan_forwards_to`` and ``family_bases``.

        Raises
        ------
        InvalidArgumentError
            ``name`` is not a str.
        """
        require_str("name", name, fix="pass a class name of ATTENTION_FAMILIES")
        return self.families.get(name)

    def public_names(self, module: str) -> Mapping[str, NameRecord]:
        """Every public name ``import <module>`` binds in this release, by name.

        Parameters
        ----------
        module
            A module's dotted name: any module of the release (``flashinfer.fused_moe``,
            ``flashinfer.comm.mapping``; every module is recorded from fi-compat 0.3.0 on,
            the seven of :data:`fi_compat._surface.NAMED_MODULES` before).

        Returns
        -------
        Mapping
            Name -> :class:`NameRecord`, names without a leading ``_``; empty when the
            release has no such module. Names served only by a module ``__getattr__`` are
            not bound at import, so not listed (:meth:`module` tells them).

        Raises
        ------
        InvalidArgumentError
            ``module`` is not a non-empty str.
        """
        require_str("module", module, nonempty=True)
        table = self.names.get(module)
        return _NO_NAMES if table is None else _Public(table)

    def module(self, module: str) -> ModuleRecord | None:
        """Everything recorded of ``module`` in this release (private names, ``__all__``,
        what its ``__getattr__`` serves, whether it could be read), or None when the
        release has no such module.

        .. versionadded:: 0.3.0

        Raises
        ------
        InvalidArgumentError
            ``module`` is not a non-empty str.
        """
        require_str("module", module, nonempty=True)
        from fi_compat._records._store import ModuleRecord, module_record  # on first use

        found = module_record(self.release, module)  # None outside the store
        if found is not None:
            return found
        table = self.names.get(module)
        if table is None:
            return None
        return ModuleRecord(module, self.release, table)

    @property
    def fast_decode_plan(self) -> FunctionRecord | None:
        """``flashinfer.decode.fast_decode_plan`` (0.4.0+), or None when the release lacks it."""
        found = (self.decode_functions.get(name) for name in FAST_DECODE_PLAN.names)
        return next((record for record in found if record is not None), None)

    @property
    def torch_dist_backend(self) -> ClassRecord | None:
        """The torch.distributed backend class (its ``module`` says where), or None."""
        return self.comm_class(TORCH_DIST_BACKEND.key)

    def has(self, gate: str) -> bool:
        """Whether the release has what the gate ``gate`` of :data:`~fi_compat._surface.GATES`
        stands for: every one of its items present (or its keyword accepted), or, for a
        change in import behaviour, the hazard it removed absent."""
        require_choice("gate", gate, tuple(GATES))
        entry = GATES[gate]
        if entry.hazard is not None:
            hazard: HazardRecord = getattr(self, entry.hazard)
            return not hazard.value
        return all(
            self.function(owner) is not None if keyword is None else self.accepts(owner, keyword)
            for owner, keyword in entry.items
        )

    @property
    def unified_api(self) -> bool:
        """The unified allreduce-fusion API's factory and call both exported."""
        return self.has("unified_api")

    @property
    def legacy_api(self) -> bool:
        """The legacy TRT-LLM IPC allreduce-fusion API's factory and call both exported."""
        return self.has("legacy_api")

    def _owner(self, qualname: str) -> tuple[ClassRecord | None, FunctionRecord | None]:
        require_str("qualname", qualname, fix="pass a name such as 'Wrapper.plan'")
        owner_name, _, method = qualname.rpartition(".")
        if not owner_name:
            return None, self.comm_function(method)
        owner_name = owner_name.rpartition(".")[2]
        owner = (
            self.wrapper(owner_name) or self.comm_class(owner_name) or self.families.get(owner_name)
        )
        if owner is None:
            return None, None
        return owner, owner.method(method)

    def function(self, qualname: str) -> FunctionRecord | None:
        """The record named by ``qualname`` (see the class docstring), or None."""
        return self._owner(qualname)[1]

    def acceptance(self, qualname: str, keyword: str) -> Status:
        """Does ``qualname`` accept ``keyword``, following ``**kwargs`` forwards?

        :attr:`~fi_compat.Status.SUPPORTED` when the callable (or a method its
        ``**kwargs`` is provably forwarded to) declares the keyword;
        :attr:`~fi_compat.Status.UNKNOWN` when it takes ``**kwargs`` whose destination is
        not a recorded method, or the forward may drop the keyword;
        :attr:`~fi_compat.Status.UNSUPPORTED` otherwise, including when the callable is
        absent. The same answers as :func:`fi_compat._signature.inspect_callable` on the
        live release. Each member is a ``str`` equal to its value (``"supported"``, ...),
        the plain string ``support``, this method's name before fi-compat 0.3.0, returned;
        ``support`` still answers, with a ``DeprecationWarning``, until 0.4.0.

        .. versionadded:: 0.3.0

        Raises
        ------
        InvalidArgumentError
            ``qualname`` or ``keyword`` is not a str.
        """
        require_str("keyword", keyword)
        owner, func = self._owner(qualname)
        return keyword_acceptance(func, keyword, owner.method if owner is not None else None)

    support = renamed_attribute("acceptance", until="0.4.0")
    """Deprecated since fi-compat 0.3.0, goes in 0.4.0: :meth:`acceptance`."""

    def accepts(self, qualname: str, keyword: str) -> bool:
        """True when :meth:`acceptance` is ``SUPPORTED`` (``UNKNOWN`` is not acceptance)."""
        return self.acceptance(qualname, keyword) is Status.SUPPORTED


def keyword_acceptance(
    function: FunctionRecord | None,
    keyword: str,
    method: Callable[[str], FunctionRecord | None] | None,
) -> Status:
    """The one walk of "does this callable accept ``keyword``": ``SUPPORTED`` when
    ``function`` declares it (by keyword), or forwards its ``**kwargs`` to a method
    (``method(name)``: the owner's method of that name, None without one) that does;
    ``UNKNOWN`` when ``**kwargs`` goes where no record follows, or the forward may drop
    the keyword; ``UNSUPPORTED`` otherwise, ``function`` None included. At most
    :data:`_MAX_FORWARDS` forwards are followed. :meth:`ReleaseRecord.acceptance` and the
    upgrade preview's facts both answer with it."""
    for _ in range(_MAX_FORWARDS + 1):
        if function is None:
            return Status.UNSUPPORTED
        if keyword in function.keyword_names:
            return Status.SUPPORTED
        if function.var_keyword is None:
            return Status.UNSUPPORTED
        target = function.forwards_kwargs_to
        following = method(target) if method is not None and target is not None else None
        if following is None or function.drops(keyword):
            return Status.UNKNOWN
        function = following
    return Status.UNKNOWN


_NO_NAMES: Mapping[str, NameRecord] = MappingProxyType({})


class _Public(Mapping[str, NameRecord]):
    """The names of a module's table without a leading ``_`` (a view: nothing is copied)."""

    def __init__(self, table: Mapping[str, NameRecord]) -> None:
        self._table = table

    def __getitem__(self, name: str) -> NameRecord:
        if name.startswith("_"):
            raise KeyError(name)
        return self._table[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and not name.startswith("_") and name in self._table

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._table if not name.startswith("_"))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]


def _first_of(table: Mapping[str, _R | None], name: str) -> _R | None:
    """``table[name]``, or the entry of the first name of the symbol ``name`` stands for."""
    found = table.get(name)
    if found is not None:
        return found
    symbol = symbol_named(name)
    if symbol is None:
        return None
    for alias in symbol.names:
        found = table.get(alias)
        if found is not None:
            return found
    return None
