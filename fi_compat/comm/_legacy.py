"""The legacy TRT-LLM IPC allreduce-fusion API (0.2.9+): workspace, launch, drop-in, destroy.

FlashInfer's factory (:data:`~fi_compat._surface.LEGACY_FACTORY`) returns a tuple whose
first item is the IPC handles and whose second is the pointer tensor every launch takes;
its fused call (:data:`~fi_compat._surface.LEGACY_FUSION`) takes 21 arguments, all
required; the handles are freed with :data:`~fi_compat._surface.LEGACY_DESTROY` (never the
non-fusion destroy function). This module makes that workspace (:func:`create_legacy`),
builds its launch (:func:`legacy_launch`, also used by the unified API of 0.6.0 to 0.6.7 to
honour ``trigger_completion_at_end=False``) and maps the drop-in's other patterns onto the
fused call (:func:`call_legacy`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from fi_compat._probe import locate
from fi_compat._requirements.names import LEGACY_API, UNIFIED_API
from fi_compat._signature import inspect_callable
from fi_compat._surface import (
    GATES,
    LEGACY_DESTROY,
    LEGACY_FACTORY,
    LEGACY_FUSION,
)
from fi_compat.capabilities import Capabilities, get_capabilities
from fi_compat.comm._factory import (
    Created,
    Request,
    accepts,
    capability_missing,
    check_call,
    check_pattern,
    group_error,
    installed,
    installed_pattern,
    not_accepted,
    option_refused,
)
from fi_compat.comm._launch import (
    Launcher,
    arguments,
    bind,
    positional_launch,
    positional_layout,
    table_freeze,
)
from fi_compat.comm._sizes import fit_for
from fi_compat.comm._types import Spec, Values

if TYPE_CHECKING:
    import torch

__all__ = ["LEGACY_CALL", "call_legacy", "create_legacy", "legacy_launch"]

#: The parameters of the legacy fused call (0.2.9+), every one of them required, in its
#: order, each with what the bound launch passes (a name of ``LAUNCH_VALUES`` of
#: ``_launch``, or one of :func:`legacy_launch`'s constants, named as the parameter).
LEGACY_CALL: dict[str, str] = {
    "allreduce_in": "input",
    "world_size": "world_size",
    "world_rank": "world_rank",
    "token_num": "tokens",
    "hidden_dim": "hidden",
    "workspace_ptrs": "workspace_ptrs",
    "launch_with_pdl": "launch_with_pdl",
    "trigger_completion_at_end": "trigger_completion_at_end",
    "fp32_acc": "fp32_acc",
    "pattern_code": "pattern_code",
    "use_oneshot": "use_oneshot",
    "allreduce_out": "allreduce_out",
    "residual_in": "residual",
    "residual_out": "residual_out",
    "norm_out": "norm_out",
    "quant_out": "quant_out",
    "scale_out": "scale_out",
    "rms_gamma": "weight",
    "rms_eps": "eps",
    "scale_factor": "scale_factor",
    "layout_code": "layout_code",
}


# ---------------------------------------------------------------------------- creation


def create_legacy(caps: Capabilities, request: Request) -> Created:
    """A legacy IPC workspace, bound to the legacy fused call, freed by its destroy function.

    ``request`` as checked by ``create_workspace``. The unified factory's options map as the
    unified API's TRT-LLM backend reads them: ``gpus_per_node`` and
    ``force_oneshot_support`` only choose or size MNNVL, so they are recorded and not
    passed (a group larger than one node is refused: the IPC buffers reach one node); a
    ``comm_backend`` is taken with the ``group=`` it is over (the factory runs the
    rendezvous over that group itself). A backend besides TRT-LLM and the 0.7 keyword-only
    options raise :class:`~fi_compat.errors.CapabilityMissingError`. ``group`` goes as
    ``group=`` where the factory takes it, is left out when it spans the whole world, and
    is refused otherwise. The factory is asked for its metadata where it can give it
    (0.5.0+).
    """
    import torch

    spec = request.spec
    unified = GATES["unified_api"].introduced_in
    if request.backend not in ("auto", "trtllm"):
        raise capability_missing(
            UNIFIED_API,
            f"backend={request.backend!r} (only the unified API has backends besides TRT-LLM)",
            f"flashinfer {caps.flashinfer.version} with only the legacy API",
            f"use backend='auto' or 'trtllm', or upgrade flashinfer-python to {unified}+",
        )
    decisions: list[str] = []
    for name, value in request.factory_options.items():
        if value is not None:
            raise option_refused(caps, name, legacy=True)
    if request.gpus_per_node is not None:
        if request.gpus_per_node < spec.world_size:
            raise capability_missing(
                UNIFIED_API,
                f"a multi-node group ({spec.world_size} ranks, {request.gpus_per_node} GPUs "
                "per node) on the MNNVL backend of the unified API",
                f"flashinfer {caps.flashinfer.version} with only the legacy TRT-LLM IPC API, "
                "which reaches the GPUs of one node",
                f"use one node, or upgrade flashinfer-python to {unified}+",
            )
        decisions.append(
            f"gpus_per_node={request.gpus_per_node} not passed: the group fits in one node, where "
            "the TRT-LLM backend does not read it (the unified API uses it to choose MNNVL)"
        )
    if request.force_oneshot_support:
        decisions.append(
            "force_oneshot_support not passed: only the unified API's MNNVL backend reads it; "
            "the TRT-LLM buffers serve one-shot and two-shot alike"
        )
    if request.comm_backend is not None:
        _check_comm_backend(request.comm_backend, request.group)
        decisions.append(
            f"comm_backend not passed ({LEGACY_FACTORY.key} takes none): the rendezvous "
            "runs over group= with torch.distributed, the group comm_backend is over"
        )
    factory = installed(caps, LEGACY_FACTORY, LEGACY_API)
    fusion = installed(caps, LEGACY_FUSION, LEGACY_API)
    destroy = locate(LEGACY_DESTROY)
    if not callable(destroy):
        raise capability_missing(
            LEGACY_API,
            f"{LEGACY_DESTROY.dotted} to free the legacy workspace",
            f"flashinfer {caps.flashinfer.version} without it",
            "use api='reference'",
        )
    check_call(caps, LEGACY_FUSION, fusion, LEGACY_CALL)
    kwargs: dict[str, Any] = {
        "tp_rank": spec.rank,
        "tp_size": spec.world_size,
        "max_token_num": spec.max_token_num,
        "hidden_dim": spec.hidden_dim,
    }
    if spec.dtype is torch.float32:
        if not accepts(caps, LEGACY_FACTORY, "use_fp32_lamport"):
            raise capability_missing(
                LEGACY_API,
                f"{LEGACY_FACTORY.dotted} to take use_fp32_lamport= for float32",
                f"flashinfer {caps.flashinfer.version} without it",
                "use bfloat16 or float16 activations",
            )
        kwargs["use_fp32_lamport"] = True
    destroy_kwargs: dict[str, Any] = {}
    if request.group is not None:
        if accepts(caps, LEGACY_FACTORY, "group"):
            kwargs["group"] = request.group
            decisions.append("group passed as group=")
        elif request.span.whole_world:
            decisions.append("group left out: it spans the whole world, the default")
        else:
            raise group_error(
                caps, LEGACY_FACTORY, request.span, f"{LEGACY_FACTORY.key} takes no group="
            )
        if inspect_callable(LEGACY_DESTROY.key, destroy).acceptance("group").supported:
            destroy_kwargs["group"] = request.group
    if accepts(caps, LEGACY_FACTORY, "create_metadata"):
        kwargs["create_metadata"] = True  # the release's own metadata, for the workspace's
    created = factory(**kwargs)
    ipc_handles = created[0]
    launcher = legacy_launch(
        spec, function=fusion, workspace_ptrs=created[1], pattern=installed_pattern()
    )
    decisions.append(
        f"legacy API: {LEGACY_FACTORY.key} + {LEGACY_FUSION.key}, freed by {LEGACY_DESTROY.key}"
    )

    def free() -> None:
        destroy(ipc_handles, **destroy_kwargs)

    fit = fit_for(spec, release=caps.flashinfer.version, kind="legacy", native=created)
    return Created(
        backend="trtllm",
        bound=bind(spec, fit, launcher),
        destroy=free,
        native=created,
        decisions=tuple(decisions),
        fit=fit,
    )


def _check_comm_backend(comm_backend: Any, group: Any) -> None:
    """Refuse a ``comm_backend`` whose group the legacy factory cannot be given.

    The legacy factory takes no ``comm_backend``; it runs its rendezvous over ``group=``
    with torch.distributed. That is the same only when the caller's ``group`` holds the
    processes ``comm_backend`` communicates over: it must be given, and where the backend
    says its group (a ``TorchDistBackend``), be that group or one of the same ranks.
    """
    unified = GATES["unified_api"].introduced_in
    known = _backend_group(comm_backend)
    if group is None or (known is not _UNKNOWN and not _same_ranks(known, group)):
        raise capability_missing(
            UNIFIED_API,
            f"comm_backend= together with the group= it communicates over "
            f"({LEGACY_FACTORY.key} takes no comm_backend=, only group=)",
            "no group=" if group is None else "a comm_backend over another group",
            f"pass group= (the process group of comm_backend), or upgrade flashinfer-python "
            f"to {unified}+",
        )


_UNKNOWN = object()


def _same_ranks(one: Any, other: Any) -> bool:
    """The two process groups are one, or hold the same global ranks in the same order
    (an engine's CPU group and device group over one set of processes)."""
    if one is other:
        return True
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    try:
        return bool(dist.get_process_group_ranks(one) == dist.get_process_group_ranks(other))
    except Exception:  # not process groups torch.distributed knows: not provably the same
        return False


def _backend_group(comm_backend: Any) -> Any:
    """The process group a ``TorchDistBackend`` (FlashInfer's or fi-compat's) is over."""
    for attribute in ("_fi_compat_group", "_group"):
        try:
            return object.__getattribute__(comm_backend, attribute)
        except AttributeError:
            continue
    return _UNKNOWN


# ------------------------------------------------------------------------------ launch


def legacy_launch(
    spec: Spec, *, function: Callable[..., Any], workspace_ptrs: Any, pattern: int
) -> Launcher:
    """A launch of the installed legacy fused call ``function`` on ``workspace_ptrs``.

    Used for legacy workspaces, and on 0.6.0 to 0.6.7 to honour
    ``trigger_completion_at_end=False`` on a unified TRT-LLM workspace (the unified call
    of those releases runs this same kernel with the flag tied to ``launch_with_pdl``).

    The function takes 21 arguments, too many to pass by keyword without CPython building
    a dict per call, so where its signature allows they are passed by position: the
    constants are placed once, and each call picks the rest from the call's values
    (``_launch.positional_launch``). Behind a forwarding wrapper (the ``deprecated`` legacy
    entry points of 0.6.0+), which builds its own ``**kwargs`` dict anyway, they are
    passed by keyword.
    """
    constants: dict[str, Any] = {
        "world_size": spec.world_size,
        "world_rank": spec.rank,
        "workspace_ptrs": workspace_ptrs,
        "pattern_code": pattern,
        "allreduce_out": None,
        "quant_out": None,
        "scale_out": None,
        "scale_factor": None,
        "layout_code": None,
    }

    freeze = table_freeze(function, LEGACY_CALL, constants)
    layout = positional_layout(function, tuple(LEGACY_CALL))
    if layout is not None:
        return Launcher(positional_launch(function, layout, LEGACY_CALL, constants), freeze)

    def by_keyword(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> None:
        function(**arguments(LEGACY_CALL, constants, call, norm_out, residual_out, tokens, hidden))

    return Launcher(by_keyword, freeze)


# ---------------------------------------------------------------------------- drop-in

#: The drop-in's arguments the legacy fused call takes under the same name, always.
_SAME_NAME = (
    "launch_with_pdl",
    "trigger_completion_at_end",
    "fp32_acc",
    "use_oneshot",
    "residual_in",
    "residual_out",
    "norm_out",
    "quant_out",
    "scale_out",
    "rms_gamma",
    "rms_eps",
    "scale_factor",
    "layout_code",
)
#: The drop-in's arguments only some releases' legacy call takes (passed where it does).
WHERE_ACCEPTED = ("block_quant_group_size", "weight_bias")
#: Every drop-in argument with a counterpart here (``output`` is ``allreduce_out``); any
#: other (the MoE patterns' arguments, 0.6.8+) is refused when given.
MAPPED = frozenset((*_SAME_NAME, *WHERE_ACCEPTED, "output"))


def call_legacy(
    input: Any,
    pattern: int,
    values: Mapping[str, Any],
    given: Mapping[str, Any],
    *,
    spec: Spec,
    workspace_ptrs: Any,
) -> Any:
    """The drop-in's call on a legacy workspace, any pattern the release has.

    ``values`` holds every drop-in argument after ``pattern`` (defaults included: the
    legacy call requires them all), ``given`` those that differ from their defaults. An
    argument the legacy call has no counterpart for, or a pattern the installed release
    lacks, raises :class:`~fi_compat.errors.CapabilityMissingError`. Returns what the
    unified call would: ``norm_out``, else ``quant_out``, else ``output``.
    """
    import torch

    caps = get_capabilities()
    check_pattern(caps, pattern)
    for name in given:
        if name not in MAPPED:
            raise not_accepted(LEGACY_FUSION, name, caps.flashinfer.version)
    output = values["output"]
    if output is None:
        output = torch.empty_like(input)
    kwargs: dict[str, Any] = {
        "allreduce_in": input,
        "world_size": spec.world_size,
        "world_rank": spec.rank,
        "token_num": int(input.shape[0]),
        "hidden_dim": int(input.shape[1]),
        "workspace_ptrs": workspace_ptrs,
        "pattern_code": pattern,
        "allreduce_out": output,
    }
    for name in _SAME_NAME:
        kwargs[name] = values[name]
    shape = caps.comm.shapes.get(LEGACY_FUSION.key)
    accepted = shape.keywords if shape is not None and shape.keywords is not None else {}
    for name in WHERE_ACCEPTED:
        if name in given:
            if name not in accepted:
                raise not_accepted(LEGACY_FUSION, name, caps.flashinfer.version)
            kwargs[name] = given[name]
    fusion = installed(caps, LEGACY_FUSION, LEGACY_API)
    fusion(**kwargs)
    norm_out, quant_out = values["norm_out"], values["quant_out"]
    return norm_out if norm_out is not None else quant_out if quant_out is not None else output
