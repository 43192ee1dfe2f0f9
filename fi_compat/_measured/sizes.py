"""What the sizes probe saw, as ``sizes.json``'s entry: which call sizes a workspace serves.

FlashInfer documents that a workspace created for ``max_token_num`` x ``hidden_dim`` serves
any call that fits, and engines rely on it (vLLM sizes one workspace for the wider of the
target and draft model; SGLang sends narrower tensors). What "fits" means is measured, not
read: :mod:`fi_compat._measured.sizes_probe` creates a workspace per backend through the
release's own factory with recorders below it and calls the public ``allreduce_fusion``
with every shape of its ``SHAPES`` for each pattern. :func:`classify` turns that into the
release's whole entry; per backend (``trtllm``, ``mnnvl``):

``check``
    The rule the public call's refusals follow, one of :data:`RULES` (the same for every
    measured pattern, else ``mixed``), or ``unmeasured`` (``detail`` says why):

    ``product``       tokens * hidden <= max_token_num * hidden_dim (TRT-LLM's metadata check)
    ``separate``      tokens <= max_token_num and hidden <= hidden_dim
    ``tokens``        tokens <= max_token_num, any hidden
    ``exact_hidden``  tokens <= max_token_num and hidden == hidden_dim
    ``bytes``         the bytes the call needs fit the workspace's ``buffer_size_bytes``:
                      one-shot (tokens * hidden * world * element size, when that is at most
                      :data:`ONESHOT_BYTES`) else two-shot (2 * ceil(tokens / world) * world *
                      hidden * element size) -- MNNVL's lamport buffers
    ``none``          every shape reaches the kernel

``reaches``
    Which sizes reach the compiled kernel on an admitted call whose shape is not the
    workspace's: ``call`` (the call's own tokens and hidden), ``workspace`` (the creation
    values), or ``mixed``.
``sufficient``
    ``is_buffer_size_sufficient``'s signature, the rule its answers follow, and whether it
    answers exactly what the public call admits (``agrees``) for every measured pattern.
``patterns``
    The same per pattern; ``observations`` the raw outcome per pattern and shape.

What the runtime reads (:mod:`fi_compat.comm._sizes`) is each backend's :data:`SHIPPED_KEYS`
(:func:`shipped_entry`): the shipped ``sizes.json`` and the installed release's cached
entry hold that. The maintainers' ``tools/sizes.py`` keeps the whole entry too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fi_compat._measured.sizes_probe import BACKENDS, HIDDEN, MAX_TOKENS, SHAPES, WORLD
from fi_compat._surface import COMM, PATTERN, TORCH_DIST_BACKEND, UNIFIED_FACTORY, UNIFIED_FUSION

__all__ = [
    "NAMES_ENV",
    "ONESHOT_BYTES",
    "PROBE",
    "RULES",
    "SHIPPED_KEYS",
    "TIMEOUT",
    "admits",
    "classify",
    "classify_backend",
    "fit",
    "probe_names",
    "shipped_entry",
]

#: The script the subprocess runs, by path (it imports no fi-compat).
PROBE = Path(__file__).resolve().parent / "sizes_probe.py"
#: The environment variable that hands the probe :func:`probe_names`.
NAMES_ENV = "FI_COMPAT_SIZES_NAMES"
#: Seconds one release's subprocess may take.
TIMEOUT = 300.0
#: The keys of a backend's entry the runtime reads (``fi_compat.comm._sizes.rule_of``).
SHIPPED_KEYS = ("check", "reaches", "detail")
#: bf16.
ELEMENT_BYTES = 2
#: The largest one-shot payload (tokens * hidden * world * element size) on MNNVL.
ONESHOT_BYTES = 64 * 1024 * 8 * 2
#: The rules :func:`fit` tries, in this order (the probe's shapes tell every two apart).
RULES = ("none", "product", "separate", "tokens", "exact_hidden", "bytes")
#: The pattern whose answers ``sufficient.agrees`` is reported against first.
MAIN_PATTERN = "kARResidualRMSNorm"
_ERROR_CHARS = 240


def probe_names() -> dict[str, str]:
    """The names the probe looks up, from ``fi_compat._surface`` (one spelling)."""
    return {
        "comm": COMM,
        "fusion": UNIFIED_FUSION.key,
        "factory": UNIFIED_FACTORY.key,
        "pattern_class": PATTERN.key,
        "backend_class": TORCH_DIST_BACKEND.key,
    }


def shipped_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """What the runtime reads of one release's whole entry: per backend, :data:`SHIPPED_KEYS`."""
    return {
        backend: {key: facts[key] for key in SHIPPED_KEYS if key in facts}
        for backend, facts in entry.items()
    }


# ------------------------------------------------------------------------ classification


def _required_bytes(tokens: int, hidden: int, world: int) -> int:
    oneshot = tokens * hidden * world * ELEMENT_BYTES
    if oneshot <= ONESHOT_BYTES:
        return oneshot
    return 2 * math.ceil(tokens / world) * world * hidden * ELEMENT_BYTES


def admits(
    rule: str,
    tokens: int,
    hidden: int,
    *,
    max_tokens: int = MAX_TOKENS,
    max_hidden: int = HIDDEN,
    world: int = WORLD,
    buffer_bytes: int | None = None,
) -> bool | None:
    """Whether ``rule`` admits a call of ``tokens`` x ``hidden`` on the workspace (None:
    the rule cannot say, ``bytes`` without a buffer size)."""
    if rule == "none":
        return True
    if rule == "product":
        return tokens * hidden <= max_tokens * max_hidden
    if rule == "separate":
        return tokens <= max_tokens and hidden <= max_hidden
    if rule == "tokens":
        return tokens <= max_tokens
    if rule == "exact_hidden":
        return tokens <= max_tokens and hidden == max_hidden
    if rule == "bytes":
        if buffer_bytes is None:
            return None
        return _required_bytes(tokens, hidden, world) <= buffer_bytes
    raise ValueError(f"unknown rule {rule!r}")


def fit(
    admitted: Mapping[str, bool],
    shapes: Mapping[str, Sequence[int]],
    *,
    buffer_bytes: int | None = None,
) -> str | None:
    """The first rule of :data:`RULES` that admits exactly the ``admitted`` shapes, or None."""
    for rule in RULES:
        answers = {
            name: admits(rule, shapes[name][0], shapes[name][1], buffer_bytes=buffer_bytes)
            for name in admitted
        }
        if all(answers[name] is not None and answers[name] == admitted[name] for name in admitted):
            return rule
    return None


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."


def _observation(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One shape's outcome: ``kernel`` (reached it, once, without raising) or ``raised``."""
    kernel = list(raw.get("kernel", []))
    error = raw.get("error")
    entry: dict[str, Any] = {"shape": list(raw["shape"])}
    if error is None and len(kernel) == 1:
        entry["outcome"] = "kernel"
        entry["reached"] = raw["reached"][0]
    elif error is not None and not kernel:
        entry["outcome"] = "raised"
        entry["error"] = _short(error)
        entry["raised_in"] = raw.get("raised_in")
    else:
        entry["outcome"] = "other"
        entry["kernel"] = kernel
        if error is not None:
            entry["error"] = _short(error)
    return entry


def _classify_pattern(
    observations: Mapping[str, Mapping[str, Any]], buffer_bytes: int | None
) -> dict[str, Any]:
    shapes = {name: observation["shape"] for name, observation in observations.items()}
    others = [name for name, o in observations.items() if o["outcome"] == "other"]
    if others:
        return {
            "check": "unmeasured",
            "detail": f"{others[0]}: {observations[others[0]]}",
        }
    same = observations.get("same")
    if same is None or same["outcome"] != "kernel":
        error = None if same is None else same.get("error")
        return {
            "check": "unmeasured",
            "detail": f"the workspace's own shape does not reach the kernel: {error}",
        }
    admitted = {name: o["outcome"] == "kernel" for name, o in observations.items()}
    rule = fit(admitted, shapes, buffer_bytes=buffer_bytes)
    entry: dict[str, Any] = {"check": rule if rule is not None else "unexplained"}
    if rule is None:
        refused = sorted(name for name, ok in admitted.items() if not ok)
        entry["detail"] = f"no rule refuses exactly {refused}"
    workspace_shape = [MAX_TOKENS, HIDDEN]
    differing = [
        o
        for o in observations.values()
        if o["outcome"] == "kernel" and list(o["shape"]) != workspace_shape
    ]
    if differing and all(o["reached"] == list(o["shape"]) for o in differing):
        entry["reaches"] = "call"
    elif differing and all(o["reached"] == workspace_shape for o in differing):
        entry["reaches"] = "workspace"
    elif differing:
        entry["reaches"] = "mixed"
    else:
        entry["reaches"] = "unmeasured"
    return entry


def _common(values: Iterable[str]) -> str:
    found = sorted(set(values))
    return found[0] if len(found) == 1 else "mixed"


def classify_backend(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One backend's entry from the probe's document for it."""
    workspace = raw.get("workspace", {})
    if "error" in workspace:
        return {
            "check": "unmeasured",
            "detail": "the workspace could not be created on the CPU: "
            + _short(workspace["error"]),
        }
    buffer_bytes = workspace.get("buffer_size_bytes")
    observations = {
        pattern: {shape: _observation(result) for shape, result in entry["shapes"].items()}
        for pattern, entry in raw.get("patterns", {}).items()
    }
    patterns = {
        pattern: _classify_pattern(shapes, buffer_bytes) for pattern, shapes in observations.items()
    }
    measured = {p: e for p, e in patterns.items() if e["check"] != "unmeasured"}
    entry: dict[str, Any] = {
        "check": _common(e["check"] for e in measured.values()) if measured else "unmeasured",
        "reaches": _common(e["reaches"] for e in measured.values()) if measured else "unmeasured",
    }
    if not measured:
        entry["detail"] = "no pattern reached the kernel with the workspace's own shape"
    answers = raw.get("sufficient", {})
    shapes = {name: list(size) for name, size in SHAPES.items()}
    sufficient: dict[str, Any] = {"signature": workspace.get("sufficient_signature")}
    if answers and all(isinstance(answer, bool) for answer in answers.values()):
        rule = fit(answers, shapes, buffer_bytes=buffer_bytes)
        sufficient["rule"] = rule if rule is not None else "unexplained"
        sufficient["agrees"] = bool(measured) and all(
            answers[name] == (observation["outcome"] == "kernel")
            for pattern in measured
            for name, observation in observations[pattern].items()
        )
    else:
        sufficient["rule"] = "unmeasured"
        sufficient["agrees"] = False
    entry["sufficient"] = sufficient
    entry["workspace"] = {
        key: workspace[key] for key in ("class", "buffer_size_bytes") if key in workspace
    }
    metadata = workspace.get("metadata")
    if isinstance(metadata, dict):
        entry["workspace"]["metadata"] = {
            key: metadata[key]
            for key in ("max_token_num", "hidden_dim", "tp_size", "use_fp32_lamport")
            if key in metadata
        }
    entry["patterns"] = patterns
    entry["observations"] = {
        "sufficient": dict(answers),
        **{pattern: observations[pattern] for pattern in observations},
    }
    return entry


def classify(document: Mapping[str, Any]) -> dict[str, Any]:
    """One release's ``sizes.json`` entry from the probe's document."""
    if "error" in document:
        return {
            backend: {"check": "unmeasured", "detail": f"not measured: {document['error']}"}
            for backend in BACKENDS
        }
    return {
        backend: classify_backend(document["backends"][backend])
        if backend in document.get("backends", {})
        else {"check": "unmeasured", "detail": "the probe did not measure this backend"}
        for backend in BACKENDS
    }
