"""FlashInfer's workspace interface on every ``FusionWorkspace``, legacy and reference included.

Engines written against FlashInfer's workspace objects read ``backend`` and
``metadata["use_fp32_lamport"]``, ask ``is_buffer_size_sufficient(...)`` before a fused call
(inspecting its signature for ``use_oneshot`` or ``strategy``), and call
``checkpoint_prepare()``/``checkpoint_restore(backend)``, catching ``NotImplementedError``.
On a legacy (0.5.x) workspace, SGLang's factory call passes ``gpus_per_node=`` and a
``comm_backend`` with its ``group``; those map to what the legacy API does.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

import fi_compat.comm as comm
from fi_compat import get_capabilities
from fi_compat.comm._interface import buffer_check, checkpoint_unsupported, legacy_metadata
from fi_compat.comm._sizes import exact_fit, measured, product_fit, rule_of
from fi_compat.comm._types import Spec
from fi_compat.errors import (
    CapabilityMissingError,
    CheckpointUnsupportedError,
    InvalidArgumentError,
)
from fi_compat.report import REQUIREMENT_NAMES
from fi_compat.testing import available_releases, fake_flashinfer, load_release
from tests.support import release_classes

LEGACY_FACTORY = "trtllm_create_ipc_workspace_for_all_reduce_fusion"
RELEASES = [v for v in available_releases() if load_release(v).legacy_api]
#: The releases the tests below run on: the first and last of each 'comm' class
#: (tests/support/release_classes.py; every one with --all-releases).
SWEPT = release_classes.releases("comm", RELEASES)
LEGACY_ONLY = [v for v in RELEASES if not load_release(v).unified_api]
WITH_METADATA = [
    v for v in LEGACY_ONLY if load_release(v).accepts(LEGACY_FACTORY, "create_metadata")
]
WITHOUT_METADATA = [v for v in LEGACY_ONLY if v not in WITH_METADATA]
TOKENS, HIDDEN, DTYPE = 16, 64, torch.bfloat16
SPEC = Spec(2, 0, TOKENS, HIDDEN, DTYPE, -1)
PRODUCT = product_fit(SPEC, "trtllm", "a test's")


class Group:
    """Stands in for a torch.distributed ProcessGroup (only its identity matters)."""


@pytest.fixture(params=SWEPT)
def workspace(request: pytest.FixtureRequest) -> Iterator[comm.FusionWorkspace]:
    with fake_flashinfer(request.param):
        created = comm.create_allreduce_fusion_workspace(
            world_size=2, rank=0, max_token_num=TOKENS, hidden_dim=HIDDEN, dtype=DTYPE
        )
        yield created
        created.destroy()


# ------------------------------------------------------------------ is_buffer_size_sufficient


#: Shapes besides the workspace's own, and whether each fits, per rule of the workspace's
#: fit (``bytes``: what the release's own MNNVL check answers).
_SHAPES: dict[tuple[int, int], dict[str, bool]] = {
    (TOKENS + 1, HIDDEN): {"exact": False, "product": False},  # over max_token_num x hidden
    (TOKENS, HIDDEN * 2): {"exact": False, "product": False},
    (TOKENS // 2, HIDDEN * 2): {"exact": False, "product": True},  # wider, fits the product
    (TOKENS, HIDDEN // 2): {"exact": False, "product": True},  # narrower
    (TOKENS * 2, HIDDEN // 2): {"exact": False, "product": True},
    (1, HIDDEN * TOKENS): {"exact": False, "product": True},
    (TOKENS * 1000, HIDDEN): {"exact": False, "product": False, "bytes": False},
}


def test_the_size_check_says_what_a_call_may_carry(workspace: comm.FusionWorkspace) -> None:
    check = workspace.is_buffer_size_sufficient
    parameters = list(inspect.signature(check).parameters)
    assert parameters[:4] == ["tp_size", "num_tokens", "hidden_dim", "dtype"]
    assert check(tp_size=2, num_tokens=TOKENS, hidden_dim=HIDDEN, dtype=DTYPE) is True
    assert check(2, 1, HIDDEN, DTYPE) is True
    for tp_size, tokens, hidden, dtype in [
        (4, TOKENS, HIDDEN, DTYPE),  # another world
        (2, TOKENS, HIDDEN, torch.float16),  # another dtype: fi-compat's call would refuse
        (2, 0, HIDDEN, DTYPE),  # no tokens: refused by the call
    ]:
        assert check(tp_size, tokens, hidden, dtype) is False, (tp_size, tokens, hidden, dtype)
    rule = workspace.fit.rule
    kind = "legacy" if workspace.api == "legacy" else workspace.backend
    release = get_capabilities().flashinfer.version  # the fake's
    assert release is not None
    assert (rule, workspace.fit.feature) == (rule_of(release, kind)[0], f"per_call_sizes:{kind}")
    facts = measured().get(release, {}).get(kind, {})
    if facts.get("check") in ("product", "bytes"):  # measured: never only the creation size
        assert rule == facts["check"]
    for (tokens, hidden), fits in _SHAPES.items():
        if rule == "bytes" and rule not in fits:  # the release's own check answers
            expected = workspace.native.is_buffer_size_sufficient(2, tokens, hidden, DTYPE)
        else:
            expected = fits[rule]
        assert check(2, tokens, hidden, DTYPE) is expected, (rule, tokens, hidden)
    workspace.destroy()
    assert workspace.is_buffer_size_sufficient(2, 1, HIDDEN, DTYPE) is False


@pytest.mark.parametrize(
    "bad",
    [
        {"tp_size": "2"},
        {"tp_size": 2.0},
        {"tp_size": True},
        {"num_tokens": None},
        {"num_tokens": -1},
        {"hidden_dim": 0},
        {"dtype": "bfloat16"},
        {"dtype": None},
    ],
    ids=repr,
)
@pytest.mark.parametrize("version", SWEPT)
def test_the_size_check_refuses_malformed_arguments(bad: dict[str, Any], version: str) -> None:
    """Typed, and before FlashInfer's own check is asked (a good call does ask it)."""
    arguments: dict[str, Any] = {
        "tp_size": 2,
        "num_tokens": 1,
        "hidden_dim": HIDDEN,
        "dtype": DTYPE,
    }
    with fake_flashinfer(version) as fake:
        workspace = comm.create_allreduce_fusion_workspace(
            world_size=2, rank=0, max_token_num=TOKENS, hidden_dim=HIDDEN, dtype=DTYPE
        )
        fake.clear_calls()
        with pytest.raises(InvalidArgumentError):
            workspace.is_buffer_size_sufficient(**{**arguments, **bad})
        assert not fake.calls
        assert workspace.is_buffer_size_sufficient(**arguments) is True
        asked = [call.name for call in fake.calls]
        assert asked == (
            [f"{type(workspace.native).__name__}.is_buffer_size_sufficient"]
            if workspace.api == "unified"
            else []
        )
        workspace.destroy()


def test_the_size_check_keeps_missing_arguments_a_type_error(
    workspace: comm.FusionWorkspace,
) -> None:
    with pytest.raises(TypeError):
        workspace.is_buffer_size_sufficient(2, 1)


class _Mnnvl:
    """FlashInfer's MNNVL check shape: ``strategy=`` instead of ``use_oneshot=``."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls: list[tuple[Any, ...]] = []

    def is_buffer_size_sufficient(
        self, tp_size: int, num_tokens: int, hidden_dim: int, dtype: Any, strategy: Any = "auto"
    ) -> bool:
        self.calls.append((tp_size, num_tokens, hidden_dim, dtype, strategy))
        return self.answer


@pytest.mark.parametrize("answer", [True, False])
def test_a_unified_check_keeps_the_release_signature_and_answer(answer: bool) -> None:
    native = _Mnnvl(answer)
    check = buffer_check(SPEC, PRODUCT, native.is_buffer_size_sufficient, None)
    assert inspect.signature(check) == inspect.signature(native.is_buffer_size_sufficient)
    assert check(2, 4, HIDDEN, DTYPE, strategy="oneshot") is answer
    assert native.calls == [(2, 4, HIDDEN, DTYPE, "oneshot")]
    # Where fi-compat would refuse the call, FlashInfer is not asked.
    assert check(2, 4, HIDDEN, torch.float16) is False
    assert check(2, TOKENS + 1, HIDDEN, DTYPE) is False  # over tokens x hidden
    assert len(native.calls) == 1
    with pytest.raises(TypeError):
        check(2, 4, HIDDEN, DTYPE, use_oneshot=True)  # not this release's keyword
    assert len(native.calls) == 1


def test_a_unified_check_of_unknown_shape_is_the_release_own() -> None:
    def is_buffer_size_sufficient(*args: Any) -> bool:
        return True

    assert buffer_check(SPEC, PRODUCT, is_buffer_size_sufficient, None) is is_buffer_size_sufficient


def test_the_legacy_check_is_flashinfer_metadata_check() -> None:
    """As FlashInfer's TRT-LLM workspace: the world, tokens x hidden, the Lamport dtype."""
    metadata = {"tp_size": 2, "max_token_num": 8, "hidden_dim": HIDDEN, "use_fp32_lamport": False}
    check = buffer_check(SPEC, exact_fit(SPEC, "legacy", "not measured"), None, metadata)
    assert list(inspect.signature(check).parameters) == [
        "tp_size",
        "num_tokens",
        "hidden_dim",
        "dtype",
        "use_oneshot",
    ]
    assert check(2, 8, HIDDEN, DTYPE) is True
    assert check(2, 9, HIDDEN, DTYPE, use_oneshot=True) is False  # the factory made room for 8
    metadata["use_fp32_lamport"] = True
    assert check(2, 8, HIDDEN, DTYPE) is False


# ------------------------------------------------------------------------------- metadata


@pytest.mark.parametrize("version", WITH_METADATA)
def test_legacy_metadata_is_the_factory_own(version: str) -> None:
    with fake_flashinfer(version) as fake:
        workspace = comm.create_workspace(2, 1, TOKENS, HIDDEN, DTYPE, device="cpu")
        (created,) = fake.calls_to(LEGACY_FACTORY)
        assert created.arguments["create_metadata"] is True
        assert workspace.api == "legacy"
        assert workspace.backend == "trtllm"
        metadata = workspace.metadata
        assert metadata["use_fp32_lamport"] is False
        assert (metadata["tp_size"], metadata["tp_rank"]) == (2, 1)
        assert (metadata["max_token_num"], metadata["hidden_dim"]) == (TOKENS, HIDDEN)
        workspace.destroy()


@pytest.mark.parametrize("version", WITHOUT_METADATA[:1] + WITHOUT_METADATA[-1:])
def test_legacy_metadata_is_computed_where_the_factory_has_none(version: str) -> None:
    with fake_flashinfer(version) as fake:
        workspace = comm.create_workspace(2, 0, TOKENS, HIDDEN, torch.float32, device="cpu")
        (created,) = fake.calls_to(LEGACY_FACTORY)
        assert "create_metadata" not in created.arguments
        assert workspace.metadata == {
            "tp_rank": 0,
            "tp_size": 2,
            "max_token_num": TOKENS,
            "hidden_dim": HIDDEN,
            "use_fp32_lamport": True,
        }


def test_legacy_metadata_prefers_a_complete_dict_and_fills_a_partial_one() -> None:
    own = {"tp_rank": 0, "tp_size": 2, "max_token_num": 4, "hidden_dim": 8, "use_fp32_lamport": 0}
    assert legacy_metadata(SPEC, ([], None, own)) is own
    partial = legacy_metadata(SPEC, ([], None, {"buffer_size": 123}))
    assert partial["buffer_size"] == 123
    assert partial["max_token_num"] == TOKENS
    assert legacy_metadata(SPEC, ([], None))["use_fp32_lamport"] is False


def test_reference_workspaces_have_no_metadata() -> None:
    workspace = comm.create_workspace(1, 0, TOKENS, HIDDEN, DTYPE, device="cpu", api="reference")
    with pytest.raises(AttributeError):
        workspace.metadata  # noqa: B018
    assert getattr(workspace, "mc_ptr", 0) == 0  # vLLM's probe for MNNVL multicast


# ----------------------------------------------------------------------------- checkpoints


def test_checkpointing_is_not_implemented_where_buffers_cannot_detach(
    workspace: comm.FusionWorkspace,
) -> None:
    native = getattr(workspace.native, "checkpoint_prepare", None)
    if workspace.api == "unified" and callable(native):
        # FlashInfer's own method, behind a check that the workspace is alive
        assert workspace.checkpoint_prepare.__wrapped__ == native  # type: ignore[attr-defined]
        return
    for call in (workspace.checkpoint_prepare, lambda: workspace.checkpoint_restore(object())):
        with pytest.raises(NotImplementedError, match="resident") as info:
            call()
        assert workspace.api in str(info.value)
        assert isinstance(info.value, CheckpointUnsupportedError)
        assert info.value.feature in REQUIREMENT_NAMES  # fi-compat report --require names it


def test_the_unsupported_checkpoint_names_itself() -> None:
    unsupported = checkpoint_unsupported("legacy", "trtllm", "checkpoint_restore")
    assert unsupported.__name__ == "checkpoint_restore"
    with pytest.raises(NotImplementedError, match="checkpoint_restore"):
        unsupported(object())


# ---------------------------------------------------- factory options on the legacy API


def _legacy(version: str, **options: Any) -> tuple[comm.FusionWorkspace, dict[str, Any]]:
    with fake_flashinfer(version) as fake:
        workspace = comm.create_allreduce_fusion_workspace(
            world_size=2, rank=0, max_token_num=TOKENS, hidden_dim=HIDDEN, dtype=DTYPE, **options
        )
        (created,) = fake.calls_to(LEGACY_FACTORY)
        workspace.destroy()
        return workspace, dict(created.arguments)


@pytest.mark.parametrize("version", LEGACY_ONLY[-1:])
@pytest.mark.parametrize("gpus_per_node", [2, 8])
def test_gpus_per_node_within_one_node_is_what_the_legacy_api_does(
    version: str, gpus_per_node: int
) -> None:
    workspace, arguments = _legacy(version, gpus_per_node=gpus_per_node)
    assert "gpus_per_node" not in arguments
    assert any(f"gpus_per_node={gpus_per_node} not passed" in d for d in workspace.decisions)


@pytest.mark.parametrize("version", LEGACY_ONLY[-1:])
def test_a_group_beyond_one_node_is_refused_on_the_legacy_api(version: str) -> None:
    with fake_flashinfer(version) as fake:
        with pytest.raises(CapabilityMissingError, match="multi-node") as info:
            comm.create_allreduce_fusion_workspace(
                world_size=2,
                rank=0,
                max_token_num=TOKENS,
                hidden_dim=HIDDEN,
                dtype=DTYPE,
                gpus_per_node=1,
            )
        assert info.value.introduced_in == "0.6.0"
        assert not fake.calls_to(LEGACY_FACTORY)


@pytest.mark.parametrize("version", LEGACY_ONLY[-1:])
def test_force_oneshot_support_is_recorded_not_refused(version: str) -> None:
    workspace, arguments = _legacy(version, force_oneshot_support=True)
    assert "force_oneshot_support" not in arguments
    assert any("force_oneshot_support not passed" in d for d in workspace.decisions)


class _Backend:
    """A ``CommBackend`` that says its group as FlashInfer's ``TorchDistBackend`` does."""

    def __init__(self, group: Any) -> None:
        self._group = group


class _Opaque:
    """A ``CommBackend`` of the engine's own that does not say its group."""


@pytest.mark.parametrize(
    "version", [v for v in LEGACY_ONLY if load_release(v).accepts(LEGACY_FACTORY, "group")][-1:]
)
def test_a_comm_backend_goes_with_its_group(version: str) -> None:
    group = Group()
    for backend in (_Backend(group), _Opaque()):
        workspace, arguments = _legacy(version, comm_backend=backend, group=group)
        assert arguments["group"] is group
        assert "comm_backend" not in arguments
        assert any("comm_backend not passed" in d for d in workspace.decisions)
    with fake_flashinfer(version) as fake:
        for options in (
            {"comm_backend": _Opaque()},
            {"comm_backend": _Backend(Group()), "group": group},
        ):
            with pytest.raises(CapabilityMissingError, match="comm_backend"):
                comm.create_allreduce_fusion_workspace(
                    world_size=2,
                    rank=0,
                    max_token_num=TOKENS,
                    hidden_dim=HIDDEN,
                    dtype=DTYPE,
                    **options,
                )
        assert not fake.calls_to(LEGACY_FACTORY)


@pytest.mark.parametrize("version", LEGACY_ONLY[-1:])
def test_backends_besides_trtllm_stay_refused_on_the_legacy_api(version: str) -> None:
    with fake_flashinfer(version), pytest.raises(CapabilityMissingError, match="mnnvl"):
        comm.create_allreduce_fusion_workspace(
            backend="mnnvl",
            world_size=2,
            rank=0,
            max_token_num=TOKENS,
            hidden_dim=HIDDEN,
            dtype=DTYPE,
        )
