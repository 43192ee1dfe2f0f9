"""The engines' own fusion decisions, as data keyed by engine and release.

Each entry models one release of one engine (SGLang 0.5.23, vLLM 0.33.0): its rule set,
its start-up refusal, the backend it runs, its architecture allow-list where it has one,
and the engine code each rule follows. :func:`engine_rules` looks one up; the next
release an engine changes its decision in is a new entry, not a new public name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fi_compat._arguments import require_str
from fi_compat.errors import PolicyInputError, explain
from fi_compat.policy import _sglang, _vllm
from fi_compat.policy._deployment import Deployment, RuleId
from fi_compat.policy._rules import FusionRuleSet

__all__ = ["ENGINE_RULES", "EngineRules", "engine_rules"]


@dataclass(frozen=True)
class EngineRules:
    """One engine release's fusion decision.

    .. versionadded:: 0.3.0

    Attributes
    ----------
    engine
        The engine's name as fi-compat's command line spells it: ``"sglang"``, ``"vllm"``.
    release
        The engine release the rules follow: ``"0.5.23"``.
    rules
        Its :class:`FusionRuleSet`, for :func:`decide_fusion`.
    refusal
        Given a deployment, the error text the engine stops with at start-up, or None.
    backend
        Given a deployment the rules enable fusion for, the backend the engine runs.
    architectures
        The architectures the engine auto-enables fusion for, where it keeps such a list
        (SGLang's ``_FLASHINFER_ALLREDUCE_FUSION_ARCHS``); None where it keeps none.
    sources
        For each rule, the engine code it follows (file and function).
    """

    engine: str
    release: str
    rules: FusionRuleSet
    refusal: Callable[[Deployment], str | None]
    backend: Callable[[Deployment], str | None]
    architectures: frozenset[str] | None
    sources: Mapping[RuleId, str]


ENGINE_RULES: Mapping[tuple[str, str], EngineRules] = MappingProxyType(
    {
        (entry.engine, entry.release): entry
        for entry in (
            EngineRules(
                "sglang",
                _sglang.RELEASE,
                _sglang.RULES,
                _sglang.refusal_for,
                _sglang.backend_for,
                _sglang.ARCHITECTURES,
                MappingProxyType(_sglang.SOURCES),
            ),
            EngineRules(
                "vllm",
                _vllm.RELEASE,
                _vllm.RULES,
                _vllm.refusal_for,
                _vllm.backend_for,
                None,
                MappingProxyType(_vllm.SOURCES),
            ),
        )
    }
)
"""Every modelled engine release, keyed by ``(engine, release)``, oldest release first
(read-only).

.. versionadded:: 0.3.0
"""


def engine_rules(engine: str, release: str | None = None) -> EngineRules:
    """The fusion decision of ``engine`` at ``release`` (None: the newest modelled).

    .. versionadded:: 0.3.0

    Raises
    ------
    PolicyInputError
        ``engine`` is not a str, or no engine of that name is modelled; ``release`` is
        neither None nor a str, or that release of the engine is not modelled.
    """
    require_str("engine", engine, error=PolicyInputError)
    if release is not None:
        require_str("release", release, detail="or None", error=PolicyInputError)
    modelled = [entry for (name, _), entry in ENGINE_RULES.items() if name == engine]
    if not modelled:
        engines = ", ".join(sorted({name for name, _ in ENGINE_RULES}))
        raise PolicyInputError(
            explain(
                f"engine to be a modelled engine ({engines})",
                repr(engine),
                fix="decide with DEFAULT_RULES, or with a FusionRuleSet of your own",
            )
        )
    if release is None:
        return modelled[-1]
    found = ENGINE_RULES.get((engine, release))
    if found is None:
        releases = ", ".join(entry.release for entry in modelled)
        raise PolicyInputError(
            explain(
                f"release to be a modelled release of {engine} ({releases})",
                repr(release),
                fix="pass release=None for the newest, or build a FusionRuleSet for it",
            )
        )
    return found
