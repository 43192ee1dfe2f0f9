"""``fi-compat measure``: measure the installed FlashInfer on this machine, ahead of time.

What a release does (whether the split settings reach each attention wrapper's kernel, the
layer the checked fused call can launch through, which call sizes a fused workspace
serves) is measured by running the release's own Python on the CPU, compiled modules
replaced by recorders, in subprocesses (:mod:`fi_compat._measured.installed`); fi-compat
ships these measurements for the releases it knew. An installed release it shipped none
for is measured on first use anyway; this command does it ahead of time (CI, container
builds), prints what it measured and where it is kept, and measures again with
``--force``. A shipped release is measured only when ``FI_COMPAT_UNRECORDED`` sets it aside.

Exit status: 0 every measurement has an entry (measured now, or already cached, or shipped),
1 one could not be measured or no installed flashinfer-python was found (the message says
why and what to do), 2 bad command line, 130 interrupted, 141 stdout closed early.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from fi_compat.cli._output import write_err, write_out

__all__ = ["register", "run"]


def __dir__() -> list[str]:
    return list(__all__)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds; found {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0; found {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``measure`` subcommand."""
    parser = subparsers.add_parser(
        "measure",
        help="measure what the installed FlashInfer does, on the CPU, into the user's cache",
        description="Measure the installed flashinfer-python release the way fi-compat's "
        "shipped measurements were made (its own Python on the CPU, in subprocesses, every "
        "GPU hidden) and keep the results in the user's cache (FI_COMPAT_CACHE_DIR), so that "
        "no later process measures on first use. A release fi-compat ships measurements for "
        "is measured only when FI_COMPAT_UNRECORDED names it.",
        epilog="Exit status: 0 measured (or cached, or shipped), 1 a measurement failed or no "
        "flashinfer-python is installed, 2 bad command line, 141 stdout closed early.",
    )
    parser.add_argument(
        "--force", action="store_true", help="measure again what the cache already holds"
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="the most each probe may take (default: 180 s, 300 s for the sizes probe)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Measure, print; the exit status."""
    document = measure_document(force=bool(args.force), timeout=args.timeout)
    if args.json:
        write_out(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        write_out(render_text(document))
    if not document["ok"]:
        write_err(f"fi-compat measure: {document['error']}")
        return 1
    return 0


def measure_document(*, force: bool = False, timeout: float | None = None) -> dict[str, Any]:
    """Measure the installed release (unless fi-compat ships its measurements) and say
    what happened, as a JSON-ready dict: ``flashinfer`` (version, location, fingerprint),
    ``shipped``, ``cache``, per measurement its ``status`` (``measured``, ``cached``,
    ``failed``), ``seconds``, ``path``, ``summary`` and ``error``, then ``ok``, ``error``
    and ``seconds``."""
    from fi_compat._local import is_left_out
    from fi_compat._measured import load
    from fi_compat._measured.installed import COMMAND, MEASUREMENTS, find_installed, measure

    installed = find_installed()
    if installed is None:
        return {
            "flashinfer": None,
            "ok": False,
            "error": "no installed flashinfer-python was found by this Python "
            "(a flashinfer package on sys.path with its flashinfer_python-*.dist-info); "
            "install flashinfer-python into this environment, then run "
            f"`{COMMAND}` again",
            "measurements": {},
            "seconds": 0.0,
        }
    described = {
        "version": installed.version,
        "location": str(installed.package),
        "fingerprint": installed.fingerprint,
    }
    shipped = installed.version in load("reach")["releases"] and not is_left_out(installed.version)
    if shipped:
        return {
            "flashinfer": described,
            "shipped": True,
            "ok": True,
            "error": None,
            "measurements": {},
            "seconds": 0.0,
        }
    result = measure(installed, force=force, timeout=timeout)
    measurements = {
        outcome.measurement: {
            "status": "failed"
            if outcome.entry is None
            else ("cached" if outcome.cached else "measured"),
            "seconds": round(outcome.seconds, 3),
            "path": None if outcome.path is None else str(outcome.path),
            "summary": None
            if outcome.entry is None
            else summary(outcome.measurement, outcome.entry),
            "error": outcome.error,
        }
        for outcome in result.outcomes
    }
    failed = [name for name in MEASUREMENTS if measurements.get(name, {}).get("error")]
    error = result.error or (
        "; ".join(f"{name}: {measurements[name]['error']}" for name in failed) if failed else None
    )
    return {
        "flashinfer": described,
        "shipped": False,
        "cache": str(installed.directory),
        "ok": result.ok,
        "error": error,
        "measurements": measurements,
        "seconds": round(result.seconds, 3),
    }


def summary(measurement: str, entry: dict[str, Any]) -> str:
    """One line on what an entry says."""
    if measurement == "reach":
        answers = [
            (family, backend, answer["verdict"])
            for family, facts in entry.items()
            for backend, answer in facts["backends"].items()
        ]
        reaching = [f"{family}:{backend}" for family, backend, v in answers if v == "reaches"]
        return (
            f"{len(reaching)} of {len(answers)} family/backend pairs carry the split settings "
            f"to the kernel across {len(entry)} families"
        )
    if measurement == "layers":
        return f"the checked fused call uses the {entry['layer']} layer: {entry['detail']}"
    return "; ".join(
        f"{backend}: {facts['check']}"
        + (f", reaches the {facts['reaches']}'s sizes" if "reaches" in facts else "")
        for backend, facts in sorted(entry.items())
    )


def render_text(document: dict[str, Any]) -> str:
    """The result for people."""
    flashinfer = document.get("flashinfer")
    if flashinfer is None:
        return "no installed flashinfer-python found: nothing measured\n"
    lines = [
        f"flashinfer {flashinfer['version']} at {flashinfer['location']} "
        f"(files {flashinfer['fingerprint']})"
    ]
    if document.get("shipped"):
        lines.append(
            "  fi-compat ships its measurements: nothing to measure here "
            "(FI_COMPAT_UNRECORDED names releases to measure anyway)"
        )
        return "\n".join(lines) + "\n"
    for name, facts in document["measurements"].items():
        if facts["status"] == "failed":
            lines.append(f"  {name:<7} failed after {facts['seconds']:.1f} s: {facts['error']}")
            continue
        how = "cached" if facts["status"] == "cached" else f"measured in {facts['seconds']:.1f} s"
        lines.append(f"  {name:<7} {how}: {facts['summary']}")
        lines.append(f"          {facts['path'] or '(not cached: the cache could not be written)'}")
    if "cache" in document:
        lines.append(f"cache: {document['cache']} ({document['seconds']:.1f} s in all)")
    return "\n".join(lines) + "\n"
