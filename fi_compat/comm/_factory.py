"""What every API's factory shares: the request it is given, what it hands back, the
installed release's answers and the errors for its gaps.

``create_workspace`` checks its arguments and builds one :class:`Request`, which the API
module it chose (``_unified``, ``_legacy`` or ``_reference``) is given whole. Creating a
workspace on the unified or the legacy API asks the same questions of the installed
release (does this function take that keyword, would it accept the call we are
about to bind, what is its ``kARResidualRMSNorm`` code) and refuses in the same words when
it cannot (:func:`capability_missing`, :func:`group_error`, :func:`trtllm_ranks_error`).
Every answer comes from :func:`~fi_compat.get_capabilities` and every FlashInfer object from
``fi_compat._probe.locate``, so FlashInfer names are spelled only in
:mod:`fi_compat._surface`.

An API module hands what it made back as :class:`Created`; ``_workspace`` wraps it in a
``FusionWorkspace``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from fi_compat._probe import locate
from fi_compat._requirements.names import (
    api_feature,
    dropin_feature,
    factory_feature,
    gate_feature,
    pattern_feature,
)
from fi_compat._surface import (
    GATES,
    PATTERN,
    UNIFIED_FACTORY,
    Symbol,
)
from fi_compat.capabilities import Capabilities
from fi_compat.comm._group import GroupSpan
from fi_compat.comm._launch import BoundCall
from fi_compat.comm._names import PATTERN_NAMES, AllReduceFusionPattern
from fi_compat.comm._sizes import Fit
from fi_compat.comm._types import Spec
from fi_compat.errors import (
    CapabilityMissingError,
    FiCompatError,
    GroupNotSupportedError,
    InvalidArgumentError,
    explain,
)

__all__ = [
    "TRTLLM_RANKS",
    "Created",
    "Request",
    "accepts",
    "capability_missing",
    "check_call",
    "check_pattern",
    "group_error",
    "installed",
    "installed_pattern",
    "not_accepted",
    "option_refused",
    "pattern_codes",
    "trtllm_ranks_error",
    "unaccepted",
]

#: Rank counts the TRT-LLM fusion kernel dispatches on (``allreduce_fusion_op`` in
#: trtllm_allreduce_fusion.cuh, every release since 0.2.9; anything else fails at launch
#: with "unsupported ranks number! Supported ranks: 2, 4, 8, 16"). It runs both the
#: legacy API and the unified API's "trtllm" backend.
TRTLLM_RANKS = (2, 4, 8, 16)


@dataclass(frozen=True)
class Request:
    """What ``create_workspace`` was asked for, checked: the one argument of every factory.

    Attributes
    ----------
    spec
        The sizes, dtype and device.
    span
        How ``group`` relates to the world.
    group
        The ``torch.distributed`` process group, or None (the default group).
    backend
        FlashInfer's backend asked for (``"auto"``, ``"trtllm"``, ...).
    comm_backend, gpus_per_node, force_oneshot_support
        The unified factory's options as given.
    factory_options
        The unified factory's other keyword options (checked; None values included).
    """

    spec: Spec
    span: GroupSpan
    group: Any
    backend: str
    comm_backend: Any
    gpus_per_node: int | None
    force_oneshot_support: bool
    factory_options: Mapping[str, Any]


class Created(NamedTuple):
    """What an API module made for a workspace (the rest is the caller's: api, spec, group).

    Attributes
    ----------
    backend
        FlashInfer's backend that runs it, or ``"reference"``.
    bound
        Its per-call and prepared paths.
    destroy
        Frees its buffers; None when it holds none.
    fit
        Which call sizes it serves (``bound`` checks every call against it).
    native
        FlashInfer's workspace object, the legacy factory's tuple, or None.
    comm_backend
        The ``comm_backend`` passed to FlashInfer, if any.
    decisions
        What was decided, one sentence each.
    reason
        Why the workspace is unfused (reference only).
    """

    backend: str
    bound: BoundCall
    destroy: Callable[[], None] | None
    fit: Fit
    native: Any = None
    comm_backend: Any = None
    decisions: tuple[str, ...] = ()
    reason: str | None = None


def accepts(caps: Capabilities, symbol: Symbol, keyword: str) -> bool:
    """The installed ``symbol`` takes ``keyword`` (from its probed signature)."""
    shape = caps.comm.shapes.get(symbol.key)
    return shape is not None and shape.acceptance(keyword).supported


def installed(caps: Capabilities, symbol: Symbol, feature: str) -> Any:
    """The installed ``symbol``, looked up in each of its homes.

    Raises
    ------
    CapabilityMissingError
        No home has it (``feature``: the gate of the API it belongs to).
    """
    value = locate(symbol)
    if value is None:
        raise capability_missing(
            feature,
            symbol.dotted,
            f"flashinfer {caps.flashinfer.version} without it",
            "install a release that has it, or use api='reference'",
        )
    return value


def installed_pattern() -> int:
    """The installed release's ``kARResidualRMSNorm`` code (ours where it has none)."""
    pattern = locate(PATTERN)
    value = getattr(pattern, "kARResidualRMSNorm", AllReduceFusionPattern.kARResidualRMSNorm)
    return int(value)


def pattern_codes() -> dict[int, str]:
    """The installed release's ``AllReduceFusionPattern``: code -> member name (its public
    int attributes; empty when it has none, or cannot be read)."""
    try:
        attributes = dict(vars(locate(PATTERN) or object))
    except (Exception, SystemExit, GeneratorExit):  # an unreadable (or hostile) class
        return {}
    return {
        value: name
        for name, value in attributes.items()
        if isinstance(value, int) and not isinstance(value, bool) and not name.startswith("_")
    }


def _required(function: Callable[..., Any]) -> set[str] | None:
    """Names of parameters without a default, or None when unreadable."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    return {
        p.name
        for p in parameters
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }


def unaccepted(caps: Capabilities, symbol: Symbol, ours: Collection[str]) -> list[str]:
    """The keywords among ``ours`` that the installed ``symbol``'s probed signature lacks,
    sorted; none when the signature could not be read (the call is then bound as is)."""
    shape = caps.comm.shapes.get(symbol.key)
    if shape is None or shape.keywords is None:
        return []
    return sorted(set(ours) - set(shape.keywords))


def check_call(
    caps: Capabilities, symbol: Symbol, function: Callable[..., Any], ours: Collection[str]
) -> None:
    """Refuse to bind a call the installed ``symbol`` would reject with ``TypeError``.

    ``ours`` are the keywords the bound call passes: each must be one the release takes,
    and every parameter without a default must be among them. The refusal's ``feature`` is
    the API that cannot run (:func:`api_feature`), which ``--require`` then answers missing
    where the probed signature lacks one of ``ours``.
    """
    passed = set(ours)
    unknown = unaccepted(caps, symbol, passed)
    required = _required(function)
    absent = sorted(required - passed) if required is not None else []
    if unknown or absent:
        found = []
        if unknown:
            found.append(f"no keyword {', '.join(unknown)}")
        if absent:
            found.append(f"required parameter {', '.join(absent)}")
        raise CapabilityMissingError(
            explain(
                f"{symbol.dotted} to take {', '.join(sorted(passed))}",
                f"{'; '.join(found)} in the installed release",
                fix="report this release to fi-compat; until then use api='reference'",
            ),
            feature=api_feature(symbol),
        )


def capability_missing(feature: str, what: str, found: str, fix: str) -> CapabilityMissingError:
    """The error for something the release lacks; ``feature`` names a gate where one
    applies (its release then goes into the message)."""
    gate = GATES.get(feature)
    return CapabilityMissingError(
        explain(what, found, changed_in=gate.introduced_in if gate else None, fix=fix),
        feature=feature,
        introduced_in=gate.introduced_in if gate else None,
    )


def not_accepted(symbol: Symbol, name: str, version: str | None) -> CapabilityMissingError:
    """The error for a drop-in argument ``name`` the installed ``symbol`` does not take.

    The message names the release that brought the keyword: its gate's, else the first
    recorded release whose ``symbol`` takes it. The error's ``feature`` is the argument's
    ``--require`` name (:func:`dropin_feature`).
    """
    from fi_compat._records import keyword_introduced_in  # the recorded data, on failure only

    gate = GATES.get(name)
    introduced_in = (
        gate.introduced_in if gate is not None else keyword_introduced_in(symbol.key, name)
    )
    upgrade = (
        f"flashinfer-python >= {introduced_in}"
        if introduced_in is not None
        else "flashinfer-python"
    )
    return CapabilityMissingError(
        explain(
            f"{symbol.dotted} to take {name}=",
            f"flashinfer {version} without it",
            changed_in=introduced_in,
            fix=f"leave {name} at its default, or upgrade {upgrade}",
        ),
        feature=dropin_feature(name),
        introduced_in=introduced_in,
    )


def option_refused(caps: Capabilities, name: str, *, legacy: bool) -> FiCompatError:
    """The error for a factory option ``name`` the installed factory does not take.

    ``legacy``: the workspace is the legacy API's, which has no counterpart for it. The
    message names the release that brought the keyword (its gate's, else the first recorded
    release whose unified factory takes it); the ``feature`` is :func:`factory_feature`.
    An option no recorded release takes (a misspelling, or a release fi-compat has not
    recorded) is an ``InvalidArgumentError``: there is no release to name.
    """
    from fi_compat._records import keyword_introduced_in  # the recorded data, on failure only

    version = caps.flashinfer.version
    gate = GATES.get(name)
    introduced_in = (
        gate.introduced_in if gate is not None else keyword_introduced_in(UNIFIED_FACTORY.key, name)
    )
    if introduced_in is None:
        return InvalidArgumentError(
            explain(
                f"an option of {UNIFIED_FACTORY.dotted} (of some recorded release)",
                f"{name}=, which no recorded release's factory takes, and flashinfer "
                f"{version}'s does not either",
                fix=f"check the spelling against {UNIFIED_FACTORY.key}'s signature",
            )
        )
    upgrade = (
        f"flashinfer-python >= {introduced_in}"
        if introduced_in is not None
        else "flashinfer-python"
    )
    return CapabilityMissingError(
        explain(
            f"{name}= (an option of the unified {UNIFIED_FACTORY.key})"
            if legacy
            else f"{UNIFIED_FACTORY.dotted} to take {name}=",
            f"flashinfer {version} with only the legacy API"
            if legacy
            else f"flashinfer {version} without it",
            changed_in=introduced_in,
            fix=f"leave {name} out, or upgrade {upgrade}",
        ),
        feature=factory_feature(name),
        introduced_in=introduced_in,
    )


def check_pattern(caps: Capabilities, pattern: int) -> None:
    """Refuse a pattern of fi-compat's :class:`~fi_compat.comm.AllReduceFusionPattern` that
    the installed release's own lacks (its fused calls would not know the code).

    A code fi-compat does not name is not judged here (the drop-in refuses it on a
    ``FusionWorkspace``; on FlashInfer's own workspace object it is handed through).
    """
    name = PATTERN_NAMES.get(pattern)
    if name is None:
        return
    if pattern in pattern_codes():
        return
    from fi_compat._records import member_introduced_in  # the recorded data, on failure only

    introduced_in = member_introduced_in(PATTERN.key, name)
    upgrade = (
        f"flashinfer-python >= {introduced_in}"
        if introduced_in is not None
        else "flashinfer-python"
    )
    raise CapabilityMissingError(
        explain(
            f"pattern {name} in the installed {PATTERN.key}",
            f"flashinfer {caps.flashinfer.version} without it",
            changed_in=introduced_in,
            fix=f"use a pattern this release has, or upgrade {upgrade}",
        ),
        feature=pattern_feature(name),
        introduced_in=introduced_in,
    )


def group_error(caps: Capabilities, symbol: Symbol, span: GroupSpan, why: str) -> Exception:
    """The error for a group the installed factory ``symbol`` cannot be given."""
    gate = GATES["group"]
    return GroupNotSupportedError(
        explain(
            f"{symbol.dotted} to honour group= (a group of {span.size} of "
            f"{span.world_size} processes)",
            f"flashinfer {caps.flashinfer.version}: {why}",
            changed_in=gate.introduced_in,
            fix=f"upgrade flashinfer-python to {gate.introduced_in} or later, or use the "
            "unfused path (api='reference'); dropping the group would run the rendezvous "
            "over the whole world and hang",
        ),
        feature=gate_feature("group"),
        introduced_in=gate.introduced_in,
    )


def trtllm_ranks_error(spec: Spec, where: str) -> InvalidArgumentError | None:
    """The error for a world size the TRT-LLM fusion kernel cannot run, or None."""
    if spec.world_size in TRTLLM_RANKS:
        return None
    return InvalidArgumentError(
        explain(
            f"world_size one of {', '.join(map(str, TRTLLM_RANKS))} for {where} (the "
            "TRT-LLM fusion kernel dispatches on those rank counts only)",
            f"world_size={spec.world_size}",
            fix="use backend='mnnvl' where the unified API has it, or the unfused path "
            "(api='reference'); a launch would fail with 'unsupported ranks number'",
        )
    )
