"""After the analysis: target parameters the forwarding calls also bind positionally."""

from __future__ import annotations

from collections.abc import Sequence

from fi_compat._forwarding.results import Doubt, ForwardCall


def bound_skip(base: str, descriptor: str) -> int:
    """Leading parameters of a target that the call binds implicitly.

    ``descriptor`` is ``"function"``, ``"staticmethod"`` or ``"classmethod"``: how the
    target is stored on the class. A global target skips nothing (its signature is what
    a call sees).
    """
    if descriptor == "classmethod":
        return 1
    if base == "instance" and descriptor == "function":
        return 1
    return 0


def positional_doubts(
    calls: Sequence[ForwardCall], parameters: Sequence[tuple[str, str]], skip: int, where: str
) -> list[Doubt]:
    """Target parameters the forwarding calls bind positionally.

    A keyword that is also bound positionally raises ``TypeError`` (multiple values), so
    it cannot be passed through ``**kwargs``. ``parameters`` are (name, kind) pairs in
    order, kinds as ``inspect.Parameter.kind.name``.
    """
    positional = [
        (name, kind)
        for name, kind in parameters[skip:]
        if kind in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
    ]
    doubts: list[Doubt] = []
    for call in calls:
        bound = positional if call.starred else positional[: call.positional]
        how = "a *args splat" if call.starred else "a positional argument"
        for name, kind in bound:
            if kind == "POSITIONAL_OR_KEYWORD":
                doubts.append(
                    Doubt(name, f"{how} of the call at line {call.line} of {where} binds it")
                )
    return doubts
