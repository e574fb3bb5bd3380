"""Rank 0 and rank 1 of a 2-rank gloo group, each in a spawned process (a process that ran FSDP2
as rank 0 keeps a socket listening afterwards: never the pytest process); both must finish in time."""

from __future__ import annotations

import torch.multiprocessing as mp

from deadlines import PROCESS_START_S


def run_two_ranks(rank_0_main, rank_0_args: tuple, child_main, child_args: tuple) -> None:
    child = mp.spawn(child_main, args=child_args, nprocs=1, join=False)
    rank_0 = mp.spawn(rank_0_main, args=rank_0_args, nprocs=1, join=False)
    try:
        assert rank_0.join(timeout=PROCESS_START_S), "rank 0 did not finish"
        assert child.join(timeout=PROCESS_START_S), "rank 1 did not finish"
    finally:
        for process in [*child.processes, *rank_0.processes]:
            if process.is_alive():
                process.kill()
