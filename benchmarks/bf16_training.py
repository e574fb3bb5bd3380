"""bf16 on this CPU: matmul speed, and the speed of one learner update with bf16 autocast.

What is measured, with one torch thread:

  matmul   C = A @ B for square sizes and for the shape of the micro model's MLP on a batch
           (rows x hidden @ hidden x mlp), float32 vs bfloat16 operands
  update   one `PolicyLearner.train_step` (forward, backward, clipping, AdamW) on `--rows`
           single-turn trajectories of `--tokens` sampled tokens, float32 vs `bf16_autocast=True`
           (autocast around the forward: matmuls in bfloat16, weights, gradients and AdamW state
           float32), for each preset in `--presets`

Each pair runs in rounds, one of each in turn per round, after a warm-up, so slow and fast
moments of a shared machine hit both alike; `fp32 / bf16` is the median of the per-round ratio
of times (a paired ratio; > 1 means bf16 is faster). The log-prob gap bf16 costs is measured by
the run itself (logprob_gap/* in metrics.jsonl): see docs/benchmarks.md, 'bf16'.

    python benchmarks/bf16_training.py [--presets micro,tiny] [--rows 256] [--tokens 16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from learner_scaling import make_batch  # noqa: E402  (same synthetic batch as the learner benchmark)

from reinforge.config import AlgoConfig  # noqa: E402
from reinforge.learner.policy_learner import PolicyLearner  # noqa: E402
from reinforge.models.tiny_llama import PRESETS, build_tiny_llama  # noqa: E402
from reinforge.models.tokenizer import train_tokenizer  # noqa: E402
from reinforge.learner.policy_objective import make_policy_objective  # noqa: E402


def paired(variants: dict[str, Callable[[], None]], rounds: int, repeat: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each variant, per round (one warm-up call each first)."""
    for run in variants.values():
        run()
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            start = time.perf_counter()
            for _ in range(repeat):
                run()
            seconds[name].append((time.perf_counter() - start) / repeat)
    return seconds


def ratio(seconds: dict[str, list[float]]) -> float:
    return statistics.median(a / b for a, b in zip(seconds["fp32"], seconds["bf16"]))


def matmuls(rounds: int) -> None:
    print(f"{'matmul (m x k @ k x n)':<28} {'fp32 ms':>9} {'bf16 ms':>9} {'fp32 / bf16':>12}")
    for m, k, n in [(256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 128, 512), (4096, 512, 128)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        a16, b16 = a.bfloat16(), b.bfloat16()
        repeat = max(1, int(2e9 / (2 * m * k * n)))
        seconds = paired({"fp32": lambda: a @ b, "bf16": lambda: a16 @ b16}, rounds, repeat)
        fp32, bf16 = (1e3 * statistics.median(seconds[v]) for v in ("fp32", "bf16"))
        print(f"{f'{m} x {k} @ {k} x {n}':<28} {fp32:>9.2f} {bf16:>9.2f} {ratio(seconds):>11.2f}x")


def updates(presets: list[str], rows: int, tokens: int, rounds: int) -> None:
    rng = random.Random(0)
    tokenizer = train_tokenizer([f"{rng.randrange(1000)}+{rng.randrange(1000)}={rng.randrange(2000)}" for _ in range(500)])
    batch = make_batch(tokenizer, rows, tokens)
    algo = AlgoConfig()
    loss_fn = make_policy_objective(algo)
    print(f"\none update on {rows} rows x {tokens} sampled tokens (micro-batches of {algo.micro_batch_size})")
    print(f"{'preset':<8} {'params':>8} {'fp32 s':>8} {'bf16 s':>8} {'fp32 / bf16':>12}")
    for preset in presets:
        learners = {
            name: PolicyLearner(build_tiny_llama(tokenizer, preset, seed=0), lr=1e-4, micro_batch_size=algo.micro_batch_size,
                                bf16_autocast=name == "bf16", max_response_tokens=tokens)
            for name in ("fp32", "bf16")
        }
        seconds = paired({name: (lambda lr=lr: lr.train_step(batch, loss_fn)) for name, lr in learners.items()}, rounds)
        params = sum(p.numel() for p in learners["fp32"].model.parameters())
        fp32, bf16 = (statistics.median(seconds[v]) for v in ("fp32", "bf16"))
        print(f"{preset:<8} {params / 1e6:>7.1f}M {fp32:>8.3f} {bf16:>8.3f} {ratio(seconds):>11.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="micro,tiny")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip-matmul", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    presets = args.presets.split(",")
    unknown = [p for p in presets if p not in PRESETS]
    if unknown:
        parser.error(f"unknown preset(s) {unknown}; valid: {', '.join(PRESETS)}")
    print(f"torch {torch.__version__}, 1 thread, load {os.getloadavg()[0]:.1f}, {args.rounds} rounds")
    if not args.skip_matmul:
        matmuls(args.rounds)
    updates(presets, args.rows, args.tokens, args.rounds)


if __name__ == "__main__":
    main()
