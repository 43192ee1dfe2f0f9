"""The call shapes SGLang and vLLM make into ``flashinfer.comm``, and what became of each.

Each shape is a small function written in the style of one engine's code (SGLang 0.5.23's
``srt/layers/flashinfer_comm_fusion.py``; vLLM 0.33.0's
``distributed/device_communicators/flashinfer_all_reduce.py`` and
``compilation/passes/fusion/allreduce_rms_fusion.py``): the same calls, keywords, probes
and attribute reads, in the same order, on the module it is given. An engine that swaps
``import flashinfer.comm as comm`` for ``import fi_compat.comm as comm`` runs exactly this
code against ``fi_compat.comm``, so the tests pass ``fi_compat.comm`` and
``fi_compat.comm.mnnvl`` and run the shapes inside ``fi_compat.testing.fake_flashinfer(V)``.

Two things differ from the engines, both so that a test can see what happened:

* the calls into ``comm`` go through :meth:`Trace.call`, which notes what was asked and
  where the fake's call log stood, and then makes the very same call;
* errors are not swallowed: where an engine wraps workspace creation in ``except
  Exception`` and falls back to NCCL, the shape lets the error out, so the classifier sees
  whether it was a typed refusal. Where an engine's code *relies* on an exception (the
  ``ImportError`` of an optional name, the ``NotImplementedError`` of checkpointing), the
  shape catches the same exception and keeps it in the trace.

:func:`run_shape` runs one shape under a fake and :func:`judge` classifies it: ``"runs"``
(everything reached FlashInfer as asked), ``"mapped"`` (it ran through the legacy API or
another mapping of fi-compat), ``"degrades safely"`` (a hint was replaced by its safe
equivalent, and the workspace says so), ``"refused"`` (a :class:`~fi_compat.errors.
FiCompatError` that names the release to install); anything else is ``"failure"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
import socket
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import torch
from packaging.version import Version

from fi_compat._surface import LEGACY_FACTORY, LEGACY_FUSION, UNIFIED_FACTORY, UNIFIED_FUSION
from fi_compat.comm import AllReduceFusionPattern, FusionWorkspace
from fi_compat.errors import FiCompatError
from fi_compat.testing import Call, FakeFlashInfer, ReleaseRecord, listed_releases

__all__ = [
    "OUTCOMES",
    "SHAPES",
    "Asked",
    "Engine",
    "Group",
    "Kind",
    "Outcome",
    "SGLangProbe",
    "Shape",
    "Trace",
    "gpus_per_node",
    "judge",
    "names_a_later_release",
    "run_shape",
    "sglang_allreduce_only",
    "sglang_compile_narrower",
    "sglang_fused_rmsnorm",
    "sglang_import_probe",
    "sglang_probe",
    "sglang_session",
    "sglang_workspace",
    "sglang_workspace_mnnvl",
    "vllm_allreduce",
    "vllm_draft_model",
    "vllm_fused_gemma_rmsnorm",
    "vllm_fused_rmsnorm",
    "vllm_fused_rmsnorm_fp4",
    "vllm_fused_rmsnorm_fp8",
    "vllm_workspace",
    "vllm_workspace_mnnvl",
]

#: The four acceptable outcomes, in the order the summary lists them.
OUTCOMES: Final = ("runs", "mapped", "degrades safely", "refused")
Kind = Literal["runs", "mapped", "degrades safely", "refused", "failure"]

#: Both engines' threshold for an early PDL completion signal (tokens per call).
PDL_ADVANCE_LAUNCH_TOKENS: Final = 16
#: What a decisions entry says when ``trigger_completion_at_end=False`` cannot be honoured.
_SAFE_TRIGGER_WORDS: Final = ("completes at the end", "ignores it")


class Group:
    """Stands in for a ``torch.distributed.ProcessGroup`` where only its identity matters."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"<group {self.label}>"


@dataclass
class Engine:
    """What an engine process knows when it reaches allreduce fusion.

    Attributes
    ----------
    comm, mnnvl
        The modules the engine imported as ``flashinfer.comm`` and
        ``flashinfer.comm.mnnvl`` (here ``fi_compat.comm`` and ``fi_compat.comm.mnnvl``).
    device_group, cpu_group
        SGLang's pair of groups over the tensor-parallel ranks (NCCL and gloo on a GPU
        node); vLLM uses ``cpu_group``. The same object when the process runs on CPU.
    backend
        The fusion backend the engine resolved (``--flashinfer-allreduce-fusion-backend``,
        ``VLLM_FLASHINFER_ALLREDUCE_BACKEND``): ``"trtllm"`` on one Hopper node.
    use_oneshot
        SGLang's one-shot choice (None: let FlashInfer pick).
    """

    comm: Any
    mnnvl: Any
    world_size: int = 2
    rank: int = 0
    device_group: Any = field(default_factory=lambda: Group("tp"))
    cpu_group: Any = None
    backend: str = "trtllm"
    tokens: int = 4
    hidden_dim: int = 64
    max_token_num: int = 16
    dtype: torch.dtype = torch.bfloat16
    gpus_per_node: int | None = None
    use_oneshot: bool | None = None
    rms_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.cpu_group is None:
            self.cpu_group = self.device_group
        if self.gpus_per_node is None:
            self.gpus_per_node = self.world_size

    def activations(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This rank's hidden states, the residual stream and the RMSNorm weight."""
        generator = torch.Generator().manual_seed(100 + self.rank)
        shape = (self.tokens, self.hidden_dim)
        hidden = torch.randn(shape, generator=generator).to(self.dtype)
        residual = torch.randn(shape, generator=generator).to(self.dtype)
        weight = (1 + 0.1 * torch.randn(self.hidden_dim, generator=generator)).to(self.dtype)
        return hidden, residual, weight


@dataclass
class Asked:
    """One call a shape made into ``comm``: what it passed and where the fake's log stood.

    ``start``/``end`` index the fake's call log (``FakeFlashInfer.calls``); ``setup`` marks
    calls that only prepare the call the shape is about (its workspace, for a fused call).
    """

    name: str
    kwargs: dict[str, Any]
    start: int
    setup: bool
    end: int = -1
    result: Any = None
    #: A workspace's ``workspace_tensor`` when it was made (destroy() clears it).
    pointers: Any = None


@dataclass
class Trace:
    """What a shape asked for and lived with, for :func:`judge`.

    Attributes
    ----------
    asked
        Every call into ``comm``'s functions, in order.
    workspaces
        Every workspace the shape created.
    probed
        ``(function, keyword) -> answer`` of the signature probes the engine made.
    refused
        Typed refusals the engine's code caught and lived with (an optional name it
        imports in ``try``/``except ImportError``): the shape's outcome is "refused".
    tolerated
        The same, caught while setting up another call: checked, not counted.
    degraded
        Safe equivalents the engine took on its own (``NotImplementedError`` of
        checkpointing: the workspace stays resident).
    notes
        What the engine read (``backend``, ``metadata``, size checks, ...).
    """

    position: Callable[[], int] = lambda: 0
    asked: list[Asked] = field(default_factory=list)
    workspaces: list[Any] = field(default_factory=list)
    probed: dict[tuple[str, str], bool] = field(default_factory=dict)
    refused: list[BaseException] = field(default_factory=list)
    tolerated: list[BaseException] = field(default_factory=list)
    degraded: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)
    _setup: int = 0

    @property
    def in_setup(self) -> bool:
        """True inside :meth:`setup`."""
        return self._setup > 0

    @contextlib.contextmanager
    def setup(self) -> Iterator[None]:
        """Calls made in this block only prepare the call the shape is about."""
        self._setup += 1
        try:
            yield
        finally:
            self._setup -= 1

    def call(self, function: Callable[..., Any], /, **kwargs: Any) -> Any:
        """``function(**kwargs)``, noted first."""
        asked = Asked(function.__name__, dict(kwargs), self.position(), self.in_setup)
        self.asked.append(asked)
        try:
            asked.result = function(**kwargs)
            asked.pointers = getattr(asked.result, "workspace_tensor", None)
        finally:
            asked.end = self.position()
        return asked.result

    def made(self, workspace: Any) -> Asked:
        """The factory call that made ``workspace``."""
        return next(asked for asked in self.asked if asked.result is workspace)

    def caught(self, error: BaseException) -> None:
        """The engine caught ``error`` (an optional name it imports) and went on."""
        (self.tolerated if self.in_setup else self.refused).append(error)

    def probe(self, function: str, keyword: str, answer: bool) -> None:
        """The engine asked whether ``function`` takes ``keyword`` and got ``answer``."""
        if not self.in_setup:
            self.probed[function, keyword] = answer


Shape = Callable[[Engine, Trace], None]


# --------------------------------------------------------------------------------- SGLang


@dataclass(frozen=True)
class SGLangProbe:
    """What SGLang's module-level probe of ``flashinfer.comm`` found.

    ``group``, ``comm_backend`` and ``trigger`` say whether the factory takes ``group=`` and
    ``comm_backend=`` and the fused call ``trigger_completion_at_end=``, read from their
    signatures. ``dist_backend`` is SGLang's subclass of ``TorchDistBackend`` (None where
    the import failed), ``comm_backend_class`` its ``CommBackend`` over a torch group.
    """

    available: bool
    group: bool
    comm_backend: bool
    trigger: bool
    dist_backend: Any
    comm_backend_class: Any


def sglang_import_probe(engine: Engine, trace: Trace) -> SGLangProbe:
    """SGLang's import-time probe: feature flags from signatures, two optional imports."""
    comm, mnnvl = engine.comm, engine.mnnvl
    group = comm_backend = trigger = False
    available = hasattr(comm, "allreduce_fusion") and hasattr(
        comm, "create_allreduce_fusion_workspace"
    )
    if available:
        factory = inspect.signature(comm.create_allreduce_fusion_workspace).parameters
        fusion = inspect.signature(comm.allreduce_fusion).parameters
        group = "group" in factory
        comm_backend = "comm_backend" in factory
        trigger = "trigger_completion_at_end" in fusion
        trace.probe("create_allreduce_fusion_workspace", "group", group)
        trace.probe("create_allreduce_fusion_workspace", "comm_backend", comm_backend)
        trace.probe("allreduce_fusion", "trigger_completion_at_end", trigger)

    dist_backend: Any = None
    try:
        base = mnnvl.TorchDistBackend  # `from flashinfer.comm.mnnvl import TorchDistBackend`
    except (ImportError, AttributeError) as error:
        trace.caught(error)
    else:
        dist_backend = _sglang_dist_backend(base)

    comm_backend_class: Any = None
    try:
        abstract = mnnvl.CommBackend  # `from flashinfer.comm.mnnvl import CommBackend`
    except (ImportError, AttributeError) as error:
        trace.caught(error)
    else:
        comm_backend_class = _sglang_comm_backend(abstract)
    return SGLangProbe(available, group, comm_backend, trigger, dist_backend, comm_backend_class)


def _sglang_dist_backend(base: Any) -> Any:
    """SGLang's ``TorchDistBackend`` subclass: set up over the device group, broadcast over
    the CPU group with a group-local root mapped to the global rank."""

    def __init__(self: Any, device_group: Any, cpu_group: Any) -> None:
        base.__init__(self, group=device_group)
        self._cpu_group = cpu_group

    def bcast(self: Any, data: Any, root: int) -> Any:
        import torch.distributed as dist

        source = dist.get_process_group_ranks(self._cpu_group)[root]
        box = [data]
        dist.broadcast_object_list(box, src=source, group=self._cpu_group)
        return box[0]

    return type("SGLangTorchDistBackend", (base,), {"__init__": __init__, "bcast": bcast})


def _sglang_comm_backend(abstract: Any) -> Any:
    """SGLang's ``CommBackend`` over a torch.distributed group (for MNNVL set-up)."""

    def __init__(self: Any, group: Any) -> None:
        self._group = group

    def get_rank(self: Any) -> int:
        rank: int = self._group.rank()
        return rank

    def get_size(self: Any) -> int:
        size: int = self._group.size()
        return size

    def allgather(self: Any, data: int) -> list[Any]:
        import torch.distributed as dist

        gathered: list[Any] = [None] * get_size(self)
        dist.all_gather_object(gathered, data, group=self._group)
        return gathered

    def barrier(self: Any) -> None:
        import torch.distributed as dist

        dist.barrier(group=self._group)

    def split(self: Any, color: int, key: int) -> Any:
        return self._group

    return type(
        "SGLangCommBackend",
        (abstract,),
        {
            "__init__": __init__,
            "Get_rank": get_rank,
            "Get_size": get_size,
            "allgather": allgather,
            "barrier": barrier,
            "Split": split,
        },
    )


def _sglang_create(engine: Engine, trace: Trace, probe: SGLangProbe) -> Any:
    """SGLang's workspace manager creating (or re-creating) its workspace."""
    comm_backend: Any = None
    if probe.dist_backend is not None and engine.device_group is not None:
        comm_backend = probe.dist_backend(
            device_group=engine.device_group, cpu_group=engine.cpu_group
        )
    elif probe.comm_backend_class is not None and engine.cpu_group is not None:
        comm_backend = probe.comm_backend_class(engine.cpu_group)
    create_kw: dict[str, Any] = {
        "backend": engine.backend,
        "world_size": engine.world_size,
        "rank": engine.rank,
        "max_token_num": engine.max_token_num,
        "hidden_dim": engine.hidden_dim,
        "dtype": engine.dtype or torch.bfloat16,
        "gpus_per_node": engine.gpus_per_node,
    }
    if probe.comm_backend and comm_backend is not None:
        create_kw["comm_backend"] = comm_backend
    if probe.group:
        create_kw["group"] = engine.device_group
    if engine.use_oneshot is not None:
        create_kw["force_oneshot_support"] = bool(engine.use_oneshot)
    workspace = trace.call(engine.comm.create_allreduce_fusion_workspace, **create_kw)
    trace.workspaces.append(workspace)
    return workspace


def _sglang_size_check(engine: Engine, workspace: Any, num_tokens: int) -> Any:
    """SGLang's ``is_buffer_size_sufficient``: the keyword read from the signature."""
    parameters = inspect.signature(workspace.is_buffer_size_sufficient).parameters
    check: dict[str, Any] = {
        "tp_size": engine.world_size,
        "num_tokens": num_tokens,
        "hidden_dim": engine.hidden_dim,
        "dtype": engine.dtype,
    }
    if "use_oneshot" in parameters:
        check["use_oneshot"] = engine.use_oneshot
    elif "strategy" in parameters and engine.use_oneshot is not None:
        strategies = type(parameters["strategy"].default)
        check["strategy"] = getattr(strategies, "ONESHOT" if engine.use_oneshot else "TWOSHOT")
    return workspace.is_buffer_size_sufficient(**check)


def _sglang_workspace_checks(engine: Engine, trace: Trace, workspace: Any) -> None:
    backend = workspace.backend
    trace.notes["backend"] = backend
    trace.notes["use_fp32_lamport"] = (
        workspace.metadata["use_fp32_lamport"] if backend == "trtllm" else None
    )
    parameters = inspect.signature(workspace.is_buffer_size_sufficient).parameters
    trace.notes["size_keyword"] = next(
        (name for name in ("use_oneshot", "strategy") if name in parameters), None
    )
    trace.notes["fits"] = _sglang_size_check(engine, workspace, engine.tokens)
    trace.notes["fits_too_many"] = _sglang_size_check(engine, workspace, engine.max_token_num + 1)
    trace.notes["tokens"], trace.notes["tokens_too_many"] = engine.tokens, engine.max_token_num + 1
    native = getattr(workspace, "native", None)
    if backend == "mnnvl" and native is not None:  # what the release's own object answers
        trace.notes["native_fits_too_many"] = _sglang_size_check(
            engine, native, engine.max_token_num + 1
        )


def sglang_probe(engine: Engine, trace: Trace) -> None:
    """``import flashinfer.comm as comm`` in SGLang: the signature probes and the two
    optional ``flashinfer.comm.mnnvl`` imports, subclassed."""
    probe = sglang_import_probe(engine, trace)
    trace.notes["probe"] = probe


def sglang_workspace(engine: Engine, trace: Trace) -> None:
    """SGLang's workspace manager: factory, ``backend``, ``metadata``, size check, destroy."""
    with trace.setup():
        probe = sglang_import_probe(engine, trace)
    workspace = _sglang_create(engine, trace, probe)
    _sglang_workspace_checks(engine, trace, workspace)
    workspace.destroy()


def sglang_workspace_mnnvl(engine: Engine, trace: Trace) -> None:
    """:func:`sglang_workspace` on a Blackwell node (MNNVL, one-shot forced): the size check
    then takes ``strategy=``."""
    engine.backend = "mnnvl"
    engine.use_oneshot = True
    sglang_workspace(engine, trace)


def _sglang_fused(engine: Engine, trace: Trace, probe: SGLangProbe, workspace: Any) -> Any:
    x, residual, weight = engine.activations()
    residual_out = torch.empty_like(residual)
    norm_out = torch.empty_like(x)
    kwargs: dict[str, Any] = {
        "input": x,
        "workspace": workspace,
        "pattern": engine.comm.AllReduceFusionPattern.kARResidualRMSNorm,
        "launch_with_pdl": True,
        "residual_out": residual_out,
        "norm_out": norm_out,
        "residual_in": residual,
        "rms_gamma": weight,
        "rms_eps": engine.rms_eps,
        "use_oneshot": engine.use_oneshot,
    }
    if workspace.backend == "trtllm":
        kwargs["fp32_acc"] = True
    if probe.trigger:
        kwargs["trigger_completion_at_end"] = False
    trace.call(engine.comm.allreduce_fusion, **kwargs)
    return norm_out, residual_out


def _sglang_allreduce(engine: Engine, trace: Trace, probe: SGLangProbe, workspace: Any) -> Any:
    x, _, _ = engine.activations()
    output = torch.empty_like(x)
    kwargs: dict[str, Any] = {
        "input": x,
        "workspace": workspace,
        "pattern": engine.comm.AllReduceFusionPattern.kAllReduce,
        "launch_with_pdl": True,
        "output": output,
    }
    if workspace.backend == "trtllm":
        kwargs["fp32_acc"] = True
    if probe.trigger:
        kwargs["trigger_completion_at_end"] = False
    trace.call(engine.comm.allreduce_fusion, **kwargs)
    return output


def sglang_fused_rmsnorm(engine: Engine, trace: Trace) -> None:
    """SGLang's ``flashinfer_allreduce_residual_rmsnorm``: ``kARResidualRMSNorm`` with PDL,
    ``fp32_acc`` on TRT-LLM and an early completion signal where the probe found it."""
    with trace.setup():
        probe = sglang_import_probe(engine, trace)
        workspace = _sglang_create(engine, trace, probe)
    _sglang_fused(engine, trace, probe, workspace)
    with trace.setup():
        workspace.destroy()


def sglang_allreduce_only(engine: Engine, trace: Trace) -> None:
    """SGLang's ``flashinfer_allreduce``: ``kAllReduce`` into ``output``."""
    with trace.setup():
        probe = sglang_import_probe(engine, trace)
        workspace = _sglang_create(engine, trace, probe)
    _sglang_allreduce(engine, trace, probe, workspace)
    with trace.setup():
        workspace.destroy()


def sglang_compile_narrower(engine: Engine, trace: Trace) -> None:
    """SGLang's compile branch of ``can_use_flashinfer_allreduce``: under
    ``torch.compile`` it asks no size check, and sends ``flashinfer_allreduce`` any tensor
    of at most the workspace's tokens and hidden size. Here: half the width (a multiple of
    8, as MNNVL needs for bf16), and fewer tokens."""
    with trace.setup():
        probe = sglang_import_probe(engine, trace)
        workspace = _sglang_create(engine, trace, probe)
    narrower = dataclasses.replace(
        engine, hidden_dim=engine.hidden_dim // 2, tokens=max(1, engine.tokens - 1)
    )
    trace.notes["allreduce"] = _sglang_allreduce(narrower, trace, probe, workspace)
    with trace.setup():
        workspace.destroy()


def sglang_session(engine: Engine, trace: Trace) -> None:
    """One SGLang process's life: probe, workspace (with its checks), a fused layer, an
    all-reduce, destroy. Used by the multi-process test over a real gloo group. (The
    probe's own outcome is :func:`sglang_probe`'s; here it only sets up.)"""
    with trace.setup():
        probe = sglang_import_probe(engine, trace)
    workspace = _sglang_create(engine, trace, probe)
    _sglang_workspace_checks(engine, trace, workspace)
    trace.notes["fused"] = _sglang_fused(engine, trace, probe, workspace)
    trace.notes["allreduce"] = _sglang_allreduce(engine, trace, probe, workspace)
    workspace.destroy()


def gpus_per_node(group: Any) -> int:
    """How many ranks of ``group`` share rank 0's host (SGLang's ``in_the_same_node_as``)."""
    import torch.distributed as dist

    hosts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(hosts, socket.gethostname(), group=group)
    return sum(host == hosts[0] for host in hosts)


# ----------------------------------------------------------------------------------- vLLM


def _vllm_create(engine: Engine, trace: Trace) -> Any:
    """vLLM's ``_create_workspace``: a ``TorchDistBackend`` over the group, passed with it."""
    group = engine.cpu_group
    comm_backend = engine.mnnvl.TorchDistBackend(group=group)
    workspace = trace.call(
        engine.comm.create_allreduce_fusion_workspace,
        backend=engine.backend,
        world_size=engine.world_size,
        rank=engine.rank,
        max_token_num=engine.max_token_num,
        hidden_dim=engine.hidden_dim,
        dtype=engine.dtype,
        comm_backend=comm_backend,
        group=group,
    )
    trace.workspaces.append(workspace)
    trace.notes["mc_ptr"] = getattr(workspace, "mc_ptr", 0)
    if engine.backend == "mnnvl" and not trace.notes["mc_ptr"]:
        workspace.destroy()  # no multicast here: vLLM falls back to TRT-LLM
        return None
    return workspace


def vllm_workspace(engine: Engine, trace: Trace) -> None:
    """vLLM's workspace life: create, ``mc_ptr``, size check, suspend/resume, destroy."""
    workspace = _vllm_create(engine, trace)
    if workspace is None:
        return
    trace.notes["backend"] = workspace.backend
    trace.notes["fits"] = workspace.is_buffer_size_sufficient(
        tp_size=engine.world_size,
        num_tokens=engine.tokens,
        hidden_dim=engine.hidden_dim,
        dtype=engine.dtype,
    )
    try:
        workspace.checkpoint_prepare()
    except NotImplementedError as error:  # vLLM: stays resident while suspended
        trace.degraded.append(f"checkpoint_prepare: {error}")
        trace.notes["checkpoint_prepare"] = "unsupported"
    else:
        trace.notes["checkpoint_prepare"] = "done"
    try:
        workspace.checkpoint_restore(engine.mnnvl.TorchDistBackend(group=engine.cpu_group))
    except NotImplementedError as error:
        trace.degraded.append(f"checkpoint_restore: {error}")
        trace.notes["checkpoint_restore"] = "unsupported"
    else:
        trace.notes["checkpoint_restore"] = "done"
    workspace.destroy()


def vllm_workspace_mnnvl(engine: Engine, trace: Trace) -> None:
    """:func:`vllm_workspace` with ``VLLM_FLASHINFER_ALLREDUCE_BACKEND=mnnvl``."""
    engine.backend = "mnnvl"
    vllm_workspace(engine, trace)


def _vllm_fused(engine: Engine, trace: Trace, pattern_code: int, **tensors: Any) -> None:
    """vLLM's ``call_trtllm_fused_allreduce_norm`` custom op, on a workspace of its own
    (``tensors``: the op's optional arguments, see :func:`_vllm_fused_call`)."""
    with trace.setup():
        workspace = _vllm_create(engine, trace)
    _vllm_fused_call(engine, trace, workspace, pattern_code, **tensors)
    with trace.setup():
        workspace.destroy()


def _vllm_fused_call(
    engine: Engine,
    trace: Trace,
    workspace: Any,
    pattern_code: int,
    *,
    residual: torch.Tensor | None = None,
    norm_out: torch.Tensor | None = None,
    quant_out: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
    scale_factor: torch.Tensor | None = None,
    weight_bias: float = 0.0,
) -> None:
    """The body of vLLM's custom op: one ``allreduce_fusion`` on ``workspace`` (vLLM's
    process-wide one, whatever hidden size it was made for)."""
    comm = engine.comm
    allreduce_in, own_residual, rms_gamma = engine.activations()
    if residual is None:
        residual = own_residual
    num_tokens = allreduce_in.shape[0]
    # Without a device capability table entry every size is one-shot (MNNVL: FlashInfer's).
    use_oneshot = None if workspace.backend == "mnnvl" else True
    if norm_out is None:
        norm_out = allreduce_in
        residual_out = residual
    else:
        residual_out = allreduce_in
    layout_code = None
    if workspace.backend in ("trtllm", "mnnvl"):
        layout_code = comm.QuantizationSFLayout.SWIZZLED_128x4
    trace.call(
        comm.allreduce_fusion,
        input=allreduce_in,
        workspace=workspace,
        pattern=pattern_code,
        launch_with_pdl=True,
        output=None,
        residual_out=residual_out,
        norm_out=norm_out,
        quant_out=quant_out,
        scale_out=scale_out,
        residual_in=residual,
        rms_gamma=rms_gamma,
        rms_eps=engine.rms_eps,
        scale_factor=scale_factor,
        layout_code=layout_code,
        use_oneshot=use_oneshot,
        fp32_acc=True,
        weight_bias=weight_bias,
        trigger_completion_at_end=(use_oneshot is True) or num_tokens > PDL_ADVANCE_LAUNCH_TOKENS,
    )


def vllm_fused_rmsnorm(engine: Engine, trace: Trace) -> None:
    """vLLM's all-reduce + fused add RMSNorm pattern: in place (``norm_out`` is the input,
    ``residual_out`` the residual)."""
    _vllm_fused(engine, trace, engine.comm.AllReduceFusionPattern.kARResidualRMSNorm)


def vllm_fused_gemma_rmsnorm(engine: Engine, trace: Trace) -> None:
    """vLLM's eager all-reduce + GemmaRMSNorm for Gemma models: ``norm_out`` given (the
    new residual goes into the input), ``weight_bias=1.0``."""
    x = torch.empty(engine.tokens, engine.hidden_dim, dtype=engine.dtype)
    _vllm_fused(
        engine,
        trace,
        engine.comm.AllReduceFusionPattern.kARResidualRMSNorm,
        norm_out=torch.empty_like(x),
        weight_bias=1.0,
    )


def _fp8(engine: Engine) -> dict[str, Any]:
    """The arguments of vLLM's static FP8 quant pattern for ``engine``'s sizes."""
    return {
        "quant_out": torch.empty(engine.tokens, engine.hidden_dim, dtype=torch.float8_e4m3fn),
        "scale_factor": torch.ones(1, dtype=torch.float32),
    }


def _fp4(engine: Engine) -> dict[str, Any]:
    """The arguments of vLLM's static NVFP4 quant pattern for ``engine``'s sizes: zero
    residual, the int32 swizzled scale buffer viewed as FP8 for FlashInfer."""
    x = torch.empty(engine.tokens, engine.hidden_dim, dtype=engine.dtype)
    return {
        "residual": torch.zeros_like(x),
        "norm_out": torch.empty_like(x),
        "quant_out": torch.empty(engine.tokens, engine.hidden_dim // 2, dtype=torch.uint8),
        "scale_out": torch.empty(128, 4, dtype=torch.int32).view(torch.float8_e4m3fn),
        "scale_factor": torch.ones(1, 1, dtype=torch.float32),
    }


def vllm_fused_rmsnorm_fp8(engine: Engine, trace: Trace) -> None:
    """vLLM's all-reduce + fused add RMSNorm + static FP8 quant pattern."""
    pattern = engine.comm.AllReduceFusionPattern.kARResidualRMSNormFP8Quant
    _vllm_fused(engine, trace, pattern, **_fp8(engine))


def vllm_fused_rmsnorm_fp4(engine: Engine, trace: Trace) -> None:
    """vLLM's all-reduce + RMSNorm (zero residual) + static NVFP4 quant pattern."""
    pattern = engine.comm.AllReduceFusionPattern.kARResidualRMSNormFP4Quant
    _vllm_fused(engine, trace, pattern, **_fp4(engine))


def vllm_draft_model(engine: Engine, trace: Trace) -> None:
    """vLLM's speculative decoding with a draft model (vLLM #52023): one process-wide
    workspace sized for the wider of the target and the draft
    (``_fused_ar_workspace_hidden_dim``), and the fused calls of both models on it, each
    of its own width: RMSNorm, static FP8 and NVFP4. The target here is twice as wide as
    the draft (``engine.hidden_dim``)."""
    patterns = engine.comm.AllReduceFusionPattern
    target = dataclasses.replace(engine, hidden_dim=2 * engine.hidden_dim)
    with trace.setup():
        workspace = _vllm_create(target, trace)
    if workspace is None:
        return
    trace.notes["widths"] = []
    for model in (target, engine):
        trace.notes["widths"].append(model.hidden_dim)
        _vllm_fused_call(model, trace, workspace, patterns.kARResidualRMSNorm)
        _vllm_fused_call(
            model, trace, workspace, patterns.kARResidualRMSNormFP8Quant, **_fp8(model)
        )
        _vllm_fused_call(
            model, trace, workspace, patterns.kARResidualRMSNormFP4Quant, **_fp4(model)
        )
    with trace.setup():
        workspace.destroy()


def vllm_allreduce(engine: Engine, trace: Trace) -> None:
    """vLLM's ``FlashInferAllReduce.all_reduce``: ``kAllReduce`` without ``output``, early
    completion signal for small batches."""
    comm = engine.comm
    with trace.setup():
        workspace = _vllm_create(engine, trace)
    x, _, _ = engine.activations()
    num_tokens = x.shape[0]
    trace.call(
        comm.allreduce_fusion,
        input=x,
        workspace=workspace,
        pattern=comm.AllReduceFusionPattern.kAllReduce,
        launch_with_pdl=True,
        trigger_completion_at_end=num_tokens > PDL_ADVANCE_LAUNCH_TOKENS,
    )
    with trace.setup():
        workspace.destroy()


#: Every shape by name, in the order the summary lists them.
SHAPES: Final[Mapping[str, Shape]] = {
    "sglang_probe": sglang_probe,
    "sglang_workspace": sglang_workspace,
    "sglang_workspace_mnnvl": sglang_workspace_mnnvl,
    "sglang_fused_rmsnorm": sglang_fused_rmsnorm,
    "sglang_allreduce_only": sglang_allreduce_only,
    "sglang_compile_narrower": sglang_compile_narrower,
    "vllm_workspace": vllm_workspace,
    "vllm_workspace_mnnvl": vllm_workspace_mnnvl,
    "vllm_fused_rmsnorm": vllm_fused_rmsnorm,
    "vllm_fused_gemma_rmsnorm": vllm_fused_gemma_rmsnorm,
    "vllm_fused_rmsnorm_fp8": vllm_fused_rmsnorm_fp8,
    "vllm_fused_rmsnorm_fp4": vllm_fused_rmsnorm_fp4,
    "vllm_allreduce": vllm_allreduce,
    "vllm_draft_model": vllm_draft_model,
}


# ------------------------------------------------------------------------------ judging


@dataclass
class Outcome:
    """One shape run under one fake release, classified.

    Attributes
    ----------
    kind
        One of :data:`OUTCOMES`, or ``"failure"``.
    reasons
        Why (the mappings, the degraded hints, the refusal, or what went wrong).
    calls
        The fake's calls made while the shape ran.
    error
        The exception that ended the shape, if any.
    caught_warnings
        Warnings emitted while it ran.
    """

    shape: str
    release: str
    kind: Kind
    reasons: tuple[str, ...]
    trace: Trace
    calls: list[Call]
    error: BaseException | None
    caught_warnings: list[warnings.WarningMessage]
    offset: int

    def calls_of(self, asked: Asked) -> list[Call]:
        """The fake's calls made while ``asked`` ran."""
        return self.calls[asked.start - self.offset : asked.end - self.offset]


def run_shape(
    name: str, fake: FakeFlashInfer, engine: Engine, shape: Shape | None = None
) -> Outcome:
    """Run shape ``name`` (or ``shape``) on ``engine`` under ``fake`` and classify it."""
    function = shape if shape is not None else SHAPES[name]
    offset = len(fake.calls)
    trace = Trace(position=lambda: len(fake.calls))
    error: BaseException | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            function(engine, trace)
        except Exception as exception:
            error = exception
    calls = list(fake.calls[offset:])
    outcome = Outcome(name, fake.version, "failure", (), trace, calls, error, list(caught), offset)
    outcome.kind, outcome.reasons = judge(outcome, fake.record)
    return outcome


def names_a_later_release(error: BaseException, installed: str) -> bool:
    """The message names a recorded FlashInfer release after ``installed`` (the one to get)."""
    known = set(listed_releases())
    named = re.findall(r"\d+\.\d+\.\d+(?:\.post\d+)?", str(error))
    return any(token in known and Version(token) > Version(installed) for token in named)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def judge(outcome: Outcome, record: ReleaseRecord) -> tuple[Kind, tuple[str, ...]]:
    """Classify a run (see the module docstring); the evidence is the fake's call log."""
    trace, installed = outcome.trace, record.release
    error = outcome.error
    if error is not None:
        if isinstance(error, FiCompatError) and names_a_later_release(error, installed):
            return "refused", (_describe(error),)
        return "failure", (f"not a typed refusal naming a release: {_describe(error)}",)
    failures = [
        f"caught an untyped or release-less error: {_describe(caught)}"
        for caught in (*trace.refused, *trace.tolerated)
        if not (isinstance(caught, FiCompatError) and names_a_later_release(caught, installed))
    ]
    failures += _unexpected_warnings(outcome, record)
    mapped: list[str] = []
    degraded: list[str] = list(trace.degraded)
    for asked in trace.asked:
        calls = outcome.calls_of(asked)
        if asked.name == UNIFIED_FACTORY.key:
            found = _judge_factory(asked, calls)
        elif asked.name == UNIFIED_FUSION.key:
            found = _judge_fusion(asked, calls, record)
        else:
            found = ([f"a call the judge does not know: {asked.name}"], [], [])
        failures += found[0]
        if not asked.setup:
            mapped += found[1]
            degraded += found[2]
    for (function, keyword), answer in trace.probed.items():
        if answer != record.accepts(function, keyword):
            mapped.append(
                f"{function} answers {keyword!r}: {answer} (flashinfer {installed}'s own: "
                f"{not answer}), fi-compat maps it"
            )
    if failures:
        return "failure", tuple(failures)
    if trace.refused:
        return "refused", tuple(_describe(error) for error in trace.refused)
    if degraded:
        return "degrades safely", (*degraded, *mapped)
    if mapped:
        return "mapped", tuple(mapped)
    return "runs", ()


def _unexpected_warnings(outcome: Outcome, record: ReleaseRecord) -> list[str]:
    """Warnings other than the ones the release's own deprecated legacy entries emit."""
    legacy = record.comm_function(LEGACY_FUSION.key)
    allowed = [d for d in (legacy.decorators if legacy else ()) if d.startswith("deprecated(")]
    return [
        f"unexpected warning {message.category.__name__}: {message.message}"
        for message in outcome.caught_warnings
        if not (
            issubclass(message.category, DeprecationWarning)
            and any(str(message.message) in decorator for decorator in allowed)
        )
    ]


_Found = tuple[list[str], list[str], list[str]]  # failures, mapped, degraded


def _same(given: Any, got: Any) -> bool:
    if given is got:
        return True
    plain = (bool, int, float, str, torch.dtype)
    return type(given) is type(got) and isinstance(given, plain) and given == got


def _dropin_defaults(function: Callable[..., Any]) -> dict[str, Any]:
    return {
        name: parameter.default
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }


def _is_default(defaults: Mapping[str, Any], name: str, value: Any) -> bool:
    return name in defaults and _same(defaults[name], value)


def _judge_factory(asked: Asked, calls: Sequence[Call]) -> _Found:
    from fi_compat.comm import create_allreduce_fusion_workspace

    made = [c for c in calls if c.name in (UNIFIED_FACTORY.key, LEGACY_FACTORY.key)]
    if len(made) != 1:
        return [f"expected one workspace factory call, found {[c.name for c in calls]}"], [], []
    (call,) = made
    if call.name == LEGACY_FACTORY.key:
        return [], [f"legacy API: {LEGACY_FACTORY.key}"], []
    defaults = _dropin_defaults(create_allreduce_fusion_workspace)
    mapped: list[str] = []
    for name, value in asked.kwargs.items():
        if _is_default(defaults, name, value) and name not in call.arguments:
            continue
        if name not in call.arguments:
            mapped.append(f"{name}= not passed to {UNIFIED_FACTORY.key}")
        elif not _same(value, call.arguments[name]):
            mapped.append(f"{name}= replaced by {call.arguments[name]!r}")
    for name, value in call.arguments.items():
        if name not in asked.kwargs and not _is_default(defaults, name, value):
            mapped.append(f"{name}= added")
    return [], mapped, []


def _judge_fusion(asked: Asked, calls: Sequence[Call], record: ReleaseRecord) -> _Found:
    from fi_compat.comm import allreduce_fusion

    kernels = [c for c in calls if c.name in (UNIFIED_FUSION.key, LEGACY_FUSION.key)]
    if len(kernels) != 1:
        return [f"expected one fused call, found {[c.name for c in calls]}"], [], []
    (call,) = kernels
    workspace = asked.kwargs["workspace"]
    pattern = asked.kwargs["pattern"]
    failures: list[str] = []
    member = next(
        (k for k, v in vars(AllReduceFusionPattern).items() if k.startswith("k") and v == pattern),
        None,
    )
    codes = record.comm_enums.get("AllReduceFusionPattern")
    release_code = codes.members.get(member) if codes is not None and member else None
    got_pattern = call.arguments.get(
        "pattern" if call.name == UNIFIED_FUSION.key else "pattern_code"
    )
    if release_code is None or got_pattern != release_code:
        failures.append(f"pattern {member} reached as {got_pattern!r}, release code {release_code}")
    if call.name == LEGACY_FUSION.key:
        defaults = _dropin_defaults(allreduce_fusion)
        failures += _legacy_delivery(asked, call, defaults)
        return failures, [f"ran {LEGACY_FUSION.key}"], []
    native = workspace.native if isinstance(workspace, FusionWorkspace) else workspace
    if call.arguments.get("workspace") is not native:
        failures.append("the workspace FlashInfer got is not the workspace's own object")
    defaults = _dropin_defaults(allreduce_fusion)
    mapped: list[str] = []
    degraded: list[str] = []
    for name, value in asked.kwargs.items():
        if name in ("workspace", "pattern"):
            continue
        if name not in call.arguments:
            if _is_default(defaults, name, value):
                continue
            if name == "trigger_completion_at_end" and value is False:
                decisions = getattr(workspace, "decisions", ())
                if any(word in d for d in decisions for word in _SAFE_TRIGGER_WORDS):
                    degraded.append(
                        "trigger_completion_at_end=False completes at the end (decisions)"
                    )
                else:
                    failures.append(
                        "trigger_completion_at_end=False dropped, and no decisions entry says "
                        f"the call completes at the end: {list(decisions)}"
                    )
                continue
            mapped.append(f"{name}= not passed to {UNIFIED_FUSION.key}")
        elif not _same(value, call.arguments[name]):
            failures.append(f"{name} reached FlashInfer as {call.arguments[name]!r}")
    for name, value in call.arguments.items():
        if name not in asked.kwargs and not _is_default(defaults, name, value):
            if name in ("norm_out", "residual_out", "output"):
                mapped.append(f"{name} allocated by fi-compat")
            elif name not in ("workspace", "pattern"):
                failures.append(f"{name}={value!r} reached FlashInfer unasked")
    return failures, mapped, degraded


def _legacy_delivery(asked: Asked, call: Call, defaults: Mapping[str, Any]) -> list[str]:
    """The legacy call carries the tensors and the flags asked (names differ)."""
    renamed = {"input": "allreduce_in", "output": "allreduce_out"}
    failures = []
    own = tuple(asked.kwargs["input"].shape)
    reached = (call.arguments.get("token_num"), call.arguments.get("hidden_dim"))
    if reached != own:
        failures.append(
            f"token_num, hidden_dim reached {LEGACY_FUSION.key} as {reached}, not {own}"
        )
    for name, value in asked.kwargs.items():
        if name in ("workspace", "pattern") or _is_default(defaults, name, value):
            continue
        target = renamed.get(name, name)
        if target not in call.arguments:
            failures.append(f"{name} did not reach {LEGACY_FUSION.key}")
        elif value is not None and not _same(value, call.arguments[target]):
            failures.append(f"{name} reached {LEGACY_FUSION.key} as {call.arguments[target]!r}")
    return failures
