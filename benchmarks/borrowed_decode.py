"""Decode speed of the engine that borrows the model's weights (a sharded learner's rank 0,
reinforge.engines.borrowed_decoder) against the default one that copies them.

Each round runs, for either engine in turn, what one RL step asks of it: `sync_weights`, then one
`generate` of `--batch` prompts x `--new-tokens` tokens (no stop tokens: every row samples all of
them), so the copying engine pays for building its copy in every round and the borrowing one for
its separate q/k/v and gate/up matmuls over [out, in] matrices. Reported: the median over rounds of
the CPU time (`time.process_time`) of one round per engine, and the paired ratio borrowed / copied
(> 1: borrowing is slower), which holds up on a shared machine better than wall time.

    python benchmarks/borrowed_decode.py [--preset micro] [--model DIR] [--rounds 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.rollout_throughput import build
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="micro", help="tiny Llama preset (ignored with --model)")
    parser.add_argument("--model", default=None, help="a local Hugging Face model directory")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--batch", type=int, default=64, help="prompts per call")
    parser.add_argument("--new-tokens", type=int, default=64, help="sampled tokens per prompt")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer, prompts = build(args)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)
    engines = {"copied": TorchEngine(model, tokenizer.pad_token_id), "borrowed": TorchEngine(model, tokenizer.pad_token_id, borrow_weights=True)}
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    for round_ in range(args.rounds + 1):  # round 0 warms up
        for name, engine in engines.items():
            start = time.process_time()
            engine.sync_weights(round_)
            sampled = sum(len(g.token_ids) for g in engine.generate(prompts, params, seed=round_))
            spent = time.process_time() - start
            assert sampled == len(prompts) * args.new_tokens, f"{name} sampled {sampled} tokens"
            if round_:
                seconds[name].append(spent)
    ratios = [b / c for b, c in zip(seconds["borrowed"], seconds["copied"])]
    for name, values in seconds.items():
        print(f"{name:9s} {statistics.median(values):.3f} CPU s per sync + generate ({len(prompts)} x {args.new_tokens} tokens)")
    print(f"borrowed / copied: {statistics.median(ratios):.3f} (median of {len(ratios)} paired rounds; min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()
