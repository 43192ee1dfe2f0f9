"""The attention planner: every FlashInfer ``plan`` call of an engine goes through here.

Built once per set of wrappers. At build time it decides, for every wrapper, the keyword
arguments its ``plan`` calls get from the planner (the split settings, or nothing when not
deterministic) and refuses what cannot be deterministic. Per step it does one thing:
:func:`_call_plan`, the only place in fi-compat that calls a wrapper's ``plan``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fi_compat._arguments import describe, require_bool, require_instance
from fi_compat._requirements.names import FAST_PLAN
from fi_compat._surface import FAST_DECODE_PLAN
from fi_compat.attention import _reach, _vouch
from fi_compat.attention._layout import (
    DECODE,
    PREFILL_PAGED,
    PREFILL_RAGGED,
    Layout,
    PlanArgs,
    PlanTarget,
)
from fi_compat.attention._planner_checks import (
    check_distinct,
    check_graph_mode,
    check_kind,
    check_requests,
    check_wrapper,
    layout_of,
    wrappers_of,
)
from fi_compat.attention._settings import Settings
from fi_compat.attention._spans import (
    KvSpan,
    check_lens,
    check_ragged,
    check_window,
    cross_decoder,
    cross_encoder,
    whole_span,
    window_decode,
    window_prefill,
)
from fi_compat.attention._vouch import (
    backend_of,
    check_options,
    check_reach,
    check_signature,
    check_tensor_cores,
    family_of,
    refuse_reach,
    release_of,
)
from fi_compat.errors import CapabilityMissingError, PlannerConfigError, explain

if TYPE_CHECKING:
    from torch import Tensor

    from fi_compat.capabilities import Capabilities

__all__ = ["AttentionPlanner"]


def _call_plan(slot: PlanTarget, request: PlanArgs) -> None:
    """The one call of ``plan`` in fi-compat: the engine's arguments plus the split settings."""
    slot.wrapper.plan(*request.args, **request.kwargs, **slot.split)


def _call_fast_plan(fast: Callable[..., Any], slot: PlanTarget, request: PlanArgs) -> None:
    """The one call of the release's ``fast_decode_plan``: as :func:`_call_plan`."""
    fast(slot.wrapper, *request.args, **request.kwargs, **slot.split)


# ---------------------------------------------------------------------------- the planner


def _span_fn(layout: Layout, window_left: int | None) -> Callable[..., tuple[KvSpan, ...]]:
    """The per-layout kv-span arithmetic, chosen once; the inputs are checked by the caller."""
    if layout is Layout.SLIDING_WINDOW and window_left is not None:

        def window(
            seq_lens: Tensor, prefix_lens: Tensor | None, encoder_lens: Tensor | None, ragged: bool
        ) -> tuple[KvSpan, ...]:
            if prefix_lens is None:
                return window_decode(seq_lens, window_left), whole_span(seq_lens)
            full = prefix_lens if ragged else seq_lens
            window_span = window_prefill(seq_lens, prefix_lens, window_left, ragged)
            return window_span, whole_span(full)

        return window
    if layout is Layout.CROSS_ATTENTION:

        def cross(
            seq_lens: Tensor, prefix_lens: Tensor | None, encoder_lens: Tensor | None, ragged: bool
        ) -> tuple[KvSpan, ...]:
            if encoder_lens is None:
                raise PlannerConfigError(
                    explain(
                        "encoder_lens for a cross-attention planner",
                        "encoder_lens=None",
                        fix="pass the encoder length of each request",
                    )
                )
            own = prefix_lens if ragged and prefix_lens is not None else seq_lens
            return cross_decoder(own, encoder_lens), cross_encoder(encoder_lens)

        return cross

    def single(
        seq_lens: Tensor, prefix_lens: Tensor | None, encoder_lens: Tensor | None, ragged: bool
    ) -> tuple[KvSpan, ...]:
        own = prefix_lens if ragged and prefix_lens is not None else seq_lens
        return (whole_span(own),)

    return single


def _fast_plan(
    decode: tuple[PlanTarget, ...],
    wanted: bool,
    settings: Settings,
    capabilities: Capabilities | None,
) -> Callable[..., Any] | None:
    """The release's ``fast_decode_plan`` for a planner built with ``fast_decode=True``."""
    if not wanted:
        return None
    fast = _vouch.fast_plan_of_release()
    if fast is None:
        raise CapabilityMissingError(
            explain(
                f"{FAST_DECODE_PLAN.dotted} for fast_decode=True",
                f"none in flashinfer {release_of(capabilities) or 'unknown'}",
                changed_in=FAST_DECODE_PLAN.introduced_in,
                fix=f"upgrade flashinfer-python to {FAST_DECODE_PLAN.introduced_in} or later, or "
                "build the planner without fast_decode",
            ),
            feature=FAST_PLAN,
            introduced_in=FAST_DECODE_PLAN.introduced_in,
        )
    if settings.deterministic:
        release = release_of(capabilities)
        for slot in decode:
            family = family_of(slot.wrapper) or slot.kind
            backend = backend_of(slot.wrapper, family, release) or "unreadable"
            answer = _vouch.vouch(release, _reach.FAST_DECODE_PLAN, backend)
            if not answer.reaches:
                raise refuse_reach(
                    answer,
                    f"{FAST_DECODE_PLAN.key} for the {slot.role} {family} (backend={backend!r})",
                    f"the {slot.role} {family}",
                )
    return fast


class AttentionPlanner:
    """Routes every FlashInfer attention ``plan`` call of an engine, adding the split settings.

    Build one per set of wrappers (for example one for the eager wrappers and one per
    captured batch size for the CUDA-graph wrappers), then per step call
    :meth:`plan_prefill` / :meth:`plan_decode` with the engine's own arguments. The
    deterministic-attention guide, ``docs/guide/attention.md``, says what each ``plan``
    gets and what is refused.

    .. versionadded:: 0.2.0

    Parameters
    ----------
    layout
        :class:`Layout` of the model.
    prefill
        The paged prefill wrappers (a list or tuple), in :attr:`Layout.roles` order; empty
        or ``None`` when this planner does no prefill.
    ragged
        The ragged prefill wrapper, if the engine uses one.
    decode
        The decode wrappers (a list or tuple), in :attr:`Layout.roles` order; may be empty
        or ``None``.
    window_left
        FlashInfer's ``window_left``; for :attr:`Layout.SLIDING_WINDOW` only.
    settings
        Defaults to ``Settings()``: deterministic exactly when the switch says so now.
    capabilities
        The installed release's; probed when needed.
    fast_decode
        The engine replays CUDA graphs through FlashInfer's ``fast_decode_plan``, which
        :meth:`plan_decode` with ``fast=True`` calls with the same settings.

    Raises
    ------
    DeterminismUnavailableError
        Deterministic, and some wrapper's ``plan`` does not (or may not) take the split
        settings, or (as :class:`~fi_compat.errors.BackendNotDeterministicError`) its class
        and backend were not measured to hand them to the kernel.
    TensorCoresRequiredError
        Deterministic, and a decode wrapper was built without tensor cores.
    PlannerConfigError
        A wrong ``layout``, wrapper, ``window_left``, ``settings`` or ``capabilities``.
    """

    __slots__ = (
        "_decode",
        "_fast",
        "_prefill",
        "_ragged",
        "_spans",
        "layout",
        "settings",
        "window_left",
    )

    def __init__(
        self,
        layout: Layout = Layout.SINGLE,
        *,
        prefill: Sequence[Any] | None = (),
        ragged: Any = None,
        decode: Sequence[Any] | None = (),
        window_left: int | None = None,
        settings: Settings | None = None,
        capabilities: Capabilities | None = None,
        fast_decode: bool = False,
    ) -> None:
        layout = layout_of(layout)
        require_bool("fast_decode", fast_decode, error=PlannerConfigError)
        check_options(settings, capabilities)
        prefill = wrappers_of("prefill", prefill, PREFILL_PAGED, layout)
        decode = wrappers_of("decode", decode, DECODE, layout)
        if ragged is not None:
            check_wrapper(PREFILL_RAGGED, "ragged", ragged)
        resolved = (settings if settings is not None else Settings()).resolved()
        roles = layout.roles
        if not prefill and ragged is None and not decode:
            raise PlannerConfigError(
                explain("at least one wrapper", "none", fix="pass prefill=, ragged= or decode=")
            )
        if layout is Layout.SLIDING_WINDOW:
            check_window(window_left)
        elif window_left is not None:
            raise PlannerConfigError(
                explain(
                    f"no window_left for layout {layout}",
                    describe(window_left),
                    fix="use Layout.SLIDING_WINDOW, or drop window_left",
                )
            )

        prefill_split = resolved.split_kwargs("prefill")
        decode_split = resolved.split_kwargs("decode")
        self._prefill = tuple(
            PlanTarget(w, PREFILL_PAGED, role, prefill_split)
            for w, role in zip(prefill, roles, strict=False)
        )
        self._ragged = (
            None if ragged is None else PlanTarget(ragged, PREFILL_RAGGED, "ragged", prefill_split)
        )
        self._decode = tuple(
            PlanTarget(w, DECODE, role, decode_split)
            for w, role in zip(decode, roles, strict=False)
        )
        check_distinct(self.targets)
        for slot in self.targets:
            check_kind(slot)
        if resolved.deterministic:
            release = release_of(capabilities)
            for slot in self.targets:
                check_signature(slot.wrapper, slot.kind, slot.role, release)
                check_graph_mode(slot, resolved)
            for slot in self._decode:
                check_tensor_cores(slot.wrapper, slot.role, release)
            for slot in self.targets:
                check_reach(slot.wrapper, slot.role, release)
        self._fast = _fast_plan(self._decode, fast_decode, resolved, capabilities)

        self.layout = layout
        self.settings = resolved
        self.window_left = window_left
        self._spans = _span_fn(layout, window_left)

    @classmethod
    def single(
        cls,
        *,
        prefill: Any = None,
        ragged: Any = None,
        decode: Any = None,
        settings: Settings | None = None,
        capabilities: Capabilities | None = None,
        fast_decode: bool = False,
    ) -> AttentionPlanner:
        """A planner for one paged wrapper per phase (plus an optional ragged one).

        Each of ``prefill``, ``ragged`` and ``decode`` is one wrapper or ``None``. Raises as
        the constructor does; a list or tuple given in place of a wrapper is refused.
        """
        return cls(
            Layout.SINGLE,
            prefill=() if prefill is None else (prefill,),
            ragged=ragged,
            decode=() if decode is None else (decode,),
            settings=settings,
            capabilities=capabilities,
            fast_decode=fast_decode,
        )

    @classmethod
    def sliding_window(
        cls,
        window_left: int,
        *,
        prefill: tuple[Any, Any] | None = None,
        ragged: Any = None,
        decode: tuple[Any, Any] | None = None,
        settings: Settings | None = None,
        capabilities: Capabilities | None = None,
        fast_decode: bool = False,
    ) -> AttentionPlanner:
        """A planner for ``(window, full)`` wrapper pairs.

        ``prefill`` and ``decode`` are pairs or ``None``; raises as the constructor does.
        """
        return cls(
            Layout.SLIDING_WINDOW,
            prefill=prefill,
            ragged=ragged,
            decode=decode,
            window_left=window_left,
            settings=settings,
            capabilities=capabilities,
            fast_decode=fast_decode,
        )

    @classmethod
    def cross_attention(
        cls,
        *,
        prefill: tuple[Any, Any] | None = None,
        ragged: Any = None,
        decode: tuple[Any, Any] | None = None,
        settings: Settings | None = None,
        capabilities: Capabilities | None = None,
        fast_decode: bool = False,
    ) -> AttentionPlanner:
        """A planner for ``(self-attention, cross-attention)`` wrapper pairs.

        ``prefill`` and ``decode`` are pairs or ``None``; raises as the constructor does.
        """
        return cls(
            Layout.CROSS_ATTENTION,
            prefill=prefill,
            ragged=ragged,
            decode=decode,
            settings=settings,
            capabilities=capabilities,
            fast_decode=fast_decode,
        )

    # ------------------------------------------------------------------------ per step

    @property
    def targets(self) -> tuple[PlanTarget, ...]:
        """Every wrapper this planner drives, with the keyword arguments it adds to its plans."""
        ragged = () if self._ragged is None else (self._ragged,)
        return (*self._prefill, *ragged, *self._decode)

    def decode_spans(
        self, seq_lens: Tensor, encoder_lens: Tensor | None = None
    ) -> tuple[KvSpan, ...]:
        """The KV span of each decode wrapper, in :attr:`Layout.roles` order.

        Parameters
        ----------
        seq_lens
            Tokens per request including the one being decoded.
        encoder_lens
            Encoder tokens per request (cross-attention only; ignored otherwise).

        Raises
        ------
        PlannerConfigError
            A length is not a 1-D integer tensor, ``encoder_lens`` differs from
            ``seq_lens`` in shape or device, or a cross-attention planner got no
            ``encoder_lens``.
        """
        check_lens("seq_lens", seq_lens)
        if encoder_lens is not None:
            check_lens("encoder_lens", encoder_lens, seq_lens)
        return self._spans(seq_lens, None, encoder_lens, False)

    def prefill_spans(
        self,
        seq_lens: Tensor,
        prefix_lens: Tensor,
        encoder_lens: Tensor | None = None,
        *,
        ragged: bool = False,
    ) -> tuple[KvSpan, ...]:
        """The KV span of each paged prefill wrapper, in :attr:`Layout.roles` order.

        Parameters
        ----------
        seq_lens
            Tokens per request after this step.
        prefix_lens
            Tokens per request already cached.
        encoder_lens
            Encoder tokens per request (cross-attention only).
        ragged
            The ragged wrapper covers the new tokens in this step, so the paged wrappers
            cover the cached prefix only.

        Raises
        ------
        PlannerConfigError
            A length is not a 1-D integer tensor, ``prefix_lens`` or ``encoder_lens``
            differs from ``seq_lens`` in shape or device, ``ragged`` is not a bool, or a
            cross-attention planner got no ``encoder_lens``.
        """
        check_lens("seq_lens", seq_lens)
        check_lens("prefix_lens", prefix_lens, seq_lens)
        if encoder_lens is not None:
            check_lens("encoder_lens", encoder_lens, seq_lens)
        check_ragged(ragged)
        return self._spans(seq_lens, prefix_lens, encoder_lens, ragged)

    def plan_prefill(self, paged: Sequence[PlanArgs], ragged: PlanArgs | None = None) -> None:
        """Plan every paged prefill wrapper (and the ragged one when ``ragged`` is given).

        Parameters
        ----------
        paged
            One :class:`PlanArgs` per paged prefill wrapper, in :attr:`Layout.roles` order.
        ragged
            The ragged wrapper's arguments, for a step that uses it.

        Raises
        ------
        PlannerConfigError
            ``paged`` is not a list or tuple of exactly one :class:`PlanArgs` per paged
            wrapper, ``ragged`` is neither ``None`` nor a :class:`PlanArgs`, or ``ragged``
            was given to a planner without a ragged wrapper. Raised before any wrapper is
            planned.
        """
        check_requests("prefill", self._prefill, paged, self.layout)
        if ragged is not None:
            require_instance(
                "ragged",
                ragged,
                PlanArgs,
                "a PlanArgs",
                optional=True,
                error=PlannerConfigError,
                fix="pass the ragged wrapper's arguments as PlanArgs(...)",
            )
            if self._ragged is None:
                raise PlannerConfigError(
                    explain(
                        "no ragged arguments",
                        "a planner without a ragged wrapper",
                        fix="build the planner with ragged=<wrapper>",
                    )
                )
            _call_plan(self._ragged, ragged)
        for slot, request in zip(self._prefill, paged, strict=True):
            _call_plan(slot, request)

    def plan_decode(self, decode: Sequence[PlanArgs], *, fast: bool = False) -> None:
        """Plan every decode wrapper.

        Parameters
        ----------
        decode
            One :class:`PlanArgs` per decode wrapper, in :attr:`Layout.roles` order.
        fast
            Plan through the release's ``flashinfer.decode.fast_decode_plan`` (a replay
            after a capture), with the same settings; needs ``fast_decode=True`` at build.

        Raises
        ------
        PlannerConfigError
            ``decode`` is not a list or tuple of exactly one :class:`PlanArgs` per decode
            wrapper, ``fast`` is not a bool, or ``fast=True`` on a planner built without
            ``fast_decode=True``. Raised before any wrapper is planned.
        """
        check_requests("decode", self._decode, decode, self.layout)
        if fast is False:
            for slot, request in zip(self._decode, decode, strict=True):
                _call_plan(slot, request)
            return
        require_bool("fast", fast, error=PlannerConfigError)
        if self._fast is None:
            raise PlannerConfigError(
                explain(
                    "a planner built with fast_decode=True for plan_decode(fast=True)",
                    "a planner built without it",
                    fix="build the planner with fast_decode=True (its release's fast plan is "
                    "checked then)",
                )
            )
        for slot, request in zip(self._decode, decode, strict=True):
            _call_fast_plan(self._fast, slot, request)

    def __repr__(self) -> str:
        return (
            f"AttentionPlanner({self.layout}, prefill={len(self._prefill)}, "
            f"ragged={self._ragged is not None}, decode={len(self._decode)}, "
            f"settings={self.settings})"
        )
