"""Every recorded module of a release under the fake (``fi_compat/testing/_modules.py``).

The records hold every module of every release and every name each binds, private ones
included; the fake binds all of them, each module when it is first imported. Here: every
module of three releases imports and binds its recorded names with their recorded kinds and
signatures; the modules and names vLLM 0.33.0 and SGLang 0.5.23 import from outside the
attention backends and ``flashinfer.comm`` (MoE, GEMM, quantization, norm, ...) are there; a
name a module ``__getattr__`` serves is served; a module the recorder could not read imports
and its names raise a clear error; a module the release lacks names the first release that
has it.

The three checks that import every module of a release, or every distinct reading of every
module of every release (thousands of imports), run in a subprocess made once per input
(:mod:`tests.support.fake_modules`): what they find depends only on this checkout's
``fi_compat/`` and the interpreter, so an unchanged checkout is answered from the kept run.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
from types import MappingProxyType
from typing import Any

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
from tests.support.fake_modules import (
    ENGINE_IMPORTS,
    ENGINE_MODULES,
    Failure,
    check_module,
    read_served,
)
from tests.support.fresh import support_json

NEWEST = available_releases()[-1]
OLDEST = available_releases()[0]
MIDDLE = available_releases()[len(available_releases()) // 2]

#: How many of a run's failures a test's message shows.
SHOWN_FAILURES = 50


def _checked_in_subprocess(*argv: str) -> dict[str, Any]:
    """What ``python -m tests.support.fake_modules ARGV`` found (its JSON), made once per
    input (:func:`tests.support.fresh.fresh_python`), after checking that it ran to the end
    and that every check held (else failing with what it said, every failure named)."""
    found = support_json("tests.support.fake_modules", *argv, timeout=1800)
    command = " ".join(["python -m tests.support.fake_modules", *argv])
    # A module that does not import first: its names' failures follow from it.
    failures = sorted(
        (Failure(**failure) for failure in found["failures"]), key=lambda f: f.name != ""
    )
    shown = "\n".join(str(failure) for failure in failures[:SHOWN_FAILURES])
    more = len(failures) - SHOWN_FAILURES
    shown += f"\n... and {more} more ({command} lists them all)" if more > 0 else ""
    assert not failures, f"{len(failures)} checks failed under the fake:\n{shown}"
    return found


@pytest.mark.parametrize("release", sorted({OLDEST, MIDDLE}))
def test_every_module_of_a_release_imports_with_its_names(release: str) -> None:
    """All of a release's modules and every name of each: the oldest recorded release and
    the middle one of the list (a few hundred modules at most; checked in a subprocess,
    :mod:`tests.support.fake_modules`)."""
    found = _checked_in_subprocess("release", release)
    modules = sorted(load_release(release).names)
    assert "flashinfer" in modules
    assert found["release"] == release
    assert found["modules"] == modules
    assert found["checked"] == modules
    assert found["imported"] == modules


def test_every_module_of_the_newest_release_imports() -> None:
    """The newest release records about 3,300 modules: every one imports; the names of
    every tenth (by name, a deterministic sample) and of the modules engines import are
    checked as above (in a subprocess, :mod:`tests.support.fake_modules`)."""
    found = _checked_in_subprocess("newest")
    modules = sorted(load_release(NEWEST).names)
    engine = {module for module, _ in ENGINE_IMPORTS} | set(ENGINE_MODULES)
    assert found["release"] == NEWEST
    assert found["modules"] == modules
    assert found["imported"] == modules
    assert found["checked"] == sorted(set(modules[::10]) | (engine & set(modules)))


def test_every_module_of_every_release_imports() -> None:
    """Under ``fake_flashinfer(R)`` for every recorded R, every recorded module imports:
    each distinct reading of each module under a release that reads it so (about 8,300
    imports for the 112 releases' some 100,000 modules), and every release's top level;
    and every value each binds holds the recorded literal or is left unbound saying why
    (in a subprocess, :mod:`tests.support.fake_modules`)."""
    found = _checked_in_subprocess("every")
    assert set(found["releases"]) == set(available_releases())
    assert found["imported"] > 5000
    assert found["bound"] > found["unbound"] > 0  # most values are literals (51,205 to 37,391)


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
        failures = check_module(record, module, "flashinfer.utils")
        assert not failures, "\n".join(str(failure) for failure in failures)
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
            is_bound, problem = read_served(importlib.import_module(module), name)
            assert problem is None, f"{module}.{name}: {problem}"
            if is_bound:
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
