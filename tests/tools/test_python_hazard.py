"""The Python-version import hazard, measured: the records say 0.6.16 to 0.6.16.post3's
``import flashinfer.comm`` raises ``TypeError`` below Python 3.12; here the release's own
``flashinfer/comm/fd_exchange.py`` runs under Python 3.11 and 3.12 (the pyenv interpreters
of this machine), its one in-release import (``.abstractions``) given as a stand-in, and
the error, its line and the Python it ends on are compared with the record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from fi_compat._records import available_releases, load_release
from tools.releases import DownloadError, RegistryUnreachableError, ReleaseCache

#: Runs the module's top level as ``flashinfer.comm.fd_exchange`` and prints what happened.
RUNNER = """
import json, sys, types
source = open(sys.argv[1]).read()
for name in ("flashinfer", "flashinfer.comm"):
    package = types.ModuleType(name)
    package.__path__ = []
    sys.modules[name] = package
abstractions = types.ModuleType("flashinfer.comm.abstractions")
abstractions.CommBackend = object
sys.modules["flashinfer.comm.abstractions"] = abstractions
module = types.ModuleType("flashinfer.comm.fd_exchange")
module.__package__ = "flashinfer.comm"
try:
    exec(compile(source, "fd_exchange.py", "exec"), module.__dict__)
except Exception as error:
    line = error.__traceback__.tb_next.tb_lineno if error.__traceback__.tb_next else None
    print(json.dumps({"error": type(error).__name__, "line": line}))
else:
    print(json.dumps({"error": None, "line": None}))
"""


def _python(minor: int) -> str | None:
    """A working ``python3.<minor>``: on PATH, else pyenv's."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [f"python3.{minor}"]
    candidates += [
        str(path / "bin" / "python") for path in sorted(root.glob(f"versions/3.{minor}.*"))
    ]
    for candidate in candidates:
        try:
            done = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info[1])"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip() == str(minor):
            return candidate
    return None


def _hazardous() -> list[str]:
    return [
        release
        for release in available_releases()
        if load_release(release).comm_requires_python.value
    ]


def test_the_records_hold_the_hazard_exactly_where_array_annotations_are_evaluated() -> None:
    found = _hazardous()
    # 0.6.16's release candidates already had fd_exchange.py's annotation; 0.6.16.post4
    # quoted it away.
    assert {"0.6.16", "0.6.16.post1", "0.6.16.post2", "0.6.16.post3"} <= set(found)
    assert "0.6.16.post4" not in found
    assert "0.6.15.post1" not in found
    for release in found:
        hazard = load_release(release).comm_requires_python
        assert hazard.python == "3.12"
        assert hazard.evidence is not None
        assert "fd_exchange.py" in hazard.evidence


@pytest.mark.parametrize("release", ["0.6.16", "0.6.16.post4"])
def test_the_release_s_own_module_raises_as_recorded(release: str, tmp_path: Path) -> None:
    try:
        wheel = ReleaseCache().download(f"flashinfer-python=={release}", wheel_only=True)
    except RegistryUnreachableError as error:
        pytest.skip(f"the package registry is unreachable: {error}")
    except DownloadError as error:  # a real failure
        raise AssertionError(str(error)) from error
    with zipfile.ZipFile(wheel) as archive:
        source = tmp_path / "fd_exchange.py"
        source.write_bytes(archive.read("flashinfer/comm/fd_exchange.py"))
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    record = load_release(release).comm_requires_python
    measured = {}
    for minor in (11, 12):
        python = _python(minor) if sys.version_info[:2] != (3, minor) else sys.executable
        assert python is not None, f"no Python 3.{minor} on this machine"
        done = subprocess.run(
            [python, str(runner), str(source)], capture_output=True, text=True, check=True
        )
        measured[minor] = json.loads(done.stdout)
    if record.value:
        assert measured[11]["error"] == "TypeError"
        assert record.evidence is not None
        assert record.evidence.startswith(f"flashinfer/comm/fd_exchange.py:{measured[11]['line']}:")
        assert measured[12]["error"] is None  # the Python the record names
    else:
        assert measured[11]["error"] is None
        assert measured[12]["error"] is None


SITE = Path(__file__).resolve().parents[1] / "support" / "release_harness_site"


def test_the_tools_defer_the_recorded_module_below_the_recorded_python() -> None:
    from tools.reach import deferred_annotations

    assert deferred_annotations("0.6.16", (3, 11)) == ("flashinfer.comm.fd_exchange",)
    assert deferred_annotations("0.6.16.post3", (3, 10)) == ("flashinfer.comm.fd_exchange",)
    assert deferred_annotations("0.6.16", (3, 12)) == ()  # the release imports there
    assert deferred_annotations("0.6.16.post4", (3, 11)) == ()  # no hazard
    assert deferred_annotations("0.7.2.post1", (3, 11)) == ()


@pytest.mark.parametrize("defer", [False, True])
def test_the_harness_defers_the_annotation_and_nothing_else(defer: bool, tmp_path: Path) -> None:
    """0.6.16's own fd_exchange.py, imported as ``flashinfer.comm.fd_exchange`` through the
    import system under this Python (3.11): without the harness switch its annotation
    raises TypeError, as recorded; with it the module imports, its annotations are the
    source text, and the log names the one module compiled so."""
    try:
        wheel = ReleaseCache().download("flashinfer-python==0.6.16", wheel_only=True)
    except RegistryUnreachableError as error:
        pytest.skip(f"the package registry is unreachable: {error}")
    except DownloadError as error:  # a real failure
        raise AssertionError(str(error)) from error
    if sys.version_info >= (3, 12):
        pytest.skip("this Python evaluates array.array[int]: nothing to defer")
    comm = tmp_path / "flashinfer" / "comm"
    comm.mkdir(parents=True)
    (tmp_path / "flashinfer" / "__init__.py").write_text("")
    (comm / "__init__.py").write_text("")
    (comm / "abstractions.py").write_text("class CommBackend:\n    pass\n")
    with zipfile.ZipFile(wheel) as archive:
        (comm / "fd_exchange.py").write_bytes(archive.read("flashinfer/comm/fd_exchange.py"))
    log = tmp_path / "log.json"
    script = (
        "import json, flashinfer.comm.fd_exchange as m\n"
        "print(json.dumps(sorted({(type(v).__name__, str(v)) for f in vars(m).values()\n"
        "    for v in getattr(f, '__annotations__', {}).values() if 'array.' in str(v)})))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "FI_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(SITE), str(tmp_path)]), PYTHONNOUSERSITE="1")
    env["FI_COMPAT_HARNESS_LOG"] = str(log)
    if defer:
        env["FI_COMPAT_HARNESS_DEFER_ANNOTATIONS"] = "flashinfer.comm.fd_exchange"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    if not defer:
        assert done.returncode == 1
        assert "TypeError" in done.stderr
        assert "not subscriptable" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    annotations = json.loads(done.stdout)
    assert annotations  # the annotation that raised is there: as its text, never evaluated
    assert all(kind == "str" and "array.array[int]" in text for kind, text in annotations)
    assert json.loads(log.read_text())["deferred_annotations"] == ["flashinfer.comm.fd_exchange"]
