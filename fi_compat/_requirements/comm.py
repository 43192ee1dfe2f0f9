"""What ``--require`` answers for comm on the installed release, computed without a call.

It says which arguments and options of the drop-in the installed release takes, which
patterns it has, which call sizes and checkpointing its workspaces serve, and which values
it takes that fi-compat passes as given.

The drop-in keeps FlashInfer 0.7.2.post1's signature on every release; an argument the
installed release has no counterpart for is refused (``CapabilityMissingError``) unless it
holds its default. This module answers, per argument and without calling anything, what
that call would do, so that ``fi-compat report --require dropin:allreduce_fusion.<name>``
and the JSON report can say it in advance. Its answers follow the same tables as the call
(:func:`fi_compat.comm._unified.call_unified`, :func:`fi_compat.comm._legacy.call_legacy`).

:func:`factory_support` answers ``dropin:create_allreduce_fusion_workspace.<option>`` the
same way for the drop-in factory's options (as :func:`~fi_compat.comm._unified.create_unified`
and :func:`~fi_compat.comm._legacy.create_legacy` take them); :func:`pattern_support`
answers ``AllReduceFusionPattern.<member>`` from the installed release's recorded enum, and
:func:`reference_support` ``reference:AllReduceFusionPattern.<member>`` (what the unfused
path refuses, the same on every release). :func:`api_call_gap` says when the installed
fused call does not take what fi-compat passes (a source build with another signature), so
that the ``unified_api`` and ``legacy_api`` flags are missing where the factory refuses.

:func:`checkpoint_support` answers ``checkpointing:<kind>`` the same way: met where the
installed release's workspace of that kind has FlashInfer's own ``checkpoint_prepare`` and
``checkpoint_restore`` (read from the release's recorded workspace classes), which is where
:meth:`fi_compat.comm.FusionWorkspace.checkpoint_prepare` hands them through; elsewhere it
raises :class:`~fi_compat.errors.CheckpointUnsupportedError` with that name as ``feature``.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping

from fi_compat._literal import literal_choices
from fi_compat._probe import locate
from fi_compat._requirements.names import (
    CHECKPOINT_KINDS,
    LEGACY_API,
    SIZE_KINDS,
    UNIFIED_API,
    checkpoint_feature,
    dropin_feature,
    factory_feature,
    pattern_feature,
    reference_feature,
    size_feature,
)
from fi_compat._signature import Status, Support
from fi_compat._surface import (
    COMM,
    LEGACY_FACTORY,
    LEGACY_FUSION,
    PATTERN,
    TORCH_DIST_BACKEND,
    UNIFIED_FACTORY,
    UNIFIED_FUSION,
)
from fi_compat.capabilities import Capabilities
from fi_compat.comm._call_checks import FINALIZE_BACKENDS
from fi_compat.comm._create_checks import BACKENDS
from fi_compat.comm._dropin import DEFAULTS, create_allreduce_fusion_workspace
from fi_compat.comm._factory import accepts, pattern_codes, unaccepted
from fi_compat.comm._legacy import LEGACY_CALL, MAPPED, WHERE_ACCEPTED
from fi_compat.comm._names import PATTERN_NAMES
from fi_compat.comm._reference import IGNORED, READS
from fi_compat.comm._sizes import rule_of
from fi_compat.comm._unified import UNIFIED_CALL

__all__ = [
    "CHECKPOINT_METHODS",
    "DROPIN_ARGUMENTS",
    "FACTORY_OPTIONS",
    "PATTERN_MEMBERS",
    "api_call_gap",
    "checkpoint_support",
    "dropin_support",
    "factory_support",
    "passed_through",
    "pattern_support",
    "reference_support",
    "size_support",
    "torch_distributed_support",
]

#: The drop-in ``allreduce_fusion``'s arguments after ``pattern``: FlashInfer 0.7.2.post1's.
DROPIN_ARGUMENTS: tuple[str, ...] = tuple(DEFAULTS)
#: Each drop-in argument's requirement name -> the argument.
_DROPIN_FEATURES = {dropin_feature(name): name for name in DROPIN_ARGUMENTS}


def _missing(caps: Capabilities) -> Status:
    """How a name answers what the installed release lacks: unknown while the probe is
    still running (a report asked for during it), unsupported once it has run."""
    return Status.UNKNOWN if caps.flashinfer.probe_in_progress else Status.UNSUPPORTED


def _without_fusion(caps: Capabilities) -> Support:
    """What a name of a fused workspace answers where neither allreduce-fusion API is."""
    why = caps.comm.error or "the installed flashinfer.comm has neither allreduce-fusion API"
    return Support(_missing(caps), why)


def _by_api(
    caps: Capabilities,
    features: Mapping[str, str],
    unified: Callable[[Capabilities, str], Support],
    legacy: Callable[[Capabilities, str], Support],
) -> dict[str, Support]:
    """Each requirement name of ``features`` (name -> the argument or option it names),
    answered for the API the drop-in factory picks: ``unified`` where the release has the
    unified API, else ``legacy``; without either, why fusion is unavailable."""
    comm = caps.comm
    if not (comm.unified_api or comm.legacy_api):
        return dict.fromkeys(features, _without_fusion(caps))
    answer = unified if comm.unified_api else legacy
    return {feature: answer(caps, name) for feature, name in features.items()}


def _unified(caps: Capabilities, name: str) -> Support:
    shape = caps.comm.shapes.get(UNIFIED_FUSION.key)
    if shape is None:
        return Support(Status.UNKNOWN, f"{UNIFIED_FUSION.dotted} was not read")
    if shape.keywords is not None and name in shape.keywords:
        return Support(Status.SUPPORTED, f"passed to {UNIFIED_FUSION.dotted}")
    if name == "trigger_completion_at_end":
        return Support(
            Status.SUPPORTED,
            f"{UNIFIED_FUSION.dotted} lacks it; False completes at the end (same result)",
        )
    answer = shape.acceptance(name)
    if answer.status is Status.SUPPORTED:  # reached through **kwargs: the call passes names only
        return Support(Status.UNKNOWN, f"{answer.reason}, which the drop-in does not follow")
    return answer


def _legacy(caps: Capabilities, name: str) -> Support:
    if name not in MAPPED:
        return Support(
            Status.UNSUPPORTED,
            f"the legacy {LEGACY_FUSION.dotted} has no counterpart for it",
        )
    if name not in WHERE_ACCEPTED:
        return Support(Status.SUPPORTED, f"mapped to {LEGACY_FUSION.dotted}")
    shape = caps.comm.shapes.get(LEGACY_FUSION.key)
    if shape is None or shape.keywords is None:
        return Support(Status.UNKNOWN, f"{LEGACY_FUSION.dotted} could not be read")
    if name in shape.keywords:
        return Support(Status.SUPPORTED, f"passed to {LEGACY_FUSION.dotted}")
    return Support(Status.UNSUPPORTED, f"not a keyword parameter of {LEGACY_FUSION.dotted}")


def dropin_support(caps: Capabilities) -> Mapping[str, Support]:
    """For each drop-in argument's requirement name, whether a non-default value runs.

    On a fused workspace of the API the drop-in factory picks: the unified API where the
    release has it, else the legacy one. Without either, every argument is refused with
    the reason fusion is unavailable.
    """
    return _by_api(caps, _DROPIN_FEATURES, _unified, _legacy)


#: FlashInfer's checkpointing methods of a unified workspace (0.6.15+).
CHECKPOINT_METHODS: tuple[str, ...] = ("checkpoint_prepare", "checkpoint_restore")


def _recorded_methods(release: str) -> dict[str, tuple[str, set[str]]] | str:
    """Workspace kind -> (class name, its recorded methods) for ``release``; why not, as a
    str, when the release was not recorded."""
    from fi_compat._records import load_release, workspace_kinds  # the recorded data, once

    try:
        record = load_release(release)
    except Exception:  # not recorded, or a version no Version parses (a hostile __version__)
        return (
            f"flashinfer {release} is not a recorded release, so its workspace classes "
            "were not read"
        )
    exported = record.public_names(COMM)
    found: dict[str, tuple[str, set[str]]] = {}
    for name, kind in workspace_kinds(record).items():
        public = exported.get(name)
        cls = public.cls if public is not None and public.cls is not None else None
        cls = cls or record.comm_class(name)
        if kind and cls is not None:
            found[kind] = (name, {m for m, entry in cls.methods.items() if entry is not None})
    return found


def checkpoint_support(caps: Capabilities) -> Mapping[str, Support]:
    """For each ``checkpointing:<kind>`` name, whether a fused workspace of that kind on the
    installed release can detach its buffers (FlashInfer's ``checkpoint_prepare`` and
    ``checkpoint_restore``).

    The unified API's workspace classes of the installed release are read from its record
    (:func:`fi_compat._records.load_release`): a release that was not recorded (a source
    build) answers unknown. Legacy workspaces never can.
    """
    comm = caps.comm
    release = caps.flashinfer.version
    pending = _missing(caps)
    answers: dict[str, Support] = {}
    recorded: dict[str, tuple[str, set[str]]] | str | None = None
    for kind in CHECKPOINT_KINDS:
        name = checkpoint_feature(kind)
        if kind == "reference":
            answers[name] = Support(
                Status.UNSUPPORTED,
                "a reference workspace is unfused: it holds no FlashInfer buffers to detach",
            )
            continue
        if kind == "legacy":
            answers[name] = (
                Support(
                    Status.UNSUPPORTED,
                    f"{LEGACY_FACTORY.dotted}'s workspaces are IPC handle lists without "
                    "checkpoint_prepare/checkpoint_restore in every release",
                )
                if comm.legacy_api
                else Support(pending, comm.error or "no legacy allreduce-fusion API")
            )
            continue
        if not comm.unified_api:
            answers[name] = Support(pending, comm.error or "no unified allreduce-fusion API")
            continue
        if release is None:
            answers[name] = Support(Status.UNKNOWN, "flashinfer's version could not be read")
            continue
        if recorded is None:
            recorded = _recorded_methods(release)
        if isinstance(recorded, str):
            answers[name] = Support(Status.UNKNOWN, recorded)
            continue
        if kind not in recorded:
            answers[name] = Support(
                Status.UNSUPPORTED, f"flashinfer {release} builds no {kind!r} workspace"
            )
            continue
        cls, methods = recorded[kind]
        lacking = [method for method in CHECKPOINT_METHODS if method not in methods]
        answers[name] = (
            Support(
                Status.UNSUPPORTED,
                f"{COMM}.{cls} of flashinfer {release} has no {'/'.join(lacking)}",
            )
            if lacking
            else Support(
                Status.SUPPORTED,
                f"{COMM}.{cls}.checkpoint_prepare/checkpoint_restore, handed through",
            )
        )
    return answers


# ------------------------------------------------------------------ the drop-in factory

#: The drop-in factory's arguments that say what to allocate, not how: every release takes
#: them (``backend`` is a choice of the unified API's, refused on the legacy one as
#: ``unified_api``).
_FACTORY_SPEC = frozenset({"backend", "world_size", "rank", "max_token_num", "hidden_dim", "dtype"})
#: The drop-in factory's options (FlashInfer 0.7.2.post1's, the keyword-only ones included),
#: read from its signature: each has a ``dropin:create_allreduce_fusion_workspace.<option>``.
FACTORY_OPTIONS: tuple[str, ...] = tuple(
    name
    for name in inspect.signature(create_allreduce_fusion_workspace).parameters
    if name not in _FACTORY_SPEC
)
#: Each drop-in factory option's requirement name -> the option.
_FACTORY_FEATURES = {factory_feature(name): name for name in FACTORY_OPTIONS}
#: Options the legacy API records and does not pass: they only choose or size MNNVL.
_RECORDED = {
    "gpus_per_node": "recorded, not passed: the legacy TRT-LLM buffers reach the GPUs of one "
    "node, where it is not read (a group larger than gpus_per_node is refused as unified_api)",
    "force_oneshot_support": "recorded, not passed: only the unified API's MNNVL backend "
    "reads it; the TRT-LLM buffers serve one-shot and two-shot alike",
    "comm_backend": f"not passed ({LEGACY_FACTORY.key} takes none): taken together with the "
    "group= it communicates over, the rendezvous running over that group",
}


def _unified_group(caps: Capabilities) -> Support:
    """What ``create_unified`` does with a group smaller than the world."""
    if accepts(caps, UNIFIED_FACTORY, "group"):
        return Support(Status.SUPPORTED, f"passed to {UNIFIED_FACTORY.dotted} as group=")
    path = caps.comm.torch_dist_backend
    if accepts(caps, UNIFIED_FACTORY, "comm_backend") and path is not None:
        return Support(
            Status.SUPPORTED,
            f"carried by comm_backend={path} over the group ({UNIFIED_FACTORY.key} takes no "
            "group=)",
        )
    return Support(
        Status.UNSUPPORTED,
        f"{UNIFIED_FACTORY.key} takes no group= and {COMM} has no {TORCH_DIST_BACKEND.key} "
        "to carry it: a group smaller than the world raises GroupNotSupportedError (feature "
        "group)",
    )


def _unified_option(caps: Capabilities, name: str) -> Support:
    if name == "group":
        return _unified_group(caps)
    shape = caps.comm.shapes.get(UNIFIED_FACTORY.key)
    if shape is None:
        return Support(Status.UNKNOWN, f"{UNIFIED_FACTORY.dotted} was not read")
    answer = shape.acceptance(name)
    if answer.supported:
        return Support(Status.SUPPORTED, f"passed to {UNIFIED_FACTORY.dotted} ({answer.reason})")
    return answer


def _legacy_option(caps: Capabilities, name: str) -> Support:
    if name in _RECORDED:
        return Support(Status.SUPPORTED, _RECORDED[name])
    if name == "group":
        if accepts(caps, LEGACY_FACTORY, "group"):
            return Support(Status.SUPPORTED, f"passed to {LEGACY_FACTORY.dotted} as group=")
        return Support(
            Status.UNSUPPORTED,
            f"{LEGACY_FACTORY.key} takes no group=: a group smaller than the world raises "
            "GroupNotSupportedError (feature group; one spanning the world is left out)",
        )
    return Support(
        Status.UNSUPPORTED,
        f"an option of the unified {UNIFIED_FACTORY.key}, which the legacy API has no "
        "counterpart for",
    )


def factory_support(caps: Capabilities) -> Mapping[str, Support]:
    """For each drop-in factory option's requirement name, whether a non-default value is
    taken by the factory the drop-in picks: the unified one where the release has it (as its
    probed signature says), else the legacy one (as :func:`~fi_compat.comm._legacy.create_legacy`
    maps it). Without either, every option is refused with the reason fusion is unavailable.
    """
    return _by_api(caps, _FACTORY_FEATURES, _unified_option, _legacy_option)


# ---------------------------------------------------------------------------- patterns

#: Every member of fi-compat's ``AllReduceFusionPattern``, in code order.
PATTERN_MEMBERS: tuple[str, ...] = tuple(PATTERN_NAMES[code] for code in sorted(PATTERN_NAMES))


def _recorded_members(release: str) -> frozenset[str] | str:
    """The members of ``release``'s recorded ``AllReduceFusionPattern``; why not, as a str."""
    from fi_compat._records import load_release  # the recorded data, once

    try:
        record = load_release(release)
    except Exception:  # not recorded, or a version no Version parses (a hostile __version__)
        return f"flashinfer {release} is not a recorded release, so its {PATTERN.key} was not read"
    enum = record.comm_enums.get(PATTERN.key)
    return frozenset(enum.members) if enum is not None else frozenset()


def pattern_support(caps: Capabilities) -> Mapping[str, Support]:
    """For each ``AllReduceFusionPattern.<member>`` name, whether the drop-in runs that
    pattern on a fused workspace of the API its factory picks: where the installed release's
    own ``AllReduceFusionPattern`` has the member (read from its record; a release that was
    not recorded answers unknown). Without either API, every pattern is refused with the
    reason. A reference workspace has names of its own (:func:`reference_support`).
    """
    from fi_compat._records import member_introduced_in  # the recorded data, once

    comm = caps.comm
    release = caps.flashinfer.version
    names = [pattern_feature(member) for member in PATTERN_MEMBERS]
    if not (comm.unified_api or comm.legacy_api):
        return dict.fromkeys(names, _without_fusion(caps))
    if release is None:
        return {
            name: Support(Status.UNKNOWN, "flashinfer's version could not be read")
            for name in names
        }
    members = _recorded_members(release)
    if isinstance(members, str):
        return {name: Support(Status.UNKNOWN, members) for name in names}
    api = "unified" if comm.unified_api else "legacy"
    answers: dict[str, Support] = {}
    for member, name in zip(PATTERN_MEMBERS, names, strict=True):
        if member in members:
            answers[name] = Support(
                Status.SUPPORTED,
                f"{COMM}.{PATTERN.key}.{member} of flashinfer {release}, run on its {api} "
                "workspaces",
            )
            continue
        introduced_in = member_introduced_in(PATTERN.key, member)
        note = f" (first in flashinfer {introduced_in})" if introduced_in is not None else ""
        answers[name] = Support(
            Status.UNSUPPORTED, f"flashinfer {release}'s {PATTERN.key} has no {member}{note}"
        )
    return answers


def reference_support(caps: Capabilities) -> Mapping[str, Support]:
    """For each ``reference:AllReduceFusionPattern.<member>`` name: missing on every release,
    saying what a reference workspace computes of that pattern (it runs ``kAllReduce`` and
    ``kARResidualRMSNorm`` only, and neither with quantization or MoE arguments)."""
    answers: dict[str, Support] = {}
    for code in sorted(PATTERN_NAMES):
        member = PATTERN_NAMES[code]
        reads = READS.get(code)
        if reads is None:
            why = (
                "the unfused reference path computes only kAllReduce and kARResidualRMSNorm, "
                "on every release: create a fused workspace for it"
            )
        else:
            arguments = ", ".join(sorted(reads | IGNORED))
            why = (
                f"the unfused reference path computes it with {arguments} only; any other "
                "argument of the drop-in (quantization, MoE) is refused, on every release"
            )
        answers[reference_feature(member)] = Support(Status.UNSUPPORTED, why)
    return answers


# ------------------------------------------------------------------ the fused calls' shape

#: The keywords each API's bound call passes to its fused call (the unified one's
#: ``trigger_completion_at_end`` only where taken), by the ``--require`` flag of the API.
_CALLS = {
    UNIFIED_API: (
        UNIFIED_FUSION,
        tuple(k for k in UNIFIED_CALL if k != "trigger_completion_at_end"),
    ),
    LEGACY_API: (LEGACY_FUSION, tuple(LEGACY_CALL)),
}


def api_call_gap(caps: Capabilities, flag: str) -> str | None:
    """Why a workspace of the API ``flag`` (``unified_api`` or ``legacy_api``) is refused
    when it is bound: the installed fused call's probed signature lacks a keyword fi-compat
    passes (a source build with another signature); None when it takes them all."""
    symbol, ours = _CALLS[flag]
    lacking = unaccepted(caps, symbol, ours)
    if not lacking:
        return None
    return (
        f"{symbol.dotted} takes no keyword {', '.join(lacking)}, which fi-compat passes: a "
        "build with another signature, refused when a workspace is created"
    )


# ---------------------------------------------------------------------- torch.distributed


def torch_distributed_support(caps: Capabilities) -> Support:
    """``torch.distributed``: whether this Python's torch has it. A reference workspace of
    several processes needs it initialized too, which is a state of that process."""
    after = (
        "; it must also be initialized (torch.distributed.init_process_group) before a "
        "reference workspace of several processes is created, in that process"
    )
    torch = sys.modules.get("torch")
    if torch is None:
        if caps.torch.version is None:
            return Support(Status.UNSUPPORTED, "torch is not installed")
        return Support(
            Status.UNKNOWN,
            f"torch {caps.torch.version} is installed but was not imported here, so "
            f"torch.distributed was not read{after}",
        )
    try:
        available = bool(torch.distributed.is_available())
    except Exception as error:  # a broken torch: a finding, not a crash
        return Support(
            Status.UNKNOWN, f"torch.distributed.is_available() raised {type(error).__name__}"
        )
    if not available:
        return Support(Status.UNSUPPORTED, "this torch build has no torch.distributed")
    return Support(Status.SUPPORTED, f"torch.distributed is available{after}")


# ----------------------------------------------------------------------- per-call sizes


def size_support(caps: Capabilities) -> dict[str, Support]:
    """For each ``per_call_sizes:<kind>`` name, whether the installed release's workspaces
    of that kind serve calls of other sizes than their own (met) or only their own."""
    release = caps.flashinfer.version
    answers: dict[str, Support] = {}
    for kind in SIZE_KINDS:
        api_present = caps.comm.legacy_api if kind == "legacy" else caps.comm.unified_api
        if not api_present:
            why = caps.comm.error or (
                "no legacy allreduce-fusion API" if kind == "legacy" else "no unified API"
            )
            answers[size_feature(kind)] = Support(_missing(caps), why)
            continue
        rule, why = rule_of(release, kind)
        if rule == "exact":
            answers[size_feature(kind)] = Support(
                Status.UNSUPPORTED, f"only the creation-time hidden size: {why}"
            )
        else:
            answers[size_feature(kind)] = Support(
                Status.SUPPORTED, f"any call that fits ({rule} rule), {why}"
            )
    return answers


# ------------------------------------------------------------ values passed as given


def passed_through(caps: Capabilities) -> dict[str, list[str]]:
    """Per parameter (``backend``, ``moe_finalize_backend``, ``pattern``), the values the
    installed release takes that fi-compat passes as given; empty lists where there are none
    (or the release says nothing it can read).

    fi-compat adapts the backends, finalize backends and pattern codes it knows; a value a
    newer release adds goes to that release unchanged (``create_workspace`` says so in
    ``workspace.decisions``, the drop-in once per pattern). This lists what the installed
    release's own ``Literal`` annotations and ``AllReduceFusionPattern`` hold beyond those,
    so that an engine sees in advance which values it will run unadapted.
    """
    found: dict[str, list[str]] = {"backend": [], "moe_finalize_backend": [], "pattern": []}
    if not caps.comm.available or not caps.comm.unified_api:
        return found
    for key, symbol, parameter, known in (
        ("backend", UNIFIED_FACTORY, "backend", BACKENDS),
        ("moe_finalize_backend", UNIFIED_FUSION, "moe_finalize_backend", FINALIZE_BACKENDS),
    ):
        function = locate(symbol)
        choices = literal_choices(function, parameter) if callable(function) else None
        found[key] = [str(value) for value in choices or () if value not in known]
    found["pattern"] = [
        f"{name}={value}" for value, name in pattern_codes().items() if value not in PATTERN_NAMES
    ]
    return found
