"""Measuring the installed release on this machine: the cache, the lock, failures as findings.

The probes here are small scripts that print what a real probe prints (or crash, hang, or
claim another location), run exactly as the real ones are: by path, behind
``fi_compat/_measured/stand_in.py``, in a subprocess with every GPU hidden. The installed
release is a made-up one (9.9.9) so nothing here depends on the FlashInfer of this venv;
``test_installed_real.py`` measures the real one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fi_compat import _local
from fi_compat._measured import installed, layers, load, reach, releases, sizes
from fi_compat._measured.installed import (
    AUTO_ENV,
    COMMAND,
    MEASUREMENTS,
    InstalledPackage,
    cache_path,
    entry,
    find_installed,
    measure,
    read_cached,
    valid_entry,
    why_unmeasured,
)
from fi_compat._version import __version__

pytest.importorskip("torch", reason="needs torch (the stand-in the probes run behind imports it)")

VERSION = "9.9.9"
#: What each fake probe prints for the made-up release (version and location are added).
DOCUMENTS: dict[str, dict[str, Any]] = {
    "reach": {
        "families": {
            "BatchDecodeWithPagedKVCacheWrapper": {"has_plan": False, "takes_backend": False}
        },
        "fast_plan": None,
    },
    "layers": {"error": "import flashinfer.comm: the made-up release has none"},
    "sizes": {"error": "import flashinfer.comm: the made-up release has none"},
}
#: What the classifiers make of them.
ENTRIES: dict[str, dict[str, Any]] = {
    "reach": {
        "BatchDecodeWithPagedKVCacheWrapper": {
            "plan_takes": False,
            "backend_attribute": None,
            "default_backend": None,
            "backends": {
                "default": {"verdict": "refused", "detail": "the class has no plan method"}
            },
        }
    },
    "layers": {
        "layer": "public",
        "detail": "not measured: import flashinfer.comm: the made-up release has none",
    },
    "sizes": {
        backend: {
            "check": "unmeasured",
            "detail": "not measured: import flashinfer.comm: the made-up release has none",
        }
        for backend in ("trtllm", "mnnvl")
    },
}
MODULES = {"reach": reach, "layers": layers, "sizes": sizes}

PROBE = """
import json, os, sys, time
behaviour = os.environ.get("FAKE_PROBE_BEHAVIOUR", "ok")
which = os.environ["FAKE_PROBE_WHICH_{name}"]
if behaviour == "crash":
    sys.stderr.write("Segmentation fault in the made-up release\\n")
    sys.exit(139)
if behaviour == "hang":
    time.sleep(60)
if behaviour == "garbage":
    print("flashinfer says hello")
    sys.exit(0)
document = json.loads(os.environ["FAKE_PROBE_DOCUMENT_{name}"])
document.update(probe=1, version=os.environ["FAKE_PROBE_VERSION"])
document["location"] = os.environ.get("FAKE_PROBE_LOCATION", os.environ["FAKE_PACKAGE"])
# The stand-in hid every GPU and answers for GPU 0 (checked where a test asks: importing
# torch in every probe of every test would cost the suite most of this file's time).
assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
if os.environ.get("FAKE_PROBE_CHECKS_GPU"):
    import torch
    assert torch.cuda.get_device_capability() == (9, 0)
with open(os.environ["FAKE_PROBE_RUNS"], "a") as runs:
    runs.write(which + "\\n")
print(json.dumps(document))
"""


@pytest.fixture
def release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InstalledPackage]:
    """A made-up installed release whose three probes are fake scripts; the cache is
    ``tmp_path / "cache"``; automatic measuring is on; the process remembers nothing."""
    package = tmp_path / "site" / "flashinfer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"__version__ = {VERSION!r}\n", encoding="utf-8")
    runs = tmp_path / "runs.txt"
    runs.write_text("", encoding="utf-8")
    monkeypatch.setenv(_local.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(AUTO_ENV, raising=False)
    monkeypatch.setenv("FAKE_PACKAGE", str(package))
    monkeypatch.setenv("FAKE_PROBE_VERSION", VERSION)
    monkeypatch.setenv("FAKE_PROBE_RUNS", str(runs))
    for name, module in MODULES.items():
        script = tmp_path / f"{name}_probe.py"
        script.write_text(PROBE.replace("{name}", name), encoding="utf-8")
        monkeypatch.setattr(module, "PROBE", script)
        monkeypatch.setenv(f"FAKE_PROBE_WHICH_{name}", name)
        monkeypatch.setenv(f"FAKE_PROBE_DOCUMENT_{name}", json.dumps(DOCUMENTS[name]))
    found = InstalledPackage(VERSION, package, "files-under-test")
    monkeypatch.setattr(installed, "find_installed", lambda: found)
    installed.forget()
    yield found
    installed.forget()


def _seed(release: InstalledPackage) -> None:
    """Cache the three entries as a measurement of ``release`` by this fi-compat would."""
    release.directory.mkdir(parents=True, exist_ok=True)
    for measurement in MEASUREMENTS:
        document = {
            "schema": installed.SCHEMA,
            "measurement": measurement,
            "release": release.version,
            "fingerprint": release.fingerprint,
            "fi_compat": __version__,
            "entry": ENTRIES[measurement],
        }
        cache_path(release, measurement).write_text(json.dumps(document), encoding="utf-8")


def _runs(tmp_path: Path) -> list[str]:
    return sorted((tmp_path / "runs.txt").read_text(encoding="utf-8").split())


# ------------------------------------------------------------------------- the shapes


@pytest.mark.parametrize("measurement", MEASUREMENTS)
def test_every_shipped_entry_has_the_shape_a_cached_one_must_have(measurement: Any) -> None:
    shipped = load(measurement)["releases"]
    assert shipped
    for release_name, found in shipped.items():
        assert valid_entry(measurement, found), release_name


@pytest.mark.parametrize(
    ("measurement", "found"),
    [
        ("reach", {}),
        ("reach", []),
        ("reach", {"F": {"plan_takes": "yes", "backend_attribute": None, "backends": {}}}),
        (
            "reach",
            {
                "F": {
                    "plan_takes": True,
                    "backend_attribute": None,
                    "default_backend": None,
                    "backends": {"fa2": {"verdict": "probably", "detail": "x"}},
                }
            },
        ),
        (
            "reach",
            {
                "F": {
                    "plan_takes": True,
                    "backend_attribute": 3,
                    "default_backend": None,
                    "backends": {"fa2": {"verdict": "reaches", "detail": "x"}},
                }
            },
        ),
        ("layers", {"layer": "fastest", "detail": "x"}),
        ("layers", {"layer": "public"}),
        ("layers", {"layer": "legacy", "detail": "x"}),
        (
            "layers",
            {
                "layer": "legacy",
                "detail": "x",
                "fusion_source": "a",
                "legacy_source": "b",
                "arguments": {"allreduce_in": "os.system"},
                "checks": [],
                "statements": [],
            },
        ),
        (
            "layers",
            {
                "layer": "legacy",
                "detail": "x",
                "fusion_source": "a",
                "legacy_source": "b",
                "arguments": {"allreduce_in": {"constant": 1, "and": 2}},
                "checks": [],
                "statements": [],
            },
        ),
        (
            "layers",
            {
                "layer": "legacy",
                "detail": "x",
                "fusion_source": "a",
                "legacy_source": "b",
                "arguments": {"allreduce_in": {"source": "tokens"}},
                "checks": [],
                "statements": [],
            },
        ),
        ("sizes", {"trtllm": {"check": 1}}),
        ("sizes", {"trtllm": {"check": "product", "observations": {}}}),
        ("sizes", {"trtllm": "product"}),
        ("sizes", None),
    ],
)
def test_an_entry_a_reader_cannot_rely_on_is_not_valid(measurement: Any, found: Any) -> None:
    assert not valid_entry(measurement, found)


# --------------------------------------------------------------------- measuring


def test_the_first_reader_measures_and_later_readers_read_the_cache(
    release: InstalledPackage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PROBE_CHECKS_GPU", "1")  # each probe sees the stand-in GPU 0
    for measurement in MEASUREMENTS:
        assert releases(measurement)[VERSION] == ENTRIES[measurement]
    assert _runs(tmp_path) == sorted(MEASUREMENTS)  # one measurement, all three at once
    for measurement in MEASUREMENTS:
        document = json.loads(cache_path(release, measurement).read_text(encoding="utf-8"))
        assert document["entry"] == ENTRIES[measurement]
        assert (document["release"], document["fingerprint"]) == (
            VERSION,
            release.directory.name.split("-", 1)[1],
        )
    installed.forget()  # a new process: only the cache is left
    for measurement in MEASUREMENTS:
        assert releases(measurement)[VERSION] == ENTRIES[measurement]
    assert _runs(tmp_path) == sorted(MEASUREMENTS)  # no probe ran again


def test_the_cache_is_kept_per_release_and_installed_files(release: InstalledPackage) -> None:
    assert release.directory == (_local.cache_root() / "measured" / f"{VERSION}-files-under-test")
    _seed(release)
    assert all(read_cached(release, m) == ENTRIES[m] for m in MEASUREMENTS)
    other = InstalledPackage(VERSION, release.package, "other-files")
    assert all(read_cached(other, measurement) is None for measurement in MEASUREMENTS)


def test_the_cache_keeps_the_order_of_an_entry(release: InstalledPackage) -> None:
    """A legacy launch places its arguments in the order the layers entry lists them."""
    shipped = load("layers")["releases"]["0.7.2.post1"]
    backwards = {**shipped, "arguments": dict(reversed(list(shipped["arguments"].items())))}
    monkeypatch = pytest.MonkeyPatch()
    with monkeypatch.context() as patched:
        patched.setenv("FAKE_PROBE_DOCUMENT_layers", json.dumps({"runs": []}))
        patched.setattr(layers, "classify", lambda document: backwards)
        assert measure(release).ok
    kept = json.loads(cache_path(release, "layers").read_text(encoding="utf-8"))["entry"]
    assert list(kept["arguments"]) == list(backwards["arguments"])
    assert list(read_cached(release, "layers")["arguments"]) == list(backwards["arguments"])  # type: ignore[index]


def test_a_shipped_release_never_measures(release: InstalledPackage, tmp_path: Path) -> None:
    assert releases("reach")["0.7.2.post1"] == load("reach")["releases"]["0.7.2.post1"]
    assert "0.7.2.post1" in releases("sizes")
    assert _runs(tmp_path) == []


def test_a_release_that_is_neither_shipped_nor_installed_is_not_there(
    release: InstalledPackage, tmp_path: Path
) -> None:
    found = releases("layers")
    assert "9.9.8" not in found
    assert found.get("9.9.8") is None
    assert found.get(None) is None  # type: ignore[call-overload]
    assert _runs(tmp_path) == []  # asking for another release measures nothing


def test_listing_the_releases_includes_the_installed_one(release: InstalledPackage) -> None:
    _seed(release)
    listed = releases("reach")
    assert VERSION in list(listed)
    assert len(listed) == len(load("reach")["releases"]) + 1


def test_a_version_spelled_otherwise_is_the_same_release(release: InstalledPackage) -> None:
    _seed(release)
    assert releases("sizes")["9.9.9.0"] == ENTRIES["sizes"]


@pytest.mark.parametrize(
    "damage",
    [
        "not json {",
        "",
        "[]",
        '{"schema": 1}',
        "foreign release",
        "foreign files",
        "other fi-compat",
        "other schema",
        "bad entry",
        "binary",
    ],
)
def test_a_damaged_or_foreign_cache_file_is_never_trusted(
    release: InstalledPackage, tmp_path: Path, damage: str
) -> None:
    _seed(release)
    path = cache_path(release, "reach")
    document = json.loads(path.read_text(encoding="utf-8"))
    changed = {
        "foreign release": ("release", "9.9.8"),
        "foreign files": ("fingerprint", "someone-elses"),
        "other fi-compat": ("fi_compat", "0.0.1"),
        "other schema": ("schema", 2),
        "bad entry": ("entry", {"F": {"plan_takes": True, "backends": {"fa2": {"verdict": 1}}}}),
    }
    if damage == "binary":
        path.write_bytes(b"\xff\xfe\x00garbage")
    elif damage in changed:
        key, value = changed[damage]
        path.write_text(json.dumps({**document, key: value}), encoding="utf-8")
    else:
        path.write_text(damage, encoding="utf-8")
    assert read_cached(release, "reach") is None
    assert read_cached(release, "layers") == ENTRIES["layers"]
    assert _runs(tmp_path) == []


def test_a_damaged_cache_file_is_measured_again(release: InstalledPackage, tmp_path: Path) -> None:
    _seed(release)
    cache_path(release, "reach").write_text('{"entry": ', encoding="utf-8")
    assert releases("reach")[VERSION] == ENTRIES["reach"]
    assert releases("layers")[VERSION] == ENTRIES["layers"]
    assert _runs(tmp_path) == ["reach"]  # only what was damaged
    assert read_cached(release, "reach") == ENTRIES["reach"]


def test_force_measures_again(release: InstalledPackage, tmp_path: Path) -> None:
    _seed(release)
    again = measure(release)
    assert [o.cached for o in again.outcomes] == [True, True, True]
    assert _runs(tmp_path) == []
    forced = measure(release, force=True)
    assert [o.cached for o in forced.outcomes] == [False, False, False]
    assert [o.entry for o in forced.outcomes] == [ENTRIES[m] for m in MEASUREMENTS]
    assert _runs(tmp_path) == sorted(MEASUREMENTS)


# ------------------------------------------------------------------ failures are findings


@pytest.mark.parametrize(
    ("behaviour", "finding"),
    [
        ("crash", "the probe exited 139\nSegmentation fault in the made-up release"),
        ("garbage", "the probe printed no JSON"),
        ("hang", "the probe timed out after 4 s"),
    ],
)
def test_a_probe_that_fails_is_a_finding(
    release: InstalledPackage, monkeypatch: pytest.MonkeyPatch, behaviour: str, finding: str
) -> None:
    monkeypatch.setenv("FAKE_PROBE_BEHAVIOUR", behaviour)
    result = measure(release, timeout=4 if behaviour == "hang" else None)
    assert not result.ok
    for outcome in result.outcomes:
        assert outcome.entry is None
        assert outcome.path is None
        assert finding in str(outcome.error)
    assert all(not cache_path(release, m).exists() for m in MEASUREMENTS)


def test_a_probe_that_imported_another_flashinfer_is_a_finding(
    release: InstalledPackage, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_PROBE_LOCATION", str(tmp_path / "elsewhere" / "flashinfer"))
    result = measure(release)
    assert not result.ok
    assert all("the probe imported flashinfer from" in str(o.error) for o in result.outcomes)


def test_a_report_the_classifier_cannot_read_is_a_finding(
    release: InstalledPackage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PROBE_DOCUMENT_reach", json.dumps({"families": "none"}))
    monkeypatch.setenv("FAKE_PROBE_DOCUMENT_layers", json.dumps({"runs": [{"error": None}]}))
    result = measure(release)
    by_name = {o.measurement: o for o in result.outcomes}
    assert "could not be classified (ValueError: the probe's report has no families)" in str(
        by_name["reach"].error
    )
    assert "could not be classified (KeyError" in str(by_name["layers"].error)
    assert by_name["sizes"].entry == ENTRIES["sizes"]  # one failure stops nothing else


def test_a_failed_first_use_answers_unmeasured_and_names_the_command(
    release: InstalledPackage, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_PROBE_BEHAVIOUR", "crash")
    assert releases("reach").get(VERSION) is None
    assert releases("sizes").get(VERSION) is None  # not retried in this process
    assert _runs(tmp_path) == []
    why = why_unmeasured(VERSION)
    assert why.startswith("measuring it here failed: flashinfer-python 9.9.9: the probe exited")
    assert why.endswith(f"run `{COMMAND}` to measure it on this machine")
    # A later process does not retry what failed automatically ...
    installed.forget()
    monkeypatch.setenv("FAKE_PROBE_BEHAVIOUR", "ok")
    assert entry("layers", release) is None
    assert "measuring it here failed" in why_unmeasured(VERSION)
    # ... until the command measures it, and then every reader has it.
    assert measure(release).ok
    installed.forget()
    assert entry("layers", release) == ENTRIES["layers"]
    assert why_unmeasured(VERSION) == f"run `{COMMAND}` to measure it on this machine"


def test_automatic_measuring_can_be_turned_off(
    release: InstalledPackage, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(AUTO_ENV, "0")
    assert releases("reach").get(VERSION) is None
    assert _runs(tmp_path) == []
    assert why_unmeasured(VERSION) == (
        f"automatic measuring is off: {AUTO_ENV}=0; run `{COMMAND}` to measure it on this machine"
    )
    assert measure(release).ok  # the command still measures, and readers read it
    installed.forget()
    assert releases("reach")[VERSION] == ENTRIES["reach"]


def test_the_hint_is_only_for_the_installed_release(release: InstalledPackage) -> None:
    assert why_unmeasured("0.3.1") == ""
    assert why_unmeasured(None) == ""
    assert why_unmeasured("1" * 5000) == ""  # beyond int()'s digit limit: no release


def test_an_unwritable_cache_still_measures_in_this_process(
    release: InstalledPackage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv(_local.CACHE_ENV, str(blocker))
    result = measure(release)
    assert _local.CACHE_ENV in str(result.error)
    assert releases("reach").get(VERSION) is None
    assert "cannot be created" in why_unmeasured(VERSION)


def test_concurrent_processes_measure_once(release: InstalledPackage, tmp_path: Path) -> None:
    """Two ranks start at once: one measures under the lock, the other reads its result."""
    code = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from fi_compat._measured import installed, layers, reach, sizes
        for name, module in (("reach", reach), ("layers", layers), ("sizes", sizes)):
            module.PROBE = Path(sys.argv[1]) / f"{name}_probe.py"
        found = installed.InstalledPackage(sys.argv[2], Path(sys.argv[3]), "files-under-test")
        installed.find_installed = lambda: found
        print(json.dumps(installed.entry("reach", found)))
        """
    )
    argv = [
        sys.executable,
        "-c",
        code,
        str(tmp_path),
        VERSION,
        str(release.package),
    ]
    ranks = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [rank.communicate(timeout=240)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0]
    assert [json.loads(output) for output in outputs] == [ENTRIES["reach"]] * 2
    assert _runs(tmp_path) == sorted(MEASUREMENTS)


def test_no_flashinfer_found_measures_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(installed, "find_installed", lambda: None)
    result = measure()
    assert not result.ok
    assert result.outcomes == ()
    assert "no installed flashinfer-python distribution was found" in str(result.error)


def test_the_installed_package_is_found_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    (site / "flashinfer").mkdir(parents=True)
    (site / "flashinfer" / "__init__.py").write_text("raise SystemExit('imported')\n")
    info = site / "flashinfer_python-0.7.4.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.7.4\n\nbody\n"
    )
    (info / "RECORD").write_text("flashinfer/__init__.py,sha256=x,1\n")
    monkeypatch.syspath_prepend(str(site))
    # A module already imported under the name (a fake's) is not the installed package.
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    found = find_installed()
    assert found is not None
    assert (found.version, found.package) == ("0.7.4", site / "flashinfer")
    assert found.fingerprint == _local.installed_fingerprint(site / "flashinfer")
    (info / "METADATA").write_text("Name: flashinfer-python\nVersion: not a version\n")
    assert find_installed() is None  # a version fi-compat cannot compare names no release


def test_a_damaged_distribution_is_read_past_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hostile dist-info folders: a METADATA that is a folder or has no Version header is
    passed over for the next one, undecodable bytes are read, a RECORD that is a folder
    leaves the package hashed file by file, and a RECORD rewritten as a new file is hashed
    anew (the per-process digest follows the file, not its path)."""
    site = tmp_path / "site"
    (site / "flashinfer").mkdir(parents=True)
    (site / "flashinfer" / "__init__.py").write_text("raise SystemExit('imported')\n")
    first = site / "flashinfer_python-0.7.3.dist-info"
    (first / "METADATA").mkdir(parents=True)
    second = site / "flashinfer_python-0.7.4.dist-info"
    second.mkdir()
    (second / "METADATA").write_bytes(
        b"Name: flashinfer-python\xff\xfe\nSummary: x\n\nVersion: 9\n"
    )
    (second / "RECORD").mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert find_installed() is None  # no Version header before the body: no release
    (second / "METADATA").write_bytes(b"Name: flashinfer-python\xff\nVersion: 0.7.4\n\nbody\n")
    found = find_installed()
    assert found is not None
    assert found.version == "0.7.4"
    assert found.fingerprint == _local.files_fingerprint(site / "flashinfer")
    (second / "RECORD").rmdir()
    (second / "RECORD").write_text("flashinfer/__init__.py,sha256=x,1\n")
    before = find_installed()
    assert before is not None
    assert before.fingerprint.startswith("record-")
    replaced = second / "RECORD.new"
    replaced.write_text("flashinfer/__init__.py,sha256=y,1\n")
    replaced.replace(second / "RECORD")
    after = find_installed()
    assert after is not None
    assert after.fingerprint.startswith("record-")
    assert after.fingerprint != before.fingerprint
