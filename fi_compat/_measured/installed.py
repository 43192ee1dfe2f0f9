"""The installed release, measured on this machine: found, measured once, cached, read back.

A FlashInfer release fi-compat shipped no measurement for (one published after it, or one
``FI_COMPAT_UNRECORDED`` sets aside) is measured here by the very probes that make the
shipped files: the release's own Python, in subprocesses of this interpreter, its compiled
modules replaced by recorders, every GPU hidden and GPU 0 answered by a stand-in
(:mod:`fi_compat._measured.stand_in`), nothing launched on a device. The three probes run
side by side; each entry is classified as the shipped ones are and kept, in the shape of
the shipped file's ``releases[R]``, under
``cache_root()/measured/<release>-<fingerprint>/<measurement>.json``
(:func:`fi_compat._local.cache_root`, :func:`fi_compat._local.installed_fingerprint`).

The first reader that needs the installed release's entry measures it (:func:`entry`),
unless :data:`AUTO_ENV` is ``0``; a lock file in the release's cache directory makes
concurrent processes (tensor-parallel ranks) measure once and the others read the result.
``fi-compat measure`` measures ahead of time (:func:`measure`). A cache file is read back
only when it is one (schema, release, fingerprint, fi-compat version, entry shape); anything
else is measured again. A probe that crashes, times out or prints something else is a
finding: no entry, and the reason (:func:`why_unmeasured`), never an exception; an automatic
attempt that failed is recorded beside the entries and not retried by later processes of
the same fi-compat version until ``fi-compat measure`` is run.

Nothing here imports torch or FlashInfer; the installed package is found on ``sys.path``
(:class:`importlib.machinery.PathFinder`) and its version read from its distribution's
metadata.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.version import Version

from fi_compat import _local
from fi_compat._log import get_logger
from fi_compat._measured import layers, reach, run, sizes
from fi_compat._version import __version__

__all__ = [
    "AUTO_ENV",
    "AUTO_TIMEOUT",
    "COMMAND",
    "MEASUREMENTS",
    "SCHEMA",
    "InstalledPackage",
    "Measured",
    "Measurement",
    "Outcome",
    "Releases",
    "auto_enabled",
    "cache_path",
    "entry",
    "find_installed",
    "forget",
    "measure",
    "read_cached",
    "same_release",
    "valid_entry",
    "why_unmeasured",
]

logger = get_logger(__name__)

#: The measurements this package holds, by file stem.
Measurement = Literal["reach", "layers", "sizes"]
#: Every measurement, in the order they are reported.
MEASUREMENTS: tuple[Measurement, ...] = ("reach", "layers", "sizes")
#: ``0`` (or ``false``, ``no``, ``off``) turns automatic measuring off.
AUTO_ENV = "FI_COMPAT_AUTO_MEASURE"
#: The command that measures the installed release ahead of time.
COMMAND = "fi-compat measure"
#: The schema of a cached measurement file.
SCHEMA = 1
#: Seconds one probe may take when a reader measures on first use (``fi-compat measure``
#: gives each probe its own, longer limit).
AUTO_TIMEOUT = 120.0
#: Seconds a process waits for another one's measurement of the same release.
LOCK_WAIT = 400.0
_OFF = frozenset({"0", "false", "no", "off"})
_FAILED = "failed.json"
_LOCK = ".lock"
#: The environment that hides every GPU from a probe.
_NO_GPU = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}
_STAND_IN = Path(__file__).resolve().parent / "stand_in.py"


def auto_enabled() -> bool:
    """Whether a reader may measure the installed release on first use (:data:`AUTO_ENV`)."""
    return os.environ.get(AUTO_ENV, "").strip().lower() not in _OFF


# ------------------------------------------------------------------ the installed release


@dataclass(frozen=True)
class InstalledPackage:
    """The installed ``flashinfer`` package, found without importing it."""

    version: str
    package: Path
    fingerprint: str

    @property
    def directory(self) -> Path:
        """Where its measurements are kept on this machine."""
        return _local.cache_root() / "measured" / f"{self.version}-{self.fingerprint}"


def find_installed() -> InstalledPackage | None:
    """The ``flashinfer`` package on this interpreter's path and the version its
    distribution (``flashinfer_python-*.dist-info`` beside it) declares; None when there is
    none, or when it is not an installed distribution (a source tree). A fake
    ``flashinfer`` (:mod:`fi_compat.testing`) or a module put in ``sys.modules`` is not
    it."""
    try:
        # The path finder alone: what pip installed on sys.path, not a module already
        # imported under the name nor an import hook's (fi_compat.testing's fake).
        spec = importlib.machinery.PathFinder.find_spec("flashinfer")
    except (ImportError, ValueError, OSError):  # an unreadable entry of sys.path
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        return None
    package = Path(locations[0])
    folders = _local.distribution_folders(package.parent)
    version = _distribution_version(folders)
    if version is None:
        return None
    try:
        fingerprint = _local.installed_fingerprint(package, folders)
    except OSError:
        return None
    return InstalledPackage(version, package, fingerprint)


def _distribution_version(folders: list[Path]) -> str | None:
    """The ``Version:`` of the first of the ``flashinfer_python-*.dist-info`` ``folders``
    (:func:`fi_compat._local.distribution_folders`; the one
    :func:`fi_compat._local.installed_fingerprint` reads), if it is a PEP 440 version."""
    for info in folders:
        try:
            version = _version_header(info / "METADATA")
        except OSError:
            continue
        if version is not None:
            return version if _parses(version) else None
    return None


#: The ``Version:`` headers :func:`_version_header` read, kept per ``METADATA`` file and its
#: inode, size, modification and change times.
_HEADERS: _local.Readings[str | None] = _local.Readings()


def _version_header(metadata: Path) -> str | None:
    """The ``Version:`` header of a ``METADATA`` file, read up to the end of the headers
    (not the long description after them). Read once per state of the file: kept while its
    inode, size and times are the ones it had when read (:class:`fi_compat._local.Readings`;
    asked on every answer about an unmeasured release)."""
    stamp = os.stat(metadata)
    state = (stamp.st_ino, stamp.st_size, stamp.st_mtime_ns, stamp.st_ctime_ns)
    return _HEADERS.read(str(metadata), state, stamp.st_mtime_ns, lambda: _header(metadata))


def _header(metadata: Path) -> str | None:
    with metadata.open(encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if not line.strip():
                return None  # the headers end at the first empty line
            if line.startswith("Version:"):
                return line.partition(":")[2].strip()
    return None


def _parses(version: str) -> bool:
    try:
        Version(version)
    except ValueError:  # InvalidVersion, or digits beyond int()'s limit
        return False
    return True


def same_release(first: object, second: object) -> bool:
    """Whether two version strings name one release (compared as PEP 440 versions)."""
    if not (isinstance(first, str) and isinstance(second, str)):
        return False
    if first == second:
        return True
    try:
        return Version(first) == Version(second)
    except ValueError:  # InvalidVersion, or digits beyond int()'s limit
        return False


# ---------------------------------------------------------------------------- the cache


def cache_path(installed: InstalledPackage, measurement: Measurement) -> Path:
    """The file ``measurement`` of ``installed`` is kept in."""
    return installed.directory / f"{measurement}.json"


def _is_text(value: object) -> bool:
    return isinstance(value, str)


def _reach_entry(entry: Mapping[str, Any]) -> bool:
    for facts in entry.values():
        if not (
            isinstance(facts, dict)
            and isinstance(facts.get("plan_takes"), bool)
            and (facts.get("backend_attribute") is None or _is_text(facts["backend_attribute"]))
            and (facts.get("default_backend") is None or _is_text(facts["default_backend"]))
            and isinstance(facts.get("backends"), dict)
        ):
            return False
        for answer in facts["backends"].values():
            if not (
                isinstance(answer, dict)
                and answer.get("verdict") in reach.VERDICTS
                and _is_text(answer.get("detail"))
            ):
                return False
    return True


def _layers_entry(entry: Mapping[str, Any]) -> bool:
    if entry.get("layer") not in ("legacy", "public") or not _is_text(entry.get("detail")):
        return False
    if entry["layer"] == "public":
        return True
    arguments = entry.get("arguments")
    return (
        _is_text(entry.get("fusion_source"))
        and _is_text(entry.get("legacy_source"))
        and isinstance(arguments, dict)
        and all(
            (isinstance(value, str) and value in layers.SOURCES)
            or (isinstance(value, dict) and set(value) == {"constant"})
            for value in arguments.values()
        )
        and isinstance(entry.get("checks"), list)
        and all(_is_text(check) for check in entry["checks"])
        and isinstance(entry.get("statements"), list)
    )


def _sizes_entry(entry: Mapping[str, Any]) -> bool:
    return all(
        isinstance(facts, dict)
        and _is_text(facts.get("check"))
        and set(facts) <= set(sizes.SHIPPED_KEYS)
        and all(_is_text(value) for value in facts.values())
        for facts in entry.values()
    )


_SHAPES: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "reach": _reach_entry,
    "layers": _layers_entry,
    "sizes": _sizes_entry,
}


def valid_entry(measurement: Measurement, entry: object) -> bool:
    """Whether ``entry`` has the shape of the shipped file's ``releases[R]`` that its reader
    relies on (a non-empty dict; every verdict, rule and source one the runtime knows)."""
    return isinstance(entry, dict) and bool(entry) and _SHAPES[measurement](entry)


def _stamp(installed: InstalledPackage, measurement: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "measurement": measurement,
        "release": installed.version,
        "fingerprint": installed.fingerprint,
        "fi_compat": __version__,
    }


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def read_cached(installed: InstalledPackage, measurement: Measurement) -> dict[str, Any] | None:
    """The cached entry of ``measurement`` for exactly these installed files and this
    fi-compat, or None: a missing, unreadable, foreign, stale or malformed file is never
    trusted (it is measured again)."""
    document = _read_json(cache_path(installed, measurement))
    if not isinstance(document, dict):
        return None
    stamp = _stamp(installed, measurement)
    if any(document.get(key) != value for key, value in stamp.items()):
        return None
    found = document.get("entry")
    return found if isinstance(found, dict) and valid_entry(measurement, found) else None


def _write(path: Path, document: Mapping[str, Any]) -> None:
    """Write ``document`` to ``path`` atomically (a reader sees the old file or the new)."""
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8"
    ) as tmp:
        json.dump(document, tmp, indent=1)  # key order kept: layers.json's arguments are ordered
        tmp.write("\n")
    os.replace(tmp.name, path)


def _recorded_failure(installed: InstalledPackage) -> str | None:
    """Why the last automatic measurement of these files by this fi-compat failed, if it did."""
    document = _read_json(installed.directory / _FAILED)
    if not isinstance(document, dict):
        return None
    stamp = _stamp(installed, "all")
    if any(document.get(key) != value for key, value in stamp.items()):
        return None
    error = document.get("error")
    return error if isinstance(error, str) else None


# ------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class Outcome:
    """One measurement of the installed release: its entry, or why there is none."""

    measurement: Measurement
    entry: dict[str, Any] | None
    error: str | None
    #: Seconds its probe ran (0 when it was read from the cache).
    seconds: float
    #: Read from the cache, not measured now.
    cached: bool
    #: Where it is kept; None when it could not be written.
    path: Path | None


@dataclass(frozen=True)
class Measured:
    """What :func:`measure` did: the installed release and each measurement's outcome, or
    why nothing could be measured (``error``)."""

    installed: InstalledPackage | None
    outcomes: tuple[Outcome, ...] = ()
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every measurement has an entry."""
        return self.error is None and all(o.entry is not None for o in self.outcomes)


_MODULES: dict[str, Any] = {"reach": reach, "layers": layers, "sizes": sizes}


def _classify(measurement: Measurement, document: Mapping[str, Any]) -> dict[str, Any]:
    if measurement == "reach":
        return reach.classify_release(document)
    if measurement == "layers":
        return layers.classify(document)
    return sizes.shipped_entry(sizes.classify(document))


def _search_path(installed: InstalledPackage) -> list[Path]:
    """The subprocess's ``PYTHONPATH``: the installed package's directory, then every
    directory this process imports from (torch and the release's dependencies as here)."""
    entries = [installed.package.parent]
    for entry in sys.path:
        if entry and os.path.isdir(entry) and Path(entry) not in entries:
            entries.append(Path(entry))
    return entries


def _probe(installed: InstalledPackage, measurement: Measurement, timeout: float) -> Outcome:
    """One probe's outcome; whatever goes wrong on the way is its error, never raised."""
    started = time.monotonic()
    try:
        return _run_probe(installed, measurement, timeout, started)
    except Exception as error:  # this machine, not the release: still a finding
        why = f"{type(error).__name__}: {error}"
        return Outcome(
            measurement,
            None,
            f"flashinfer-python {installed.version}: the {measurement} probe could not run ({why})",
            time.monotonic() - started,
            False,
            None,
        )


def _run_probe(
    installed: InstalledPackage, measurement: Measurement, timeout: float, started: float
) -> Outcome:
    module = _MODULES[measurement]
    environment = run.probe_environment(
        _search_path(installed),
        {module.NAMES_ENV: json.dumps(module.probe_names()), **_NO_GPU},
    )
    probed = run.run(
        [sys.executable, str(_STAND_IN), str(module.PROBE)],
        version=installed.version,
        env=environment,
        timeout=timeout,
    )
    seconds = time.monotonic() - started
    if probed.document is None:
        return Outcome(measurement, None, probed.error, seconds, False, None)
    location = str(probed.document.get("location", ""))
    if not location.startswith(str(installed.package)):
        error = (
            f"flashinfer-python {installed.version}: the probe imported flashinfer from "
            f"{location!r}, not {str(installed.package)!r}"
        )
        return Outcome(measurement, None, error, seconds, False, None)
    try:
        found = _classify(measurement, probed.document)
    except Exception as error:  # a document that is not a measurement: a finding
        why = f"{type(error).__name__}: {error}"
        return Outcome(
            measurement,
            None,
            f"flashinfer-python {installed.version}: the {measurement} probe's report could "
            f"not be classified ({why})",
            seconds,
            False,
            None,
        )
    if not valid_entry(measurement, found):
        return Outcome(
            measurement,
            None,
            f"flashinfer-python {installed.version}: the {measurement} probe's report gave "
            "an entry fi-compat cannot read",
            seconds,
            False,
            None,
        )
    return Outcome(measurement, found, None, seconds, False, None)


def _keep(installed: InstalledPackage, outcome: Outcome) -> Outcome:
    """Write a new entry to the cache; the outcome says where (or why it could not)."""
    if outcome.entry is None or outcome.cached:
        return outcome
    path = cache_path(installed, outcome.measurement)
    try:
        _write(path, {**_stamp(installed, outcome.measurement), "entry": outcome.entry})
    except OSError as error:
        logger.debug("fi-compat could not cache %s in %s: %s", outcome.measurement, path, error)
        return Outcome(outcome.measurement, outcome.entry, None, outcome.seconds, False, None)
    return Outcome(outcome.measurement, outcome.entry, None, outcome.seconds, False, path)


def measure(
    installed: InstalledPackage | None = None,
    *,
    force: bool = False,
    timeout: float | None = None,
    automatic: bool = False,
) -> Measured:
    """Measure the installed release (``installed``, else :func:`find_installed`) and cache
    each entry; with ``force``, measure again what is cached. Never raises for what the
    release or the machine does: every failure is in the result.

    ``timeout`` bounds each probe (default: each measurement's own limit). ``automatic``
    is a reader's first use: it records a failure so that later processes do not retry.
    """
    started = time.monotonic()
    installed = installed or find_installed()
    if installed is None:
        return Measured(
            None,
            error="no installed flashinfer-python distribution was found "
            "(a flashinfer package on sys.path with its flashinfer_python-*.dist-info)",
        )
    try:
        installed.directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return Measured(
            installed,
            error=f"the cache directory {installed.directory} cannot be created ({error}); "
            f"set {_local.CACHE_ENV} to a writable directory",
        )
    with _local.locked(installed.directory / _LOCK, LOCK_WAIT) as held:
        if not held:
            return Measured(
                installed,
                error=f"another process held {installed.directory / _LOCK} for {LOCK_WAIT:g} s",
                seconds=time.monotonic() - started,
            )
        outcomes: dict[str, Outcome] = {}
        for measurement in MEASUREMENTS:
            cached = None if force else read_cached(installed, measurement)
            if cached is not None:
                path = cache_path(installed, measurement)
                outcomes[measurement] = Outcome(measurement, cached, None, 0.0, True, path)
        missing = [m for m in MEASUREMENTS if m not in outcomes]

        def one(measurement: Measurement) -> Outcome:
            limit = timeout if timeout is not None else float(_MODULES[measurement].TIMEOUT)
            return _keep(installed, _probe(installed, measurement, limit))

        with ThreadPoolExecutor(max_workers=max(1, len(missing))) as pool:
            for outcome in pool.map(one, missing):
                outcomes[outcome.measurement] = outcome
        result = Measured(
            installed,
            tuple(outcomes[m] for m in MEASUREMENTS),
            seconds=time.monotonic() - started,
        )
        _record(installed, result, automatic)
    return result


def _record(installed: InstalledPackage, result: Measured, automatic: bool) -> None:
    """Keep an automatic attempt's failure beside the entries; forget it once all succeed."""
    failed = installed.directory / _FAILED
    errors = [o.error for o in result.outcomes if o.error]
    with contextlib.suppress(OSError):
        if not errors:
            failed.unlink(missing_ok=True)
        elif automatic:
            _write(failed, {**_stamp(installed, "all"), "error": "; ".join(errors)})


# ------------------------------------------------------------------------ the readers

#: Why the installed release has no entry in this process: (version, fingerprint) -> why.
_REASONS: dict[tuple[str, str], str] = {}
#: Entries measured or read by this process: (version, fingerprint, measurement) -> entry.
_ENTRIES: dict[tuple[str, str, str], dict[str, Any]] = {}


def entry(measurement: Measurement, installed: InstalledPackage) -> dict[str, Any] | None:
    """The installed release's entry of ``measurement``: cached, else measured now (once
    per process, under the lock) unless automatic measuring is off or failed before; None
    then, and :func:`why_unmeasured` says why."""
    key = (installed.version, installed.fingerprint)
    known = _ENTRIES.get((key[0], key[1], measurement))
    if known is not None:
        return known
    cached = read_cached(installed, measurement)
    if cached is not None:
        _ENTRIES[(key[0], key[1], measurement)] = cached
        return cached
    if key in _REASONS:
        return None
    if not auto_enabled():
        _REASONS[key] = f"automatic measuring is off: {AUTO_ENV}=0"
        return None
    failure = _recorded_failure(installed)
    if failure is not None:
        _REASONS[key] = f"measuring it here failed: {failure}"
        return None
    logger.debug("measuring flashinfer %s on first use (%s)", installed.version, installed.package)
    result = measure(installed, timeout=AUTO_TIMEOUT, automatic=True)
    for outcome in result.outcomes:
        if outcome.entry is not None:
            _ENTRIES[(key[0], key[1], outcome.measurement)] = outcome.entry
    found = _ENTRIES.get((key[0], key[1], measurement))
    if found is None:
        errors = [o.error for o in result.outcomes if o.measurement == measurement and o.error]
        _REASONS[key] = "measuring it here failed: " + (
            errors[0] if errors else result.error or "no entry"
        )
    return found


def forget() -> None:
    """Forget the entries and reasons this process took (the files in the cache stay):
    the next reader asks the cache, and measures, anew."""
    _ENTRIES.clear()
    _REASONS.clear()


def why_unmeasured(release: str | None) -> str:
    """For a message about ``release`` having no measured entry: what to run, and why the
    installed release was not measured here, if it was asked; empty for another release."""
    installed = find_installed()
    if installed is None or not same_release(release, installed.version):
        return ""
    reason = _REASONS.get((installed.version, installed.fingerprint))
    command = f"run `{COMMAND}` to measure it on this machine"
    return f"{reason}; {command}" if reason else command


class Releases(Mapping[str, Any]):
    """A measurement's ``releases``: the shipped entries fi-compat keeps (``shipped``) and,
    when the installed release is not among them, its entry measured on this machine,
    taken (or measured) only when a reader asks for it or lists every release."""

    def __init__(self, measurement: Measurement, shipped: Mapping[str, Any]) -> None:
        self._measurement = measurement
        self._shipped = dict(shipped)
        self._installed: InstalledPackage | None = None
        self._looked = False
        self._extra: dict[str, Any] | None = None

    def _find(self) -> InstalledPackage | None:
        if not self._looked:
            self._installed = find_installed()
            self._looked = True
        return self._installed

    def _installed_entries(self) -> dict[str, Any]:
        if self._extra is None:
            self._extra = {}
            installed = self._find()
            if installed is not None and not any(
                same_release(installed.version, release) for release in self._shipped
            ):
                found = entry(self._measurement, installed)
                if found is not None:
                    self._extra[installed.version] = found
        return self._extra

    def __getitem__(self, release: str) -> Any:
        if release in self._shipped:
            return self._shipped[release]
        installed = self._find()
        if installed is not None and same_release(release, installed.version):
            extra = self._installed_entries()
            if installed.version in extra:
                return extra[installed.version]
        raise KeyError(release)

    def __iter__(self) -> Iterator[str]:
        yield from self._shipped
        yield from self._installed_entries()

    def __len__(self) -> int:
        return len(self._shipped) + len(self._installed_entries())
