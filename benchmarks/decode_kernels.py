"""The engine's decode step in C (`engine.decode_kernels: native`) against torch's ops.

What is measured, one torch thread, CPU time:
  1. one decode-attention call, C kernel vs `scaled_dot_product_attention`, on a cache laid out
     as the engine's ([rows, 4 kv heads, 135 slots, 32]: the `micro` model at 64 new tokens), at
     64 and 256 rows and 10 to 130 used slots;
  2. the rollout of `benchmarks/vs_trl.py` (the `micro` model, 8 or 32 prompts x 8 completions,
     64 forced tokens), the same engine with torch's ops and with the C kernels (attention,
     RMSNorm, rotary, SwiGLU), in alternating rounds.
Each line gives the medians and the median of the per-round ratios.

    python benchmarks/decode_kernels.py [--rounds 7] [--tasks 8,32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_trl import reinforge_alone  # noqa: E402

from reinforge.kernels import decode_attention  # noqa: E402
from reinforge.rollout.episodes import rollout_groups  # noqa: E402


def cpu_seconds(fn, repeat: int = 1) -> float:
    start = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - start) / repeat


def paired(a, b, rounds: int, repeat: int = 1) -> tuple[float, float, float]:
    """Medians of a's and b's CPU seconds over alternating rounds, and of the ratios a / b."""
    a(), b()  # warm-up
    times_a, times_b = [], []
    for _ in range(rounds):
        times_a.append(cpu_seconds(a, repeat))
        times_b.append(cpu_seconds(b, repeat))
    ratios = [x / y for x, y in zip(times_a, times_b)]
    return statistics.median(times_a), statistics.median(times_b), statistics.median(ratios)


def kernel_calls(rounds: int) -> None:
    heads, dim, slots = 4, 32, 135
    for rows in (64, 256):
        for length in (10, 40, 71, 130):
            keys, values = torch.randn(rows, heads, slots, dim), torch.randn(rows, heads, slots, dim)
            key_bias = torch.zeros(rows, 1, 1, slots)
            key_bias[..., :3] = float("-inf")
            q = torch.randn(rows, heads, dim)

            def sdpa():
                F.scaled_dot_product_attention(q[:, :, None], keys[:, :, :length], values[:, :, :length], attn_mask=key_bias[..., :length])

            def native():
                decode_attention.decode_attention(q, keys, values, key_bias, length)

            s, n, ratio = paired(sdpa, native, rounds, repeat=200)
            print(f"call  rows {rows:3d}  slots {length:3d}:  SDPA {s * 1e6:6.0f} us  C {n * 1e6:6.0f} us  {ratio:.2f}x")


def rollouts(tasks: int, rounds: int) -> None:
    ours, env = reinforge_alone(1, False, 4)
    batch = [t for b in ours.task_batches for t in b][:tasks]
    decoder = ours.engine._get_decoder()

    def with_kernels(native: bool):
        def run():
            decoder.native = native
            rollout_groups(ours.engine, env, batch, 8, ours.params, seed=0)
        return run

    s, n, ratio = paired(with_kernels(False), with_kernels(True), rounds)
    print(f"rollout {tasks}x8, 64 tokens:  torch {s:.3f} CPU-s  C {n:.3f} CPU-s  {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tasks", default="8,32", help="prompts per rollout, comma-separated")
    args = parser.parse_args()
    torch.set_num_threads(1)
    decode_attention.load()  # built before anything is timed
    kernel_calls(args.rounds)
    for tasks in (int(t) for t in args.tasks.split(",")):
        rollouts(tasks, args.rounds)


if __name__ == "__main__":
    main()
