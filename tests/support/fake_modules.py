"""Every recorded module imported under the fake and its names checked, in a subprocess.

``tests/testing/test_fake_modules.py`` checks that every module the records hold imports
under ``fake_flashinfer`` and binds its recorded names: every module of a release with every
name's kind and signature (:func:`release_modules`), the newest release's ~3,300 modules
with a sample's names (:func:`newest_modules`), and every distinct reading of every module
of every release with every value it assigns (:func:`every_module`, about 8,300 imports).
That is a minute and more of importing, and what it finds is a pure function of this
checkout's ``fi_compat/`` (the fake and its shipped records) and the interpreter. So the
tests run it here, in a subprocess made once per input
(:func:`tests.support.fresh.fresh_python`, :mod:`tools.results`): an unchanged checkout is
answered from the kept result, its coverage data included. Each check runs to the end and
collects what it finds, rather than stopping at the first failure::

    python -m tests.support.fake_modules every             # every reading of every module
    python -m tests.support.fake_modules newest            # the newest release's modules
    python -m tests.support.fake_modules release VERSION   # one release, every name

Each prints one JSON object: what was imported and counted, and ``failures``, a list of
``{"release", "module", "name", "expected", "found"}`` (``name`` is ``""`` for the module
itself). It exits 0 once every check has run, whatever they found; a traceback and a
non-zero status mean the checking itself broke. The output names no temporary path (the
fake's generated modules live in one), so the run can be kept.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import json
import re
import sys
import tempfile
import traceback
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pytest

from fi_compat.testing import (
    NameRecord,
    ReleaseRecord,
    available_releases,
    fake_flashinfer,
    load_release,
)
from fi_compat.testing._modules import MODULE_ATTRIBUTES
from fi_compat.testing._objects import served as served_by_getattr
from fi_compat.testing._objects import unmodelled_reason
from tests.support.outside_names import is_outside, outside_binding

__all__ = [
    "ENGINE_IMPORTS",
    "ENGINE_MODULES",
    "Failure",
    "check_module",
    "check_values",
    "every_distinct_module",
    "every_module",
    "main",
    "newest_modules",
    "read_served",
    "release_modules",
]

#: Modules engines' model code imports outside the attention backends, with a name from each
#: (read from vLLM 0.33.0's and SGLang 0.5.23's ``from flashinfer... import ...`` lines).
ENGINE_IMPORTS = (
    ("flashinfer.fused_moe", "cutlass_fused_moe"),
    ("flashinfer.fused_moe", "trtllm_fp4_block_scale_routed_moe"),
    ("flashinfer.fused_moe", "Fp8QuantizationType"),
    ("flashinfer.fused_moe.core", "ActivationType"),
    ("flashinfer.fused_moe.core", "get_w2_permute_indices_with_cache"),
    ("flashinfer.fused_moe.core", "_maybe_get_cached_w3_w1_permute_indices"),
    ("flashinfer.gemm", "mm_bf16"),
    ("flashinfer.quantization.fp4_quantization", "block_scale_interleave"),
    ("flashinfer.fp4_quantization", "nvfp4_block_scale_interleave"),
    ("flashinfer.norm", "gemma_rmsnorm"),
    ("flashinfer.rope", "apply_rope_with_cos_sin_cache_inplace"),
    ("flashinfer.sampling", "top_k_top_p_sampling_from_logits"),
    ("flashinfer.topk", "top_k_ragged_transform"),
    ("flashinfer.mla", "BatchMLAPagedAttentionWrapper"),
    ("flashinfer.autotuner", "AutoTuner"),
    ("flashinfer.jit.core", "gen_jit_spec"),
    ("flashinfer.cute_dsl.utils", "get_max_active_clusters"),
    ("flashinfer.moe_ep", "MoEEpMegaLayer"),
    ("flashinfer.mamba", "selective_state_update"),
    ("flashinfer.gdn_decode", "gated_delta_rule_mtp"),
    ("flashinfer.gdn_prefill", "chunk_gated_delta_rule"),
    ("flashinfer.comm.mapping", "Mapping"),
    ("flashinfer.comm.trtllm_alltoall", "MnnvlMoe"),
    ("flashinfer.comm.mnnvl", "is_mnnvl_fabric_supported"),
    ("flashinfer.utils", "get_device_sm_count"),
    ("flashinfer.utils", "_get_range_buf"),
    ("flashinfer.tllm_enums", "RoutingMethodType"),
)
#: The further modules the engines' code names (``flashinfer.comm``'s submodules among them).
ENGINE_MODULES = (
    "flashinfer.quantization",
    "flashinfer.sparse",
    "flashinfer.jit",
    "flashinfer.cute_dsl",
    "flashinfer.comm.allreduce",
    "flashinfer.comm.cuda_ipc",
    "flashinfer.comm.vllm_ar",
)

#: What reading a served name the fake leaves unbound says.
UNBOUND = "so the fake leaves it unbound"
#: How long a value or a message is shown in a failure.
SHOWN = 300
#: A temporary path (the fake's build directories): shown as ``<tmp>/...``, so that no output
#: names one (tools.results keeps no run whose output could not be told from another's).
TEMPORARY = re.compile(re.escape(tempfile.gettempdir()) + r"/[^/\s'\"]+")


@dataclasses.dataclass(frozen=True)
class Failure:
    """A check that did not hold: what ``release``'s fake binds as ``module.name`` (``name``
    empty: the module itself) was expected to be ``expected`` and was ``found``."""

    release: str
    module: str
    name: str
    expected: str
    found: str

    def __str__(self) -> str:
        where = f"{self.module}.{self.name}" if self.name else self.module
        return f"{self.release}: {where}: expected {self.expected}; found {self.found}"


def _shown(text: object) -> str:
    """``text`` (or a value's repr) on one line, at most :data:`SHOWN` characters, with no
    temporary path."""
    shown = text if isinstance(text, str) else repr(text)
    shown = TEMPORARY.sub("<tmp>", " ".join(shown.split()))
    return shown if len(shown) <= SHOWN else shown[: SHOWN - 3] + "..."


def _raised(error: BaseException) -> str:
    """What ``error`` says, and the line that raised it."""
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return _shown(f"{type(error).__name__}: {error}{where}")


def read_served(module: ModuleType, name: str) -> tuple[bool, str | None]:
    """A name ``module``'s ``__getattr__`` serves: (True, None) when bound; (False, None)
    when it is the fake's unbound value, whose ``AttributeError`` says why; else (False,
    what reading it gave instead)."""
    missing = object()
    if getattr(module, name, missing) is not missing:
        return True, None
    try:
        value = getattr(module, name)
    except AttributeError as error:
        if re.search(UNBOUND, str(error)):
            return False, None
        return False, _raised(error)
    return False, f"unbound at first, then {_shown(value)}"


def _outside(
    module: ModuleType, binding: str, found: NameRecord
) -> tuple[str, tuple[str, str] | None]:
    """How ``module.binding``, a name from outside the release, is bound (``"bound"``, or
    ``"unbound"`` where :func:`tests.support.outside_names.outside_binding` gives None), and
    (expected, found) where it is not bound as that checks, else None."""
    try:
        value = outside_binding(module, binding, found)
    except (AssertionError, pytest.fail.Exception) as error:
        expected = f"the object imported from {found.defined_in}, or unbound saying so"
        return "unbound", (expected, _raised(error))
    return ("unbound" if value is None else "bound"), None


def _name(
    module: ModuleType, binding: str, found: NameRecord, served: tuple[str, ...] | str | None
) -> tuple[str, str] | None:
    """(expected, found) where ``module.binding`` is not bound with its recorded kind: a
    function with the recorded parameters, a class or enum as a class, a module as that
    module; else None."""
    if unmodelled_reason(found) is not None and not served_by_getattr(found, served):
        if hasattr(module, binding):  # a value the source cannot tell
            return "unbound (a value the source cannot tell)", _shown(getattr(module, binding))
        return None
    if is_outside(found):
        return _outside(module, binding, found)[1]  # the object, or unbound saying why
    value = getattr(module, binding)
    if found.kind == "function" and found.function is not None:
        if not callable(value):
            return "a function", _shown(value)
        parameters = [p.name for p in found.function.parameters]
        signature = list(inspect.signature(value).parameters)
        if signature != parameters:
            return f"parameters {parameters}", f"parameters {signature}"
    elif found.kind in ("class", "enum") and found.defined_in is not None:
        if not isinstance(value, type):
            return f"a {found.kind} (a class)", _shown(value)
    elif (
        found.kind == "module"
        and found.defined_in in sys.modules
        and value is not sys.modules[found.defined_in]
    ):
        return f"the module {found.defined_in}", _shown(value)
    return None


def check_module(record: ReleaseRecord, module: ModuleType, name: str) -> list[Failure]:
    """Every name ``module``'s record lists is bound there with its recorded kind; a
    function with the recorded parameters, a class or enum as a class; each name its
    ``__getattr__`` serves is served. The names that are not."""
    release = record.release
    recorded = record.module(name)
    if recorded is None:
        return [Failure(release, name, "", "a recorded module", "no record")]
    failures = []
    for binding, found in recorded.names.items():
        if binding.startswith("__") and binding.endswith("__"):
            continue  # the module's own attributes (__all__, __getattr__ ...)
        try:
            wrong = _name(module, binding, found, recorded.served)
        except Exception as error:
            wrong = f"a {found.kind} read as recorded", _raised(error)
        if wrong is not None:
            failures.append(Failure(release, name, binding, *wrong))
    if isinstance(recorded.served, tuple):
        for served in recorded.served:
            # served from the module binding it, which may be a value the fake leaves unbound
            try:
                _, problem = read_served(module, served)
            except Exception as error:
                problem = _raised(error)
            if problem is not None:
                expected = f"served, or unbound saying {UNBOUND!r}"
                failures.append(Failure(release, name, served, expected, problem))
    return failures


def _value(
    module: ModuleType, binding: str, found: NameRecord, served: tuple[str, ...] | str | None
) -> tuple[str | None, tuple[str, str] | None]:
    """How the fake binds ``module.binding``, a value the release assigns: ``"bound"``,
    ``"unbound"`` or None (served by ``__getattr__``, not counted); and (expected, found)
    where that is not as recorded, else None."""
    if is_outside(found):
        # from outside the release (typing.Any, cutlass.cute.typing.Float32)
        if served_by_getattr(found, served):
            return None, None
        return _outside(module, binding, found)
    if found.literal is not None:
        value = getattr(module, binding)
        expected = ast.literal_eval(found.literal)
        if value != expected or type(value) is not type(expected):
            shown = f"{_shown(expected)} ({type(expected).__name__})"
            return "bound", (shown, f"{_shown(value)} ({type(value).__name__})")
        return "bound", None
    if served_by_getattr(found, served):
        return None, None  # the module's __getattr__ serves it (test_names_a_module_getattr_...)
    reason = unmodelled_reason(found)
    if reason is None:
        return "unbound", ("a literal, or a reason to leave it unbound", "neither is recorded")
    missing = object()
    value = getattr(module, binding, missing)
    if value is not missing:
        return "unbound", (f"unbound ({reason})", _shown(value))
    said = f"({reason}), {UNBOUND}"
    try:
        getattr(module, binding)
    except AttributeError as error:
        if re.search(re.escape(said), str(error)):
            return "unbound", None
        return "unbound", (f"AttributeError saying {said!r}", _raised(error))
    return "unbound", (f"AttributeError saying {said!r}", "no error")


def check_values(
    record: ReleaseRecord, module: ModuleType, name: str
) -> tuple[int, int, list[Failure]]:
    """Every value the release assigns in ``module`` is bound as its recorded literal, a
    fresh object equal to it, and every name it imports from outside itself as the very
    object where this process has it; or left unbound, so that ``getattr(module, n,
    default)`` gives the default and reading it says why; never a stand-in. (Bound,
    unbound) values, and the values that are not so."""
    release = record.release
    recorded = record.module(name)
    if recorded is None:
        return 0, 0, [Failure(release, name, "", "a recorded module", "no record")]
    bound = unbound = 0
    failures = []
    for binding, found in recorded.names.items():
        if found.kind != "value" or binding in MODULE_ATTRIBUTES or binding == "__version__":
            continue  # the fake binds __version__ to the release, as the release does
        try:
            state, wrong = _value(module, binding, found, recorded.served)
        except Exception as error:
            state, wrong = None, ("the value read as recorded", _raised(error))
        bound += state == "bound"
        unbound += state == "unbound"
        if wrong is not None:
            failures.append(Failure(release, name, binding, *wrong))
    return bound, unbound, failures


def every_distinct_module() -> dict[str, list[str]]:
    """Release -> the modules to import under its fake so that every recorded reading of
    every module of every release is imported once: the store's ``tables.json`` cuts each
    module's releases into runs where it reads the same (every name, a re-export followed
    to its home, ``__all__``, ``__getattr__``, star imports), and a fake builds a module
    from exactly that reading; each run's newest release stands for it."""
    from fi_compat._records._store import alike_runs, modules_of

    chosen: dict[str, list[str]] = {release: [] for release in available_releases()}
    every = sorted({module for release in chosen for module in modules_of(release)})
    for module in every:
        for run in alike_runs(module):
            chosen[run[-1]].append(module)
    return chosen


def _imported(release: str, name: str, failures: list[Failure]) -> ModuleType | None:
    """Module ``name`` of the installed fake of ``release``; None, with the failure said,
    where it does not import or imports as another module."""
    try:
        module = importlib.import_module(name)
    except Exception as error:
        failures.append(Failure(release, name, "", "the module imports", _raised(error)))
        return None
    if module.__name__ != name:
        failures.append(Failure(release, name, "__name__", repr(name), repr(module.__name__)))
        return None
    return module


def _checked(release: str, modules: Sequence[str], check: set[str]) -> dict[str, Any]:
    """Under ``release``'s fake: each of ``modules`` imported, in order, and the names of
    those in ``check`` checked (:func:`check_module`)."""
    record = load_release(release)
    imported: list[str] = []
    failures: list[Failure] = []
    try:
        with fake_flashinfer(release):
            for name in modules:
                module = _imported(release, name, failures)
                if module is None:
                    continue
                imported.append(name)
                if name in check:
                    failures += check_module(record, module, name)
    except Exception as error:
        failures.append(Failure(release, "flashinfer", "", "the fake installs", _raised(error)))
    return {
        "release": release,
        "modules": list(modules),
        "imported": imported,
        "checked": sorted(check),
        "failures": [dataclasses.asdict(failure) for failure in failures],
    }


def release_modules(release: str) -> dict[str, Any]:
    """All of ``release``'s modules, and every name of each: ``release``, ``modules`` (the
    recorded ones, sorted), ``imported`` (those that imported, in that order), ``checked``
    and ``failures``."""
    modules = sorted(load_release(release).names)
    return _checked(release, modules, set(modules))


def newest_modules() -> dict[str, Any]:
    """The newest release's modules (about 3,300): every one imports; the names of every
    tenth (by name, a deterministic sample) and of the modules engines import are checked
    (the keys of :func:`release_modules`)."""
    release = available_releases()[-1]
    modules = sorted(load_release(release).names)
    engine = {module for module, _ in ENGINE_IMPORTS} | set(ENGINE_MODULES)
    return _checked(release, modules, set(modules[::10]) | (engine & set(modules)))


def every_module() -> dict[str, Any]:
    """Under ``fake_flashinfer(R)`` for every recorded R, each distinct reading of each
    module under a release that reads it so (:func:`every_distinct_module`), and every
    release's top level, imported, and every value each binds checked
    (:func:`check_values`): ``releases`` (each release whose fake it installed),
    ``imported`` (how many imports succeeded), ``bound`` and ``unbound`` (how many values
    are) and ``failures``."""
    chosen = every_distinct_module()
    imported = bound = unbound = 0
    failures: list[Failure] = []
    for release, modules in chosen.items():
        record = load_release(release)
        try:
            with fake_flashinfer(release):
                for name in ["flashinfer", *modules]:
                    module = _imported(release, name, failures)
                    if module is None:
                        continue
                    imported += 1
                    recorded = record.module(name)
                    if recorded is not None and recorded.unreadable is None:
                        found = check_values(record, module, name)
                        bound, unbound = bound + found[0], unbound + found[1]
                        failures += found[2]
        except Exception as error:
            failure = Failure(release, "flashinfer", "", "the fake installs", _raised(error))
            failures.append(failure)
    return {
        "releases": sorted(chosen),
        "imported": imported,
        "bound": bound,
        "unbound": unbound,
        "failures": [dataclasses.asdict(failure) for failure in failures],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("every", help="every distinct reading of every module, every value")
    commands.add_parser("newest", help="every module of the newest release, a sample's names")
    one = commands.add_parser("release", help="every module of a release, every name")
    one.add_argument("version")
    args = parser.parse_args(argv)
    # A warning is an error, as the suite's pytest configuration makes it (filterwarnings).
    warnings.simplefilter("error")
    if args.command == "every":
        found = every_module()
    elif args.command == "newest":
        found = newest_modules()
    else:
        found = release_modules(args.version)
    for failure in found["failures"]:
        print(Failure(**failure), file=sys.stderr)
    print(json.dumps(found, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
