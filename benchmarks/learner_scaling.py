"""Learner scaling: trained samples/s of 1 and 2 data-parallel learners (workers.learners) on the
same model and batch.

What is measured: one optimizer step (`train_step`: forward, backward, gradient all-reduce,
clipping, AdamW) on a batch of `--rows` single-turn trajectories (prompt ~8 tokens, `--tokens`
sampled tokens each, GRPO-style advantages), PPO-clip with token-mean aggregation, one torch
thread per process. Variants:

  1 learner    PolicyLearner in this process
  2 learners   LearnerGroup: this process (rank 0) + one spawned follower over gloo; rank 0
               sends the whole batch (pickled) to the follower, each trains on half of it and
               the gradients are summed

Both start from the same weights; each variant is warmed up once, then they run in rounds (one
step each per round, in turn), so slow and fast moments of a shared machine hit both alike.
`x 1 learner` is the median of the per-round ratio (a paired ratio, steadier than absolute
numbers). On a 2-core machine two learners can at most double the update's speed, and only
when nothing else runs; the batch transfer and the all-reduce are the overhead.

    python benchmarks/learner_scaling.py [--preset micro] [--rows 256] [--tokens 16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from reinforge.config import AlgoConfig
from reinforge.distributed.learner_group import FollowerSpec, LearnerGroup
from reinforge.learner.batch import collate
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer
from reinforge.rollout.trajectory import Trajectory
from reinforge.learner.policy_objective import make_policy_objective


def make_batch(tokenizer, rows: int, tokens: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    trajectories = []
    for i in range(rows):
        prompt = torch.randint(3, len(tokenizer), (6 + i % 4,), generator=g).tolist()
        sampled = torch.randint(3, len(tokenizer), (tokens,), generator=g).tolist()
        trajectories.append(
            Trajectory(
                task_id=f"t{i}", group_id=i // 8, token_ids=prompt + sampled,
                loss_mask=[False] * len(prompt) + [True] * len(sampled),
                behaviour_logprobs=[0.0] * len(prompt) + (-torch.rand(tokens, generator=g) * 3).tolist(),
                turn_spans=[(len(prompt), len(prompt) + tokens)], prompt_length=len(prompt),
                response_text="", policy_version=0, finish_reason="length",
            )
        )
    return collate(trajectories, torch.randn(rows, generator=g), tokenizer.pad_token_id)


def update_arguments(description: str) -> argparse.ArgumentParser:
    """The options every learner-update benchmark takes (this one, lora_update.py)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--preset", default="micro")
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    return parser


def update_setup(args):
    """One thread, a tokenizer, a batch of `args.rows` x `args.tokens`, the default policy objective
    and the learner's keyword arguments: (tokenizer, batch, algo config, loss_fn, learner kwargs)."""
    torch.set_num_threads(1)
    rng = random.Random(0)
    tokenizer = train_tokenizer([f"{rng.randrange(1000)}+{rng.randrange(1000)}={rng.randrange(2000)}" for _ in range(500)])
    batch = make_batch(tokenizer, args.rows, args.tokens)
    algo = AlgoConfig()
    kwargs = dict(lr=1e-4, micro_batch_size=algo.micro_batch_size, max_response_tokens=args.tokens)
    return tokenizer, batch, algo, make_policy_objective(algo), kwargs


def main() -> None:
    args = update_arguments(__doc__.split("\n\n")[0]).parse_args()
    tokenizer, batch, algo, loss_fn, kwargs = update_setup(args)

    single = PolicyLearner(build_tiny_llama(tokenizer, args.preset, seed=0), **kwargs)
    model = build_tiny_llama(tokenizer, args.preset, seed=0)
    group = LearnerGroup(2, FollowerSpec(model.config, kwargs, algo, threads=1, timeout_s=600), model)
    variants = {"1 learner": single, "2 learners": group.learner}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    try:
        for learner in variants.values():  # warm-up
            learner.train_step(batch, loss_fn)
        for _ in range(args.rounds):
            for name, learner in variants.items():
                start = time.perf_counter()
                learner.train_step(batch, loss_fn)
                seconds[name].append(time.perf_counter() - start)
    finally:
        group.close()

    load = os.getloadavg()[0]
    print(f"{args.preset}: one optimizer step on {args.rows} rows x {args.tokens} sampled tokens, {args.rounds} rounds (load {load:.1f})")
    print(f"{'variant':<12} {'s/step':>8} {'samples/s':>10} {'x 1 learner':>12}")
    for name, times in seconds.items():
        ratio = statistics.median(a / b for a, b in zip(seconds["1 learner"], times))
        median = statistics.median(times)
        print(f"{name:<12} {median:>8.3f} {args.rows / median:>10.0f} {ratio:>11.2f}x")


if __name__ == "__main__":
    main()
