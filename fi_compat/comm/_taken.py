"""Which arguments of the drop-in ``allreduce_fusion`` the installed release takes, and
which kinds of fused workspace it can checkpoint.

The drop-in keeps FlashInfer 0.7.2.post1's signature on every release; an argument the
installed release has no counterpart for is refused (``CapabilityMissingError``) unless it
holds its default. This module answers, per argument and without calling anything, what
that call would do, so that ``fi-compat report --require dropin:allreduce_fusion.<name>``
and the JSON report can say it in advance. Its answers follow the same tables as the call
(:func:`fi_compat.comm._unified.call_unified`, :func:`fi_compat.comm._legacy.call_legacy`).

:func:`checkpoint_support` answers ``checkpointing:<kind>`` the same way: met where the
installed release's workspace of that kind has FlashInfer's own ``checkpoint_prepare`` and
``checkpoint_restore`` (read from the release's recorded workspace classes), which is where
:meth:`fi_compat.comm.FusionWorkspace.checkpoint_prepare` hands them through; elsewhere it
raises :class:`~fi_compat.errors.CheckpointUnsupportedError` with that name as ``feature``.
"""

from __future__ import annotations

from collections.abc import Mapping

from fi_compat._signature import Status, Support
from fi_compat._surface import COMM, LEGACY_FACTORY, LEGACY_FUSION, UNIFIED_FUSION
from fi_compat.capabilities import Capabilities
from fi_compat.comm._dropin import DEFAULTS
from fi_compat.comm._factory import dropin_feature
from fi_compat.comm._legacy import MAPPED, WHERE_TAKEN

#: The drop-in ``allreduce_fusion``'s arguments after ``pattern``: FlashInfer 0.7.2.post1's.
DROPIN_ARGUMENTS: tuple[str, ...] = tuple(DEFAULTS)


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
    answer = shape.support(name)
    if answer.status is Status.SUPPORTED:  # reached through **kwargs: the call passes names only
        return Support(Status.UNKNOWN, f"{answer.reason}, which the drop-in does not follow")
    return answer


def _legacy(caps: Capabilities, name: str) -> Support:
    if name not in MAPPED:
        return Support(
            Status.UNSUPPORTED,
            f"the legacy {LEGACY_FUSION.dotted} has no counterpart for it",
        )
    if name not in WHERE_TAKEN:
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
    comm = caps.comm
    if comm.unified_api:
        return {dropin_feature(name): _unified(caps, name) for name in DROPIN_ARGUMENTS}
    if comm.legacy_api:
        return {dropin_feature(name): _legacy(caps, name) for name in DROPIN_ARGUMENTS}
    why = comm.error or "the installed flashinfer.comm has neither allreduce-fusion API"
    status = Status.UNKNOWN if caps.flashinfer.probe_in_progress else Status.UNSUPPORTED
    return {dropin_feature(name): Support(status, why) for name in DROPIN_ARGUMENTS}


#: The kinds of workspace a ``checkpointing:<kind>`` requirement names: the unified API's
#: backends, the legacy API, and the unfused reference path.
CHECKPOINT_KINDS: tuple[str, ...] = ("trtllm", "mnnvl", "mnnvl-cutedsl", "legacy", "reference")
#: FlashInfer's checkpointing methods of a unified workspace (0.6.15+).
CHECKPOINT_METHODS: tuple[str, ...] = ("checkpoint_prepare", "checkpoint_restore")


def checkpoint_feature(kind: str) -> str:
    """The ``--require`` name of checkpointing on one kind of workspace."""
    return f"checkpointing:{kind}"


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
    pending = Status.UNKNOWN if caps.flashinfer.probe_in_progress else Status.UNSUPPORTED
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
