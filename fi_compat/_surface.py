"""FlashInfer's Python surface as fi-compat knows it: the one table of names and releases.

Every FlashInfer module, function, class, method and keyword that fi-compat looks at is
declared here, once, with where it has lived in which release and the release of each
change fi-compat relies on. Everything else reads this table: the probe
(:mod:`fi_compat.capabilities`), the report and its ``--require`` names, the hazards, the
allreduce-fusion facade, the recorded-release loader, the fake FlashInfer, the
compatibility table and the recorder. No other module spells a FlashInfer name (a test
checks that), so a change in FlashInfer is a change here:

* a new keyword worth probing goes into a :class:`Symbol`'s ``keywords`` (or a class's
  ``methods``), with a :class:`Gate` that says which release brought it;
* a rename or a move adds a :class:`Home` in front of the symbol's ``homes``: the probe,
  the facade, the loader and the recorder look a symbol up under each of its homes,
  newest first, and report it under its ``key``, which never changes.

The release numbers are never compared against the installed version to decide anything
(fi-compat detects every capability from the installed code); they say in messages which
release changed a thing, and a test checks each gate against every recorded release.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

__all__ = [
    "ALL_SYMBOLS",
    "ATTENTION_FAMILIES",
    "ATTENTION_MODULES",
    "COMM",
    "COMM_NAMED_MODULES",
    "COMM_SYMBOLS",
    "CUDART_MODULE",
    "DECODE",
    "DECODE_FUNCTIONS",
    "DECODE_MODULE",
    "DISTRIBUTIONS",
    "FAST_DECODE_PLAN",
    "FLASHINFER",
    "GATES",
    "IMPORT_HAZARDS",
    "INIT",
    "INIT_KEYWORDS",
    "LEGACY_DESTROY",
    "LEGACY_FACTORY",
    "LEGACY_FUSION",
    "MNNVL_MODULE",
    "NAMED_MODULES",
    "PATTERN",
    "PLAN",
    "PLAN_IMPL",
    "PREFILL_PAGED",
    "PREFILL_RAGGED",
    "RESIDUAL_RMSNORM",
    "SPLIT_KEYWORDS",
    "SYMMETRIC_HANDLE",
    "TORCH_DIST_BACKEND",
    "TRTLLM_MODULE_LOADER",
    "TRTLLM_WORKSPACE",
    "UNIFIED_FACTORY",
    "UNIFIED_FUSION",
    "WORKSPACE",
    "WRAPPER_SYMBOLS",
    "Gate",
    "Home",
    "ImportHazard",
    "Item",
    "Symbol",
    "symbol_named",
]

#: The top-level package and its communication package.
FLASHINFER = "flashinfer"
COMM = "flashinfer.comm"
#: Where releases up to 0.6.13 keep the CUDA runtime handle whose creation asserts on
#: ``import flashinfer.comm`` in a process without a loaded libcudart.
CUDART_MODULE = f"{COMM}.cuda_ipc"
#: The multi-node NVLink submodule of ``flashinfer.comm`` (home of ``TorchDistBackend`` in
#: 0.6.0 .. 0.6.15.post1, and of ``MnnvlConfig``, ``McastGPUBuffer``, ... that engines use).
MNNVL_MODULE = f"{COMM}.mnnvl"
#: The module of the decode wrapper and of ``fast_decode_plan``.
DECODE_MODULE = f"{FLASHINFER}.decode"
#: The modules each recorded release lists every public name of, with its kind, where it is
#: defined and its signature: engines use far more of them than the symbols below, and
#: fi-compat says which release brought a name the installed one lacks.
COMM_NAMED_MODULES: tuple[str, ...] = (COMM, MNNVL_MODULE)
#: The modules engines' FlashInfer attention backends import names from: SGLang 0.5.23's
#: ``srt/layers/attention/flashinfer_backend.py`` (``flashinfer``, ``flashinfer.cascade``,
#: ``flashinfer.decode``) and vLLM 0.33.0's ``v1/attention/backends/flashinfer.py``
#: (``flashinfer``, ``flashinfer.decode``, ``flashinfer.prefill``, ``flashinfer.utils``).
#: Recorded like the communication modules, so the fake binds every public name of them.
ATTENTION_MODULES: tuple[str, ...] = (
    FLASHINFER,
    f"{FLASHINFER}.cascade",
    DECODE_MODULE,
    f"{FLASHINFER}.prefill",
    f"{FLASHINFER}.utils",
)
NAMED_MODULES: tuple[str, ...] = (*COMM_NAMED_MODULES, *ATTENTION_MODULES)
#: The distributions FlashInfer's Python package has been published as, newest first.
DISTRIBUTIONS: tuple[str, ...] = ("flashinfer-python", "flashinfer")

Kind = Literal["function", "class", "enum"]


@dataclass(frozen=True)
class Home:
    """One place a symbol has lived: ``<module>.<name>``, from release ``introduced_in`` on."""

    module: str
    name: str
    introduced_in: str

    @property
    def dotted(self) -> str:
        """``"<module>.<name>"``."""
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class Symbol:
    """One FlashInfer function, class or constant holder that fi-compat uses.

    Attributes
    ----------
    key
        fi-compat's name for it: the name reports, ``--require`` and recorded data use.
        It is the FlashInfer name the symbol was first known by, and stays when FlashInfer
        renames or moves it.
    kind
        ``"function"``, ``"class"`` or ``"enum"`` (a class used for its constants).
    homes
        Where it has lived, newest first. Lookups try each in turn; the first present wins.
    keywords
        Keywords the probe answers for on a function (none: looked up, not probed).
    methods
        For a class: each method the probe reads, with the keywords it answers for.
    """

    key: str
    kind: Kind
    homes: tuple[Home, ...]
    keywords: tuple[str, ...] = ()
    methods: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def module(self) -> str:
        """The module of its newest home."""
        return self.homes[0].module

    @property
    def names(self) -> tuple[str, ...]:
        """Every name it has had, newest first, each once."""
        return tuple(dict.fromkeys(home.name for home in self.homes))

    @property
    def dotted(self) -> str:
        """``"<module>.<name>"`` of its newest home, for messages: the name to look up today."""
        return self.homes[0].dotted

    @property
    def introduced_in(self) -> str:
        """The first release that had it, under any name."""
        return self.homes[-1].introduced_in


#: ``<wrapper>.plan`` and ``<wrapper>.__init__``: the methods read on attention wrappers.
PLAN = "plan"
INIT = "__init__"
#: The method the decode wrapper's ``plan(**kwargs)`` forwards to in the releases that
#: split it (0.6.15+); the probe follows it by parsing, this name is for the table only.
PLAN_IMPL = "_plan_impl"

#: The split-KV keywords of the prefill (paged, ragged) and decode ``plan`` (0.4.0+) that
#: make attention batch-invariant.
SPLIT_KEYWORDS: tuple[str, ...] = ("fixed_split_size", "disable_split_kv")
#: Keywords read on each attention wrapper's ``__init__``.
INIT_KEYWORDS: tuple[str, ...] = ("use_tensor_cores", "backend")


def _comm(key: str, kind: Kind, introduced_in: str, keywords: tuple[str, ...] = ()) -> Symbol:
    return Symbol(key, kind, (Home(COMM, key, introduced_in),), keywords)


def _wrapper(key: str) -> Symbol:
    return Symbol(
        key,
        "class",
        (Home(FLASHINFER, key, "0.2.9"),),
        methods=MappingProxyType({PLAN: SPLIT_KEYWORDS, INIT: INIT_KEYWORDS}),
    )


# ------------------------------------------------------------------- flashinfer.comm

#: The unified allreduce-fusion API (0.6.0+): the workspace factory and the fused call.
UNIFIED_FACTORY = _comm(
    "create_allreduce_fusion_workspace", "function", "0.6.0", ("group", "comm_backend")
)
UNIFIED_FUSION = _comm("allreduce_fusion", "function", "0.6.0", ("trigger_completion_at_end",))
#: The legacy TRT-LLM IPC allreduce-fusion API (0.2.9+, still present next to the unified).
LEGACY_FACTORY = _comm(
    "trtllm_create_ipc_workspace_for_all_reduce_fusion",
    "function",
    "0.2.9",
    ("group", "comm_backend"),
)
LEGACY_FUSION = _comm(
    "trtllm_allreduce_fusion", "function", "0.2.9", ("trigger_completion_at_end",)
)
LEGACY_DESTROY = _comm("trtllm_destroy_ipc_workspace_for_all_reduce_fusion", "function", "0.2.9")
#: The pattern codes (``kARResidualRMSNorm``, ...) of both APIs.
PATTERN = _comm("AllReduceFusionPattern", "enum", "0.2.9")
#: The base class of the unified API's workspaces.
WORKSPACE = _comm("AllReduceFusionWorkspace", "class", "0.6.0")
#: What the unified fused call runs on a TRT-LLM workspace, below its public name (the
#: lower launch layer a workspace binds to, ``comm/_layers.py``; measured by
#: ``tools/layers.py``): the workspace class it dispatches on, the class of the
#: symmetric-memory handles it checks, and the compiled module's loader the legacy call uses.
TRTLLM_WORKSPACE = "TRTLLMAllReduceFusionWorkspace"
SYMMETRIC_HANDLE = "SymmDeviceMemory"
TRTLLM_MODULE_LOADER = "get_trtllm_comm_module"
#: The pattern every bound call runs: all-reduce, residual add, RMSNorm.
RESIDUAL_RMSNORM = "kARResidualRMSNorm"
#: The torch.distributed communication backend a unified workspace can be given.
TORCH_DIST_BACKEND = Symbol(
    "TorchDistBackend",
    "class",
    (
        Home(f"{COMM}.comm_backend", "TorchDistBackend", "0.6.16"),
        Home(f"{COMM}.mnnvl", "TorchDistBackend", "0.6.0"),
    ),
    methods=MappingProxyType({"bcast": ()}),
)

#: The ``flashinfer.comm`` symbols, in the order reports list them.
COMM_SYMBOLS: tuple[Symbol, ...] = (
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
    LEGACY_FACTORY,
    LEGACY_FUSION,
    LEGACY_DESTROY,
    PATTERN,
    WORKSPACE,
    TORCH_DIST_BACKEND,
)

# --------------------------------------------------------------------------- flashinfer

PREFILL_PAGED = _wrapper("BatchPrefillWithPagedKVCacheWrapper")
PREFILL_RAGGED = _wrapper("BatchPrefillWithRaggedKVCacheWrapper")
DECODE = _wrapper("BatchDecodeWithPagedKVCacheWrapper")

#: The attention wrappers whose ``plan`` must take the split-KV settings for determinism.
WRAPPER_SYMBOLS: tuple[Symbol, ...] = (PREFILL_PAGED, PREFILL_RAGGED, DECODE)

ALL_SYMBOLS: tuple[Symbol, ...] = COMM_SYMBOLS + WRAPPER_SYMBOLS

#: Every FlashInfer attention wrapper class an engine can plan through, by the name
#: ``flashinfer`` exports it under: the three above, their subclasses and the other families
#: (MLA, ``BatchAttention``, POD, sparse, cascade). For each, every measured release records
#: whether its ``plan`` hands the split settings to the kernel, per backend
#: (``fi_compat/_measured/reach.json``); the deterministic planner and wrapper accept a
#: (class, backend) only where they do.
ATTENTION_FAMILIES: tuple[str, ...] = (
    PREFILL_PAGED.key,
    PREFILL_RAGGED.key,
    DECODE.key,
    "CUDAGraphBatchDecodeWithPagedKVCacheWrapper",
    "BatchAttentionWithAttentionSinkWrapper",
    "BatchMLAPagedAttentionWrapper",
    "BatchAttention",
    "PODWithPagedKVCacheWrapper",
    "BatchPODWithPagedKVCacheWrapper",
    "BlockSparseAttentionWrapper",
    "VariableBlockSparseAttentionWrapper",
    "MultiLevelCascadeAttentionWrapper",
    "BatchPrefillWithSharedPrefixPagedKVCacheWrapper",
)

# ------------------------------------------------------------------- flashinfer.decode

#: The decode wrapper's lean ``plan`` for multi-step drafting, a module-level ``def`` taking
#: the wrapper as ``self`` (engines bind it as a method). Recorded for the fake and for
#: engines, never probed, so it is not in :data:`ALL_SYMBOLS`.
FAST_DECODE_PLAN = Symbol(
    "fast_decode_plan", "function", (Home(DECODE_MODULE, "fast_decode_plan", "0.4.0"),)
)
#: The ``flashinfer.decode`` functions each release's record holds.
DECODE_FUNCTIONS: tuple[Symbol, ...] = (FAST_DECODE_PLAN,)

_BY_NAME: Mapping[str, Symbol] = MappingProxyType(
    {name: symbol for symbol in ALL_SYMBOLS for name in (symbol.key, *symbol.names)}
)


def symbol_named(name: str) -> Symbol | None:
    """The symbol whose key, or any of whose names, is ``name``; None for any other."""
    return _BY_NAME.get(name)


# ------------------------------------------------------------------------ import hazards


@dataclass(frozen=True)
class ImportHazard:
    """An import of FlashInfer that fails on some releases, in some environments.

    Which releases have it is never written here: each release's record holds it as the
    :class:`~fi_compat._records.HazardRecord` named :attr:`flag`, read off the release's
    source by the recorder. This is what the hazard is, for every reader of the records
    (the report's hazards, ``fi-compat diff``, ``fi-compat scan``).

    Attributes
    ----------
    flag
        The record's field (``ReleaseRecord.<flag>``).
    id
        The id ``fi-compat report`` gives it.
    modules
        The imports that meet it (a submodule's import included).
    raised
        What the import raises, as people read it.
    exceptions
        The exception classes that is (a handler of one of them catches it).
    condition
        When it raises; ``{python}`` stands for the Python version the record names.
    remedy
        What to do about it.
    """

    flag: str
    id: str
    modules: tuple[str, ...]
    raised: str
    exceptions: tuple[str, ...]
    condition: str
    remedy: str

    def when(self, python: str | None = None) -> str:
        """:attr:`condition` for a record naming ``python`` (the Python it needs)."""
        return self.condition.format(python=python or "the version the record names")

    def raises(self, python: str | None = None) -> str:
        """``"raises <what> <when>"``, as the report, the diff and the scan say it."""
        return f"raises {self.raised} {self.when(python)}"


#: Every import hazard the recorder reads off a release's source, by record field.
IMPORT_HAZARDS: Mapping[str, ImportHazard] = MappingProxyType(
    {
        hazard.flag: hazard
        for hazard in (
            ImportHazard(
                "comm_requires_cuda_runtime",
                "comm-needs-cuda-runtime",
                (COMM,),
                "AssertionError",
                ("AssertionError",),
                "without a loaded CUDA runtime",
                "load the CUDA runtime first (a CUDA build of torch, or libcudart from the "
                "nvidia-cuda-runtime-cu12 wheel), or install a release without it",
            ),
            ImportHazard(
                "comm_requires_triton",
                "comm-needs-triton",
                (COMM,),
                "ModuleNotFoundError",
                ("ModuleNotFoundError",),
                "without triton installed",
                "install triton, or a release without it",
            ),
            ImportHazard(
                "import_queries_gpu",
                "import-queries-gpu",
                (FLASHINFER,),
                "RuntimeError (AssertionError with a CPU build of torch)",
                ("RuntimeError", "AssertionError"),
                "on a machine without a GPU",
                "run where a GPU is visible, stub the query, or install a release without it",
            ),
            ImportHazard(
                "comm_requires_python",
                "comm-needs-newer-python",
                (COMM,),
                "TypeError",
                ("TypeError",),
                "below Python {python}",
                "run a newer Python, or install a release without it",
            ),
        )
    }
)


# -------------------------------------------------------------------------------- gates

#: ``(owner, keyword)``: ``keyword`` accepted by ``owner`` (a symbol key, or
#: ``"<wrapper>.<method>"``); a keyword of None means ``owner`` is present.
Item = tuple[str, "str | None"]


@dataclass(frozen=True)
class Gate:
    """One change in FlashInfer's Python surface that fi-compat relies on.

    Attributes
    ----------
    key
        Short name used by ``fi-compat report --require`` and in messages.
    introduced_in
        The first release on the package registry that has it.
    summary
        One sentence for people (the compatibility table's label).
    items
        What the change is, as :data:`Item` pairs that must all hold; empty for a change
        in import behaviour.
    hazard
        For a change in import behaviour: the recorded import hazard that it removed.
    """

    key: str
    introduced_in: str
    summary: str
    items: tuple[Item, ...] = ()
    hazard: str | None = None

    @property
    def keyword(self) -> bool:
        """The gate is a keyword (``--require`` takes its key as a short name)."""
        return bool(self.items) and all(keyword is not None for _, keyword in self.items)


def _split_gate(keyword: str) -> Gate:
    return Gate(
        keyword,
        "0.4.0",
        f"`{keyword}=` on the `plan` of the prefill (paged, ragged) and decode wrappers",
        tuple((f"{wrapper.key}.{PLAN}", keyword) for wrapper in WRAPPER_SYMBOLS),
    )


GATES: Mapping[str, Gate] = MappingProxyType(
    {
        gate.key: gate
        for gate in (
            Gate(
                "unified_api",
                UNIFIED_FACTORY.introduced_in,
                f"Unified API: `comm.{UNIFIED_FACTORY.key}` + `comm.{UNIFIED_FUSION.key}`",
                ((UNIFIED_FACTORY.key, None), (UNIFIED_FUSION.key, None)),
            ),
            Gate(
                "legacy_api",
                LEGACY_FACTORY.introduced_in,
                f"Legacy API: `comm.{LEGACY_FACTORY.key}` + `comm.{LEGACY_FUSION.key}`",
                ((LEGACY_FACTORY.key, None), (LEGACY_FUSION.key, None)),
            ),
            Gate(
                "comm_backend",
                "0.6.0",
                f"`comm_backend=` on `{UNIFIED_FACTORY.key}`",
                ((UNIFIED_FACTORY.key, "comm_backend"),),
            ),
            Gate(
                "group",
                "0.6.10.post1",
                f"`group=` on `{UNIFIED_FACTORY.key}`",
                ((UNIFIED_FACTORY.key, "group"),),
            ),
            Gate(
                "trigger_completion_at_end",
                "0.6.8",
                f"`trigger_completion_at_end=` on `{UNIFIED_FUSION.key}`",
                ((UNIFIED_FUSION.key, "trigger_completion_at_end"),),
            ),
            *(_split_gate(keyword) for keyword in SPLIT_KEYWORDS),
            Gate(
                "comm_imports_without_cuda_runtime",
                "0.6.14",
                f"`import {COMM}` no longer asserts that libcudart is loaded",
                hazard="comm_requires_cuda_runtime",
            ),
        )
    }
)
