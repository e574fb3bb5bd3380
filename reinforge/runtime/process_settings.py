"""How a reinforge process sets itself up before it trains: `configure_process`.

Threads (`trainer.threads`): one by default, since on a shared machine a second OpenMP thread
spin-waits against other work and a step runs several times slower (docs/running.md, "Threads").

Pinning (`trainer.cpus`): the process, and the threads it starts later (OpenMP's included), run
only on the listed cores, so two runs on one machine can be kept off each other's cores.

Freed memory (`trainer.retain_freed_memory`, on by default): glibc's malloc serves every
allocation above its mmap threshold (128 KiB at first, adapted up to at most 32 MiB) with fresh
pages from the kernel and unmaps them on free, and trims the heap's free top. An RL step
allocates and frees the same activation tensors every micro-batch, so every step page-faults
them in again, each fault a trip through the kernel that also zeroes the page: on the `micro`
model at 4x width, 225,000-242,000 minor faults and 1.1-1.8 CPU-seconds in the kernel per step
(`python benchmarks/freed_memory.py --width 4`). With mmap off and trimming only above 2 GiB
free, freed memory stays mapped and the next step reuses most of it: 25,000-33,000 faults and
0.4-0.7 kernel seconds per step, the update 1.18x faster (median of 3 rounds). At the default
`micro` width it is within noise. What it costs: the process keeps the memory it freed, 3-7%
more steady RSS there, flat over 60 steps. PyTorch's CPU tuning guide gets the same effect by
preloading jemalloc or tcmalloc; mallopt needs no preload. Nothing is changed off glibc, or when
the user set a MALLOC_* tunable in the environment (theirs wins).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

import torch

# mallopt parameter numbers, from glibc's <malloc.h>
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX = -1, -2, -4
RETAIN_SETTINGS = ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, (2 << 30) - 1), (M_TOP_PAD, 64 << 20))
USER_TUNABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")


def retain_freed_memory() -> bool:
    """Keep freed heap memory mapped for reuse (see the module docstring). True when applied."""
    if not sys.platform.startswith("linux") or any(name in os.environ for name in USER_TUNABLES):
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in RETAIN_SETTINGS)  # 1: accepted


def configure_process(threads: int | None, cpus: list[int] | None = None, retain_memory: bool = True) -> None:
    """Core pinning, torch intra-op threads and the allocator of this process, as `trainer.*` asks."""
    if cpus:  # before torch starts its thread pool, so that its threads inherit the mask
        os.sched_setaffinity(0, cpus)
    if threads:
        torch.set_num_threads(threads)
    if retain_memory:
        retain_freed_memory()
