"""The probe against generated hostile ``flashinfer`` packages: it never crashes or lies.

The packages come from :mod:`tests.support.hostile`. For each, ``get_capabilities()``
returns exactly the answers the package was built to give, ``fi-compat report`` and
``fi-compat report --json`` exit 0 with parseable JSON, and ``--require group`` exits 1
unless ``group`` really is supported.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator

import pytest

from fi_compat import capabilities
from fi_compat.capabilities import PROBE_IN_PROGRESS, Capabilities, Status, get_capabilities
from fi_compat.cli import main
from fi_compat.cli._output import encodable
from fi_compat.hazards import hazards
from fi_compat.report import build_report, render_text
from tests.support import fakes
from tests.support.fakes import FakePackage
from tests.support.hostile import (
    BACKEND_HEAD,
    BCASTS,
    BUILTIN_EXCEPTIONS,
    EXCEPTION_PRELUDE,
    FULL,
    GROUP,
    HOSTILE_PACKAGE_COUNT,
    HOSTILE_PACKAGES,
    RAISES,
    VERSIONS,
    Hostile,
    statuses,
)

# ---------------------------------------------------------------------------- the tests


def test_the_tables_generate_what_they_claim() -> None:
    names = {cls.__name__ for cls in BUILTIN_EXCEPTIONS}
    assert {"SystemExit", "GeneratorExit", "Exception", "OSError", "ValueError"} <= names
    assert "KeyboardInterrupt" not in names
    assert len({hostile.id for hostile in HOSTILE_PACKAGES}) == HOSTILE_PACKAGE_COUNT
    assert 2 * len(BUILTIN_EXCEPTIONS) + 50 <= HOSTILE_PACKAGE_COUNT


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["report", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("hostile", HOSTILE_PACKAGES, ids=[h.id for h in HOSTILE_PACKAGES])
def test_hostile_package(
    hostile: Hostile, fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_package(hostile.files)
    # The first call probes (inside the CLI, so import-time output must stay off stdout).
    code, out, err = _run(capsys, "--json")
    assert code == 0, err
    assert "Traceback" not in err
    report = json.loads(out)
    caps = get_capabilities()
    found = statuses(caps)
    supported = {item for item, status in found.items() if status is Status.SUPPORTED}
    assert supported == set(hostile.supported)
    # What the report says is what the probe found.
    assert report["comm"]["kwargs"] == {
        owner: {k: v.to_dict() for k, v in answers.items()}
        for owner, answers in caps.comm.kwargs.items()
    }
    assert json.loads(json.dumps(build_report(caps))) == report
    for text in _strings(report):
        assert type(text) is str
    code, out, err = _run(capsys)
    assert code == 0, err
    assert out == encodable(render_text(caps), sys.stdout)
    code, _, err = _run(capsys, "--require", "group")
    assert code == (0 if GROUP in hostile.supported else 1), err
    assert "Traceback" not in err
    hazards(caps)  # never raises either


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


@pytest.mark.parametrize(("name", "expression"), RAISES, ids=[name for name, _ in RAISES])
def test_import_errors_are_described(fake_package: FakePackage, name: str, expression: str) -> None:
    fake_package(fakes.package(init_raises=expression, prelude=EXCEPTION_PRELUDE))
    info = get_capabilities().flashinfer
    assert info.installed
    assert not info.importable
    assert type(info.import_error) is str
    assert info.import_error
    if name == "nothing-prints":
        assert info.import_error == "NothingPrints: <unprintable NothingPrints>"
    elif name == "nameless":
        assert info.import_error.startswith("<unnamed exception>: ")
    elif name == "str-raises":
        assert info.import_error == "StrRaises: StrRaises('secret')"
    elif name.startswith("SystemExit-"):
        assert info.import_error.startswith("SystemExit: ")
    else:
        assert info.import_error.split(":")[0] in expression


@pytest.mark.parametrize("where", ["init", "comm"])
def test_keyboard_interrupt_propagates(fake_package: FakePackage, where: str) -> None:
    key = "init_raises" if where == "init" else "comm_raises"
    root = fake_package(fakes.package(**{key: 'KeyboardInterrupt("ctrl-c")'}))
    with pytest.raises(KeyboardInterrupt):
        get_capabilities()
    # Nothing was cached and nothing is left locked or marked as probing.
    assert capabilities._cached is None
    assert capabilities._probing_thread is None
    # Once the package is fixed the probe works.
    fixed = fakes.package()
    (root / "flashinfer" / "__init__.py").write_text(fixed["flashinfer/__init__.py"])
    (root / "flashinfer" / "comm" / "__init__.py").write_text(fakes.NEW_COMM)
    importlib.invalidate_caches()
    assert get_capabilities().comm.available


def test_keyboard_interrupt_in_the_cli(
    fake_package: FakePackage, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_package(fakes.package(comm_raises='KeyboardInterrupt("ctrl-c")'))
    code, out, err = _run(capsys, "--json")
    assert code == 130
    assert out == ""
    assert "interrupted" in err


@pytest.mark.parametrize(
    "raised",
    [SystemExit(0), KeyboardInterrupt(), GeneratorExit(), RuntimeError("x")],
    ids=["SystemExit", "KeyboardInterrupt", "GeneratorExit", "RuntimeError"],
)
def test_signature_reader_failures_are_guarded(
    fake_package: FakePackage, monkeypatch: pytest.MonkeyPatch, raised: BaseException
) -> None:
    """Whatever ``inspect_callable`` raises becomes ``unknown``; only Ctrl-C propagates."""
    fake_package(fakes.package())

    def hostile(*args: object, **kwargs: object) -> object:
        raise raised

    monkeypatch.setattr(capabilities, "inspect_callable", hostile)
    if isinstance(raised, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt):
            get_capabilities()
        return
    caps = get_capabilities()
    found = statuses(caps)
    assert {found[item] for item in FULL} == {Status.UNKNOWN}
    shape = caps.comm.shapes["allreduce_fusion"]
    assert shape.keywords is None
    assert shape.error is not None
    assert type(raised).__name__ in shape.error


def test_malformed_answer_from_the_signature_reader_is_unknown(
    fake_package: FakePackage, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_package(fakes.package())
    monkeypatch.setattr(
        capabilities,
        "acceptances",
        lambda shape, keywords: dict.fromkeys(keywords, capabilities.Support("supported", 5)),
    )
    found = statuses(get_capabilities())
    assert {found[item] for item in FULL} == {Status.UNKNOWN}


def test_last_resort_answer(fake_package: FakePackage, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_package(fakes.package())

    def broken() -> object:
        raise SystemExit("a bug in the probe")

    monkeypatch.setattr(capabilities, "_probe_flashinfer", broken)
    caps = get_capabilities()
    assert not caps.flashinfer.importable
    assert caps.flashinfer.import_error == "the probe failed: SystemExit: a bug in the probe"
    assert set(statuses(caps).values()) == {Status.UNKNOWN}


@pytest.mark.parametrize(
    ("name", "source", "location_ends"),
    [
        ("int", "__path__ = 5\n", "__init__.py"),
        ("non-str-entries", "__path__ = [5]\n", "__init__.py"),
        ("pathlike", "import pathlib\n__path__ = [pathlib.Path('/opt/fi')]\n", "/opt/fi"),
    ],
)
def test_location_survives_path(
    fake_package: FakePackage, name: str, source: str, location_ends: str
) -> None:
    fake_package(fakes.package(extra=source))
    location = get_capabilities().flashinfer.location
    assert type(location) is str
    assert location.endswith(location_ends)


@pytest.mark.parametrize(
    ("name", "version", "parsed"),
    [
        ("huge-release", "1" * 5000, None),
        ("nul", "0.7.2\x00", None),
        ("hostile-str", "0.7.2", "0.7.2"),
    ],
)
def test_version_survives(
    fake_package: FakePackage, name: str, version: str, parsed: str | None
) -> None:
    source = dict(VERSIONS)[name]
    fake_package(fakes.package(extra=source))
    info = get_capabilities().flashinfer
    assert type(info.version) is str
    assert info.version == version
    assert (str(info.parsed_version) if info.parsed_version else None) == parsed
    assert info.source_build is (parsed is None)


def test_bcast_reason_names_the_call(fake_package: FakePackage) -> None:
    method = {name: m for name, m, _ in BCASTS}["comment-only"]
    fake_package({**fakes.package(), "flashinfer/comm/comm_backend.py": BACKEND_HEAD + method})
    comm = get_capabilities().comm
    assert comm.torch_dist_backend == "flashinfer.comm.comm_backend.TorchDistBackend"
    assert comm.bcast_root_is_group_local.status is Status.UNSUPPORTED
    ids = [hazard.id for hazard in hazards(get_capabilities())]
    assert "torch-dist-backend-global-root" in ids


def test_reentrant_call_gets_the_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, without FlashInfer: a probe that asks for capabilities while probing."""
    capabilities.clear_cache()
    seen: list[Capabilities] = []
    real = capabilities._probe

    def reentrant() -> Capabilities:
        seen.append(get_capabilities())
        seen.append(get_capabilities(refresh=True))
        return real()

    monkeypatch.setattr(capabilities, "_probe", reentrant)
    try:
        outer = get_capabilities()
    finally:
        monkeypatch.undo()
    try:
        assert not outer.flashinfer.probe_in_progress
        assert len(seen) == 2
        for inner in seen:
            assert inner is not outer
            assert inner.flashinfer.probe_in_progress
            assert not inner.flashinfer.importable
            assert set(statuses(inner).values()) == {Status.UNKNOWN}
            reasons = {
                support.reason
                for answers in inner.attention.values()
                for support in answers.values()
            }
            assert reasons == {PROBE_IN_PROGRESS}
            assert [h.id for h in hazards(inner)] == ["probe-in-progress"]
            assert build_report(inner)["hazards"][0]["id"] == "probe-in-progress"
        assert get_capabilities() is outer  # the placeholder was never cached
    finally:
        capabilities.clear_cache()
