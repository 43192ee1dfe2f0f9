"""The reach tool's pure parts (``tools/reach.py``): verdicts, the file, ``--check``, failures.

No release is imported here: the verdicts are decided from hand-made probe reports, and
the subprocess runner is pointed at small hostile commands (a crash, garbage on stdout, a
hang, the wrong release) that must each end as an error for that release, never as data.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from fi_compat._measured import reach_names, reach_probe
from fi_compat._surface import ATTENTION_FAMILIES, FAST_DECODE_PLAN, PLAN_IMPL
from tools import reach
from tools.reach import (
    OUTPUT,
    ProbeError,
    ReleaseEnvironment,
    build_document,
    classify,
    classify_family,
    classify_release,
    dump_document,
    parse_probe_output,
    recorded_releases,
    run_probe,
)
from tools.releases import ReleaseCache

BOUNDARY = "get_batch_prefill_module(...).plan"
SETTINGS: list[tuple[int | None, bool]] = [(7919, False), (7920, False), (7919, True), (None, True)]
ARRIVES = {7919: 7919, 7920: 7920, None: -1}


def _run(
    settings: tuple[int | None, bool],
    *,
    args: list[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    error: str | None = None,
    calls: list[dict[str, Any]] | None = None,
    kept: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    if calls is None:
        calls = [{"boundary": BOUNDARY, "args": args or [], "kwargs": dict(kwargs or {})}]
    return {
        "settings": list(settings),
        "error": error,
        "calls": calls if error is None else [],
        "kept": dict(kept or {}),
        "consulted": [],
    }


def _baseline(error: str | None = None) -> dict[str, Any]:
    return {"error": error, "calls": [], "kept": {}, "consulted": []}


def _fa2_runs() -> list[dict[str, Any]]:
    """What fa2's planner receives: ``..., window_left, fixed, disable, 0, 0``."""
    return [_run(s, args=["<Tensor>", 16, False, -1, ARRIVES[s[0]], s[1], 0, 0]) for s in SETTINGS]


def _fa3_runs() -> list[dict[str, Any]]:
    return [_run(s, args=["<Tensor>", 16, False, 64, 64, False, -1]) for s in SETTINGS]


# ---------------------------------------------------------------------------- verdicts


def test_settings_at_the_boundary_reach() -> None:
    verdict, detail = classify(_baseline(), _fa2_runs())
    assert verdict == "reaches"
    expected = "receives fixed_split_size as arg 4 and disable_split_kv as arg 5 in every run"
    assert detail == f"{BOUNDARY} {expected}"


def test_settings_by_keyword_reach() -> None:
    runs = [
        _run(s, kwargs={"fixed_split_size": ARRIVES[s[0]], "disable_split_kv": s[1]})
        for s in SETTINGS
    ]
    assert classify(_baseline(), runs)[0] == "reaches"


def test_a_planner_without_them_drops_them() -> None:
    verdict, detail = classify(_baseline(), _fa3_runs())
    assert (verdict, detail) == (
        "dropped",
        f"{BOUNDARY} called without either setting in every run",
    )


def test_a_fixed_size_that_does_not_move_does_not_reach() -> None:
    # 7919 in every run (the planner saw a constant), -1 never: not "as given".
    runs = [_run(s, args=[7919, s[1]]) for s in SETTINGS]
    verdict, detail = classify(_baseline(), runs)
    assert verdict == "dropped"
    assert "disable_split_kv reaches" in detail
    assert "fixed_split_size does not" in detail


def test_only_the_fixed_size_reaching_is_dropped() -> None:
    runs = [_run(s, args=[ARRIVES[s[0]], False]) for s in SETTINGS]
    verdict, detail = classify(_baseline(), runs)
    assert verdict == "dropped"
    assert detail.startswith(f"fixed_split_size reaches {BOUNDARY} (arg 0)")


def test_an_int_flag_is_not_the_bool_flag() -> None:
    # 0/1 where the planner needs False/True is not the disable flag as given.
    runs = [_run(s, args=[ARRIVES[s[0]], int(s[1])]) for s in SETTINGS]
    assert classify(_baseline(), runs)[0] == "dropped"


def test_a_raise_with_the_settings_only_is_a_refusal() -> None:
    runs = [
        _run(s, error="ValueError: fixed_split_size is only supported by tensor core decode")
        for s in SETTINGS
    ]
    verdict, detail = classify(_baseline(), runs)
    assert verdict == "refused"
    assert "ValueError: fixed_split_size is only supported" in detail
    assert "fixed_split_size=7919, disable_split_kv=False" in detail


def test_a_plan_that_does_not_bind_them_is_refused() -> None:
    error = "TypeError: X.plan() got an unexpected keyword argument 'fixed_split_size'"
    runs = [_run(s, error=error) for s in SETTINGS]
    assert classify(_baseline(), runs) == (
        "refused",
        "plan takes no fixed_split_size/disable_split_kv",
    )


def test_a_plan_that_fails_without_them_is_unmeasured() -> None:
    runs = [_run(s, error="ValueError: device must be a cuda device") for s in SETTINGS]
    verdict, detail = classify(_baseline("ValueError: device must be a cuda device"), runs)
    assert verdict == "unmeasured"
    assert detail == "plan fails without the settings too: ValueError: device must be a cuda device"


def test_transformed_settings_are_unmeasured() -> None:
    # cute-dsl decode: kv_splits derived from the fixed size, reduction from the flag.
    runs = [
        _run(
            s,
            kwargs={
                "kv_splits": None if s[0] is None else 1,
                "reduction": "none" if s[1] else "auto",
            },
        )
        for s in SETTINGS
    ]
    verdict, detail = classify(_baseline(), runs)
    assert verdict == "unmeasured"
    assert "kw kv_splits moves with the settings but not as given" in detail


def test_settings_kept_for_run_are_unmeasured() -> None:
    runs = [_run(s, calls=[], kept={"_fixed_split_size": s[0]}) for s in SETTINGS]
    verdict, detail = classify(_baseline(), runs)
    assert verdict == "unmeasured"
    assert "_fixed_split_size" in detail


def test_no_kernel_call_and_nothing_kept_is_dropped() -> None:
    runs = [_run(s, calls=[]) for s in SETTINGS]
    assert classify(_baseline(), runs) == (
        "dropped",
        "plan called no compiled module and kept neither setting on the wrapper",
    )


def test_calls_that_differ_between_runs_are_unmeasured() -> None:
    runs = _fa3_runs()
    runs[2]["calls"] = [*runs[2]["calls"], {"boundary": "other.plan", "args": [], "kwargs": {}}]
    verdict, detail = classify(_baseline(), runs)
    assert verdict == "unmeasured"
    assert "the list of kernel calls" in detail


@pytest.mark.parametrize(
    "runs",
    [
        [],
        [{"settings": [1234, False], "error": None, "calls": [], "kept": {}}],
        [{"settings": [7919, "yes"], "error": None, "calls": [], "kept": {}}],
        [{"settings": "7919", "error": None, "calls": [], "kept": {}}],
    ],
    ids=["no-runs", "unknown-size", "non-bool-flag", "not-a-pair"],
)
def test_malformed_runs_are_unmeasured(runs: list[dict[str, Any]]) -> None:
    assert classify(_baseline(), runs)[0] == "unmeasured"


def _family(**backends: Any) -> dict[str, Any]:
    return {
        "has_plan": True,
        "takes_backend": True,
        "default_backend": "auto",
        "backend_attributes": ["_backend", "_requested_backend"],
        "backend_attributes_after_plan": ["_requested_backend"],
        "backends": backends,
    }


def _resolutions(**labelled: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "init_error": None,
        "resolutions": {
            label.replace("_", "="): {"baseline": _baseline(), "runs": runs}
            for label, runs in labelled.items()
        },
    }


def test_auto_reaches_only_when_every_answer_reaches() -> None:
    entry = classify_family(
        _family(
            auto=_resolutions(answer_fa2=_fa2_runs(), answer_fa3=_fa3_runs()),
            fa2=_resolutions(default=_fa2_runs()),
        )
    )
    assert entry["backends"]["fa2"]["verdict"] == "reaches"
    assert entry["backends"]["auto"]["verdict"] == "dropped"
    assert entry["backends"]["auto"]["detail"].startswith("when answer=fa3: ")
    both = classify_family(_family(auto=_resolutions(a_x=_fa2_runs(), a_y=_fa2_runs())))
    assert both["backends"]["auto"]["verdict"] == "reaches"
    assert both["backends"]["auto"]["detail"].startswith("under each of 2 device answers: ")


def test_family_fields() -> None:
    entry = classify_family(_family(fa2=_resolutions(default=_fa2_runs())))
    assert entry["plan_takes"] is True
    assert entry["default_backend"] == "auto"
    # The attribute that still holds the requested value after an auto plan.
    assert entry["backend_attribute"] == "_requested_backend"
    alone = classify_family(
        {**_family(fa2=_resolutions(default=_fa2_runs())), "backend_attributes_after_plan": []}
    )
    assert alone["backend_attribute"] == "_backend"


def test_default_backend_is_what_an_instance_holds_for_a_class_without_backend() -> None:
    # The CUDA-graph decode wrapper takes no backend= and hands its base "auto".
    graph = {
        "has_plan": True,
        "takes_backend": False,
        "default_backend": None,
        "constructed_backend": "auto",
        "backends": {"default": _resolutions(default=_fa2_runs())},
    }
    entry = classify_family(graph)
    assert (entry["default_backend"], entry["backend_attribute"]) == ("auto", None)
    assert classify_family({**graph, "constructed_backend": None})["default_backend"] is None
    # A class with backend=: the value asked for, even where __init__ resolves it.
    resolved = classify_family(
        {**_family(fa2=_resolutions(default=_fa2_runs())), "constructed_backend": "fa2"}
    )
    assert resolved["default_backend"] == "auto"


def test_a_constructor_that_fails_on_the_cpu_is_unmeasured() -> None:
    entry = classify_family(_family(cudnn={"init_error": "AssertionError: at x.py:1 (assert y)"}))
    assert entry["backends"]["cudnn"] == {
        "verdict": "unmeasured",
        "detail": "__init__ fails in the probe: AssertionError: at x.py:1 (assert y)",
    }


def test_a_family_without_plan_or_keywords_is_refused() -> None:
    no_plan = classify_family({"has_plan": False, "takes_backend": False, "backends": {}})
    assert no_plan["plan_takes"] is False
    assert no_plan["backend_attribute"] is None
    assert no_plan["backends"] == {
        "default": {"verdict": "refused", "detail": "the class has no plan method"}
    }
    error = "TypeError: P.plan() got an unexpected keyword argument 'disable_split_kv'"
    binding = classify_family(
        _family(fa2=_resolutions(default=[_run(s, error=error) for s in SETTINGS]))
    )
    assert binding["plan_takes"] is False
    assert binding["backends"]["fa2"]["verdict"] == "refused"


def test_a_family_the_probe_could_not_measure_is_an_error() -> None:
    with pytest.raises(ProbeError, match="could not measure the family"):
        classify_family({"error": "LookupError: no probe value"})


def test_release_entry_and_fast_decode_plan() -> None:
    decode = ATTENTION_FAMILIES[2]
    document = {
        "probe": 1,
        "version": "9.9.9",
        "families": {decode: _family(fa2=_resolutions(default=_fa2_runs())), "NotAFamily": {}},
        "fast_plan": {"takes": True, "backends": {"fa2": _resolutions(d=_fa3_runs())}},
    }
    entry = classify_release(document)
    assert set(entry) == {decode, "fast_decode_plan"}
    fast = entry["fast_decode_plan"]
    assert fast["plan_takes"] is True
    assert fast["backend_attribute"] == entry[decode]["backend_attribute"]
    assert fast["backends"]["fa2"]["verdict"] == "dropped"
    with pytest.raises(ProbeError, match="no families"):
        classify_release({"probe": 1, "version": "9.9.9"})
    with pytest.raises(ProbeError, match="fast_decode_plan"):
        classify_release({"families": {}, "fast_plan": {"error": "boom"}})


# ----------------------------------------------------------------- the probe's output


@pytest.mark.parametrize(
    ("stdout", "match"),
    [
        ("", "printed no JSON"),
        ("Traceback (most recent call last):\n", "printed no JSON"),
        ('{"probe": 1, "version": "0.7.2.post1"}\ntrailing', "printed no JSON"),
        ("[1, 2]", "unknown document"),
        ('{"probe": 2, "version": "0.7.1"}', "unknown document"),
        ('{"probe": 1, "version": "0.7.2.post1", "location": "/site"}', "imported flashinfer"),
    ],
    ids=["empty", "traceback", "trailing", "list", "probe-2", "other-release"],
)
def test_garbage_from_the_probe_is_an_error(stdout: str, match: str) -> None:
    with pytest.raises(ProbeError, match=match):
        parse_probe_output("0.7.1", stdout)


def _environment(tmp_path: Path) -> ReleaseEnvironment:
    return ReleaseEnvironment(version="0.7.1", release_dir=tmp_path, site_dir=tmp_path, cudart=None)


@pytest.mark.parametrize(
    ("code", "match"),
    [
        ("import sys; sys.stderr.write('Segmentation fault\\n'); sys.exit(139)", "exited 139"),
        ("print('hello')", "printed no JSON"),
        ("import time; time.sleep(30)", "timed out"),
        ('print(\'{"probe": 1, "version": "0.6.0"}\')', "imported flashinfer '0.6.0'"),
    ],
    ids=["crash", "garbage", "hang", "wrong-release"],
)
def test_a_hostile_subprocess_is_an_error(tmp_path: Path, code: str, match: str) -> None:
    with pytest.raises(ProbeError, match=match):
        run_probe(_environment(tmp_path), timeout=2, command=[sys.executable, "-c", code])


def test_the_subprocess_gets_the_release_first_and_no_flashinfer_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASHINFER_RAGGED_AUTO_BACKEND_ORDER", "cutlass")
    monkeypatch.setenv("PYTHONSTARTUP", "/nonexistent")
    # fi-compat's own settings pass through as they are (the release cache's location is no
    # FlashInfer setting); the run's own are set aside so the expectation holds anywhere.
    for key in [k for k in os.environ if k.startswith("FI_COMPAT_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("FI_COMPAT_RELEASE_CACHE", str(tmp_path / "cache"))
    code = (
        "import json, os; print(json.dumps({'probe': 1, 'version': '0.7.1', "
        "'env': {k: v for k, v in os.environ.items() if k.startswith(('PYTHON', 'FLASHINFER_', "
        "'FI_COMPAT_'))}}))"
    )
    environment = ReleaseEnvironment(
        "0.7.1", tmp_path / "release", tmp_path / "site", tmp_path / "c"
    )
    document = run_probe(environment, command=[sys.executable, "-c", code])
    # An empty fi-compat cache of the run's own, in its scratch directory (tools.results).
    own_cache = Path(document["env"].pop("FI_COMPAT_CACHE_DIR"))
    assert own_cache.name == "fi-compat-cache"
    assert own_cache.parent.name.startswith("fi-compat-probe-")
    assert document["env"] == {
        "PYTHONPATH": f"{tmp_path / 'site'}:{tmp_path / 'release'}",
        "PYTHONNOUSERSITE": "1",
        "FI_COMPAT_RELEASE_CACHE": str(tmp_path / "cache"),
        "FI_COMPAT_HARNESS_STUB_GPU": "1",
        "FI_COMPAT_HARNESS_CUDART": str(tmp_path / "c"),
        "FI_COMPAT_REACH_NAMES": json.dumps(
            {
                "decode_module": FAST_DECODE_PLAN.module,
                "fast_plan": FAST_DECODE_PLAN.key,
                "families": list(ATTENTION_FAMILIES),
                "plan_impl": PLAN_IMPL,
            }
        ),
    }


# ------------------------------------------------------------------------- the file


def _entry(verdict: str = "reaches") -> dict[str, Any]:
    return {
        ATTENTION_FAMILIES[0]: {
            "plan_takes": True,
            "backend_attribute": "_backend",
            "default_backend": "auto",
            "backends": {"fa2": {"verdict": verdict, "detail": "seen"}},
        }
    }


def test_the_document_is_deterministic() -> None:
    one = build_document({"0.10.0": _entry(), "0.4.0": _entry(), "0.9.0": _entry()})
    other = build_document({"0.9.0": _entry(), "0.10.0": _entry(), "0.4.0": _entry()})
    text = dump_document(one)
    assert text == dump_document(other)
    assert text.endswith("}\n")
    assert not text.endswith("\n\n")
    # Sorted keys everywhere: release numbers sort as text (the reader looks them up).
    assert list(json.loads(text)["releases"]) == ["0.10.0", "0.4.0", "0.9.0"]
    assert json.loads(text)["schema"] == 1
    assert json.loads(text)["tool"] == "tools/reach.py"
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"


def _fake_measure(results: Mapping[str, Any]) -> Any:
    def measure(version: str) -> dict[str, Any]:
        result = results[version]
        if isinstance(result, Exception):
            raise result
        return dict(result)

    return measure


def test_main_writes_merges_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "reach.json"
    measure = _fake_measure({"0.4.0": _entry(), "0.5.0": _entry("dropped")})
    assert reach.main(["0.5.0", "0.4.0"], output=output, measure=measure) == 0
    written = output.read_text(encoding="utf-8")
    assert list(json.loads(written)["releases"]) == ["0.4.0", "0.5.0"]
    assert reach.main(["--check", "0.4.0", "0.5.0"], output=output, measure=measure) == 0
    changed = _fake_measure({"0.4.0": _entry("dropped")})
    assert reach.main(["--check", "0.4.0"], output=output, measure=changed) == 1
    assert "differs: 0.4.0" in capsys.readouterr().err
    assert output.read_text(encoding="utf-8") == written  # --check never writes
    # Measuring one release keeps the others' entries.
    assert reach.main(["0.4.0"], output=output, measure=changed) == 0
    releases = json.loads(output.read_text(encoding="utf-8"))["releases"]
    assert releases["0.4.0"] == _entry("dropped")
    assert releases["0.5.0"] == _entry("dropped")


def test_a_failed_release_is_reported_and_never_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "reach.json"
    measure = _fake_measure(
        {"0.4.0": _entry(), "0.5.0": ProbeError("flashinfer-python 0.5.0: the probe exited 1")}
    )
    assert reach.main(["0.4.0", "0.5.0"], output=output, measure=measure) == 1
    assert "0.5.0 not measured" in capsys.readouterr().err
    assert list(json.loads(output.read_text(encoding="utf-8"))["releases"]) == ["0.4.0"]
    # A check that cannot measure a release fails too, even when nothing differs.
    assert reach.main(["--check", "0.4.0", "0.5.0"], output=output, measure=measure) == 1


def test_a_new_release_is_a_difference(tmp_path: Path) -> None:
    output = tmp_path / "reach.json"
    output.write_text(dump_document(build_document({})), encoding="utf-8")
    measure = _fake_measure({"0.4.0": _entry()})
    assert reach.main(["--check", "0.4.0"], output=output, measure=measure) == 1


def test_the_sdist_package_is_unpacked_once(tmp_path: Path) -> None:
    sdist = tmp_path / "flashinfer_python-0.4.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name, text in {
            "flashinfer_python-0.4.0/flashinfer/__init__.py": "__version__ = '0.4.0'\n",
            "flashinfer_python-0.4.0/flashinfer/decode.py": "x = 1\n",
            "flashinfer_python-0.4.0/csrc/kernel.cu": "// not Python\n",
            "flashinfer_python-0.4.0/setup.py": "raise SystemExit\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    cache = ReleaseCache(tmp_path / "cache")
    target = reach._extract_sdist(cache, sdist)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) == [
        ".complete",
        "flashinfer/__init__.py",
        "flashinfer/decode.py",
    ]
    assert reach._extract_sdist(cache, sdist) == target


def test_an_sdist_without_the_package_is_an_error(tmp_path: Path) -> None:
    sdist = tmp_path / "flashinfer_python-0.4.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        info = tarfile.TarInfo("flashinfer_python-0.4.1/setup.py")
        archive.addfile(info, io.BytesIO(b""))
    with pytest.raises(ProbeError, match="no flashinfer/ package"):
        reach._extract_sdist(ReleaseCache(tmp_path / "cache"), sdist)


# ------------------------------------------------------------------ the shipped data


def test_the_probe_measures_exactly_the_surface_families(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    names = {"families": list(ATTENTION_FAMILIES)}
    monkeypatch.setenv("FI_COMPAT_REACH_NAMES", json.dumps(names))
    probe = importlib.reload(reach_names)
    try:
        assert probe.FAMILIES == ATTENTION_FAMILIES
        assert tuple(ATTENTION_FAMILIES[:3]) == (
            probe.PAGED_FAMILY,
            probe.RAGGED_FAMILY,
            probe.DECODE_FAMILY,
        )
    finally:
        monkeypatch.delenv("FI_COMPAT_REACH_NAMES")
        importlib.reload(reach_names)


def test_the_probe_loads_its_modules_by_path_and_no_fi_compat(tmp_path: Path) -> None:
    # Imported from fi-compat, the probe's modules are fi-compat's own...
    assert reach_probe.load("reach_names") is reach_names
    # ...run by path in a release's subprocess (no repository on its path), they are a
    # package of their own, and neither fi-compat nor FlashInfer nor torch is imported.
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('reach_probe', {str(reach.PROBE)!r})\n"
        "probe = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(probe)\n"
        "module = probe.load('reach_measure')\n"
        "tops = ('fi_compat', 'flashinfer', 'torch', probe.PACKAGE)\n"
        "loaded = sorted(name for name in sys.modules if name.split('.')[0] in tops)\n"
        "print(json.dumps({'probe': 1, 'version': '0.7.1', 'module': module.__name__, "
        "'loaded': loaded}))\n"
    )
    document = run_probe(_environment(tmp_path), command=[sys.executable, "-c", code])
    package = reach_probe.PACKAGE
    assert document["module"] == f"{package}.reach_measure"
    assert document["loaded"] == [
        package,
        *(
            f"{package}.reach_{role}"
            for role in ("arguments", "backends", "cpu", "hooks", "measure", "names", "recorders")
        ),
    ]


def test_the_shipped_file_covers_every_recorded_release_from_040() -> None:
    text = OUTPUT.read_text(encoding="utf-8")
    document = json.loads(text)
    assert text == dump_document(document)
    assert document["schema"] == 1
    assert document["tool"] == "tools/reach.py"
    assert recorded_releases()[0] == "0.4.0"
    assert sorted(document["releases"], key=Version) == recorded_releases()
    for version, entry in document["releases"].items():
        assert set(entry) <= {*ATTENTION_FAMILIES, "fast_decode_plan"}, version
        for family, data in entry.items():
            assert set(data) == {"plan_takes", "backend_attribute", "default_backend", "backends"}
            assert data["backends"], (version, family)
            for backend, result in data["backends"].items():
                assert set(result) == {"verdict", "detail"}, (version, family, backend)
                assert result["verdict"] in reach.VERDICTS
                assert result["detail"]
            if not data["plan_takes"]:
                assert {r["verdict"] for r in data["backends"].values()} == {"refused"}


def test_fa2_is_measured_on_every_release() -> None:
    """The runtime refuses what is not measured as reaching: fa2 must be measured everywhere."""
    releases = json.loads(OUTPUT.read_text(encoding="utf-8"))["releases"]
    for version, entry in releases.items():
        for family in ATTENTION_FAMILIES[:3]:
            assert entry[family]["backends"]["fa2"]["verdict"] == "reaches", (version, family)
