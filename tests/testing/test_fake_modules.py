"""Every recorded module of a release under the fake (``fi_compat/testing/_modules.py``).

The records hold every module of every release and every name each binds, private ones
included; the fake binds all of them, each module when it is first imported. Here: every
module of three releases imports and binds its recorded names with their recorded kinds and
signatures; the modules and names vLLM 0.33.0 and SGLang 0.5.23 import from outside the
attention backends and ``flashinfer.comm`` (MoE, GEMM, quantization, norm, ...) are there; a
name a module ``__getattr__`` serves is served; a module the recorder could not read imports
and its names raise a clear error; a module the release lacks names the first release that
has it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Iterator
from types import MappingProxyType, ModuleType

import pytest

import fi_compat.testing._fake as fake_module
from fi_compat.testing import (
    ModuleRecord,
    NameRecord,
    ReleaseRecord,
    StandIn,
    available_releases,
    fake_flashinfer,
    load_release,
    module_introduced_in,
)
from fi_compat.testing._modules import MODULE_ATTRIBUTES
from fi_compat.testing._objects import served as served_by_getattr
from fi_compat.testing._objects import unmodelled_reason
from tests.support.outside_names import is_outside, outside_binding

NEWEST = available_releases()[-1]
OLDEST = available_releases()[0]
MIDDLE = available_releases()[len(available_releases()) // 2]

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


def _read_served(module: ModuleType, name: str) -> bool:
    """A name ``module``'s ``__getattr__`` serves: bound (True), or the fake's unbound value,
    whose ``AttributeError`` says why (False)."""
    missing = object()
    if getattr(module, name, missing) is not missing:
        return True
    with pytest.raises(AttributeError, match="so the fake leaves it unbound"):
        getattr(module, name)
    return False


def _check_module(record: ReleaseRecord, module: ModuleType, name: str) -> None:
    """Every name ``module``'s record lists is bound there with its recorded kind; a
    function with the recorded parameters, a class or enum as a class."""
    recorded = record.module(name)
    assert recorded is not None, name
    for binding in recorded.names:
        if binding.startswith("__") and binding.endswith("__"):
            continue  # the module's own attributes (__all__, __getattr__ ...)
        found = recorded.names[binding]
        if unmodelled_reason(found) is not None and not served_by_getattr(found, recorded.served):
            assert not hasattr(module, binding), binding  # a value the source cannot tell
            continue
        where = f"{name}.{binding}"
        if is_outside(found):
            outside_binding(module, binding, found)  # the object itself, or unbound saying why
            continue
        value = getattr(module, binding)
        if found.kind == "function" and found.function is not None:
            assert callable(value), where
            parameters = [p.name for p in found.function.parameters]
            assert list(inspect.signature(value).parameters) == parameters, where
        elif found.kind in ("class", "enum") and found.defined_in is not None:
            assert isinstance(value, type), where
        elif found.kind == "module" and found.defined_in in sys.modules:
            assert value is sys.modules[found.defined_in], where
    if isinstance(recorded.served, tuple):
        for served in recorded.served:
            # served from the module binding it, which may be a value the fake leaves unbound
            _read_served(module, served)


def _imported(release: str, modules: list[str], check: list[str]) -> Iterator[str]:
    record = load_release(release)
    with fake_flashinfer(release):
        for name in modules:
            module = importlib.import_module(name)
            assert module.__name__ == name
            if name in check:
                _check_module(record, module, name)
            yield name


@pytest.mark.parametrize("release", sorted({OLDEST, MIDDLE}))
def test_every_module_of_a_release_imports_with_its_names(release: str) -> None:
    """All of a release's modules and every name of each: the oldest recorded release and
    the middle one of the list (a few hundred modules at most)."""
    modules = sorted(load_release(release).names)
    assert "flashinfer" in modules
    assert list(_imported(release, modules, modules)) == modules


def test_every_module_of_the_newest_release_imports() -> None:
    """The newest release records about 1900 modules: every one imports; the names of
    every tenth (by name, a deterministic sample) and of the modules engines import are
    checked as above, which keeps the test within seconds."""
    record = load_release(NEWEST)
    modules = sorted(record.names)
    engine = {module for module, _ in ENGINE_IMPORTS} | set(ENGINE_MODULES)
    sample = set(modules[::10]) | (engine & set(modules))
    assert list(_imported(NEWEST, modules, sorted(sample))) == modules


def _every_distinct_module() -> dict[str, list[str]]:
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


def _check_values(record: ReleaseRecord, module: ModuleType, name: str) -> tuple[int, int]:
    """Every value the release assigns in ``module`` is bound as its recorded literal, a
    fresh object equal to it, and every name it imports from outside itself as the very
    object where this process has it; or left unbound, so that ``getattr(module, n,
    default)`` gives the default and reading it says why; never a stand-in. (Bound,
    unbound) values."""
    recorded = record.module(name)
    assert recorded is not None, name
    bound = unbound = 0
    for binding, found in recorded.names.items():
        if found.kind != "value" or binding in MODULE_ATTRIBUTES or binding == "__version__":
            continue  # the fake binds __version__ to the release, as the release does
        where = f"{record.release}: {name}.{binding}"
        if is_outside(found):
            # from outside the release (typing.Any, cutlass.cute.typing.Float32)
            if served_by_getattr(found, recorded.served):
                continue
            if outside_binding(module, binding, found) is None:
                unbound += 1
            else:
                bound += 1
            continue
        if found.literal is not None:
            value = getattr(module, binding)
            expected = ast.literal_eval(found.literal)
            assert value == expected, where
            assert type(value) is type(expected), where
            bound += 1
            continue
        if served_by_getattr(found, recorded.served):
            continue  # the module's __getattr__ serves it (test_names_a_module_getattr_...)
        reason = unmodelled_reason(found)
        assert reason is not None, where
        missing = object()
        assert getattr(module, binding, missing) is missing, where
        with pytest.raises(
            AttributeError, match=re.escape(f"({reason}), so the fake leaves it unbound")
        ):
            getattr(module, binding)
        unbound += 1
    return bound, unbound


def test_every_module_of_every_release_imports() -> None:
    """Under ``fake_flashinfer(R)`` for every recorded R, every recorded module imports:
    each distinct reading of each module under a release that reads it so (about 5,700
    imports for the 111 releases' some 100,000 modules), and every release's top level;
    and every value each binds holds the recorded literal or is left unbound saying why."""
    chosen = _every_distinct_module()
    assert set(chosen) == set(available_releases())
    imported = bound = unbound = 0
    for release, modules in chosen.items():
        record = load_release(release)
        with fake_flashinfer(release):
            for name in ["flashinfer", *modules]:
                module = importlib.import_module(name)
                assert module.__name__ == name, (release, name)
                imported += 1
                recorded = record.module(name)
                if recorded is not None and recorded.unreadable is None:
                    found = _check_values(record, module, name)
                    bound, unbound = bound + found[0], unbound + found[1]
    assert imported > 5000
    assert bound > unbound > 0  # most values are literals (31,102 against 22,192)


def test_the_modules_engines_import_are_there() -> None:
    """What vLLM's and SGLang's model code imports from FlashInfer outside the attention
    backends imports from the newest release's fake, each name as recorded."""
    record = load_release(NEWEST)
    with fake_flashinfer(NEWEST):
        for module, name in ENGINE_IMPORTS:
            recorded = record.module(module)
            if recorded is None or not recorded.binds(name):
                continue  # not in this release (the engines guard such imports)
            value = getattr(importlib.import_module(module), name)
            assert not isinstance(value, StandIn) or recorded.names[name].kind == "value"
        for module in ENGINE_MODULES:
            if record.module(module) is not None:
                importlib.import_module(module)
        core = importlib.import_module("flashinfer.fused_moe.core")
        package = importlib.import_module("flashinfer.fused_moe")
        # One object, however it is reached (flashinfer.fused_moe re-exports core's).
        assert package.ActivationType is core.ActivationType
        assert issubclass(core.ActivationType, __import__("enum").Enum)
        found = record.module("flashinfer.fused_moe.core")
        assert found is not None
        cutlass = found.names["cutlass_fused_moe"].function
        assert cutlass is not None
        fused = package.cutlass_fused_moe
        assert list(inspect.signature(fused).parameters) == [p.name for p in cutlass.parameters]
        assert "def cutlass_fused_moe(" in inspect.getsource(fused)


def test_private_names_are_bound_as_recorded() -> None:
    """``flashinfer.utils._get_range_buf`` (engines call it) and every other private name of
    ``flashinfer.utils``, a module the fake imports on entry: bound on first use."""
    pytest.importorskip("torch", reason="needs torch")  # _get_range_buf computes with it
    record = load_release(NEWEST)
    utils = record.module("flashinfer.utils")
    assert utils is not None
    private = [name for name in utils.names if name.startswith("_") and not name.endswith("__")]
    assert "_get_range_buf" in private
    with fake_flashinfer(NEWEST) as fi:
        module = importlib.import_module("flashinfer.utils")
        _check_module(record, module, "flashinfer.utils")
        function = module._get_range_buf
        assert function.__module__ == "flashinfer.utils"
        assert "def _get_range_buf(" in inspect.getsource(function)
        calls = len(fi.calls)
        found = function(8, "cpu")  # computed, as the release does (test_fake_helpers_real)
        assert [call.name for call in fi.calls[calls:]] == ["_get_range_buf"]
        assert found.tolist() == list(range(8))
        assert ("range_8", "cpu") in module._cache_buf
        assert set(private) <= set(dir(module))


def test_a_submodule_does_not_rebind_a_name_of_its_package() -> None:
    """``flashinfer.cute_dsl`` binds the function ``add_rmsnorm_fp4quant`` of its submodule
    of that name (``from .add_rmsnorm_fp4quant import add_rmsnorm_fp4quant``): importing the
    submodule later leaves the package's name the function, as in the release."""
    record = load_release(NEWEST)
    recorded = record.module("flashinfer.cute_dsl")
    assert recorded is not None
    assert recorded.names["add_rmsnorm_fp4quant"].kind == "function"
    with fake_flashinfer(NEWEST):
        submodule = importlib.import_module("flashinfer.cute_dsl.add_rmsnorm_fp4quant")
        package = importlib.import_module("flashinfer.cute_dsl")
        assert package.add_rmsnorm_fp4quant is submodule.add_rmsnorm_fp4quant
        assert callable(package.add_rmsnorm_fp4quant)


def _served(release: str) -> list[tuple[str, str]]:
    record = load_release(release)
    found = []
    for module in sorted(record.names):
        recorded = record.module(module)
        if recorded is not None and isinstance(recorded.served, tuple):
            found += [(module, name) for name in recorded.served]
    return found


def test_names_a_module_getattr_serves_are_served() -> None:
    """Each name a module ``__getattr__`` serves in the newest release is there, from the
    module binding it nearest below; 0.6.14's ``flashinfer.comm`` serves the function
    ``all_gather_matmul`` of its subpackage of that name."""
    served = _served(NEWEST)
    assert served
    bound = unbound = 0
    with fake_flashinfer(NEWEST):
        for module, name in served:
            if _read_served(importlib.import_module(module), name):
                bound += 1
            else:  # served from a module that binds it to a value the source cannot tell
                unbound += 1
    assert bound > 4 * unbound
    if "0.6.14" in available_releases():
        with fake_flashinfer("0.6.14") as fi:
            comm = importlib.import_module("flashinfer.comm")
            function = comm.all_gather_matmul
            assert callable(function)
            assert function.__module__ == "flashinfer.comm.all_gather_matmul.all_gather_matmul"
            assert list(inspect.signature(function).parameters)[:2] == ["inp", "w"]
            fi.clear_calls()
            function(None, None, None)
            assert fi.calls[-1].name == "all_gather_matmul"


def test_a_getattr_whose_names_are_unknown_serves_none() -> None:
    """A module ``__getattr__`` whose source does not list what it serves (recorded ``"*"``,
    ``flashinfer.decode`` of 0.7.2.post1): the record cannot tell its names, so the fake
    serves none and says why."""
    record = load_release(NEWEST)
    unknown = [m for m in sorted(record.names) if getattr(record.module(m), "served", None) == "*"]
    assert unknown, f"no module of {NEWEST} serves names its source does not list"
    with fake_flashinfer(NEWEST):
        module = importlib.import_module(unknown[0])
        with pytest.raises(AttributeError, match="does not list"):
            module.definitely_not_a_flashinfer_name  # noqa: B018
        assert not hasattr(module, "definitely_not_a_flashinfer_name")


def _record_with(monkeypatch: pytest.MonkeyPatch, target: str, found: ModuleRecord) -> None:
    """Make the fakes of this test read ``found`` as the newest release's ``target`` (from a
    copy of its record: a build of its own, which no other test reuses)."""
    record = dataclasses.replace(load_release(NEWEST))
    assert record.module(target) is not None
    recorded = ReleaseRecord.module

    def module(self: ReleaseRecord, name: str) -> ModuleRecord | None:
        return found if self is record and name == target else recorded(self, name)

    monkeypatch.setattr(ReleaseRecord, "module", module)
    monkeypatch.setattr(fake_module, "load_release", lambda release: record)


def test_a_served_name_no_module_binds_is_a_function_that_logs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where no recorded module binds a name a module ``__getattr__`` serves, the fake serves
    a function taking anything, which logs its calls and returns None."""
    target = "flashinfer.jit.core"
    names: MappingProxyType[str, NameRecord] = MappingProxyType({})
    served = ModuleRecord(target, NEWEST, names, served=("definitely_served_by_getattr",))
    _record_with(monkeypatch, target, served)
    with fake_flashinfer(NEWEST) as fi:
        core = importlib.import_module(target)
        function = core.definitely_served_by_getattr
        assert function.__module__ == target
        assert function(1, key="value") is None
        assert fi.calls[-1].name == "definitely_served_by_getattr"
        assert fi.calls[-1].arguments == {"args": (1,), "kwargs": {"key": "value"}}
        assert "definitely_served_by_getattr" in dir(core)


def test_a_module_the_recorder_could_not_read_imports_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A module recorded as unreadable imports; each of its names raises an ``ImportError``
    naming the module and the recorder's reason (``from ... import`` shows it too); its
    dunders stay ``AttributeError`` (``hasattr`` probes keep working)."""
    target = "flashinfer.jit.core"
    reason = "SyntaxError: invalid syntax (core.py, line 1)"
    names: MappingProxyType[str, NameRecord] = MappingProxyType({})
    _record_with(monkeypatch, target, ModuleRecord(target, NEWEST, names, unreadable=reason))
    with fake_flashinfer(NEWEST):
        core = importlib.import_module(target)
        with pytest.raises(ImportError, match="could not read") as raised:
            core.gen_jit_spec  # noqa: B018
        assert target in str(raised.value)
        assert reason in str(raised.value)
        with pytest.raises(ImportError, match="could not read"):
            exec(f"from {target} import check_cuda_arch", {})
        assert not hasattr(core, "__wrapped__")


def test_a_module_the_release_lacks_names_the_first_release_with_it() -> None:
    """``import flashinfer.X`` of a module the release lacks raises ``ModuleNotFoundError``
    naming the first recorded release that ships it (or that none does, or when it was
    there before); ``importlib.util.find_spec`` answers None, as Python does."""
    old, new = set(load_release(OLDEST).names), set(load_release(NEWEST).names)
    later = sorted(new - old)
    assert later
    module = "flashinfer.fused_moe" if "flashinfer.fused_moe" in later else later[0]
    first = module_introduced_in(module)
    assert first is not None
    with fake_flashinfer(OLDEST):
        with pytest.raises(ModuleNotFoundError, match=f"first .* ships it is {first}") as raised:
            importlib.import_module(module)
        assert raised.value.name == module
        assert str(raised.value).startswith(f"No module named {module!r}")
        assert importlib.util.find_spec(module) is None
        with pytest.raises(ModuleNotFoundError, match="no recorded flashinfer-python release"):
            importlib.import_module("flashinfer.definitely_not_a_module")
    gone = sorted(old - new)
    if gone:
        with fake_flashinfer(NEWEST), pytest.raises(ModuleNotFoundError, match="is gone by"):
            importlib.import_module(gone[0])


def test_the_values_left_unbound_are_listed_with_their_reasons() -> None:
    """``FakeFlashInfer.unmodelled_values()`` lists exactly the values of a module that the
    fake leaves unbound, each with the reason reading it gives; every other value the
    release assigns there is bound."""
    release = "0.7.2.post1" if "0.7.2.post1" in available_releases() else NEWEST
    record = load_release(release)
    with fake_flashinfer(release) as fi:
        listed = fi.unmodelled_values()
        assert listed["flashinfer.kda_decode._FUSED_KDA_DECODE_AVAILABLE"] == (
            "bound by several statements"
        )
        assert "flashinfer.utils._cache_buf" not in listed
        for name in ("flashinfer.utils", "flashinfer.kda_decode", "flashinfer.comm.mnnvl"):
            module = importlib.import_module(name)
            recorded = record.module(name)
            assert recorded is not None
            here = {
                key.rpartition(".")[2]: why
                for key, why in listed.items()
                if key.rpartition(".")[0] == name
            }
            assert here, name
            for binding, found in recorded.names.items():
                if found.kind != "value" or binding in MODULE_ATTRIBUTES:
                    continue
                if binding in here:
                    with pytest.raises(AttributeError, match=re.escape(f"({here[binding]})")):
                        getattr(module, binding)
                elif found.defined_in is not None and found.defined_in.startswith("flashinfer"):
                    assert hasattr(module, binding), f"{name}.{binding}"


def test_a_name_from_outside_the_release_is_bound_once_its_module_is_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """0.7.2.post1's ``flashinfer.__main__`` imports ``InvalidRequirement`` from
    ``packaging.requirements``. In a process that has not imported that module the fake
    leaves the name unbound (it imports nothing beyond the standard library), says why and
    lists it; once the process imports the module, the name is that module's very class."""
    monkeypatch.delitem(sys.modules, "packaging.requirements", raising=False)
    record = load_release("0.7.2.post1")
    found = record.module("flashinfer.__main__")
    assert found is not None
    assert found.names["InvalidRequirement"].defined_in == "packaging.requirements"
    with fake_flashinfer("0.7.2.post1") as fi:
        main = importlib.import_module("flashinfer.__main__")
        assert getattr(main, "InvalidRequirement", None) is None
        with pytest.raises(AttributeError, match="which this process has not imported"):
            main.InvalidRequirement  # noqa: B018
        listed = fi.unmodelled_values()
        assert (
            "imported from packaging.requirements"
            in listed["flashinfer.__main__.InvalidRequirement"]
        )
        import packaging.requirements

        assert main.InvalidRequirement is packaging.requirements.InvalidRequirement
        assert "flashinfer.__main__.InvalidRequirement" not in fi.unmodelled_values()
        assert not isinstance(main.tabulate if "tabulate" in vars(main) else None, StandIn)


def test_an_outside_name_re_exported_under_another_name_is_looked_up_by_its_own() -> None:
    """A module that re-exports, as ``alias``, a name another module imports from outside
    the release finds it, once that module is imported, under the name it has there; until
    then reading it names where it comes from."""
    from fi_compat.testing import _runtime

    namespace: dict[str, object] = {"_fi_outside": {"alias": ("json", False, "dumps")}}
    found = _runtime._lazy("flashinfer.somewhere", namespace, {}, "alias")
    assert found is importlib.import_module("json").dumps
    assert namespace["alias"] is found
    missing: dict[str, object] = {"_fi_outside": {"alias": ("not_a_module_here", False, "x")}}
    with pytest.raises(AttributeError, match=re.escape("imported from not_a_module_here")):
        _runtime._lazy("flashinfer.somewhere", missing, {}, "alias")
