"""Several CPU processes joined by torch.distributed (gloo), for the multiprocess tests.

:func:`run_ranks` starts one process per rank running a module of this repository with
``python -m`` (from the repository root, so it can import ``fi_compat`` and ``tests``), waits
for all of them and fails with the tail of each failing rank's stderr; the worker calls
:func:`join_gloo` with the rank, world size and port it was given.
"""

from __future__ import annotations

import datetime
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ROOT", "free_port", "join_gloo", "run_ranks"]

#: The repository root: the working directory of every worker.
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_ranks(module: str, world: int, extra: Sequence[str], *, timeout: float) -> None:
    """Run ``python -m module RANK WORLD PORT *extra`` for each rank and wait for all.

    Raises
    ------
    AssertionError
        A rank exited with a non-zero status (its stderr tail is in the message).
    """
    port = free_port()
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", module, str(rank), str(world), str(port), *extra],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    failures = []
    try:
        for rank, process in enumerate(processes):
            _, stderr = process.communicate(timeout=timeout)
            if process.returncode != 0:
                failures.append(f"rank {rank}: {stderr[-3000:]}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert not failures, "\n".join(failures)


def join_gloo(rank: int, world: int, port: int) -> None:
    """Join the default process group of a :func:`run_ranks` worker (gloo over TCP)."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
