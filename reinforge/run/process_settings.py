"""How a reinforge process sets up torch's threads before it trains: `configure_process`.

Threads (`trainer.threads`): one by default, since on a shared machine a second OpenMP thread
spin-waits against other work and a step runs several times slower (README, "Threads").

Pinning (`trainer.cpus`): the process, and the threads it starts later (OpenMP's included), run
only on the listed cores, so two runs on one machine can be kept off each other's cores.
"""

from __future__ import annotations

import os

import torch


def configure_process(threads: int | None, cpus: list[int] | None = None) -> None:
    """Core pinning and torch intra-op thread count of this process, as `trainer.*` asks."""
    if cpus:  # before torch starts its thread pool, so that its threads inherit the mask
        os.sched_setaffinity(0, cpus)
    if threads:
        torch.set_num_threads(threads)
