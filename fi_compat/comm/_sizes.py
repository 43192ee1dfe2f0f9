"""Which call sizes a workspace serves, from what the installed release was measured to serve.

A workspace is created for ``max_token_num`` x ``hidden_dim``; FlashInfer serves calls of
other sizes that fit it, and engines rely on that (vLLM sizes one workspace for the wider of
the target and the draft model; SGLang's compile branch sends narrower tensors). Which sizes
a workspace serves is its :class:`Fit`, decided once at creation by :func:`fit_for`, and
read by every call's check (:mod:`._call_checks`). ``tools/sizes.py`` measured, per release
from 0.6.0, what the release's own public ``allreduce_fusion`` admits and what reaches its
kernel; ``sizes.json`` (:mod:`fi_compat._measured`) is what this module reads of it
(:func:`rule_of`). The rules:

``product``
    TRT-LLM: any call with ``tokens * hidden <= max_token_num * hidden_dim``, the call's own
    sizes reaching the kernel (FlashInfer's workspace metadata check).
``bytes``
    MNNVL: any call whose bytes the workspace's lamport buffer holds, asked of the
    workspace's own ``is_buffer_size_sufficient`` as the release's call asks it.
``exact``
    Everything else (the legacy API, and backends or releases that were not measured):
    only the creation-time hidden size and at most ``max_token_num`` tokens.

:func:`size_mismatch` says why a size is refused. The allreduce-fusion guide,
``docs/guide/comm.md``, says the same for users ("Per-call sizes").
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from fi_compat._measured import releases, why_unmeasured
from fi_compat._requirements.names import size_feature
from fi_compat.comm._types import Spec
from fi_compat.errors import CallSizeUnsupportedError, WorkspaceMismatchError, explain

__all__ = [
    "Fit",
    "SizeRule",
    "exact_fit",
    "fit_for",
    "measured",
    "product_fit",
    "relaxed_in",
    "rule_of",
    "size_mismatch",
]


SizeRule = Literal["exact", "product", "bytes"]
#: The measured rule per backend that fi-compat follows (anything else: ``exact``).
_FOLLOWED = {"trtllm": "product", "mnnvl": "bytes"}


@functools.cache
def measured() -> Mapping[str, Any]:
    """``sizes.json``'s ``releases``: release -> backend -> its measured entry, the installed
    release's measured on this machine where fi-compat shipped none
    (:func:`fi_compat._measured.releases`)."""
    return releases("sizes")


def relaxed_in(after: str | None = None, backend: str = "trtllm") -> str | None:
    """The oldest measured release whose ``backend`` serves calls of other sizes; with
    ``after``, the oldest such release newer than it (else the oldest of all)."""
    serving = _serving(backend)
    if after is not None:
        try:
            newer = [release for release in serving if Version(release) > Version(after)]
        except InvalidVersion:
            newer = []
        if newer:
            return newer[0]
    return serving[0] if serving else None


@functools.cache
def _serving(backend: str) -> tuple[str, ...]:
    """The measured releases whose ``backend`` serves other sizes, oldest first."""
    followed = _FOLLOWED.get(backend)
    found = [
        release
        for release, entry in measured().items()
        if entry.get(backend, {}).get("check") == followed
    ]
    return tuple(sorted(found, key=Version))


def rule_of(release: str | None, kind: str) -> tuple[SizeRule, str]:
    """The rule fi-compat follows on ``kind`` of workspace of ``release``, and why."""
    if kind == "legacy":
        return "exact", (
            "the legacy API's call checks nothing against the workspace and was not "
            f"measured; the unified API serves calls that fit from {relaxed_in()}"
        )
    entry = measured().get(release) if release is not None else None
    if entry is None:
        hint = why_unmeasured(release)
        return "exact", f"flashinfer {release}'s per-call sizes were not measured" + (
            f" ({hint})" if hint else ""
        )
    facts = entry.get(kind)
    if facts is None:
        return "exact", f"the {kind!r} backend's per-call sizes were not measured"
    followed = _FOLLOWED.get(kind)
    if facts.get("check") != followed or facts.get("reaches") != "call":
        detail = facts.get("detail") or f"measured rule {facts.get('check')!r}"
        return "exact", f"flashinfer {release}'s {kind!r} backend: {detail}"
    assert followed is not None
    return followed, f"measured for flashinfer {release}'s {kind!r} backend"  # type: ignore[return-value]


@dataclass(frozen=True)
class Fit:
    """Which call sizes one workspace serves (decided at creation; read per call).

    The per-call check accepts at once a call with ``0 < tokens <= max_tokens``,
    ``min_hidden <= hidden <= max_hidden`` and ``tokens * hidden <= capacity`` (and, where
    ``oneshot_fast`` is False, ``use_oneshot`` not True); anything else goes to
    :meth:`admits`, the whole rule.

    Attributes
    ----------
    rule
        ``"exact"``, ``"product"`` or ``"bytes"``.
    max_tokens, min_hidden, max_hidden, capacity, oneshot_fast
        The bounds of the fast check.
    feature
        The ``--require`` name (``per_call_sizes:<kind>``).
    why
        Where the rule comes from (measured, or why only the creation size is served).
    relaxed_in
        ``exact`` only: the release to name in a refusal, the one that serves other sizes
        (the next measured one after the installed release, else the oldest).
    sufficient
        ``bytes`` only: ``(tokens, hidden, use_oneshot) -> bool``, the workspace's own
        ``is_buffer_size_sufficient`` asked as the release's call asks it.
    """

    rule: SizeRule
    max_tokens: int
    min_hidden: int
    max_hidden: int
    capacity: int
    oneshot_fast: bool
    feature: str
    why: str
    relaxed_in: str | None = None
    sufficient: Callable[[int, int, bool | None], bool] | None = None

    def admits(self, tokens: int, hidden: int, use_oneshot: bool | None = None) -> bool:
        """Whether a call of ``tokens`` x ``hidden`` (both >= 1) fits the workspace."""
        if tokens < 1 or hidden < 1:
            return False
        if self.sufficient is not None:
            return self.sufficient(tokens, hidden, use_oneshot)
        return (
            tokens <= self.max_tokens
            and self.min_hidden <= hidden <= self.max_hidden
            and tokens * hidden <= self.capacity
        )


def exact_fit(spec: Spec, kind: str, why: str, release: str | None = None) -> Fit:
    """Only the creation-time hidden size, at most ``max_token_num`` tokens (``release``:
    the installed one, for the release a refusal names)."""
    return Fit(
        "exact",
        spec.max_token_num,
        spec.hidden_dim,
        spec.hidden_dim,
        spec.max_token_num * spec.hidden_dim,
        True,
        size_feature(kind),
        why,
        relaxed_in(None if kind == "legacy" else release),
    )


def product_fit(spec: Spec, kind: str, why: str) -> Fit:
    """Any call whose ``tokens * hidden`` is at most ``max_token_num * hidden_dim``."""
    capacity = spec.max_token_num * spec.hidden_dim
    return Fit("product", capacity, 1, capacity, capacity, True, size_feature(kind), why)


def fit_for(spec: Spec, *, release: str | None, kind: str, native: Any) -> Fit:
    """The :class:`Fit` of a workspace of ``kind`` made by ``release`` (``native``: its
    FlashInfer object, asked on ``bytes`` workspaces). Whatever the release's objects do
    while they are read here falls back to ``exact``, with the reason."""
    rule, why = rule_of(release, kind)
    if rule == "product":
        return product_fit(spec, kind, why)
    if rule == "bytes":
        sufficient = _bytes_check(spec, native)
        if isinstance(sufficient, str):
            return exact_fit(spec, kind, f"{why}, but {sufficient}", release)
        fast = exact_fit(spec, kind, why, release)
        return Fit(
            "bytes",
            fast.max_tokens,
            fast.min_hidden,
            fast.max_hidden,
            fast.capacity,
            False,
            fast.feature,
            why,
            None,
            sufficient,
        )
    return exact_fit(spec, kind, why, release)


def _bytes_check(spec: Spec, native: Any) -> Callable[[int, int, bool | None], bool] | str:
    """The MNNVL workspace's own check, as ``(tokens, hidden, use_oneshot) -> bool``.

    ``use_oneshot=None`` asks with the default strategy (``AUTO``), as every release's call
    does; a forced strategy is asked too, and both must fit: some releases pass it to the
    kernel and some ignore it (0.6.x), so a call is served only where either would fit.
    """
    try:
        check = native.is_buffer_size_sufficient
        parameter = inspect.signature(check).parameters.get("strategy")
        default = parameter.default if parameter is not None else None
        members = getattr(type(default), "__members__", {})
        oneshot, twoshot = members.get("ONESHOT"), members.get("TWOSHOT")
    except Exception as error:  # FlashInfer's object, read: a finding, never a crash
        return f"its is_buffer_size_sufficient could not be read ({type(error).__name__})"
    if default is None or oneshot is None or twoshot is None:
        return "its is_buffer_size_sufficient has no strategy=AUTO/ONESHOT/TWOSHOT"
    world, dtype = spec.world_size, spec.dtype
    forced = {True: oneshot, False: twoshot}

    def sufficient(tokens: int, hidden: int, use_oneshot: bool | None) -> bool:
        try:
            if not check(world, tokens, hidden, dtype, default):
                return False
            return use_oneshot is None or bool(
                check(world, tokens, hidden, dtype, forced[use_oneshot])
            )
        except Exception:  # its own check cannot say: refused, never launched
            return False

    return sufficient


def size_mismatch(
    spec: Spec, fit: Fit, tokens: int, hidden: int, use_oneshot: Any = None
) -> WorkspaceMismatchError | None:
    """Why a call of ``tokens`` x ``hidden`` cannot run on the workspace, or None."""
    found = f"input of shape ({tokens}, {hidden})"
    if hidden < 1:
        return WorkspaceMismatchError(
            explain(
                "a hidden size of at least 1",
                found,
                fix="skip the call: a zero-width tensor has nothing to all-reduce",
            )
        )
    if tokens < 1:
        return WorkspaceMismatchError(
            explain(
                "at least 1 token",
                found,
                fix="skip the call for an empty batch (FlashInfer's kernels require at "
                "least 1 token)",
            )
        )
    if fit.rule == "exact" and hidden != spec.hidden_dim and tokens * hidden <= fit.capacity:
        first = fit.relaxed_in
        return CallSizeUnsupportedError(
            explain(
                f"hidden size {spec.hidden_dim} (the workspace's hidden_dim: it serves only "
                f"its own, because {fit.why})",
                found,
                changed_in=first,
                fix="create a workspace for this hidden size, or a unified-API workspace of "
                f"flashinfer-python {first}, measured to serve any call that fits",
            ),
            feature=fit.feature,
            introduced_in=first,
        )
    if fit.admits(tokens, hidden, use_oneshot):
        return None
    if fit.rule == "exact" and hidden != spec.hidden_dim:
        expected = (
            f"hidden size {spec.hidden_dim} (the workspace's hidden_dim) and at most "
            f"{spec.max_token_num} tokens"
        )
    elif fit.rule == "exact":
        expected = f"at most {spec.max_token_num} tokens (the workspace's max_token_num)"
    elif fit.rule == "product":
        expected = (
            f"tokens x hidden at most {fit.capacity} (the workspace's max_token_num "
            f"{spec.max_token_num} x hidden_dim {spec.hidden_dim})"
        )
    else:
        oneshot = "" if use_oneshot is None else f" with use_oneshot={use_oneshot}"
        expected = (
            "a call whose bytes fit the workspace's buffer (its own is_buffer_size_sufficient"
            f"{oneshot}, as FlashInfer checks it)"
        )
    return WorkspaceMismatchError(
        explain(
            expected,
            found,
            fix="split the batch, or create the workspace with a larger max_token_num; "
            "a larger launch would overrun the workspace buffers",
        )
    )
