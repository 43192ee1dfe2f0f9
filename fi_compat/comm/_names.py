"""``flashinfer.comm``'s names besides its calls: the pattern codes, the rest handed through.

:class:`AllReduceFusionPattern` is fi-compat's own copy of FlashInfer's fusion pattern codes.
FlashInfer keeps these as plain ``int`` class attributes (not an ``enum``), so a value
taken from here is interchangeable with one taken from ``flashinfer.comm``. Every recorded
release that has a member gives it the same value (a test checks that against the
recorded signatures). Whether the *installed* release can run a pattern is checked when the
pattern is used, not here.

Every other public name of ``flashinfer.comm`` (and of its submodules) is looked up in the
installed module, imported through the probe, on each access and returned as it is; a
submodule of the installed one is fi-compat's module of the same name
(:mod:`fi_compat.comm._submodules`). The allreduce-fusion guide, ``docs/guide/comm.md``
("Every other name is handed through"), says what a missing name raises.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import keyword
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from fi_compat._signature import describe_error, exact_text
from fi_compat._surface import COMM, FLASHINFER
from fi_compat.capabilities import get_capabilities
from fi_compat.errors import (
    FlashInferUnavailableError,
    ModuleUnavailableError,
    NameUnavailableError,
    explain,
)

if TYPE_CHECKING:
    from fi_compat._records import ReleaseRecord

__all__ = [
    "PATTERN_NAMES",
    "AllReduceFusionPattern",
    "Installed",
    "Lifespan",
    "account",
    "hand_through",
    "import_installed",
    "installed_module",
    "lifespan",
    "module_unavailable",
    "public_part",
    "ships",
    "unavailable",
]

_ABSENT = object()


class AllReduceFusionPattern:
    """Fusion pattern codes of ``allreduce_fusion`` (FlashInfer 0.7.4 names and values).

    ``kARResidualRMSNorm`` (all-reduce, residual add, RMSNorm) exists in every release with
    allreduce fusion (0.2.9+); the MoE patterns arrived in 0.6.8, the dynamic and
    per-token-group FP8 patterns later, and the MXFP8 patterns in 0.7.4. A release without a
    pattern refuses it (``fi-compat report --require AllReduceFusionPattern.<name>`` says
    which release brought it).

    .. versionadded:: 0.2.0
    """

    kAllReduce = 0
    kARResidualRMSNorm = 1
    kARResidualRMSNormFP8Quant = 2
    kARResidualRMSNormFP4Quant = 3
    kARResidualRMSNormOutFP8Quant = 4
    kARResidualRMSNormOutFP4Quant = 5
    kMoEReductionARResidualRMSNorm = 6
    kMoEFinalizeARResidualRMSNorm = 7
    kARResidualRMSNormPerTokenGroupFP8PackedQuant = 8
    kARResidualRMSNormOutPerTokenGroupFP8PackedQuant = 9
    kARResidualRMSNormDynamicFP8Quant = 10
    kARResidualRMSNormOutDynamicFP8Quant = 11
    kMoEFinalizeARResidualRMSNormFP8Quant = 12
    kARResidualRMSNormMXFP8Quant = 13
    kARResidualRMSNormOutMXFP8Quant = 14


#: Member name -> value, for messages and checks.
PATTERN_NAMES: dict[int, str] = {
    value: name
    for name, value in vars(AllReduceFusionPattern).items()
    if name.startswith("k") and isinstance(value, int)
}


def public_part(name: str) -> bool:
    """``name`` can be one part of a public module's dotted name: an identifier, not a
    keyword, not starting with ``_``."""
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")


@dataclass(frozen=True)
class Installed:
    """What importing one FlashInfer module through the probe gave.

    Attributes
    ----------
    module
        The module, or None when it could not be imported.
    failed
        The module whose import failed (``flashinfer.comm`` itself, or the one asked for).
    why
        ``"ExceptionType: message"`` of that failure; None on success.
    missing
        The installed release has no such module (as opposed to one that raises).
    error
        The exception the import raised, for ``raise ... from``.
    """

    module: Any
    failed: str | None = None
    why: str | None = None
    missing: bool = False
    error: BaseException | None = None


def import_installed(module: str) -> Installed:
    """``module`` (``flashinfer.comm`` or one of its submodules) of the installed release.

    ``flashinfer.comm`` is imported through the probe, once; the submodule is taken from
    ``sys.modules`` or imported on each call, so a refreshed probe or another fake release
    is seen at once. Never raises but ``KeyboardInterrupt``: a module that is missing or
    raises on import is a finding.
    """
    caps = get_capabilities()
    if not caps.comm.available:
        return Installed(None, COMM, caps.comm.error or f"{COMM} is not importable")
    loaded = sys.modules.get(module)
    if loaded is not None:
        return Installed(loaded)
    try:
        return Installed(importlib.import_module(module))
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # the module is missing or raises on import: a finding
        return Installed(None, module, describe_error(error), _missing(error, module), error)


def _missing(error: BaseException, module: str) -> bool:
    """``error`` says that ``module`` (or a package above it, below ``flashinfer.comm``)
    does not exist, rather than that something it imports does not."""
    if not isinstance(error, ModuleNotFoundError):
        return False
    absent = exact_text(error.name)
    return (
        absent is not None
        and absent.startswith(f"{COMM}.")
        and (module == absent or module.startswith(f"{absent}."))
    )


def hand_through(module: str, name: str, owner: str) -> Any:
    """``<module>.<name>`` of the installed release, for ``owner``'s module ``__getattr__``.

    A submodule of the installed module is ``owner``'s submodule of that name
    (``fi_compat.comm.mapping`` for ``flashinfer.comm.mapping``), imported if need be.

    Parameters
    ----------
    module
        The FlashInfer module (``flashinfer.comm`` or one of its submodules).
    name
        The attribute asked for.
    owner
        The fi-compat module asked (for the message of a private name, and the home of
        its submodules).

    Raises
    ------
    NameUnavailableError
        The name is private, or the installed release lacks it or its module (or has the
        submodule but cannot import it).
    """
    if name.startswith("_"):
        # Dunder and private lookups (pickle, inspect, pytest) never import FlashInfer.
        raise NameUnavailableError(f"module {owner!r} has no attribute {name!r}", name=name)
    installed = installed_module(module, name)
    value = getattr(installed, name, _ABSENT)
    if public_part(name) and _is_submodule(value, f"{module}.{name}"):
        return _submodule(owner, name)
    if value is _ABSENT:
        raise unavailable(module, name, None)
    return value


def _is_submodule(value: Any, dotted: str) -> bool:
    """``value``, an attribute of ``dotted``'s parent (``_ABSENT`` when it has none), is its
    submodule ``dotted``, or the parent has not bound that submodule yet."""
    if value is not _ABSENT:
        return sys.modules.get(dotted, _ABSENT) is value
    return ships(dotted) is True


def ships(module: str) -> bool | None:
    """Whether the installed release has ``module`` (a submodule of ``flashinfer.comm``),
    found without importing it: None when that cannot be told (``flashinfer.comm`` or a
    package above ``module`` does not import, or a finder raises)."""
    if not get_capabilities().comm.available:
        return None
    if sys.modules.get(module) is not None:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # a parent that is no package, or raises on import
        return False if _missing(error, module) else None


def _submodule(owner: str, name: str) -> Any:
    """fi-compat's module ``<owner>.<name>``; its import error as the ``AttributeError`` an
    attribute lookup raises."""
    try:
        return importlib.import_module(f"{owner}.{name}")
    except FlashInferUnavailableError as error:
        introduced_in = error.introduced_in if isinstance(error, ModuleUnavailableError) else None
        raise NameUnavailableError(str(error), name=name, introduced_in=introduced_in) from error


def installed_module(module: str, name: str) -> Any:
    """``module`` of the installed release, for looking up ``name`` in it.

    Raises
    ------
    NameUnavailableError
        The module is missing from the installed release or cannot be imported.
    """
    found = import_installed(module)
    if found.module is None:
        raise unavailable(module, name, found.why, missing=found.missing) from found.error
    return found.module


def _version() -> str:
    version = get_capabilities().flashinfer.version
    return "of unknown version" if version is None else version


# ------------------------------------------------------------------ both sides of a change


@dataclass(frozen=True)
class Lifespan:
    """Where the installed release stands in the recorded history of a name or module it
    lacks: before the thing arrived, after it was removed, or neither can be told.

    Attributes
    ----------
    thing
        What is missing (``flashinfer.comm.trtllm_alltoall``, ``flashinfer.comm.MnnvlMoe``).
    introduced_in
        The first recorded release that has it (a final release where one does), or None.
    arrived
        Set where the installed release is older than every recorded release that has it:
        the first of those (what to install).
    last
        Set where a recorded release older than the installed one has it: the newest such
        (the last release to pin to).
    removed_in
        With ``last``: the first recorded release after it, up to the installed one, that
        lacks it (a final release where both are final; the installed one itself when it
        is recorded and nothing lies between); None where no recorded release lies there
        (the installed release is newer than every recorded one, or falls between two).
    again
        With ``last``: the first recorded release newer than the installed one that has it
        again, or None.
    moved_to
        With ``removed_in``: a module of that release that still binds the name (its home
        in ``last``, or a package above it): where to import it from instead.
    recorded_with_it
        The installed release is recorded and its record has the thing: these files are not
        that release as published (or the thing cannot be told from the records).
    """

    thing: str
    introduced_in: str | None
    arrived: str | None = None
    last: str | None = None
    removed_in: str | None = None
    again: str | None = None
    moved_to: str | None = None
    recorded_with_it: bool = False


def lifespan(
    thing: str, kind: Callable[[ReleaseRecord], str | None], introduced_in: str | None
) -> Lifespan:
    """Where the installed release stands between the recorded releases that have ``thing``,
    ``introduced_in`` being the first of them (as :func:`fi_compat._records.introduced_in` answers
    it); ``kind`` tells what a release has there (a name's kind, ``"module"``), or None.
    It is "back" in a newer release only as what it was when it went (a function's name
    bound again as a submodule is not the function back).

    Reads only releases fi-compat already knows (:func:`fi_compat._records.available_releases`),
    loading as few as it can: the installed release's recorded neighbours, walking away from
    it until one has the thing. A version that cannot be trusted (unparsable, a source
    build's ``0.0.0+unknown``) tells nothing: only ``introduced_in`` is given.
    """
    from fi_compat._records import available_releases, load_release

    info = get_capabilities().flashinfer
    here = info.parsed_version
    if introduced_in is None or here is None or info.source_build:
        return Lifespan(thing, introduced_in)

    def has(release: str) -> bool:
        return kind(load_release(release)) is not None

    known = _versions(tuple(available_releases()))
    same = [release for version, release in known if version == here]
    if same and has(same[0]):
        return Lifespan(thing, introduced_in, recorded_with_it=True)
    # As the diff walks: from a final release, the final releases only (users move from
    # final to final), unless no final release has it; from a pre-release, every release.
    start = Version(introduced_in)
    every = here.is_prerelease or start.is_prerelease
    walk = [(version, release) for version, release in known if every or not version.is_prerelease]
    # Nothing older than the first release with it has it, except, from a pre-release
    # where the first is a final release, a pre-release before that final one.
    bound = None if here.is_prerelease and not start.is_prerelease else start
    older = [
        release
        for version, release in walk
        if version < here and (bound is None or version >= bound)
    ]
    # Newer ones, final releases first (what users install; a pre-release is named only
    # where no final release has it).
    newer = [release for version, release in walk if version > here and not version.is_prerelease]
    newer += [release for version, release in walk if version > here and version.is_prerelease]
    last = next((release for release in reversed(older) if has(release)), None)
    if last is None:
        arrived = next((release for release in newer if has(release)), None)
        return Lifespan(thing, introduced_in, arrived=arrived)
    # As the diff cites a change: between two final releases, at the first final release
    # that has the new state (0.7.0, not 0.7.0rc3); every release where either is a
    # pre-release.
    every = here.is_prerelease or Version(last).is_prerelease
    between = [
        release
        for version, release in known
        if Version(last) < version <= here and (every or not version.is_prerelease)
    ]
    removed_in = between[0] if between else None
    went = kind(load_release(last))
    again = next((release for release in newer if kind(load_release(release)) == went), None)
    moved_to = _moved_to(thing, last, removed_in) if removed_in is not None else None
    return Lifespan(
        thing, introduced_in, last=last, removed_in=removed_in, again=again, moved_to=moved_to
    )


@functools.cache
def _versions(releases: tuple[str, ...]) -> tuple[tuple[Version, str], ...]:
    """Each known release with its parsed version (parsed once per list of releases)."""
    return tuple((Version(release), release) for release in releases)


def _moved_to(thing: str, last: str, removed_in: str) -> str | None:
    """A module of ``removed_in`` that binds the name ``thing`` names, as ``last`` defined it:
    its home in ``last``, or a package above that home; None for a module or where none does."""
    from fi_compat._records import load_release

    module, _, name = thing.rpartition(".")
    entry = load_release(last).public_names(module).get(name)
    if entry is None or entry.defined_in is None or entry.kind == "module":
        return None
    parts = entry.defined_in.split(".")
    gone = load_release(removed_in)
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate != module and name in gone.public_names(candidate):
            return candidate
    return None


def account(span: Lifespan) -> tuple[str, str | None, str]:
    """``(history, changed_in, fix)`` of a missing thing for :func:`~fi_compat.errors.explain`:
    what the records say of it next to the installed release, the release that changed it
    (None where no recorded release can be named), and what to do."""
    thing = span.thing
    if span.introduced_in is None:
        return (
            "in no recorded release",
            None,
            f"no recorded FlashInfer release has {thing}; check the name",
        )
    if span.recorded_with_it:
        version = _version()
        return (
            f"although flashinfer {version} as recorded has it: these files are not that "
            "release as published",
            None,
            f"reinstall flashinfer-python=={version} from the package index",
        )
    if span.arrived is not None:
        return (
            f"it arrived in {span.arrived}",
            span.arrived,
            f"install flashinfer-python >= {span.arrived}",
        )
    if span.last is None:  # the installed version tells nothing (unknown, a source build)
        return (
            f"first in {span.introduced_in}",
            span.introduced_in,
            f"install flashinfer-python >= {span.introduced_in} (a release that has it)",
        )
    back = (
        f", or install flashinfer-python >= {span.again}, which has it again" if span.again else ""
    )
    if span.removed_in is None:
        return (
            f"last in {span.last}, absent from the installed {_version()}",
            None,
            f"pin flashinfer-python <= {span.last}{back}",
        )
    moved = (
        f", or import it from {span.moved_to}, which still binds it in {span.removed_in}"
        if span.moved_to
        else ""
    )
    return (
        f"removed in {span.removed_in}, last in {span.last}",
        span.removed_in,
        f"pin flashinfer-python < {span.removed_in}{moved}{back}",
    )


def _name_kind(module: str, name: str, submodule: bool) -> Callable[[ReleaseRecord], str | None]:
    """What a release binds as ``module.name`` (its kind), or None; for a submodule that
    ``module`` need not bind, ``"module"`` where the release ships it."""
    if submodule:
        return _module_kind(f"{module}.{name}")

    def kind(record: ReleaseRecord) -> str | None:
        entry = record.public_names(module).get(name)
        return None if entry is None else entry.kind

    return kind


def _module_kind(module: str) -> Callable[[ReleaseRecord], str | None]:
    """``"module"`` where a release ships ``module``, else None."""
    return lambda record: "module" if record.module(module) is not None else None


def unavailable(
    module: str, name: str, why: str | None, *, missing: bool = False
) -> NameUnavailableError:
    """The error for ``<module>.<name>`` missing from the installed release.

    ``why`` says why the module itself could not be read, or None when it was read and
    lacks the name; ``missing`` says that the installed release has no such module. The
    message says where the installed release stands in the recorded history of the name
    (or, for a submodule, of the module; where the module is missing, of the module): not
    arrived yet (the release to install), or removed (the release that removed it, the
    last that has it, and where else to import it from where the records show one).
    """
    from fi_compat._records import introduced_in, module_introduced_in  # on failure only

    recorded = module.split(".")[0] == FLASHINFER and bool(name)
    introduced = introduced_in(module, name) if recorded else None
    submodule = False
    if introduced is None and recorded and public_part(name):
        introduced = module_introduced_in(f"{module}.{name}")  # a submodule not bound (or absent)
        submodule = introduced is not None
    if why is not None and not missing:  # the module is there but cannot be read
        found = f"{module} unusable ({why})"
        span = Lifespan(f"{module}.{name}", introduced)
        changed_in = introduced
        fix = (
            f"install flashinfer-python >= {introduced}"
            if introduced is not None
            else f"no recorded FlashInfer release has {module}.{name}; check the name"
        )
    else:
        if why is None:  # the module was read and lacks the name
            span = lifespan(f"{module}.{name}", _name_kind(module, name, submodule), introduced)
            what = "it"
        else:  # the installed release has no such module
            shipped = module_introduced_in(module) if recorded else None
            span = lifespan(module, _module_kind(module), shipped)
            what = module
        history, changed_in, fix = account(span)
        if (
            span.arrived is not None
            and introduced is not None
            and Version(introduced) > Version(span.arrived)
        ):
            # The name came later.
            changed_in, fix = introduced, f"install flashinfer-python >= {introduced}"
        found = f"flashinfer {_version()} without {what} ({history})"
    if span.introduced_in is not None:
        fix = f"{fix}, or do without {name}"
    return NameUnavailableError(
        explain(f"{module}.{name}", found, changed_in=changed_in, fix=fix),
        name=name,
        introduced_in=introduced,
    )


def module_unavailable(module: str, owner: str, installed: Installed) -> FlashInferUnavailableError:
    """The error for ``import <owner>`` (``fi_compat.comm.mapping``) when ``installed``,
    the import of FlashInfer's ``module`` (``flashinfer.comm.mapping``), failed.

    A module the installed release lacks gives :class:`ModuleUnavailableError` (a
    ``ModuleNotFoundError``) saying where the installed release stands in the module's
    recorded history: before the first recorded release that ships it, or after the one
    that removed it (:func:`lifespan`); one that is there but raises on import (or whose
    ``flashinfer.comm`` does) gives :class:`FlashInferUnavailableError` saying why.
    """
    from fi_compat._records import module_introduced_in  # on failure only

    expected = f"{module} (for {owner})"
    if installed.missing:
        introduced_in = module_introduced_in(module)
        history, changed_in, fix = account(lifespan(module, _module_kind(module), introduced_in))
        if introduced_in is not None:
            fix = f"{fix}, or do without {owner}"
        message = explain(
            expected,
            f"flashinfer {_version()} without it ({history})",
            changed_in=changed_in,
            fix=fix,
        )
        return ModuleUnavailableError(message, name=owner, introduced_in=introduced_in)
    failed = installed.failed or module
    message = explain(
        expected,
        f"{failed} unusable ({installed.why})",
        fix=f"make {failed} importable here (see the error above), or do without {owner}",
    )
    return FlashInferUnavailableError(message, name=owner)
