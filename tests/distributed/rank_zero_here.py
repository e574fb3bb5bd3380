"""Rank 0 of a 2-rank gloo group in the test's own process, rank 1 spawned."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch.multiprocessing as mp

from deadlines import PROCESS_START_S
from reinforge.distributed.ddp import free_port, init_distributed
from reinforge.distributed.teardown import leave_process_group


@contextmanager
def rank_zero_here(follower: Callable[[int, int, int], None]) -> Iterator[int]:
    """Spawn `follower(index, world_size, port)` as rank 1, join the group as rank 0 and yield the
    rendezvous port; on leaving, leave the group (and its sockets: reinforge.distributed.teardown)
    and wait for rank 1, which is killed if the body failed."""
    port = free_port()
    child = mp.spawn(follower, args=(2, port), nprocs=1, join=False)
    try:
        init_distributed(0, 2, port, backend="gloo", timeout_s=PROCESS_START_S)
        try:
            yield port
        finally:
            leave_process_group()
        assert child.join(timeout=PROCESS_START_S), "rank 1 did not finish"
    finally:
        for process in child.processes:
            if process.is_alive():
                process.kill()
