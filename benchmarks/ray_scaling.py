"""Rollout scaling with Ray: samples/s of 1 and 2 Ray rollout workers (RayEngine) against the
in-process TorchEngine, on the same model and batch.

What is measured: one rollout batch of `--prompts` prompts (arithmetic problems, a GRPO-like 8
samples per task) sampling exactly `--tokens` tokens each (no stop tokens), temperature 1.0,
float32 weights. Variants:

  in-process   TorchEngine in this process (one torch thread)
  ray x1       RayEngine with 1 worker (one actor, one thread): the cost of going through Ray
  ray x2       RayEngine with 2 workers: the batch split in two contiguous shards

Each variant is warmed up once; then the variants run in rounds (one call each per round, in
turn), so slow and fast moments of a shared machine hit every variant alike. `samples/s` is the
median over rounds; `x in-process` is the median of the per-round ratio to the in-process engine
(a paired ratio, steadier than absolute numbers). `sync ms` is the median time of one
`sync_weights` (state_dict -> object store -> every worker loads it and echoes its checksum), paid
once per RL step. The local Ray cluster declares 3 logical CPUs so the x1 and x2 engines can stay
up together; only one variant runs at a time, on the machine's real cores.

    python benchmarks/ray_scaling.py [--preset micro] [--prompts 256] [--tokens 32] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path

import torch

from reinforge.distributed.ray_cluster import start_ray, stop_ray
from reinforge.distributed.ray_engine import RayEngine
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat (Linux)."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="micro")
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)

    rng = random.Random(0)
    problems = [f"{rng.randrange(100)}+{rng.randrange(100)}=" for _ in range(args.prompts // 8)]
    tokenizer = train_tokenizer([p + "0" for p in problems] * 4)
    model = build_tiny_llama(tokenizer, args.preset, max_positions=args.tokens + 32, seed=0)
    prompts = [tokenizer(p).input_ids for p in problems for _ in range(8)]
    params = SamplingParams(max_new_tokens=args.tokens, temperature=1.0)
    n_params = sum(p.numel() for p in model.parameters())

    start_ray(None, num_cpus=3)
    started = time.perf_counter()
    engines = {"in-process": TorchEngine(model, tokenizer.pad_token_id)}
    engines["ray x1"] = RayEngine(model, tokenizer.pad_token_id, num_workers=1, timeout_s=600)
    engines["ray x2"] = RayEngine(model, tokenizer.pad_token_id, num_workers=2, timeout_s=600)
    print(f"workers up in {time.perf_counter() - started:.1f} s (actor start + first weight sync)")

    seconds: dict[str, list[float]] = {name: [] for name in engines}
    syncs: dict[str, list[float]] = {name: [] for name in engines if name != "in-process"}
    for name, engine in engines.items():  # warm-up
        engine.generate(prompts, params, seed=0)
    busy0, total0 = cpu_times()
    for round_ in range(args.rounds):
        for name, engine in engines.items():
            t0 = time.perf_counter()
            out = engine.generate(prompts, params, seed=round_)
            seconds[name].append(time.perf_counter() - t0)
            assert len(out) == len(prompts) and all(len(g.token_ids) == args.tokens for g in out)
            if name in syncs:
                t0 = time.perf_counter()
                engine.sync_weights(round_ + 1)
                syncs[name].append(time.perf_counter() - t0)

    busy1, total1 = cpu_times()
    cores = os.cpu_count() or 1
    busy = (busy1 - busy0) / max(total1 - total0, 1e-9) * cores
    print(
        f"\nmachine: {cores} cores, {busy:.2f} busy on average during the rounds (this benchmark alone keeps 1 busy "
        "while in-process and ray x1 run, 2 while ray x2 runs; well above that, other jobs shared the cores)"
    )
    print(
        f"\n{args.preset} preset ({n_params / 1e6:.2f}M params), {len(prompts)} prompts x {args.tokens} tokens, "
        f"{args.rounds} rounds, {torch.get_num_threads()} torch thread per engine\n"
    )
    print(f"{'variant':<12} {'samples/s':>10} {'tokens/s':>10} {'x in-process':>13} {'sync ms':>8}")
    base = seconds["in-process"]
    for name in engines:
        median = statistics.median(seconds[name])
        ratio = statistics.median(b / s for b, s in zip(base, seconds[name]))
        sync = f"{statistics.median(syncs[name]) * 1000:.0f}" if name in syncs else "-"
        print(f"{name:<12} {len(prompts) / median:>10.0f} {len(prompts) * args.tokens / median:>10.0f} {ratio:>12.2f}x {sync:>8}")
    for name, engine in engines.items():
        if isinstance(engine, RayEngine):
            engine.close()
    stop_ray()


if __name__ == "__main__":
    main()
