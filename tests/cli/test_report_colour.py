"""``fi-compat report`` in colour on a terminal, plain everywhere else (``NO_COLOR``).

The renderer paints each answer cell as it builds the line (``render_text(paint=...)``);
these tests check that only those cells are painted, in their colours, that the painted
report is the plain one byte for byte once the escapes are gone, and that a pipe,
``NO_COLOR`` and ``TERM=dumb`` get no escape at all.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from fi_compat._signature import Status, Support
from fi_compat.capabilities import Capabilities, get_capabilities
from fi_compat.cli import main
from fi_compat.cli._colour import (
    BOLD_RED,
    COLOURS,
    GREEN,
    RED,
    RESET,
    YELLOW,
    ansi,
    palette,
    plain,
    wants_colour,
)
from fi_compat.errors import InvalidArgumentError
from fi_compat.hazards import Hazard, Severity
from fi_compat.report import render_text
from fi_compat.testing import fake_flashinfer

ESCAPE = re.compile(r"\033\[[0-9;]*m")
#: A painted cell: its colour and its text.
CELL = re.compile(r"(\033\[[0-9;]*m)(.*?)\033\[0m")
ANSWERS = (
    *("supported", "unsupported", "unknown", "served", "refused"),
    *("yes", "no", "available", "unavailable"),
)
#: comm unavailable, error and warning hazards (whose messages say "unsupported"); an old
#: API, info hazards; group= refused; the newest recorded.
RELEASES = ("0.2.0.post1", "0.6.5", "0.6.11.post1", "0.7.2.post1")


class Stream(io.StringIO):
    def __init__(self, tty: bool | Exception) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        if isinstance(self.tty, Exception):
            raise self.tty
        return self.tty


# ---------------------------------------------------------------- when, and which palette


@pytest.mark.parametrize(
    ("tty", "environ", "expected"),
    [
        (True, {}, True),
        (True, {"NO_COLOR": "1"}, False),
        (True, {"NO_COLOR": ""}, True),  # no-color.org: set *and* non-empty
        (True, {"TERM": "dumb"}, False),
        (True, {"TERM": "xterm-256color"}, True),
        (False, {}, False),
        (ValueError("I/O operation on closed file"), {}, False),
    ],
)
def test_colour_only_on_a_terminal_without_no_color(
    tty: bool | Exception, environ: dict[str, str], expected: bool
) -> None:
    assert wants_colour(Stream(tty), environ) is expected
    assert palette(Stream(tty), environ) is (ansi if expected else plain)


def test_no_stream_and_a_stream_without_isatty_are_plain() -> None:
    assert wants_colour(None, {}) is False
    assert wants_colour(object(), {}) is False  # type: ignore[arg-type]
    assert palette(None, {}) is plain


@pytest.mark.parametrize(
    ("role", "colour"),
    [
        *((word, GREEN) for word in ("supported", "served", "yes", "available")),
        *((word, RED) for word in ("unsupported", "refused", "no", "unavailable")),
        ("unknown", YELLOW),
        ("error", BOLD_RED),
        ("warning", YELLOW),
    ],
)
def test_each_role_has_its_colour(role: str, colour: str) -> None:
    assert ansi(role, "text") == f"{colour}text{RESET}"
    assert plain(role, "text") == "text"


@pytest.mark.parametrize("role", ["info", "a role nobody gave a colour", ""])
def test_info_and_roles_without_a_colour_stay_plain(role: str) -> None:
    assert ansi(role, "[info]") == "[info]"


def test_every_answer_and_severity_has_a_colour() -> None:
    """A new probe answer or hazard severity must be given a colour (or ``""``) here."""
    statuses = {status.value for status in Status}
    severities = {severity.value for severity in Severity}
    assert not statuses & severities  # a role names one thing
    assert statuses | severities | set(ANSWERS) == set(COLOURS)


# ------------------------------------------------------------------- the renderer paints


def _capabilities(release: str) -> Capabilities:
    with fake_flashinfer(release):
        return get_capabilities()


@pytest.fixture(scope="module")
def reports() -> dict[str, Capabilities]:
    return {release: _capabilities(release) for release in RELEASES}


def _cells(line: str) -> Iterator[tuple[int, str, str]]:
    """Each painted cell of ``line``: where it starts in the plain line, colour, text."""
    shift = 0
    for found in CELL.finditer(line):
        yield found.start() - shift, found[1], found[2]
        shift += len(found[1]) + len(RESET)


def _painted_where_expected(plain_line: str, start: int, text: str) -> bool:
    """An answer is the second field of its line (a keyword, kind, backend or module
    line) or follows ``API: `` / ``CUDA available: ``; a hazard's tag opens its line."""
    before = plain_line[:start]
    if text.startswith("["):
        return before == "  "
    if before.endswith(("API: ", "CUDA available: ")):
        return True
    return len(before.split()) == 1 and plain_line.split()[1] == text


@pytest.mark.parametrize("release", RELEASES)
def test_a_real_report_painted_is_the_plain_report_with_escapes(
    release: str, reports: dict[str, Capabilities]
) -> None:
    caps = reports[release]
    text = render_text(caps)
    coloured = render_text(caps, paint=ansi)
    assert ESCAPE.search(coloured)
    assert not ESCAPE.search(text)
    assert ESCAPE.sub("", coloured) == text  # the same bytes, only painted
    assert render_text(caps, paint=plain) == text
    assert render_text(caps, paint=None) == text


@pytest.mark.parametrize("release", RELEASES)
def test_only_answer_cells_are_painted_each_in_its_colour(
    release: str, reports: dict[str, Capabilities]
) -> None:
    caps = reports[release]
    plain_lines = render_text(caps).split("\n")
    coloured_lines = render_text(caps, paint=ansi).split("\n")
    painted = 0
    for plain_line, line in zip(plain_lines, coloured_lines, strict=True):
        cells = list(_cells(line))
        api = "unified API: " in plain_line
        assert len(cells) <= (2 if api else 1), line  # never a word of a reason or message
        for start, colour, text in cells:
            role = text.strip("[]")
            assert colour == COLOURS[role], line
            assert _painted_where_expected(plain_line, start, text), line
        fields = plain_line.split()
        if len(fields) > 1 and fields[1] in ANSWERS and plain_line.startswith(("    ", "flash")):
            assert [text for _, _, text in cells] == [fields[1]], line  # no answer left plain
        if plain_line.startswith(("  [error] ", "  [warning] ")):
            assert [text for _, _, text in cells] == [fields[0]], line  # [info] is plain
        painted += len(cells)
    assert painted > 20


def test_words_in_reasons_and_hazard_messages_stay_plain(
    reports: dict[str, Capabilities],
) -> None:
    """0.2.0.post1 has no flashinfer.comm: each comm answer's reason says "unavailable",
    and its hazards' messages say "unsupported"; only the answers are painted."""
    coloured = render_text(reports["0.2.0.post1"], paint=ansi).split("\n")
    reasons = [line for line in coloured if "flashinfer.comm unavailable:" in line]
    hazards = [line for line in coloured if "determinism-unavailable" in line]
    assert reasons
    assert hazards
    for line in reasons:
        assert line.count("\033[") == 2  # the answer "unknown", and its reset
        assert f"{YELLOW}unknown{RESET}" in line
        assert "flashinfer.comm unavailable:" in line  # the reason's word, unpainted
    for line in hazards:
        assert line.startswith(f"  {YELLOW}[warning]{RESET} determinism-unavailable: ")
        assert line.count("\033[") == 2
        assert "unsupported" in line
    assert f"  {BOLD_RED}[error]{RESET} comm-unavailable: " in "\n".join(coloured)
    assert f"flashinfer.comm   {RED}unavailable{RESET}" in coloured


def test_info_hazards_stay_plain(reports: dict[str, Capabilities]) -> None:
    coloured = render_text(reports["0.6.11.post1"], paint=ansi).split("\n")
    infos = [line for line in coloured if line.startswith("  [info] ")]
    assert infos
    assert not any(ESCAPE.search(line) for line in infos)


def _tricky(caps: Capabilities) -> Capabilities:
    """``caps`` with a keyword named like an answer whose reason is full of answer words,
    and a comm error that says "unavailable"."""
    owner = next(iter(caps.comm.kwargs))
    reason = "no: supported from 0.6.10.post1, unknown before; yes [error] served"
    kwargs = dict(caps.comm.kwargs)
    kwargs[owner] = {"supported": Support(Status.UNSUPPORTED, reason), **kwargs[owner]}
    comm = dataclasses.replace(caps.comm, kwargs=kwargs, error="unavailable? no: available")
    return dataclasses.replace(caps, comm=comm)


def test_a_reason_full_of_answer_words_is_not_painted(
    reports: dict[str, Capabilities], monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = [
        Hazard("first", Severity.ERROR, "[warning] unsupported, no"),
        Hazard("second", Severity.WARNING, "supported"),
        Hazard("third", Severity.INFO, "[error] yes"),
    ]
    monkeypatch.setattr("fi_compat.report.hazards", lambda caps: messages)
    caps = _tricky(reports["0.7.2.post1"])
    calls: list[tuple[str, str]] = []

    def mark(role: str, text: str) -> str:
        calls.append((role, text))
        return f"<{role}|{text}>"

    lines = render_text(caps, paint=mark).split("\n")
    reason = "no: supported from 0.6.10.post1, unknown before; yes [error] served"
    # Padded by the plain word: "unsupported" takes 12 columns, whatever paint adds.
    assert f"    {'supported':<26} <unsupported|unsupported>  {reason}" in lines
    assert "  error:          unavailable? no: available" in lines
    assert "  <error|[error]> first: [warning] unsupported, no" in lines
    assert "  <warning|[warning]> second: supported" in lines
    assert "  <info|[info]> third: [error] yes" in lines
    for role, text in calls:
        assert text in (role, f"[{role}]")
    coloured = render_text(caps, paint=ansi)
    assert ESCAPE.sub("", coloured) == render_text(caps)
    assert f"{ansi('unsupported', 'unsupported')}  {reason}\n" in coloured


@pytest.mark.parametrize("paint", [5, "ansi", {"supported": GREEN}])
def test_paint_must_be_callable(paint: object, reports: dict[str, Capabilities]) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^expected paint to be None or a callable"):
        render_text(reports["0.6.5"], paint=paint)  # type: ignore[arg-type]


def test_paint_is_keyword_only(reports: dict[str, Capabilities]) -> None:
    with pytest.raises(TypeError):
        render_text(reports["0.6.5"], ansi)  # type: ignore[call-arg]


# --------------------------------------------------------------------- through the CLI


def _report(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tty: bool, *argv: str
) -> str:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty, raising=False)
    assert main(["report", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("release", ["0.6.5", "0.7.2.post1"])
def test_the_report_is_coloured_on_a_terminal(
    release: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    with fake_flashinfer(release):
        coloured = _report(capsys, monkeypatch, True)
        text = _report(capsys, monkeypatch, False)
        assert coloured == render_text(get_capabilities(), paint=ansi)
    assert ESCAPE.sub("", coloured) == text  # the same words, only coloured
    assert f"{GREEN}supported{RESET}" in coloured
    if release == "0.6.5":  # group= arrived in 0.6.10.post1
        assert f"{RED}unsupported{RESET}" in coloured


@pytest.mark.parametrize(
    ("tty", "environ", "argv"),
    [
        (True, {"NO_COLOR": "1"}, ()),
        (True, {"TERM": "dumb"}, ()),
        (False, {}, ()),  # a pipe or a file
        (True, {}, ("--json",)),
    ],
    ids=["NO_COLOR", "TERM=dumb", "not-a-tty", "json"],
)
def test_no_escape_off_a_terminal_with_no_color_or_dumb_or_json(
    tty: bool,
    environ: dict[str, str],
    argv: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    with fake_flashinfer("0.6.5"):
        out = _report(capsys, monkeypatch, tty, *argv)
    assert "supported" in out
    assert "\033" not in out


def _read_all(primary: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.parametrize(
    "environ", [{}, {"NO_COLOR": "1"}, {"TERM": "dumb"}], ids=["colour", "NO_COLOR", "dumb"]
)
def test_a_real_terminal(environ: dict[str, str]) -> None:
    """``fi-compat report`` in a subprocess whose stdout is a pseudo-terminal."""
    primary, secondary = os.openpty()
    env: dict[str, Any] = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm"
    env.update(environ)
    done = subprocess.run(
        [sys.executable, "-m", "fi_compat", "report"],
        stdout=secondary,
        stderr=subprocess.DEVNULL,
        env=env,
        timeout=120,
        check=False,
    )
    os.close(secondary)
    out = _read_all(primary)
    os.close(primary)
    assert done.returncode == 0
    assert "fi-compat" in out
    # The report always paints comm's "available"/"unavailable" and the API answers.
    assert bool(ESCAPE.search(out)) is (not environ)


def test_a_pipe_gets_no_escape() -> None:
    """``fi-compat report | less``: stdout is a pipe, so plain whatever ``TERM`` says."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm-256color"
    done = subprocess.run(
        [sys.executable, "-m", "fi_compat", "report"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "flashinfer.comm" in done.stdout
    assert "\033" not in done.stdout
