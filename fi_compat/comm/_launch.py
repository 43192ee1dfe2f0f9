"""How a checked call reaches FlashInfer: the paths bound to a workspace, FlashInfer's
arguments placed once, and the prepared call.

A call on a workspace passes the ten values of :class:`~fi_compat.comm._types.FusedCall`, always
by position and in its order (the protocols take them as ``*call: *FusedCall``, so
``mypy --strict`` refuses two swapped arguments of different types). Each API module makes a
:class:`Launcher`, which :func:`bind` turns into the workspace's ``run`` and ``prepare``
paths, each checking the call first (:func:`~fi_compat.comm._call_checks.make_validator`);
the launches are built by :func:`keyword_launch` and :func:`positional_launch`, with
positions placed once from the callable's own signature (:func:`positional_layout`), and the
prepared call (:class:`PreparedAllReduce`) by :func:`freeze_call`. The allreduce-fusion
guide, ``docs/guide/comm.md``, says why arguments go by position and when by keyword.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, Protocol, cast

from fi_compat.comm._call_checks import make_validator
from fi_compat.comm._sizes import Fit
from fi_compat.comm._types import FusedCall, Spec, Values
from fi_compat.errors import UnsupportedOperationError, explain

if TYPE_CHECKING:
    import torch
    from typing_extensions import Unpack

__all__ = [
    "LAUNCH_VALUES",
    "BoundCall",
    "Freeze",
    "Launch",
    "Launcher",
    "PositionalLayout",
    "PreparedAllReduce",
    "Preparer",
    "Runner",
    "arguments",
    "bind",
    "freeze_call",
    "keyword_launch",
    "positional_launch",
    "positional_launcher",
    "positional_layout",
    "table_freeze",
]

#: The names of what a launch has: :class:`FusedCall`'s fields, then the outputs as allocated
#: (which stand for the call's own, None when the caller left them to be allocated) and the
#: token count and hidden size of the call; in the order of ``(*call, norm_out, residual_out,
#: tokens, hidden)``.
LAUNCH_VALUES: tuple[str, ...] = (
    *FusedCall._fields,
    "norm_out",
    "residual_out",
    "tokens",
    "hidden",
)
#: Each name of :data:`LAUNCH_VALUES` -> its position (an output: the allocated one).
_POSITION = {name: position for position, name in enumerate(LAUNCH_VALUES)}


class Runner(Protocol):
    """One checked call: validate, allocate missing outputs, launch.

    Returns ``(norm_out, residual_out)``.
    """

    def __call__(self, *call: Unpack[FusedCall]) -> tuple[torch.Tensor, torch.Tensor]: ...


class Preparer(Protocol):
    """:class:`FusedCall`'s arguments, validated once -> ``(call, norm_out, residual_out)``,
    ``call`` launching on them with no arguments."""

    def __call__(
        self, *call: Unpack[FusedCall]
    ) -> tuple[Callable[[], Any], torch.Tensor, torch.Tensor]: ...


class Launch(Protocol):
    """One launch on validated tensors: the call, its outputs as allocated, the call's token
    count and hidden size (its own, which may differ from the workspace's)."""

    def __call__(
        self,
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Any: ...


class Freeze(Protocol):
    """:class:`Launch`'s arguments -> a zero-argument call that launches on them."""

    def __call__(
        self,
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Callable[[], Any]: ...


class Launcher(NamedTuple):
    """A launch for every call, and the same launch frozen on fixed arguments."""

    launch: Launch
    freeze: Freeze


class BoundCall(NamedTuple):
    """What a workspace runs: per call (:class:`Runner`) and prepared (:class:`Preparer`)."""

    run: Runner
    prepare: Preparer


def bind(spec: Spec, fit: Fit, launcher: Launcher) -> BoundCall:
    """The paths of a workspace whose every call goes to ``launcher``; ``fit`` says which
    call sizes the workspace serves."""
    validate = make_validator(spec, fit)
    launch, freeze = launcher

    def run(*call: Unpack[FusedCall]) -> tuple[torch.Tensor, torch.Tensor]:
        norm_out, residual_out, tokens, hidden = validate(call)
        launch(call, norm_out, residual_out, tokens, hidden)
        return norm_out, residual_out

    def prepare(*call: Unpack[FusedCall]) -> tuple[Callable[[], Any], torch.Tensor, torch.Tensor]:
        norm_out, residual_out, tokens, hidden = validate(call)
        return freeze(call, norm_out, residual_out, tokens, hidden), norm_out, residual_out

    return BoundCall(run, prepare)


def positional_launcher(launch: Launch) -> Launcher:
    """A :class:`Launcher` whose frozen call is ``launch`` with its arguments bound."""

    def freeze(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Callable[[], Any]:
        return functools.partial(launch, call, norm_out, residual_out, tokens, hidden)

    return Launcher(launch, freeze)


# ------------------------------------------------------------------ FlashInfer's parameters
#
# A table maps each parameter of a FlashInfer function, in call order, to what it takes: a
# name of LAUNCH_VALUES, or the name of one of the constants given with the table.


def arguments(
    table: Mapping[str, str],
    constants: Mapping[str, Any],
    call: Values,
    norm_out: torch.Tensor,
    residual_out: torch.Tensor,
    tokens: int,
    hidden: int,
) -> dict[str, Any]:
    """Every parameter of ``table`` by name, with its value (off the per-call path)."""
    values = (*call, norm_out, residual_out, tokens, hidden)
    return {
        name: constants[source] if source in constants else values[_POSITION[source]]
        for name, source in table.items()
    }


def table_freeze(
    function: Callable[..., Any], table: Mapping[str, str], constants: Mapping[str, Any]
) -> Freeze:
    """A freeze of ``function`` with the parameters of ``table`` (see :func:`freeze_call`)."""

    def freeze(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Callable[[], Any]:
        values = arguments(table, constants, call, norm_out, residual_out, tokens, hidden)
        return freeze_call(function, values)

    return freeze


def keyword_launch(
    function: Callable[..., Any], table: Mapping[str, str], constants: Mapping[str, Any]
) -> Launch:
    """A launch that calls ``function`` with the keywords of ``table``, in its order.

    A literal call of up to 15 keywords builds no dict, where ``function(**arguments)``
    would build one per call; so the call is compiled once from the table, the way
    :func:`collections.namedtuple` compiles its ``__new__``. The constants are the
    function's globals; the code's module is this one.
    """
    reserved = set(_POSITION) | {"call", "function"}
    if (
        len(table) > 15
        or not set(table.values()) <= set(_POSITION) | set(constants)
        or set(constants) & reserved
        or not all(n.isidentifier() and not keyword.iskeyword(n) for n in (*table, *constants))
    ):
        raise ValueError(f"not a table keyword_launch can compile: {dict(table)}")
    unpacked = ", ".join(
        "_" if name in ("norm_out", "residual_out") else name for name in FusedCall._fields
    )
    passed = ", ".join(f"{name}={source}" for name, source in table.items())
    source = (
        "def launch(call, norm_out, residual_out, tokens, hidden, /):\n"
        f"    {unpacked} = call\n"
        f"    return function({passed})\n"
    )
    namespace: dict[str, Any] = {**constants, "function": function, "__name__": __name__}
    exec(compile(source, f"<{__name__}.keyword_launch>", "exec"), namespace)
    return cast("Launch", namespace["launch"])


def positional_launch(
    function: Callable[..., Any],
    layout: PositionalLayout,
    table: Mapping[str, str],
    constants: Mapping[str, Any],
) -> Launch:
    """A launch that calls ``function`` by position, as ``layout`` places ``table``'s names.

    The constants and defaults are placed once; each call picks its arguments from them and
    ``(*call, norm_out, residual_out, tokens, hidden)`` with one :func:`operator.itemgetter`.
    """
    template, slots = layout
    fixed = list(template)
    where = list(range(len(template)))
    for slot, source in zip(slots, table.values(), strict=True):
        if source in constants:
            fixed[slot] = constants[source]
        else:
            where[slot] = len(template) + _POSITION[source]
    if len(where) < 2:  # itemgetter of one index returns the item, not a tuple
        raise ValueError("positional_launch needs at least two parameters")
    pick = operator.itemgetter(*where)
    placed = tuple(fixed)

    def launch(
        call: Values,
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
        hidden: int,
        /,
    ) -> Any:
        return function(*pick((*placed, *call, norm_out, residual_out, tokens, hidden)))

    return launch


# ------------------------------------------------------------------- placing arguments once

#: ``(template, slots)``: the positional arguments with the callable's defaults filled in
#: and None at the named positions, and the position of each name, in the given order.
PositionalLayout = tuple[list[Any], tuple[int, ...]]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def positional_layout(
    function: Callable[..., Any], names: Sequence[str]
) -> PositionalLayout | None:
    """Where each of ``names`` goes in a positional call of ``function``, or None.

    Parameters left out before the last named one are filled with their defaults (the
    very objects the signature holds, so the call is the same as leaving them out). None
    when the callable's own signature is unreadable or is a forwarding ``(*args,
    **kwargs)``, or when a name is keyword-only or unknown, or a parameter without a
    default would be left out: call by keyword then.
    """
    try:
        parameters = inspect.signature(function, follow_wrapped=False).parameters.values()
    except (TypeError, ValueError):
        return None
    wanted = set(names)
    template: list[Any] = []
    position: dict[str, int] = {}
    for parameter in parameters:
        if len(position) == len(wanted):
            break
        if parameter.kind not in _POSITIONAL:
            return None
        if parameter.name in wanted:
            position[parameter.name] = len(template)
            template.append(None)
        elif parameter.default is not inspect.Parameter.empty:
            template.append(parameter.default)
        else:
            return None
    if len(position) != len(wanted) or len(wanted) != len(names):
        return None
    return template, tuple(position[name] for name in names)


def freeze_call(function: Callable[..., Any], arguments: Mapping[str, Any]) -> Callable[[], Any]:
    """A zero-argument call that runs ``function(**arguments)``.

    Positional where :func:`positional_layout` allows (the cheapest call), by keyword
    otherwise; the result is a :func:`functools.partial` either way.
    """
    layout = positional_layout(function, tuple(arguments))
    if layout is None:
        return functools.partial(function, **arguments)
    template, slots = layout
    for slot, value in zip(slots, arguments.values(), strict=True):
        template[slot] = value
    return functools.partial(function, *template)


# ------------------------------------------------------------------------ the prepared call
#
# FusionWorkspace.prepare checks a set of tensors the way every allreduce_residual_rmsnorm
# call does and returns a PreparedAllReduce: a zero-argument call of the installed release's
# function with every argument already in place (freeze_call). It is meant for static
# buffers, the ones an engine fills before each step and captures in a CUDA graph. Calling
# it reads no tensor attribute, builds nothing and inspects nothing.


class PreparedAllReduce:
    """One allreduce + residual add + RMSNorm, checked once, ready to launch.

    Made by :meth:`FusionWorkspace.prepare <fi_compat.comm.FusionWorkspace.prepare>`.
    Calling it launches on the tensors it was prepared with, whatever they hold at that
    moment, and returns ``(norm_out, residual_out)``; it takes no arguments and does no
    per-call work besides the launch. After the workspace's ``destroy()`` a call raises
    :class:`~fi_compat.errors.WorkspaceDestroyedError`.

    The contract of static buffers: the tensors keep their shape, strides and storage.
    Writing new values into them is what they are for; ``resize_()``, ``set_()`` or
    ``as_strided_()`` on one of them after ``prepare`` is not detected.

    .. versionadded:: 0.2.0

    Attributes
    ----------
    workspace
        The workspace the call runs on.
    tokens
        The token count the tensors were checked for.
    norm_out, residual_out
        The output buffers (preallocated by the caller, or allocated by ``prepare``).
    """

    __slots__ = ("__weakref__", "_launch", "_outputs", "tokens", "workspace")

    def __init__(
        self,
        workspace: Any,
        launch: Callable[[], Any],
        norm_out: torch.Tensor,
        residual_out: torch.Tensor,
        tokens: int,
    ) -> None:
        self.workspace = workspace
        self.tokens = tokens
        self._launch = launch
        self._outputs = (norm_out, residual_out)

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        self._launch()
        return self._outputs

    @property
    def norm_out(self) -> torch.Tensor:
        """The normalized output, ``rmsnorm(residual_out) * weight``."""
        return self._outputs[0]

    @property
    def residual_out(self) -> torch.Tensor:
        """The residual output, ``allreduce(input) + residual``."""
        return self._outputs[1]

    def __copy__(self) -> PreparedAllReduce:
        """Another call on the same tensors and workspace, revoked with it by ``destroy()``."""
        copy = PreparedAllReduce(self.workspace, self._launch, *self._outputs, self.tokens)
        self.workspace._prepared.add(copy)
        return copy

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise _not_copyable("copy.deepcopy")

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        raise _not_copyable("pickle")

    def _revoke(self, refuse: Callable[[], Any]) -> None:
        """Called by the workspace's ``destroy()``: every later call runs ``refuse``."""
        self._launch = refuse

    def __repr__(self) -> str:
        return f"PreparedAllReduce(tokens={self.tokens}, workspace={self.workspace!r})"


def _not_copyable(operation: str) -> UnsupportedOperationError:
    return UnsupportedOperationError(
        explain(
            "a PreparedAllReduce to be copied with copy.copy (the copy launches on the same "
            "tensors and workspace)",
            f"{operation} of one: it would need new tensors checked and a workspace copied",
            fix="prepare the call again with workspace.prepare(...) on the new tensors",
        )
    )
