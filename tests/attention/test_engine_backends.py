"""SGLang 0.5.23's and vLLM 0.33.0's own FlashInfer attention backends under the fake.

The modules are read from the engines' wheels and run as they are
(:mod:`tests.support.engine_modules`): every ``flashinfer`` name they import comes from
``fi_compat.testing.fake_flashinfer``, nothing of FlashInfer from outside the kit. The
fake's kernel-plan log shows what each planning path hands the kernel.

SGLang's backend is planned on every path of ``init_forward_metadata`` and
``init_forward_metadata_out_graph`` (capture and replay) and of its multi-step draft backend
(:data:`tests.support.sglang_backend.PATHS`), with and without the integration
``docs/migration/sglang.md`` describes; the guide's table of those paths is checked against
what the run shows, so a stale row fails here.

The wheels are downloaded once into the release cache (:mod:`tests.support.engine_wheels`);
where one is not cached and the registry cannot be reached the tests skip, saying so.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

from fi_compat.testing import fake_flashinfer
from tests.support.engine_modules import ENGINES, LAZY_ZEROS_BYTES, CpuTorch, engine_wheel
from tests.support.sglang_backend import (
    DECODE_TILE,
    PATHS,
    PREFILL_TILE,
    Layout,
    Path_,
    outcome,
    sglang_backend,
)
from tests.support.vllm_backend import Batch, build, forward, vllm_builder
from tools.releases import RegistryUnreachableError

#: The releases SGLang 0.5.23 pins (0.7.2), vLLM 0.33.0 pins (0.7.2.post1), and one 0.6.x
#: release earlier SGLang versions ran on.
RELEASES = ("0.6.5", "0.7.2", "0.7.2.post1")
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "migration" / "sglang.md"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _wheel(name: str) -> Path:
    try:
        return engine_wheel(ENGINES[name])
    except RegistryUnreachableError as error:  # pragma: no cover - depends on the network
        pytest.skip(f"the {name} wheel is not here and the registry is unreachable: {error}")


@pytest.fixture(scope="module")
def sglang_wheel() -> Path:
    return _wheel("sglang")


# --------------------------------------------------------------------------- SGLang


@pytest.mark.parametrize("release", RELEASES)
def test_sglang_backend_imports_every_flashinfer_name_from_the_fake(
    sglang_wheel: Path, release: str
) -> None:
    with (
        fake_flashinfer(release) as fake,
        sglang_backend(sglang_wheel, deterministic=False, integration=False) as (module, backend),
    ):
        import flashinfer
        import flashinfer.cascade

        assert module.merge_state is flashinfer.cascade.merge_state
        assert module.fast_decode_plan is flashinfer.fast_decode_plan
        for name in ("BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper"):
            assert getattr(module, name) is getattr(flashinfer, name)
        # The wrappers SGLang builds are the fake's, and answer what SGLang reads of them.
        assert type(backend.decode_wrappers[0]).__module__ == "flashinfer.decode"
        assert backend.decode_wrappers[0].is_cuda_graph_enabled is False
        assert fake.calls[0].name == "BatchPrefillWithRaggedKVCacheWrapper.__init__"


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.name.replace(" ", "-"))
def test_sglang_plans_every_path_with_its_own_split_settings(
    sglang_wheel: Path, release: str, path: Path_
) -> None:
    """Without determinism SGLang plans as it always has: no fixed split, split-KV on."""
    with fake_flashinfer(release) as fake:
        found = outcome(fake, sglang_wheel, path, deterministic=False, integration=False)
    assert "refused" not in found
    assert "`-1, False`" in found
    assert "True`" not in found


def _carried(found: str) -> list[tuple[str, int, bool]]:
    return [
        (kind, int(fixed), disable == "True")
        for kind, fixed, disable in re.findall(r"(\w+) `(-?\d+), (True|False)`", found)
    ]


#: Every path on every layout; SGLang's multi-step draft backend builds full-attention
#: backends only (its buffers hold one wrapper's indices).
LAYOUT_PATHS = [
    pytest.param(layout, path, id=f"{layout.value}-{path.name.replace(' ', '-')}")
    for layout in Layout
    for path in PATHS
    if layout is Layout.FULL or not path.method.startswith("draft")
]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("layout", "path"), LAYOUT_PATHS)
def test_sglang_integrated_plans_deterministically_or_is_refused(
    sglang_wheel: Path, release: str, layout: Layout, path: Path_
) -> None:
    """With the guide's integration, every deterministic path either hands the kernel a
    batch-independent split (a fixed size, or split-KV off) or is refused, typed."""
    with fake_flashinfer(release) as fake:
        found = outcome(
            fake, sglang_wheel, path, deterministic=True, integration=True, layout=layout
        )
    if found.startswith("refused"):
        assert found in (
            "refused: `PlannerConfigError`",
            "refused: `DeterminismUnavailableError`",
        )
        return
    assert "dropped" not in found
    assert "unmeasured" not in found
    carried = _carried(found)
    assert carried
    for kind, fixed, disable in carried:
        if kind == "decode" and path.method in ("eager", "draft_eager"):
            assert (fixed, disable) == (DECODE_TILE, False)
        elif kind == "ragged" or (kind == "paged" and path.method == "eager"):
            assert (fixed, disable) == (PREFILL_TILE, False)
        else:  # a CUDA-graph wrapper: the CUDA-graph pair
            assert (fixed, disable) == (-1, True)


def _guide_rows() -> dict[str, list[str]]:
    """The guide's table of SGLang's planning paths: path name -> its other cells."""
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("<!-- sglang-paths: start -->")
    end = text.index("<!-- sglang-paths: end -->")
    rows: dict[str, list[str]] = {}
    for line in text[start:end].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0] not in ("path", "---"):
            rows[cells[0]] = cells[1:]
    return rows


def test_the_guide_lists_every_path_with_what_the_run_shows(sglang_wheel: Path) -> None:
    rows = _guide_rows()
    assert set(rows) == {path.name for path in PATHS}
    for path in PATHS:
        with fake_flashinfer("0.7.2") as fake:
            integrated = outcome(fake, sglang_wheel, path, deterministic=True, integration=True)
        with fake_flashinfer("0.7.2") as fake:
            as_is = outcome(fake, sglang_wheel, path, deterministic=True, integration=False)
        assert rows[path.name][0] == as_is, path.name
        assert rows[path.name][1] == integrated, path.name


def test_without_the_integration_determinism_is_lost_on_the_paths_the_guide_names(
    sglang_wheel: Path,
) -> None:
    """The guide's reasons, shown on SGLang's own code: unwrapped, the dLLM CUDA-graph path
    plans the ragged wrapper with ``auto`` (settings dropped), and the CUDA-graph prefill
    paths keep split-KV on."""
    dllm = next(path for path in PATHS if path.name == "CUDA-graph dLLM extend capture")
    verify = next(path for path in PATHS if path.name == "CUDA-graph target verify capture")
    with fake_flashinfer("0.7.2") as fake:
        assert "ragged dropped" in outcome(
            fake, sglang_wheel, dllm, deterministic=True, integration=False
        )
    with fake_flashinfer("0.7.2") as fake:
        assert outcome(fake, sglang_wheel, verify, deterministic=True, integration=False) == (
            "paged `-1, False`"
        )


def test_the_integrated_ragged_wrapper_is_fa2_and_wrapped(sglang_wheel: Path) -> None:
    with (
        fake_flashinfer("0.7.2.post1"),
        sglang_backend(sglang_wheel, deterministic=True, integration=True) as (_, backend),
    ):
        ragged = backend.prefill_wrapper_ragged
        assert ragged._backend == "fa2"
        assert type(ragged).__module__ == "fi_compat.attention._wrapper"


# --------------------------------------------------------------------------- vLLM


@pytest.fixture(scope="module")
def vllm_wheel() -> Path:
    return _wheel("vllm")


def _plans(fake: Any, start: int) -> list[tuple[str, str, int | None, bool | None, bool]]:
    return [
        (plan.family, plan.backend, plan.fixed_split_size, plan.disable_split_kv, plan.dropped)
        for plan in fake.kernel_plans[start:]
    ]


@pytest.mark.parametrize("release", ["0.7.2", "0.7.2.post1"])
def test_vllm_builder_imports_every_flashinfer_name_from_the_fake(
    vllm_wheel: Path, release: str
) -> None:
    with (
        fake_flashinfer(release),
        vllm_builder(vllm_wheel, batch_invariant=False) as (
            module,
            builder,
        ),
    ):
        import flashinfer
        import flashinfer.utils

        assert module.get_seq_lens is flashinfer.get_seq_lens
        assert module.fast_decode_plan is flashinfer.fast_decode_plan
        assert module.FP4Tensor is flashinfer.utils.FP4Tensor
        assert builder.decode_fixed_split_size == -1


def test_vllm_names_what_an_older_release_lacks(vllm_wheel: Path) -> None:
    """vLLM 0.33.0 imports names 0.6.5 does not have: the fake raises the ImportError the
    real release raises, naming the first missing one."""
    with (
        fake_flashinfer("0.6.5"),
        pytest.raises(ImportError, match="cannot import name"),
        vllm_builder(vllm_wheel, batch_invariant=False),
    ):
        pass  # pragma: no cover - the import fails


@pytest.mark.parametrize("release", ["0.7.2", "0.7.2.post1"])
@pytest.mark.parametrize("cudagraph", [False, True], ids=["eager", "cuda-graph"])
def test_vllm_build_plans_prefill_and_decode(
    vllm_wheel: Path, release: str, cudagraph: bool
) -> None:
    """vLLM's own ``build``: decode through ``fast_plan_decode`` (``plan`` first, then
    ``fast_decode_plan`` on a CUDA-graph wrapper), prefill through ``plan``, with vLLM's
    normal pair ``(-1, False)``; its prefill wrapper is ``auto``, which drops them."""
    with (
        fake_flashinfer(release) as fake,
        vllm_builder(vllm_wheel, batch_invariant=False, cudagraph=cudagraph) as (_, builder),
    ):
        start = len(fake.kernel_plans)
        build(builder, Batch(4, 0))
        build(builder, Batch(4, 0))
        build(builder, Batch(2, 3))
        plans = _plans(fake, start)
    second = "fast_decode_plan" if cudagraph else "BatchDecodeWithPagedKVCacheWrapper"
    assert [plan[0] for plan in plans] == [
        "BatchDecodeWithPagedKVCacheWrapper",
        second,
        "BatchPrefillWithPagedKVCacheWrapper",
        "BatchDecodeWithPagedKVCacheWrapper",
    ]
    for family, backend, fixed, disable, dropped in plans:
        assert backend == "auto"
        assert dropped or (fixed, disable) == (-1, False), family


@pytest.mark.parametrize("release", ["0.7.2", "0.7.2.post1"])
@pytest.mark.parametrize("cudagraph", [False, True], ids=["eager", "cuda-graph"])
def test_vllm_batch_invariant_prefill_loses_its_settings_without_the_integration(
    vllm_wheel: Path, release: str, cudagraph: bool
) -> None:
    """``VLLM_BATCH_INVARIANT=1`` as vLLM 0.33.0 is: decode gets ``2048, True``, but the
    ``auto`` prefill wrapper drops ``4096, True`` at the kernel (as the guide says)."""
    with (
        fake_flashinfer(release) as fake,
        vllm_builder(vllm_wheel, batch_invariant=True, cudagraph=cudagraph) as (_, builder),
    ):
        start = len(fake.kernel_plans)
        build(builder, Batch(2, 3))
        plans = _plans(fake, start)
    prefill = [plan for plan in plans if plan[0] == "BatchPrefillWithPagedKVCacheWrapper"]
    assert prefill
    assert all(plan[4] for plan in prefill)


@pytest.mark.parametrize("release", ["0.7.2", "0.7.2.post1"])
@pytest.mark.parametrize("cudagraph", [False, True], ids=["eager", "cuda-graph"])
def test_vllm_integrated_build_is_batch_invariant(
    vllm_wheel: Path, release: str, cudagraph: bool
) -> None:
    """With the vLLM guide's integration, every plan of vLLM's own ``build`` hands the
    kernel split-KV off, on ``fa2``, eager and CUDA graph, first plan and replays."""
    with (
        fake_flashinfer(release) as fake,
        vllm_builder(vllm_wheel, batch_invariant=True, cudagraph=cudagraph, integration=True) as (
            _,
            builder,
        ),
    ):
        start = len(fake.kernel_plans)
        build(builder, Batch(4, 0))
        build(builder, Batch(4, 0))
        build(builder, Batch(2, 3))
        plans = _plans(fake, start)
    assert len(plans) == 4
    for family, backend, fixed, disable, dropped in plans:
        assert (backend, disable, dropped) == ("fa2", True, False), family
        assert fixed in (-1, 2048, 4096)


@pytest.mark.parametrize("release", ["0.7.2", "0.7.2.post1"])
@pytest.mark.parametrize("capability", [90, 100], ids=["sm90", "sm100"])
@pytest.mark.parametrize("cudagraph", [False, True], ids=["eager", "cuda-graph"])
@pytest.mark.parametrize("batch_invariant", [False, True], ids=["normal", "batch-invariant"])
def test_vllm_builds_and_runs_on_a_pinning_host_with_its_own_flashinfer_utils(
    vllm_wheel: Path, release: str, capability: int, cudagraph: bool, batch_invariant: bool
) -> None:
    """vLLM 0.33.0's builder and attention layer with its own ``vllm/utils/flashinfer.py``
    as it is, memory pinning on: every metadata build (decode, mixed, prefill; CUDA-graph
    capture, then replay) runs, each decode plan first pins FlashInfer's cached range buffer
    through vLLM's ``pin_host_range_buf`` (``_get_range_buf``, ``_ceil_pow2``, ``_cache_buf``
    from the fake), and the decode plans carry vLLM's split settings: ``(-1, False)``, or
    ``(2048, True)`` batch-invariant. After each build vLLM's own ``forward`` runs on it: its
    checks of what ``plan`` left on the wrappers (``_window_left``, ``_logits_soft_cap``,
    ``_sm_scale``, ``_causal``) hold, and it runs the decode wrapper on the decodes and the
    prefill wrapper on the prefills, each into its part of the layer's output."""
    with (
        fake_flashinfer(release) as fake,
        vllm_builder(
            vllm_wheel,
            batch_invariant=batch_invariant,
            cudagraph=cudagraph,
            pinned=True,
            capability=capability,
        ) as (module, builder),
    ):
        import flashinfer.utils

        start = len(fake.kernel_plans)
        for batch in (Batch(4, 0), Batch(4, 0), Batch(2, 3), Batch(0, 3)):
            metadata = build(builder, batch)
            called = len(fake.calls)
            output = forward(module, metadata, batch)
            runs = [call for call in fake.calls[called:] if call.name.endswith(".run")]
            decodes, prefills = batch.num_reqs - batch.prefills, batch.prefills
            assert [call.name.partition(".")[0] for call in runs] == [
                *(["BatchPrefillWithPagedKVCacheWrapper"] if prefills else []),
                *(["BatchDecodeWithPagedKVCacheWrapper"] if decodes else []),
            ]
            for call in runs:
                out = call.arguments["out"]
                assert out.untyped_storage().data_ptr() == output.untyped_storage().data_ptr()
            assert tuple(output.shape) == (batch.num_actual_tokens, 32, 128)
        plans = _plans(fake, start)
        cache = vars(flashinfer.utils)["_cache_buf"]  # the fake's, as vLLM reads it
        assert isinstance(cache, dict)
        assert ("range_8", "cpu") in cache  # 4 decodes + 1, as vLLM asks
        assert all(buffer.is_pinned() for buffer in cache.values())
    families = [plan[0] for plan in plans]
    second = "fast_decode_plan" if cudagraph else "BatchDecodeWithPagedKVCacheWrapper"
    assert families == [
        "BatchDecodeWithPagedKVCacheWrapper",
        second,
        "BatchPrefillWithPagedKVCacheWrapper",
        "BatchDecodeWithPagedKVCacheWrapper",
        "BatchPrefillWithPagedKVCacheWrapper",
    ]
    decode = (2048, True) if batch_invariant else (-1, False)
    for family, _, fixed, disable, dropped in plans:
        if family != "BatchPrefillWithPagedKVCacheWrapper":
            assert not dropped, family
            assert (fixed, disable) == decode, family


@pytest.mark.parametrize("release", ["0.7.2", "0.7.2.post1"])
def test_vllm_forward_checks_what_plan_left_on_the_wrapper(vllm_wheel: Path, release: str) -> None:
    """vLLM's forward refuses a wrapper planned with other settings than its layer's: the
    fake's wrappers hold what ``plan`` was given, so a layer with another scale fails vLLM's
    own check, as it would on FlashInfer."""
    with (
        fake_flashinfer(release),
        vllm_builder(vllm_wheel, batch_invariant=False, pinned=True) as (module, builder),
    ):
        batch = Batch(2, 3)
        metadata = build(builder, batch)
        wrapper = metadata.prefill.wrapper
        assert (wrapper._window_left, wrapper._logits_soft_cap, wrapper._causal) == (
            -1,
            0.0,
            True,
        )
        wrapper._sm_scale *= 2
        with pytest.raises(AssertionError):
            forward(module, metadata, batch)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((LAZY_ZEROS_BYTES,), {"dtype": torch.uint8, "device": "cuda"}),
        (((4, LAZY_ZEROS_BYTES // 16),), {"dtype": torch.int32, "device": torch.device("cpu")}),
        ((3, LAZY_ZEROS_BYTES // 8), {"device": "cuda:0"}),
        ((LAZY_ZEROS_BYTES - 1,), {"dtype": torch.uint8, "device": "cuda"}),
        ((5,), {"dtype": torch.int64}),
        ((2, 3), {"dtype": torch.float16, "device": "cuda", "requires_grad": True}),
    ],
)
def test_the_engines_torch_gives_zeros_as_torch_does(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Large zeroed tensors come from an anonymous mapping (no byte written until used): the
    same shape, dtype, values and flags as ``torch.zeros`` on the CPU, and writable."""
    made = CpuTorch().zeros(*args, **kwargs)
    expected = torch.zeros(*args, **{**kwargs, "device": "cpu"})
    assert made.device.type == "cpu"
    assert (made.shape, made.dtype, made.requires_grad) == (
        expected.shape,
        expected.dtype,
        expected.requires_grad,
    )
    assert torch.equal(made, expected)
    mapped = not kwargs.get("requires_grad") and made.nbytes >= LAZY_ZEROS_BYTES
    assert made.untyped_storage().resizable() is not mapped  # torch's own storage resizes
    if not made.requires_grad:
        made.view(-1)[-1] = 7
        assert int(made.view(-1)[-1]) == 7
        assert int(made.view(-1)[0]) == 0
