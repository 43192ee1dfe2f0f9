"""The unfused reference path computes what the fused kernel computes.

FlashInfer's ``kARResidualRMSNorm`` kernel: ``residual_out = allreduce(input) + residual``
(added in float32, rounded to the input dtype), ``norm_out = residual_out *
rsqrt(mean(residual_out**2) + eps) * weight`` (float32 arithmetic on the rounded
``residual_out``, rounded once). The expected values below are computed independently in a
single process; the multiprocess tests run the reference path in 2 and 4 CPU processes
with torch.distributed (gloo) and compare.

This file is also the worker those tests start: ``python tests/comm/test_reference.py RANK
WORLD PORT DIRECTORY``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs torch")

import torch

from tests.support.ranks import join_gloo, run_ranks

TOKENS, HIDDEN, EPS = 5, 48, 1e-6
DTYPES = (torch.float32, torch.bfloat16)


def _rank_input(rank: int, dtype: torch.dtype, *, exact: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 + rank)
    if exact:
        # Multiples of 1/8 up to 8: sums over 4 ranks are exact in bfloat16 in any order.
        steps = torch.randint(-64, 65, (TOKENS, HIDDEN), generator=generator)
        return (steps.to(torch.float32) / 8).to(dtype)
    return torch.randn(TOKENS, HIDDEN, generator=generator).to(dtype)


def _shared(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    residual = torch.randn(TOKENS, HIDDEN, generator=generator).to(dtype)
    weight = (1 + 0.1 * torch.randn(HIDDEN, generator=generator)).to(dtype)
    return residual, weight


def _expected(
    inputs: list[torch.Tensor], residual: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-process computation of the kernel's semantics."""
    summed = torch.stack([x.to(torch.float64) for x in inputs]).sum(dim=0).to(dtype)
    residual_out = (summed.to(torch.float32) + residual.to(torch.float32)).to(dtype)
    wide = residual_out.to(torch.float32)
    inverse = torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + EPS)
    norm_out = (wide * inverse * weight.to(torch.float32)).to(dtype)
    return norm_out, residual_out


# ------------------------------------------------------------------------- one process


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_workspace", [False, True])
def test_single_process_semantics(dtype: torch.dtype, with_workspace: bool) -> None:
    import fi_compat.comm as comm

    x = _rank_input(0, dtype, exact=False)
    residual, weight = _shared(dtype)
    before = x.clone()
    norm_out, residual_out = torch.empty_like(x), torch.empty_like(x)
    workspace = (
        comm.create_workspace(1, 0, TOKENS, HIDDEN, dtype, device="cpu") if with_workspace else None
    )
    result = comm.allreduce_residual_rmsnorm(
        x,
        residual,
        weight,
        workspace=workspace,
        eps=EPS,
        norm_out=norm_out,
        residual_out=residual_out,
    )
    assert result[0] is norm_out
    assert result[1] is residual_out
    expected_norm, expected_residual = _expected([x], residual, weight, dtype)
    assert torch.equal(residual_out, expected_residual)
    assert torch.equal(norm_out, expected_norm)
    assert torch.equal(x, before)


def test_outputs_may_alias_the_residual() -> None:
    import fi_compat.comm as comm

    x = _rank_input(0, torch.bfloat16, exact=False)
    residual, weight = _shared(torch.bfloat16)
    expected_norm, expected_residual = _expected([x], residual, weight, torch.bfloat16)
    norm_out, residual_out = comm.allreduce_residual_rmsnorm(
        x, residual, weight, workspace=None, eps=EPS, residual_out=residual
    )
    assert residual_out is residual
    assert torch.equal(residual, expected_residual)
    assert torch.equal(norm_out, expected_norm)


def test_rmsnorm_uses_the_rounded_residual() -> None:
    """The norm is taken over residual_out as stored (bfloat16), not the float32 sum."""
    import fi_compat.comm as comm

    x = torch.full((1, 4), 1.0, dtype=torch.bfloat16)
    residual = torch.full((1, 4), 2.0**-9, dtype=torch.bfloat16)  # lost when rounded
    weight = torch.ones(4, dtype=torch.bfloat16)
    norm_out, residual_out = comm.allreduce_residual_rmsnorm(
        x, residual, weight, workspace=None, eps=0.0
    )
    assert torch.equal(residual_out, x)
    assert torch.equal(norm_out, torch.ones(1, 4, dtype=torch.bfloat16))


# --------------------------------------------------------------------- several processes


def _run_workers(world: int, directory: Path) -> list[dict[str, Any]]:
    run_ranks("tests.comm.test_reference", world, [str(directory)], timeout=180)
    return [torch.load(directory / f"{rank}.pt") for rank in range(world)]


_RESULTS: dict[int, list[dict[str, Any]]] = {}


@pytest.fixture
def workers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Results of one run of ``world`` worker processes, shared by the tests that read them."""

    def run(world: int) -> list[dict[str, Any]]:
        if world not in _RESULTS:
            _RESULTS[world] = _run_workers(world, tmp_path_factory.mktemp(f"world{world}"))
        return _RESULTS[world]

    return run


@pytest.mark.multiprocess
@pytest.mark.parametrize("world", [2, 4])
def test_reference_path_across_processes(world: int, workers: Any) -> None:
    results = workers(world)
    for dtype in DTYPES:
        residual, weight = _shared(dtype)
        exact = [_rank_input(rank, dtype, exact=True) for rank in range(world)]
        expected = _expected(exact, residual, weight, dtype)
        for rank, result in enumerate(results):
            for key in (
                "none",
                "workspace",
                "prepared",
                "none-fp32acc",
                "workspace-fp32acc",
                "prepared-fp32acc",
            ):
                norm_out, residual_out = result[f"exact-{dtype}-{key}"]
                assert norm_out.dtype is dtype
                assert torch.equal(residual_out, expected[1]), (rank, dtype, key)
                assert torch.equal(norm_out, expected[0]), (rank, dtype, key)
        random = [_rank_input(rank, dtype, exact=False) for rank in range(world)]
        expected = _expected(random, residual, weight, dtype)
        for rank, result in enumerate(results):
            # The prepared call read the static buffer's second filling, not its first.
            for key in ("", "-fp32acc"):
                prepared = result[f"random-{dtype}-prepared{key}"]
                checked = result[f"random-{dtype}-workspace{key}"]
                assert torch.equal(prepared[0], checked[0]), (rank, dtype, key)
                assert torch.equal(prepared[1], checked[1]), (rank, dtype, key)
        for key in ("none", "fp32acc"):
            first = results[0][f"random-{dtype}-{key}"]
            for result in results:
                # Every rank ends with the same bits.
                assert torch.equal(result[f"random-{dtype}-{key}"][0], first[0])
                assert torch.equal(result[f"random-{dtype}-{key}"][1], first[1])
            if key == "none" and dtype is not torch.float32 and world > 2:
                # Without FP32 accumulation the sum is rounded after every add, in an order
                # gloo (or NCCL) chooses rather than the kernel's rank order: the bits may
                # differ by rounding, a couple of units in the last place of the sum.
                unit = 2.0 ** (int(torch.log2(expected[1].abs().max().float())) - 7)
                torch.testing.assert_close(first[1], expected[1], atol=2 * unit, rtol=0)
                torch.testing.assert_close(first[0], expected[0], atol=2 * unit, rtol=0)
            else:
                torch.testing.assert_close(first[1], expected[1])
                torch.testing.assert_close(first[0], expected[0])


@pytest.mark.multiprocess
def test_subgroups_and_group_local_bcast_root(workers: Any) -> None:
    results = workers(4)
    dtype = torch.float32
    residual, weight = _shared(dtype)
    members = [1, 3]
    expected = _expected(
        [_rank_input(rank, dtype, exact=True) for rank in members], residual, weight, dtype
    )
    for rank in members:
        for key in ("subgroup-workspace", "subgroup-none"):
            norm_out, residual_out = results[rank][key]
            assert torch.equal(residual_out, expected[1]), (rank, key)
            assert torch.equal(norm_out, expected[0]), (rank, key)
    for rank in (0, 2):
        assert "subgroup-workspace" not in results[rank]
    # group [2, 3]: root 0 of the group is global rank 2.
    assert results[2]["bcast"] == results[3]["bcast"] == "from rank 2"
    assert "not part of group" in results[2]["unmapped-bcast"]


# ---------------------------------------------------------------------------- the worker


def _worker(rank: int, world: int, port: int, directory: Path) -> None:
    import torch.distributed as dist

    import fi_compat.comm as comm
    from fi_compat.comm._group import group_backend

    join_gloo(rank, world, port)
    results: dict[str, Any] = {}
    for dtype in DTYPES:
        residual, weight = _shared(dtype)
        workspace = comm.create_workspace(
            world, rank, TOKENS, HIDDEN, dtype, api="reference", device="cpu"
        )
        # Static buffers: prepared once, refilled before each launch.
        static = torch.empty(TOKENS, HIDDEN, dtype=dtype)
        prepared = {
            fp32_acc: workspace.prepare(static, residual, weight, eps=EPS, fp32_acc=fp32_acc)
            for fp32_acc in (False, True)
        }
        for kind in ("exact", "random"):
            x = _rank_input(rank, dtype, exact=kind == "exact")
            for fp32_acc in (False, True):
                suffix = "-fp32acc" if fp32_acc else ""
                results[f"{kind}-{dtype}-none{suffix}"] = comm.allreduce_residual_rmsnorm(
                    x, residual, weight, workspace=None, eps=EPS, fp32_acc=fp32_acc
                )
                results[f"{kind}-{dtype}-workspace{suffix}"] = comm.allreduce_residual_rmsnorm(
                    x, residual, weight, workspace=workspace, eps=EPS, fp32_acc=fp32_acc
                )
                static.copy_(x)
                results[f"{kind}-{dtype}-prepared{suffix}"] = tuple(
                    out.clone() for out in prepared[fp32_acc]()
                )
            results[f"{kind}-{dtype}-fp32acc"] = results[f"{kind}-{dtype}-none-fp32acc"]
    if world == 4:
        dtype = torch.float32
        residual, weight = _shared(dtype)
        x = _rank_input(rank, dtype, exact=True)
        odd = dist.new_group([1, 3])
        if rank in (1, 3):
            workspace = comm.create_workspace(
                2,
                dist.get_rank(odd),
                TOKENS,
                HIDDEN,
                dtype,
                group=odd,
                api="reference",
                device="cpu",
            )
            results["subgroup-workspace"] = comm.allreduce_residual_rmsnorm(
                x, residual, weight, workspace=workspace, eps=EPS
            )
            results["subgroup-none"] = comm.allreduce_residual_rmsnorm(
                x, residual, weight, workspace=None, group=odd, eps=EPS
            )
        upper = dist.new_group([2, 3])
        if rank in (2, 3):

            class GlobalRootBackend:
                """Like FlashInfer's early TorchDistBackend: root taken as a global rank."""

                def __init__(self, group: Any = None) -> None:
                    self._group = group

                def bcast(self, data: Any, root: int) -> Any:
                    objects = [data]
                    dist.broadcast_object_list(objects, src=root, group=self._group)
                    return objects[0]

            try:
                GlobalRootBackend(upper).bcast(f"from rank {rank}", root=0)
            except Exception as error:  # the bug the adapter exists for
                results["unmapped-bcast"] = str(error)
            else:
                results["unmapped-bcast"] = "no error"
            backend = group_backend(GlobalRootBackend, upper, root_is_group_local=False)
            results["bcast"] = backend.bcast(f"from rank {rank}", root=0)
    dist.barrier()
    torch.save(results, directory / f"{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
