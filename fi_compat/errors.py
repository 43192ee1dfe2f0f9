"""Every exception fi-compat raises, in one module.

Every exception subclasses a built-in as well as :class:`FiCompatError`; the names other
modules export (``fi_compat.attention.PlannerConfigError``, ...) are these very classes. The
errors guide, ``docs/guide/errors.md``, lists them and when each is raised.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from fi_compat._requirements.names import deterministic_feature

__all__ = [
    "BackendNotDeterministicError",
    "CallSizeUnsupportedError",
    "CapabilityMissingError",
    "CheckpointUnsupportedError",
    "DeploymentRefusedError",
    "DeterminismUnavailableError",
    "FakeUninstalledError",
    "FiCompatError",
    "FlashInferUnavailableError",
    "FusionForbiddenError",
    "GroupNotSupportedError",
    "InvalidArgumentError",
    "ModuleUnavailableError",
    "NameUnavailableError",
    "PlannerConfigError",
    "PolicyInputError",
    "RecordingError",
    "TensorCoresRequiredError",
    "UnknownReleaseError",
    "UnknownRequirementError",
    "UnsupportedOperationError",
    "WorkspaceDestroyedError",
    "WorkspaceDetachedError",
    "WorkspaceMismatchError",
    "explain",
]


def __dir__() -> list[str]:
    return list(__all__)


def explain(
    expected: str,
    found: str,
    *,
    changed_in: str | None = None,
    fix: str | None = None,
) -> str:
    """Build a message in fi-compat's one shape.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    expected
        What the caller or fi-compat needed.
    found
        What is actually there.
    changed_in
        The FlashInfer release that introduced (or removed) the thing, if one did.
    fix
        What the reader should do about it.
    """
    parts = [f"expected {expected}; found {found}."]
    if changed_in:
        parts.append(f"FlashInfer changed this in {changed_in}.")
    if fix:
        parts.append(f"Fix: {fix}")
    return " ".join(parts)


class FiCompatError(Exception):
    """Base class of every exception fi-compat raises on purpose.

    .. versionadded:: 0.2.0
    """


class InvalidArgumentError(FiCompatError, TypeError, ValueError):
    """An argument of a fi-compat entry point has the wrong type or value.

    Raised before anything reaches FlashInfer. It is both a ``TypeError`` and a
    ``ValueError``, so an engine catches it with whichever built-in it expects for a bad
    argument. The errors for a tensor that does not fit a workspace, a malformed planner
    and a malformed deployment description subclass it.

    .. versionadded:: 0.2.0
    """


class FlashInferUnavailableError(FiCompatError, ImportError):
    """FlashInfer (or ``flashinfer.comm``, or one of its submodules) cannot be imported here.

    .. versionadded:: 0.2.0
    """


class ModuleUnavailableError(FlashInferUnavailableError, ModuleNotFoundError):
    """A submodule asked of :mod:`fi_compat.comm` is not in the installed FlashInfer release.

    ``import fi_compat.comm.mapping`` where the installed ``flashinfer.comm`` has no
    ``mapping``: a ``ModuleNotFoundError``, as ``import flashinfer.comm.mapping`` would
    raise, whose message says, from the recorded releases, whether the module has not
    arrived yet (the release to install) or was removed (the release that removed it, the
    last that ships it, what to pin). A
    submodule the release has but cannot import raises its base class,
    :class:`FlashInferUnavailableError`, saying why.

    .. versionadded:: 0.3.0

    Attributes
    ----------
    name
        The module asked for (``"fi_compat.comm.mapping"``), as on every ``ImportError``.
    introduced_in
        The first recorded release that ships FlashInfer's module, or None when none does.
    """

    def __init__(self, message: str, *, name: str, introduced_in: str | None = None) -> None:
        super().__init__(message, name=name)
        self.introduced_in = introduced_in


class CapabilityMissingError(FiCompatError, RuntimeError):
    """The installed FlashInfer lacks something the caller asked for.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    feature
        The probed item, for example ``"group"``.
    introduced_in
        The first FlashInfer release that has it, when known.
    """

    def __init__(self, message: str, *, feature: str, introduced_in: str | None = None) -> None:
        super().__init__(message)
        self.feature = feature
        self.introduced_in = introduced_in


class NameUnavailableError(FiCompatError, AttributeError):
    """A FlashInfer name asked of :mod:`fi_compat.comm` (or a submodule) is not installed.

    An ``AttributeError``, as the installed ``flashinfer.comm`` would raise, so ``hasattr``
    answers False and ``from fi_compat.comm import name`` raises ``ImportError``; the
    message says, from the recorded releases, whether the name has not arrived yet (the
    release that introduced it) or was removed (the release that removed it, the last that
    has it, what to pin, and where else it is bound where the records show one).

    .. versionadded:: 0.2.0

    Attributes
    ----------
    introduced_in
        The first recorded release that has the name, or None when none does.
    """

    def __init__(self, message: str, *, name: str, introduced_in: str | None = None) -> None:
        super().__init__(message, name=name)
        self.introduced_in = introduced_in


class GroupNotSupportedError(CapabilityMissingError):
    """A process group was given that the installed release cannot honour.

    Dropping it would make the workspace rendezvous span the whole world, which hangs
    when the group is smaller than the world, so fi-compat refuses instead.

    .. versionadded:: 0.2.0
    """


class DeterminismUnavailableError(CapabilityMissingError):
    """Deterministic attention was asked for, but some ``plan`` cannot take the split settings.

    .. versionadded:: 0.2.0
    """


class BackendNotDeterministicError(DeterminismUnavailableError):
    """A wrapper's family and backend do not hand the split settings to the kernel.

    Raised, with determinism on, when a planner or a deterministic wrapper is built over a
    wrapper whose (class, backend) the measurement of the installed release saw drop or
    refuse ``fixed_split_size``/``disable_split_kv``, or could not measure at all: planning
    it would run without the settings and drift with the batch.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    family
        The FlashInfer class, e.g. ``"BatchPrefillWithPagedKVCacheWrapper"``.
    backend
        The backend it was built with (``"default"`` for a class without one).
    release
        The installed FlashInfer release, or ``"unknown"``.
    verdict
        What was measured: ``"dropped"``, ``"refused"``, ``"unmeasured"`` or ``"unknown"``.
    """

    def __init__(
        self, message: str, *, family: str, backend: str, release: str, verdict: str
    ) -> None:
        super().__init__(message, feature=deterministic_feature(family, backend))
        self.family = family
        self.backend = backend
        self.release = release
        self.verdict = verdict


class FusionForbiddenError(FiCompatError, RuntimeError):
    """Allreduce fusion was asked for while deterministic inference is on.

    .. versionadded:: 0.2.0
    """


class WorkspaceMismatchError(InvalidArgumentError):
    """Tensors given to a fused call do not fit the workspace they would run on.

    .. versionadded:: 0.2.0
    """


class CallSizeUnsupportedError(WorkspaceMismatchError, CapabilityMissingError):
    """A call of another size than the workspace's, on a workspace that serves only its own.

    Where the installed release was measured to serve any call that fits the workspace
    (``fi_compat/_measured/sizes.json``), fi-compat serves it too; on the legacy API and on
    backends or releases that were not measured, only the creation-time hidden size is
    served, and a call of another width raises this (a ``WorkspaceMismatchError`` as well).
    ``feature`` is the ``--require`` name, ``per_call_sizes:<kind>``.

    .. versionadded:: 0.3.0
    """


class CheckpointUnsupportedError(CapabilityMissingError, NotImplementedError):
    """``checkpoint_prepare``/``checkpoint_restore`` on a workspace that cannot detach.

    A ``NotImplementedError``, as FlashInfer answers the same case (vLLM catches it).
    ``feature`` is the ``--require`` name, ``checkpointing:<kind>``.

    .. versionadded:: 0.3.0
    """


class WorkspaceDestroyedError(FiCompatError, RuntimeError):
    """A fusion workspace was used after ``destroy()``.

    .. versionadded:: 0.2.0
    """


class WorkspaceDetachedError(FiCompatError, RuntimeError):
    """A fusion workspace was used while its memory is detached (``checkpoint_prepare()``).

    A ``RuntimeError``, as FlashInfer's own refusal in the same case.

    .. versionadded:: 0.2.0
    """


class UnsupportedOperationError(FiCompatError, TypeError):
    """An operation an object fi-compat hands out does not support.

    ``copy.copy``, ``copy.deepcopy`` or ``pickle`` of an object bound to live FlashInfer
    buffers or a process group (a ``FusionWorkspace``: a copy would free or launch on the
    buffers behind the original's back), or ``pickle`` of a deterministic attention
    wrapper. A ``TypeError``, as ``pickle`` raises for objects it cannot pickle. The guides
    say, per object, which of these operations it supports.

    .. versionadded:: 0.3.0
    """


class PlannerConfigError(InvalidArgumentError):
    """The attention planner was built or called with arguments that cannot be right.

    For example the wrong number of wrappers for the layout, a wrapper without a callable
    ``plan``, an unknown layout, a ``Settings`` value that disagrees with
    :mod:`fi_compat.determinism`, split settings passed by the caller, or a step given the
    wrong number of :class:`~fi_compat.attention.PlanArgs`. Raised before any wrapper is
    planned.

    .. versionadded:: 0.2.0
    """


class TensorCoresRequiredError(DeterminismUnavailableError, ValueError):
    """A decode wrapper without tensor cores was handed to a deterministic planner.

    FlashInfer's decode wrapper honours ``fixed_split_size`` and ``disable_split_kv`` only
    on its tensor-core path: ``plan(fixed_split_size=...)`` raises ``ValueError`` without
    tensor cores, and ``disable_split_kv`` is silently ignored there. It is a
    :class:`DeterminismUnavailableError` (``RuntimeError``) and a ``ValueError``, like
    FlashInfer's own error for the same mistake.

    .. versionadded:: 0.2.0
    """


class PolicyInputError(InvalidArgumentError):
    """An input to the fusion policy (:mod:`fi_compat.policy`) is out of range or malformed.

    .. versionadded:: 0.2.0
    """


class DeploymentRefusedError(FiCompatError, ValueError):
    """An engine's rule set refuses the described deployment, as the engine refuses it.

    Raised by :func:`fi_compat.policy.decide_fusion` when the applying rule that decides
    is one the engine answers with an error at start-up (for example SGLang 0.5.23's
    ``_resolve_backend`` for an explicit backend the GPU or the node count cannot
    serve). A ``ValueError``, as the engine's own refusal. The message carries the
    engine's reason.

    .. versionadded:: 0.3.0

    Attributes
    ----------
    rule
        The value of the :class:`fi_compat.policy.RuleId` that refused.
    """

    def __init__(self, message: str, *, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


class UnknownRequirementError(InvalidArgumentError):
    """A ``fi-compat report --require`` name that the report does not print (or an empty one).

    .. versionadded:: 0.2.0
    """


class RecordingError(FiCompatError, ValueError):
    """A FlashInfer release could not be read or parsed into a signature record (raised by
    the maintainers' recorder in ``tools/``).

    .. versionadded:: 0.2.0
    """


class UnknownReleaseError(FiCompatError, LookupError):
    """No recorded signatures ship for the requested FlashInfer release.

    .. versionadded:: 0.2.0
    """


class FakeUninstalledError(FiCompatError, RuntimeError):
    """A function of a fake flashinfer was called after its ``fake_flashinfer()`` ended.

    .. versionadded:: 0.2.0
    """
