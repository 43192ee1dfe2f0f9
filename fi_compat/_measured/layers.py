"""What the layers probe saw, as ``layers.json``'s entry: the layer the checked call can use.

A fi-compat workspace on FlashInfer's TRT-LLM backend may call the legacy
``trtllm_allreduce_fusion`` below its ``@deprecated`` wrapper instead of the public
``allreduce_fusion`` (:mod:`fi_compat.comm._layers`), but only with exactly the arguments
the public function passes, and only where fi-compat makes every check the public function
makes on the way. :mod:`fi_compat._measured.layers_probe` measures both in the release's
own Python; :func:`classify` turns its document into the release's entry:

``layer``
    ``legacy`` when every run reached the kernel through one legacy call, every legacy
    parameter has exactly one source the runtime knows (:data:`SOURCES` or a constant),
    every statement the public function ran is in :data:`CATALOGUE`, and the wrappers are
    FlashInfer's trace wrapper and ``@deprecated``; ``public`` otherwise, ``detail`` saying
    why.
``arguments``
    Legacy parameter -> source, in the legacy function's order.
``checks``
    What fi-compat must add per call (``handles_attached`` where the release checks it).
``fusion_source``, ``legacy_source``
    SHA-256 of each function's source; the runtime binds lower only when they match.
``statements``
    The public function's statements run on this path, in the order they first ran, for
    review.

The sources a legacy argument may have (:data:`PER_CALL`, :data:`FIXED`) are this
measurement's vocabulary and what the runtime binds from. The maintainers'
``tools/layers.py`` writes the shipped file with :func:`classify`;
:mod:`fi_compat._measured.installed` measures the installed release with it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fi_compat._surface import (
    COMM,
    LEGACY_FUSION,
    PATTERN,
    RESIDUAL_RMSNORM,
    SYMMETRIC_HANDLE,
    TRTLLM_MODULE_LOADER,
    TRTLLM_WORKSPACE,
    UNIFIED_FUSION,
)

__all__ = [
    "CATALOGUE",
    "FIXED",
    "HANDLES_ATTACHED",
    "NAMES_ENV",
    "PER_CALL",
    "PROBE",
    "SOURCES",
    "TIMEOUT",
    "classify",
    "probe_names",
]

#: The script the subprocess runs, by path (it imports no fi-compat).
PROBE = Path(__file__).resolve().parent / "layers_probe.py"
#: The environment variable that hands the probe :func:`probe_names`.
NAMES_ENV = "FI_COMPAT_LAYERS_NAMES"
#: Seconds one release's subprocess may take.
TIMEOUT = 180.0

#: Sources of a legacy argument that change per call, in the order the launch computes them:
#: the flat view of a caller tensor, the weight as given, a new flat tensor like the input,
#: the token count, the per-call switches and the call's own hidden size (the probe
#: measures it with a call narrower than the workspace).
PER_CALL: tuple[str, ...] = (
    "view:input",
    "view:residual_in",
    "view:residual_out",
    "view:norm_out",
    "rms_gamma",
    "scratch",
    "tokens",
    "launch_with_pdl",
    "trigger_completion_at_end",
    "fp32_acc",
    "use_oneshot",
    "rms_eps",
    "hidden",
)
#: Sources fixed when the workspace is created: FlashInfer workspace attributes (read then),
#: the pattern, and the legacy parameter's own default.
FIXED: tuple[str, ...] = (
    "workspace.world_size",
    "workspace.rank",
    "workspace.workspace_tensor",
    "workspace.metadata",
    "pattern",
    "default",
)
#: Every source a ``layers.json`` argument may name (or ``{"constant": value}``).
SOURCES: frozenset[str] = frozenset(PER_CALL + FIXED)
#: The check fi-compat adds per call where the public function makes it.
HANDLES_ATTACHED = "handles_attached"

#: What each statement the public function runs on the measured path is, and how fi-compat
#: covers it: ``fixed`` (decided once when the workspace is created: the workspace class,
#: the pattern, keywords fi-compat never passes), ``validated`` (fi-compat's own per-call
#: validator checks the same: 2-D shape of the workspace's hidden size, contiguity),
#: ``argument`` (how an argument of the legacy call is made, measured in ``arguments``),
#: ``result`` (what the public function returns; fi-compat returns its outputs itself), or
#: a check name fi-compat adds per call. A statement matching none is not understood.
CATALOGUE: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), meaning)
    for pattern, meaning in (
        (rf"^if isinstance\(workspace, {TRTLLM_WORKSPACE}\)$", "fixed"),
        (
            rf"^if moe_finalize_backend == 'cake' and \(not isinstance\(workspace, "
            rf"{TRTLLM_WORKSPACE}\)\)$",
            "fixed",
        ),
        (rf"^if pattern == {PATTERN.key}\.k\w+$", "fixed"),
        # A list of patterns up to 0.7.2.post1; 0.7.4 also tests a tuple (its MXFP8 patterns).
        (rf"^if pattern in \[{PATTERN.key}\.k\w+(, {PATTERN.key}\.k\w+)*\]$", "fixed"),
        (rf"^if pattern in \({PATTERN.key}\.k\w+(, {PATTERN.key}\.k\w+)*,?\)$", "fixed"),
        (
            rf"^dynamic_fp8_patterns = \({PATTERN.key}\.k\w+(, {PATTERN.key}\.k\w+)*\)$",
            "fixed",
        ),
        (r"^if pattern in dynamic_fp8_patterns$", "fixed"),
        (
            rf"^if any\(\(isinstance\(handle, {SYMMETRIC_HANDLE}\) and \(not handle\.mapped\) "
            r"for handle in workspace\.mem_handles\)\)$",
            HANDLES_ATTACHED,
        ),
        (r"^token_num, hidden_dim = input\.shape$", "validated"),
        (r"^def _flatten_checked\(t, name\)$", "argument"),
        (r"^if not t\.is_contiguous\(\)$", "validated"),
        (r"^return t\.view\(-1\)$", "argument"),
        # 0.7.4 adds its MXFP8 patterns to the ones that make no output of their own.
        (
            r"^if output is None( and pattern not in (dynamic_fp8_patterns|"
            rf"\(\*dynamic_fp8_patterns(, {PATTERN.key}\.k\w+)*\)))?$",
            "argument",
        ),
        (r"^output = torch\.empty_like\(input\)$", "argument"),
        (
            r"^(\w+)_flat = _flatten_checked\(\1, '\1'\)"
            r"( if \1 is not None else None)?$",
            "argument",
        ),
        (rf"^{LEGACY_FUSION.key}\(.*\)$", "argument"),
        (r"^if norm_out is not None$", "result"),
        (r"^return norm_out$", "result"),
    )
)

_DEPRECATION_FILES = ("typing_extensions.py", "warnings.py")


def probe_names() -> dict[str, str]:
    """The names the probe looks up, from ``fi_compat._surface`` (one spelling)."""
    return {
        "comm": COMM,
        "fusion": UNIFIED_FUSION.key,
        "legacy": LEGACY_FUSION.key,
        "workspace": TRTLLM_WORKSPACE,
        "pattern_class": PATTERN.key,
        "pattern": RESIDUAL_RMSNORM,
        "kernel_getter": TRTLLM_MODULE_LOADER,
    }


# ------------------------------------------------------------------------ classification


def _meaning(statement: str) -> str | None:
    for pattern, meaning in CATALOGUE:
        if pattern.match(statement):
            return meaning
    return None


def _public(document: Mapping[str, Any], detail: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"layer": "public", "detail": detail}
    for key in ("fusion_source", "legacy_source"):
        if key in document:
            entry[key] = document[key]
    return entry


def _wrappers_known(document: Mapping[str, Any]) -> str | None:
    """Why the wrappers are not the ones the runtime sees through, or None."""
    chain = document["chain"]
    for layer in chain[:-1]:
        if (layer["code_file"], layer["code_name"]) != ("api_logging.py", "_auto_dump_wrapper"):
            return f"{UNIFIED_FUSION.key} is wrapped by {layer['code_name']} ({layer['code_file']})"
    legacy = document["legacy_chain"]
    if len(legacy) > 2:
        return f"{LEGACY_FUSION.key} is wrapped more than once"
    if len(legacy) == 2 and not (
        legacy[0]["deprecated"]
        and legacy[0]["code_file"] in _DEPRECATION_FILES
        and legacy[0]["code_name"] == "wrapper"
    ):
        return f"{LEGACY_FUSION.key} is wrapped by {legacy[0]['code_name']}, not @deprecated"
    return None


def _arguments(document: Mapping[str, Any]) -> dict[str, Any] | str:
    """Legacy parameter -> its one source or constant, or why one has none."""
    arguments: dict[str, Any] = {}
    for name in document["legacy_parameters"]:
        sources = document["sources"].get(name)
        values = document["values"].get(name, [])
        if sources and len(sources) == 1 and sources[0] in SOURCES:
            arguments[name] = sources[0]
        elif sources and len(sources) == 1:
            return f"{LEGACY_FUSION.key}'s {name} comes from {sources[0]!r}, unknown to the runtime"
        elif sources:
            return f"{LEGACY_FUSION.key}'s {name} comes from any of {sources}"
        elif (
            values
            and all(value == values[0] and type(value) is type(values[0]) for value in values)
            and (values[0] is None or isinstance(values[0], (bool, int, float)))
        ):
            arguments[name] = {"constant": values[0]}
        else:
            return f"{LEGACY_FUSION.key}'s {name} has no source the runtime knows ({values})"
    return arguments


def classify(document: Mapping[str, Any]) -> dict[str, Any]:
    """One release's ``layers.json`` entry from the probe's document."""
    if "error" in document:
        return _public(document, f"not measured: {document['error']}")
    runs = document["runs"]
    for run in runs:
        if run["error"] is not None:
            return _public(document, f"the public call failed on the CPU: {run['error']}")
        if run["legacy_calls"] != 1 or run["kernel_calls"] != [LEGACY_FUSION.key]:
            return _public(
                document,
                f"the public call made {run['legacy_calls']} {LEGACY_FUSION.key} call(s) and "
                f"kernel calls {run['kernel_calls']}",
            )
    wrappers = _wrappers_known(document)
    if wrappers is not None:
        return _public(document, wrappers)
    statements: list[str] = []
    for run in runs:
        statements.extend(text for text in run["statements"] if text not in statements)
    checks: set[str] = set()
    for statement in statements:
        meaning = _meaning(statement)
        if meaning is None:
            return _public(document, f"a statement fi-compat does not account for: {statement}")
        if meaning not in ("fixed", "validated", "argument", "result"):
            checks.add(meaning)
    arguments = _arguments(document)
    if isinstance(arguments, str):
        return _public(document, arguments)
    return {
        "layer": "legacy",
        "detail": (
            f"{UNIFIED_FUSION.key} calls {LEGACY_FUSION.key} on a {TRTLLM_WORKSPACE} for "
            f"{RESIDUAL_RMSNORM}"
            + (f"; it also checks {', '.join(sorted(checks))}" if checks else "")
        ),
        "fusion_source": document["fusion_source"],
        "legacy_source": document["legacy_source"],
        "arguments": arguments,
        "checks": sorted(checks),
        "statements": statements,
    }
