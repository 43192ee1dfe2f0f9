"""The ``auto`` hooks: a release's device-dependent backend choices, answered in turn.

The choices ``backend="auto"`` makes from the device (``determine_attention_backend``,
``_should_use_fmha_v2_sm120``, ``_blackwell_ragged_auto_upgrade`` and decode's
``_auto_decode_prefers_cudnn``) are replaced by hooks (:func:`install_hooks`) that give
:data:`ANSWERS` and note in :data:`CONSULTED` that they were asked. Each hook's possible
answers are read from the release's code (the strings the function returns or compares
with) or, for decode's cuDNN choice, varied over the device inputs
(:data:`DECODE_CUDNN_DEVICES`); the reach probe measures ``plan`` under every combination
of the answers it consulted (:func:`answer_sets`).
"""

from __future__ import annotations

import ast
import inspect
import itertools
from collections.abc import Callable
from typing import Any

from .reach_recorders import flashinfer_modules, function_source

__all__ = [
    "ANSWERS",
    "CONSULTED",
    "DECODE_CUDNN_DEVICES",
    "answer_sets",
    "install_hooks",
    "label",
]

#: The ``auto`` hooks consulted since the last reset.
CONSULTED: set[str] = set()
#: The answer each ``auto`` hook gives now.
ANSWERS: dict[str, Any] = {}

#: Device inputs of decode's ``_auto_decode_prefers_cudnn``, per answer label.
DECODE_CUDNN_DEVICES: dict[str, dict[str, Any]] = {
    "sm100 with cuDNN": {
        "compute_capability": (10, 0),
        "frontend_serves_frost_decode": True,
        "cudnn_available": True,
        "frontend_leads_short_caches": True,
        "frost_runtime_available": True,
    },
    "sm90": {
        "compute_capability": (9, 0),
        "frontend_serves_frost_decode": False,
        "cudnn_available": False,
        "frontend_leads_short_caches": False,
        "frost_runtime_available": False,
    },
}


def _returned_strings(func: Any) -> list[str]:
    tree = function_source(func)
    if tree is None:
        return []
    return sorted(
        {
            node.value.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Return)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        }
    )


def _compared_strings(func: Any, name: str) -> list[str]:
    """String constants compared with the variable ``name`` in the function's body."""
    tree = function_source(func)
    if tree is None:
        return []
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Name)
            and node.left.id == name
        ):
            for comparator in node.comparators:
                if isinstance(comparator, ast.Constant) and isinstance(comparator.value, str):
                    found.add(comparator.value)
    return sorted(found)


def install_hooks() -> dict[str, list[Any]]:
    """Replace the device-dependent ``auto`` choices; returns each hook's possible answers."""
    hooks: dict[str, list[Any]] = {}
    originals: dict[str, Any] = {}
    for module in flashinfer_modules():
        for name in (
            "determine_attention_backend",
            "_should_use_fmha_v2_sm120",
            "_blackwell_ragged_auto_upgrade",
            "_auto_decode_prefers_cudnn",
        ):
            value = vars(module).get(name)
            if inspect.isfunction(value) and name not in originals:
                originals[name] = value
    if "determine_attention_backend" in originals:
        answers = _returned_strings(originals["determine_attention_backend"]) or ["fa2"]
        hooks["determine_attention_backend"] = sorted(answers, key=lambda a: a != "fa2")
    if "_should_use_fmha_v2_sm120" in originals:
        hooks["_should_use_fmha_v2_sm120"] = [False, True]
    if "_blackwell_ragged_auto_upgrade" in originals:
        upgrade = originals["_blackwell_ragged_auto_upgrade"]
        hooks["_blackwell_ragged_auto_upgrade"] = [None, *_compared_strings(upgrade, "backend")]
    if "_auto_decode_prefers_cudnn" in originals:
        hooks["_auto_decode_prefers_cudnn"] = sorted(DECODE_CUDNN_DEVICES, reverse=True)

    def constant(name: str) -> Callable[..., Any]:
        def hook(*args: Any, **kwargs: Any) -> Any:
            CONSULTED.add(name)
            return ANSWERS[name]

        return hook

    def decode_cudnn(*args: Any, **kwargs: Any) -> Any:
        CONSULTED.add("_auto_decode_prefers_cudnn")
        original = originals["_auto_decode_prefers_cudnn"]
        accepted = inspect.signature(original).parameters
        device = DECODE_CUDNN_DEVICES[ANSWERS["_auto_decode_prefers_cudnn"]]
        kwargs.update({key: value for key, value in device.items() if key in accepted})
        if "override" in accepted:
            kwargs["override"] = ""
        return original(*args, **kwargs)

    for module in flashinfer_modules():
        for name in hooks:
            if name in vars(module) and vars(module)[name] is originals[name]:
                replacement = decode_cudnn if name == "_auto_decode_prefers_cudnn" else None
                setattr(module, name, replacement or constant(name))
    for name, answers in hooks.items():
        ANSWERS[name] = answers[0]
    return hooks


def label(answers: dict[str, Any]) -> str:
    """The report's name for one combination of answers (``default`` for none)."""
    if not answers:
        return "default"
    return ", ".join(f"{name}={value!r}" for name, value in sorted(answers.items()))


def answer_sets(hooks: dict[str, list[Any]], consulted: set[str]) -> list[dict[str, Any]]:
    """Every combination of the answers of the ``consulted`` hooks."""
    names = sorted(name for name in hooks if name in consulted)
    return [
        dict(zip(names, combination, strict=True))
        for combination in itertools.product(*(hooks[name] for name in names))
    ]
