"""``fi-compat report`` in colour on a terminal, plain everywhere else (``NO_COLOR``)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from fi_compat.cli import main
from fi_compat.cli._colour import ANSWERS, GREEN, RED, YELLOW, colourize, wants_colour
from fi_compat.testing import fake_flashinfer

ESCAPE = re.compile(r"\033\[[0-9;]*m")


class Stream(io.StringIO):
    def __init__(self, tty: bool | Exception) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        if isinstance(self.tty, Exception):
            raise self.tty
        return self.tty


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


def test_no_stream_and_a_stream_without_isatty_are_plain() -> None:
    assert wants_colour(None, {}) is False
    assert wants_colour(object(), {}) is False  # type: ignore[arg-type]


def _report(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tty: bool) -> str:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: tty, raising=False)
    assert main(["report"]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("release", ["0.6.5", "0.7.2.post1"])
def test_the_report_is_coloured_on_a_terminal(
    release: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    with fake_flashinfer(release):
        coloured = _report(capsys, monkeypatch, tty=True)
        plain = _report(capsys, monkeypatch, tty=False)
    assert ESCAPE.search(coloured)
    assert not ESCAPE.search(plain)
    assert ESCAPE.sub("", coloured) == plain  # the same words, only coloured
    assert f"{GREEN}supported\033[0m" in coloured
    if release == "0.6.5":  # group= arrived in 0.6.10.post1
        assert f"{RED}unsupported\033[0m" in coloured


def test_no_color_keeps_a_terminal_plain(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    with fake_flashinfer("0.7.2.post1"):
        out = _report(capsys, monkeypatch, tty=True)
    assert not ESCAPE.search(out)


def test_json_is_never_coloured(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    with fake_flashinfer("0.6.5"):
        assert main(["report", "--json"]) == 0
    assert not ESCAPE.search(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("line", "word"),
    [
        ("    group                      unsupported  declared by ...", "unsupported"),
        ("    fa2                  served   the split settings reach the kernel", "served"),
        ("    auto                 refused  the split settings are dropped", "refused"),
        ("    mnnvl-cutedsl              unknown      not recorded", "unknown"),
        ("flashinfer.comm   unavailable", "unavailable"),
    ],
)
def test_each_answer_gets_its_colour(line: str, word: str) -> None:
    coloured = colourize(line)
    assert f"{ANSWERS[word]}{word}\033[0m" in coloured
    assert ESCAPE.sub("", coloured) == line


def test_hazards_by_severity_and_api_answers() -> None:
    text = (
        "  [error] comm-needs-cuda-runtime: ...\n"
        "  [warning] x: y\n"
        "  unified API: yes    legacy API: no"
    )
    coloured = colourize(text)
    assert "\033[1;31m[error]\033[0m" in coloured
    assert f"{YELLOW}[warning]\033[0m" in coloured
    assert f"API: {GREEN}yes\033[0m" in coloured
    assert f"API: {RED}no\033[0m" in coloured
    assert ESCAPE.sub("", coloured) == text


def test_words_outside_the_answer_columns_stay_plain() -> None:
    """A reason that says "supported" or a keyword named like an answer is not coloured."""
    line = "    supported_thing            unsupported  only supported from 0.6.0"
    coloured = colourize(line)
    assert coloured.count("\033[") == 2  # the answer, and its reset
    assert "only supported from" in coloured


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
@pytest.mark.parametrize("no_color", [None, "1"])
def test_a_real_terminal(no_color: str | None) -> None:
    """``fi-compat report`` in a subprocess whose stdout is a pseudo-terminal."""
    primary, secondary = os.openpty()
    environ: dict[str, Any] = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR",)}
    environ["TERM"] = "xterm"
    if no_color is not None:
        environ["NO_COLOR"] = no_color
    done = subprocess.run(
        [sys.executable, "-m", "fi_compat", "report"],
        stdout=secondary,
        stderr=subprocess.DEVNULL,
        env=environ,
        timeout=120,
        check=False,
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    out = b"".join(chunks).decode()
    assert done.returncode == 0
    assert "fi-compat" in out
    coloured = bool(ESCAPE.search(out))
    # Without FlashInfer installed (the Python 3.10 run) the report may hold no answer word.
    if no_color is None and ("supported" in out or "available" in out):
        assert coloured
    if no_color is not None:
        assert not coloured
