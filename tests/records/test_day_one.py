"""A release fi-compat shipped no data for, modelled from its own files (issue 49).

The releases here are small synthetic ``flashinfer`` trees: what matters is the path a
release takes (built by the one builder, kept in the user's cache, read by the one
loader beside the shipped ones), not the size of the release. The real releases' proof,
an installed 0.7.2.post1 set aside and modelled again, is ``test_day_one_real.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from fi_compat._local import CACHE_ENV, UNRECORDED_ENV
from fi_compat._records import (
    available_releases,
    forget,
    load_release,
    model_release,
)
from fi_compat._records._catalogue import (
    build,
    installed,
    local_releases,
    records_dir,
    shipped_names,
)
from fi_compat.cli import main
from fi_compat.errors import RecordingError, UnknownReleaseError

#: The synthetic release: newer than every shipped one.
NEW = "9.9.9"

FILES: Mapping[str, str] = {
    "flashinfer/__init__.py": """
        from .norm import rmsnorm
        from . import comm
        __version__ = "9.9.9"
    """,
    "flashinfer/norm.py": """
        def rmsnorm(input, weight, eps: float = 1e-6, *, enable_pdl=None):
            pass
    """,
    "flashinfer/comm/__init__.py": """
        from .allreduce import allreduce_fusion, AllReduceFusionPattern
    """,
    "flashinfer/comm/allreduce.py": """
        class AllReduceFusionPattern:
            kAllReduce = 0
            kARResidualRMSNorm = 1
            kARNew = 9

        def allreduce_fusion(input, workspace, pattern, *, trigger_completion_at_end=True):
            pass
    """,
}


def write_tree(root: Path, files: Mapping[str, str] = FILES) -> Path:
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root


@contextlib.contextmanager
def switched(cache: Path, left_out: str | None) -> Iterator[Path]:
    """``cache`` as the cache and ``left_out`` set aside, in this process, until the block
    ends; the loader forgets what it read on both sides."""
    saved = {name: os.environ.get(name) for name in (CACHE_ENV, UNRECORDED_ENV)}
    os.environ[CACHE_ENV] = str(cache)
    os.environ.pop(UNRECORDED_ENV, None)
    if left_out is not None:
        os.environ[UNRECORDED_ENV] = left_out
    forget()
    try:
        yield cache
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        forget()


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    """An empty cache of the test's own, and no release set aside."""
    with switched(tmp_path / "cache", None) as found:
        yield found


@pytest.fixture(scope="module")
def modelled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache holding the synthetic release, with shipped 0.7.2 set aside: the store the
    loader reads is then packed once (the slow step) for every test that uses it."""
    root = tmp_path_factory.mktemp("modelled")
    with switched(root / "cache", "0.7.2") as found:
        build(write_tree(root / "tree"), NEW)
        yield found


def test_a_modelled_release_is_known_and_read_like_a_shipped_one(modelled: Path) -> None:
    assert available_releases()[-1] == NEW
    record = load_release(NEW)
    assert record.release == NEW
    module = record.module("flashinfer.norm")
    assert module is not None
    assert set(module.names) == {"rmsnorm"}
    rmsnorm = record.public_names("flashinfer")["rmsnorm"]
    assert rmsnorm.kind == "function"
    assert rmsnorm.defined_in == "flashinfer.norm"
    assert record.accepts("allreduce_fusion", "trigger_completion_at_end")
    enum = record.comm_enums["AllReduceFusionPattern"]
    assert enum is not None
    assert enum.members["kARNew"] == 9


def test_the_shipped_releases_read_the_same_beside_a_modelled_one(modelled: Path) -> None:
    # The merged store holds every shipped release as the shipped store does.
    names = set(load_release("0.7.2.post1").module("flashinfer.utils").names)  # type: ignore[union-attr]
    assert "_get_range_buf" in names
    saved = os.environ.pop(CACHE_ENV), os.environ.pop(UNRECORDED_ENV)
    forget()
    try:
        shipped = set(load_release("0.7.2.post1").module("flashinfer.utils").names)  # type: ignore[union-attr]
    finally:
        os.environ[CACHE_ENV], os.environ[UNRECORDED_ENV] = saved
        forget()
    assert names == shipped


def test_a_release_set_aside_is_unknown_until_modelled(modelled: Path) -> None:
    assert "0.7.2" not in available_releases()
    assert "0.7.2.post1" in available_releases()
    with pytest.raises(UnknownReleaseError) as caught:
        load_release("0.7.2")
    assert "fi-compat record 0.7.2" in str(caught.value)


def test_a_damaged_or_foreign_model_is_never_trusted(cache: Path) -> None:
    for name, meta in {
        "1.0.0": "not json",
        "1.0.1": json.dumps({"format": 999, "release": "1.0.1"}),
        "1.0.2": json.dumps({"format": 1, "release": "1.0.3", "fingerprint": "x", "source": "y"}),
        "notaversion": json.dumps({"format": 1, "release": "notaversion"}),
    }.items():
        folder = cache / "records" / name
        folder.mkdir(parents=True)
        (folder / "source.json").write_text(meta, encoding="utf-8")
    forget()
    assert local_releases() == {}
    assert available_releases() == list(shipped_names())


def test_the_installed_release_is_modelled_on_first_use_then_read_from_the_cache(
    tmp_path: Path,
) -> None:
    site = write_tree(tmp_path / "site")
    info = site / "flashinfer_python-9.9.8.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 9.9.8\n", encoding="utf-8"
    )
    (info / "RECORD").write_text("flashinfer/__init__.py,,\n", encoding="utf-8")
    script = textwrap.dedent(
        """
        import json, logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        from fi_compat._records import load_release
        from fi_compat._records._catalogue import installed
        record = load_release("9.9.8")
        names = sorted(record.public_names("flashinfer"))
        print(json.dumps([str(installed()[1]), record.release, names]))
        """
    )
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache"), "PYTHONPATH": str(site)}
    first = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    package, release, names = json.loads(first.stdout)
    assert Path(package) == site / "flashinfer"
    assert release == "9.9.8"
    assert names == ["comm", "rmsnorm"]
    assert "modelling it from its installed files" in first.stderr
    again = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert json.loads(again.stdout) == [package, release, names]
    assert "modelling" not in again.stderr  # read from the cache, not modelled again


def test_installed_names_no_release_for_a_source_build(tmp_path: Path) -> None:
    site = write_tree(tmp_path / "site")
    info = site / "flashinfer_python-0.0.0+unknown.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.0.0+unknown\n",
        encoding="utf-8",
    )
    script = "from fi_compat._records._catalogue import installed; print(installed())"
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == "None"
    # In this interpreter: the installed release (a shipped one), found without importing it,
    # or none where flashinfer-python is not installed (the Python 3.10 run).
    here = installed()
    if importlib.util.find_spec("flashinfer") is None:
        assert here is None
    else:
        assert here is not None
        assert here[1].name == "flashinfer"


def test_record_models_a_tree_and_names_the_diff_to_review(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = write_tree(tmp_path / "tree")
    assert main(["record", "--path", str(tree), "--release", "9.9.7", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["records"][0]
    assert result["release"] == "9.9.7"
    assert result["action"] == "modelled"
    assert result["previous"] == available_releases()[-2]
    assert result["known"] is True
    assert Path(result["folder"]) == records_dir() / "9.9.7"
    assert main(["record", "--path", str(tree), "--release", "9.9.7"]) == 0
    out = capsys.readouterr().out  # the same files: read back, not modelled again
    assert f"flashinfer 9.9.7: already modelled from {tree}" in out
    assert f"review what changed: fi-compat diff {available_releases()[-2]} 9.9.7" in out
    (tree / "flashinfer" / "norm.py").write_text("def rmsnorm(x):\n    pass\n", encoding="utf-8")
    assert main(["record", "--path", str(tree), "--release", "9.9.7"]) == 0
    assert "flashinfer 9.9.7: modelled from" in capsys.readouterr().out  # other files


def test_record_leaves_a_shipped_release_alone(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["record", "0.7.2"]) == 0
    assert "fi-compat ships its model; nothing to do" in capsys.readouterr().out
    assert not (cache / "records").exists()


@pytest.mark.parametrize(
    ("argv", "status", "said"),
    [
        (["record", "--release", "1.0"], 2, "--release needs --path"),
        (["record", "not-a-version"], 2, "expected a PEP 440 release"),
        (["record", "1.0", "--path", "x"], 2, "not both"),
        (["record", "--path", "/nonexistent/flashinfer.whl"], 1, "fi-compat record:"),
    ],
)
def test_record_refuses_what_it_cannot_model(
    cache: Path, argv: list[str], status: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == status
    assert said in capsys.readouterr().err
    assert local_releases() == {}


def test_record_refuses_a_tree_without_flashinfer(
    cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_tree(tmp_path / "other", {"other/__init__.py": "x = 1"})
    assert main(["record", "--path", str(tmp_path / "other"), "--release", "9.9.5"]) == 1
    assert "no flashinfer/__init__.py found" in capsys.readouterr().err
    assert local_releases() == {}


def test_a_release_the_index_cannot_give_names_the_command_and_the_path(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No index at all: pip answers at once, as on a machine without network.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(RecordingError) as caught:
        model_release("9.9.6")
    message = str(caught.value)
    assert "pip download --no-deps flashinfer-python==9.9.6 -d DIR" in message
    assert "fi-compat record --path DIR/<file>" in message
    assert local_releases() == {}


@pytest.mark.parametrize("release", ["", "nonsense", "1.0\0", "0." + "1" * 5000])
def test_model_release_refuses_a_release_that_names_none(cache: Path, release: str) -> None:
    with pytest.raises(RecordingError, match="expected a PEP 440 release"):
        model_release(release)


def test_processes_modelling_the_same_files_at_once_model_them_once(tmp_path: Path) -> None:
    # An engine's ranks start together: one models the release, the others wait and read it.
    tree = write_tree(tmp_path / "tree")
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from fi_compat._records._catalogue import build
        local, made = build(Path(sys.argv[1]), "9.9.4")
        print(local.release, made)
        """
    )
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache")}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tree)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    said = sorted(rank.communicate(timeout=600)[0].strip() for rank in ranks)
    assert said == ["9.9.4 False", "9.9.4 False", "9.9.4 True"]


#: An installed flashinfer that must never be imported: it prints, leaves a mark and raises.
HOSTILE_INIT = """
    import os, pathlib
    print("flashinfer was imported")
    pathlib.Path(os.environ["IMPORTED_MARK"]).touch()
    raise RuntimeError("import flashinfer ran")
"""


def _hostile_site(tmp_path: Path, release: str) -> Path:
    site = write_tree(tmp_path / "site", {**FILES, "flashinfer/__init__.py": HOSTILE_INIT})
    (site / "flashinfer" / "norm.py").write_text("def rmsnorm(x, *, eps=1e-6):\n    pass\n")
    info = site / f"flashinfer_python-{release}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {release}\n", encoding="utf-8"
    )
    return site


LOAD = """
import json, sys
from fi_compat._records import load_release
from fi_compat.errors import UnknownReleaseError
try:
    record = load_release(sys.argv[1])
    names = sorted(record.public_names("flashinfer"))
    print(json.dumps({"release": record.release, "names": names}))
except UnknownReleaseError as error:
    lookup = isinstance(error, LookupError)
    print(json.dumps({"error": type(error).__name__, "lookup": lookup, "message": str(error)}))
print(json.dumps({"flashinfer_imported": "flashinfer" in sys.modules}))
"""


def test_first_use_models_a_flashinfer_that_raises_on_import_without_importing_it(
    tmp_path: Path,
) -> None:
    site = _hostile_site(tmp_path, "9.9.2")
    mark = tmp_path / "imported"
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache"), "PYTHONPATH": str(site)}
    env["IMPORTED_MARK"] = str(mark)
    done = subprocess.run(
        [sys.executable, "-c", LOAD, "9.9.2"], capture_output=True, text=True, env=env, check=True
    )
    first, after = map(json.loads, done.stdout.splitlines())
    assert first == {"release": "9.9.2", "names": ["os", "pathlib"]}  # what its source binds
    assert after == {"flashinfer_imported": False}
    assert not mark.exists()
    assert "flashinfer was imported" not in done.stdout + done.stderr


def test_first_use_with_an_unwritable_cache_leaves_the_release_unknown_saying_why(
    tmp_path: Path,
) -> None:
    site = _hostile_site(tmp_path, "9.9.1")
    blocked = tmp_path / "cache-is-a-file"
    blocked.write_text("not a folder", encoding="utf-8")
    env = {**os.environ, CACHE_ENV: str(blocked), "PYTHONPATH": str(site)}
    env["IMPORTED_MARK"] = str(tmp_path / "imported")
    done = subprocess.run(
        [sys.executable, "-c", LOAD, "9.9.1"], capture_output=True, text=True, env=env, check=True
    )
    first, after = map(json.loads, done.stdout.splitlines())
    assert first["error"] == "UnknownReleaseError"
    assert first["lookup"] is True  # a LookupError, as for any release fi-compat does not know
    assert "modelling the installed release failed: RecordingError" in first["message"]
    assert "FI_COMPAT_CACHE_DIR" in first["message"]
    assert after == {"flashinfer_imported": False}
    assert blocked.read_text(encoding="utf-8") == "not a folder"
    assert not (tmp_path / "imported").exists()


def test_record_with_an_unwritable_cache_exits_1_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = tmp_path / "cache-is-a-file"
    blocked.write_text("not a folder", encoding="utf-8")
    with switched(blocked, None):
        tree = write_tree(tmp_path / "tree")
        assert main(["record", "--path", str(tree), "--release", "9.9.0"]) == 1
    said = capsys.readouterr().err
    assert "expected a writable cache" in said
    assert "FI_COMPAT_CACHE_DIR" in said
