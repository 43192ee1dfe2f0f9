"""The helpers the fake computes (``fi_compat/testing/_helpers.py``): plain arithmetic on their
arguments, as each release computes it. ``test_fake_helpers_real.py`` compares them with the
installed flashinfer-python 0.7.2.post1."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch (the helpers compute on tensors)")

import torch
from packaging.version import Version

from fi_compat.testing import (
    FunctionRecord,
    ParameterRecord,
    StandIn,
    available_releases,
    fake_flashinfer,
    load_release,
)
from fi_compat.testing._gates import TIGHT_MOE_TILE_BOUND
from fi_compat.testing._helpers import HELPERS, helper
from tests.support.engine_modules import ENGINES, engine_wheel
from tests.support.vllm_backend import Batch, build, vllm_builder
from tools.releases import RegistryUnreachableError

NEWEST = available_releases()[-1]
MOE_UTILS = "flashinfer.fused_moe.cute_dsl.moe_utils"


def _pinned(tensor: torch.Tensor) -> tuple[str, object]:
    """What ``.pin_memory()`` does with ``tensor`` here: pins it, or raises (a host without
    an accelerator)."""
    try:
        return "pinned", tensor.pin_memory().is_pinned()
    except RuntimeError as error:
        return "raised", str(error)


def test_get_seq_lens_is_a_tensor_vllm_can_pin() -> None:
    """vLLM 0.33.0's ``FlashInferMetadataBuilder.build()`` calls ``.pin_memory()`` on what
    ``get_seq_lens`` returns wherever pinned memory is available: the fake returns the
    sequence lengths as a CPU tensor, which pins as any CPU tensor does on this host."""
    indptr = torch.tensor([0, 3, 4, 4, 8], dtype=torch.int32)
    last_page_len = torch.tensor([5, 16, 0, 1], dtype=torch.int32)
    with fake_flashinfer(NEWEST) as fi:
        flashinfer = importlib.import_module("flashinfer")
        seq_lens = flashinfer.get_seq_lens(indptr, last_page_len, 16)
        assert fi.calls[-1].name == "get_seq_lens"
        assert flashinfer.get_seq_lens is importlib.import_module("flashinfer.page").get_seq_lens
    assert isinstance(seq_lens, torch.Tensor)
    assert seq_lens.device.type == "cpu"
    assert seq_lens.dtype == torch.int32
    # (pages - 1) * page_size + the last page's entries; no pages: the last page's entries.
    assert seq_lens.tolist() == [2 * 16 + 5, 0 * 16 + 16, 0, 3 * 16 + 1]
    assert _pinned(seq_lens) == _pinned(torch.zeros(4, dtype=torch.int32))
    if torch.cuda.is_available():
        assert seq_lens.pin_memory().is_pinned()


@pytest.fixture(scope="module")
def vllm_wheel() -> Path:
    try:
        return engine_wheel(ENGINES["vllm"])
    except RegistryUnreachableError as error:  # pragma: no cover - depends on the network
        pytest.skip(f"the vllm wheel is not here and the registry is unreachable: {error}")


def test_vllm_builds_its_metadata_where_memory_is_pinned(
    vllm_wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM 0.33.0's own ``FlashInferMetadataBuilder.build()`` with ``PIN_MEMORY`` on, as on
    every host with pinned memory: it pins what ``get_seq_lens`` returns and plans with it
    (when the fake returned None, ``build`` raised ``AttributeError`` there). On a host
    without an accelerator, pinning hands back the same values."""
    pinned: list[torch.Tensor] = []
    if not torch.cuda.is_available():

        def pin_memory(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            pinned.append(self)
            return self

        monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    with (
        fake_flashinfer(NEWEST) as fi,
        vllm_builder(vllm_wheel, batch_invariant=False) as (module, builder),
    ):
        monkeypatch.setattr(module, "PIN_MEMORY", True)
        build(builder, Batch(4, 0))
        build(builder, Batch(2, 3))
        calls = fi.calls_to("get_seq_lens")
    assert len(calls) == 3  # one decode batch, then a decode and a prefill part
    for call in calls:
        indptr, last = call.arguments["kv_indptr"], call.arguments["kv_last_page_len"]
        pages = indptr[1:] - indptr[:-1]
        expected = (pages - 1).clamp(min=0) * call.arguments["page_size"] + last
        assert torch.all(expected > 0)
        if pinned:
            assert any(torch.equal(tensor, expected) for tensor in pinned)


def test_sizes_are_computed_where_the_release_has_the_helper() -> None:
    """``get_trtllm_gen_multi_ctas_kv_counter_bytes`` (0.6.15 on) and the CuTe DSL MoE's
    ``get_max_num_tiles``/``get_max_num_permuted_tokens`` (0.6.4 on) return what the
    release computes; a release without the helper does not bind it."""
    with fake_flashinfer(NEWEST):
        utils = importlib.import_module("flashinfer.utils")
        # max(3 * 5, 132) = 132 semaphores, a multiple of 8: 136, 4 bytes each.
        assert utils.get_trtllm_gen_multi_ctas_kv_counter_bytes(3, 5, 132) == 544
        assert utils.get_trtllm_gen_multi_ctas_kv_counter_bytes(64, 32, 132) == 64 * 32 * 4
    oldest = available_releases()[0]
    with fake_flashinfer(oldest):
        assert load_release(oldest).module("flashinfer.utils") is not None
        utils = importlib.import_module("flashinfer.utils")
        assert not hasattr(utils, "get_trtllm_gen_multi_ctas_kv_counter_bytes")


@pytest.mark.parametrize(
    ("release", "tiles"),
    [
        # 800 expanded tokens over 33 experts, tiles of 128: 33 + ceil(767 / 128) = 39 up to
        # 0.6.10.post1, (800 + 127 * 33) // 128 = 38 from 0.6.11rc1.
        ("0.6.10.post1", 39),
        (TIGHT_MOE_TILE_BOUND.introduced_in, 38),
        (NEWEST, 38),
    ],
)
def test_the_moe_tile_bound_is_the_releases(release: str, tiles: int) -> None:
    assert release in available_releases()
    with fake_flashinfer(release):
        moe_utils = importlib.import_module(MOE_UTILS)
        assert moe_utils.get_max_num_tiles(100, 8, 33, 128) == tiles
        assert moe_utils.get_max_num_permuted_tokens(100, 8, 33, 128) == tiles * 128
        # No more expanded tokens than experts: one (padded) tile each.
        assert moe_utils.get_max_num_tiles(2, 4, 33, 128) == 8


def test_a_value_the_fake_made_up_gives_a_stand_in() -> None:
    """The fake cannot compute from a value it does not have (a ``StandIn`` another fake
    function returned): it returns a ``StandIn`` instead of failing inside the arithmetic."""
    with fake_flashinfer(NEWEST):
        flashinfer = importlib.import_module("flashinfer")
        seq_lens = flashinfer.get_seq_lens(StandIn("kv_indptr"), torch.ones(2), 16)
        assert isinstance(seq_lens, StandIn)
        utils = importlib.import_module("flashinfer.utils")
        # the imitated GPU's, which the counter bytes then take as the release does
        assert utils.get_trtllm_gen_multi_ctas_kv_counter_bytes(
            3, 5, utils.get_device_sm_count("cuda")
        ) == (136 * 4)
        with pytest.raises(TypeError):  # what the release raises given None for sm_count
            utils.get_trtllm_gen_multi_ctas_kv_counter_bytes(3, 5, None)


def test_a_helper_applies_only_to_the_parameters_it_reads() -> None:
    """A release whose ``def`` takes other parameters than the helper reads does not get a
    computed result (its fake function returns None, as any other)."""
    assert helper("flashinfer.page", "get_seq_lens", None) is None  # no recorded def
    parameters = tuple(
        ParameterRecord(name, "POSITIONAL_OR_KEYWORD")
        for name in ("kv_indptr", "kv_last_page_len", "page_size")
    )
    record = FunctionRecord("get_seq_lens", "flashinfer.page", (), parameters)
    assert (
        helper("flashinfer.page", "get_seq_lens", record) is HELPERS["flashinfer.page:get_seq_lens"]
    )
    renamed = FunctionRecord("get_seq_lens", "flashinfer.page", (), parameters[:2])
    assert helper("flashinfer.page", "get_seq_lens", renamed) is None
    assert helper("flashinfer.other", "get_seq_lens", record) is None


def test_every_helper_is_recorded_where_it_says() -> None:
    """Each helper names the module defining it and the parameters the newest release's
    ``def`` has (a recorder or upstream change fails here, not as a silent None)."""
    record = load_release(NEWEST)
    for found in HELPERS.values():
        module = record.module(found.module)
        assert module is not None, found.key
        name = module.names.get(found.name)
        assert name is not None, found.key
        assert name.function is not None, found.key
        assert name.defined_in == found.module, found.key
        assert helper(found.module, found.name, name.function) is found, found.key
    assert Version(TIGHT_MOE_TILE_BOUND.introduced_in) > Version("0.6.10.post1")


@pytest.mark.parametrize("release", ["0.4.0", "0.6.5", "0.7.2.post1", NEWEST])
def test_get_device_sm_count_answers_for_the_imitated_gpu(release: str) -> None:
    """``get_device_sm_count`` reads the device's properties in every release; the fake
    answers for its imitated GPU (132 SMs, an H100 SXM, unless ``sm_count`` says otherwise),
    whichever device is asked about: vLLM 0.33.0 sizes a counter buffer with it."""
    for wanted, fake in (
        (132, fake_flashinfer(release)),
        (78, fake_flashinfer(release, sm_count=78)),
    ):
        with fake:
            utils = importlib.import_module("flashinfer.utils")
            if "get_device_sm_count" not in vars(utils):
                pytest.skip(f"flashinfer {release} has no get_device_sm_count")
            assert utils.get_device_sm_count(torch.device("cuda")) == wanted
            assert utils.get_device_sm_count(torch.device("cuda", 1)) == wanted


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "132", None, 1 << 21])
def test_sm_count_refuses_what_no_gpu_has(value: object) -> None:
    from fi_compat.errors import InvalidArgumentError

    with (
        pytest.raises(InvalidArgumentError, match="sm_count"),
        fake_flashinfer(
            NEWEST,
            sm_count=value,  # type: ignore[arg-type]
        ),
    ):
        pass  # pragma: no cover - refused on entry
