"""The update and the reference forward padded, packed (`algo.pack_sequences`) with torch's
kernels, and packed with the C kernels (`algo.packed_kernels`), on three batch shapes.

What is measured: the default recipe's `micro` model (as `benchmarks/vs_trl.py` builds it), 8
prompts x 8 completions, PPO-clip with KL 0.05 to a reference; `PolicyLearner.train_step` (forward,
backward, AdamW) and the reference's no-grad log-probs, in the three variants, on the same batch in
interleaved rounds (CPU time, median of `--rounds`), in a process set up like `reinforge train`.

  fixed     the vs_trl.py work: 64 forced completion tokens, the recipe's ~7-token prompts
  variable  completion lengths drawn uniformly from 1..128 (what stop tokens make): pads
  long      prompts of ~256 tokens (a shared instruction) and 64 completion tokens

Completion tokens are drawn at random from the vocabulary (their values do not change the cost).

    python benchmarks/packed_forward.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import statistics
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_trl import benchmark_setup  # noqa: E402

from reinforge.learner.batch import collate  # noqa: E402
from reinforge.learner.packed_forward import plan_packing  # noqa: E402
from reinforge.learner.policy_learner import PolicyLearner  # noqa: E402
from reinforge.learner.reference import ReferenceModel  # noqa: E402
from reinforge.rollout.trajectory import Trajectory  # noqa: E402
from reinforge.runtime.process_settings import configure_process  # noqa: E402
from reinforge.learner.policy_objective import make_policy_objective  # noqa: E402

SHAPES = {"fixed": (0, 64, 64), "variable": (0, 1, 128), "long": (256, 64, 64)}  # prompt tokens, completion min, max


def batch_of(shape: str, group_size: int = 8, prompts: int = 8, seed: int = 0):
    prompt_tokens, low, high = SHAPES[shape]
    cfg, tasks, model, tokenizer, env = benchmark_setup(prompt_tokens=prompt_tokens, new_tokens=high)
    g = torch.Generator().manual_seed(seed)
    trajectories = []
    for task in tasks.train[:prompts]:
        prompt = env.episode().reset(task)
        for _ in range(group_size):
            n = int(torch.randint(low, high + 1, (), generator=g))
            completion = torch.randint(3, len(tokenizer), (n,), generator=g).tolist()
            trajectories.append(Trajectory(
                task_id=task.id, group_id=len(trajectories) // group_size, token_ids=prompt + completion,
                loss_mask=[False] * len(prompt) + [True] * n, behaviour_logprobs=[0.0] * len(prompt) + [-5.0] * n,
                turn_spans=[(len(prompt), len(prompt) + n)], prompt_length=len(prompt), response_text="",
                policy_version=0, finish_reason="length",
            ))
    advantages = torch.randn(len(trajectories), generator=g)
    return cfg, model, collate(trajectories, advantages, tokenizer.pad_token_id)


VARIANTS = {
    "padded": dict(pack_sequences=False),
    "packed": dict(pack_sequences=True, packed_kernels="torch"),
    "packed C": dict(pack_sequences=True, packed_kernels="native"),
}


def measure(shape: str, rounds: int) -> dict:
    cfg, model, batch = batch_of(shape)
    loss_fn = make_policy_objective(cfg.algo)
    learners = {name: PolicyLearner(copy.deepcopy(model), 1e-5, **kw) for name, kw in VARIANTS.items()}
    references = {name: ReferenceModel(model, **kw) for name, kw in VARIANTS.items()}
    batch.ref_logprobs = references["padded"].logprobs(batch)
    times = {(kind, name): [] for kind in ("update", "reference") for name in VARIANTS}
    for round_ in range(rounds + 1):
        for name in VARIANTS:
            start = time.process_time()
            learners[name].train_step(batch, loss_fn)
            update = time.process_time() - start
            start = time.process_time()
            references[name].logprobs(batch)
            reference = time.process_time() - start
            if round_:  # the first round warms up
                times["update", name].append(update)
                times["reference", name].append(reference)
    median = {key: statistics.median(values) for key, values in times.items()}
    return {
        "positions": batch.input_ids.numel(), "real": int(batch.attention_mask.sum()),
        "computed": plan_packing(batch.input_ids, batch.attention_mask).num_tokens, **median,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds after one warm-up")
    args = parser.parse_args()
    configure_process(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    print("micro model, 8 x 8 completions, 1 thread, CPU-s (median of interleaved rounds); x: padded / packed, packed / packed C")
    print("| batch | padded positions | real tokens | computed packed | update padded / packed / packed C | x | x | reference padded / packed / packed C | x | x |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape in SHAPES:
        r = measure(shape, args.rounds)
        cells = []
        for kind in ("update", "reference"):
            padded, packed, native = (r[kind, name] for name in VARIANTS)
            cells.append(f"{padded:.3f} / {packed:.3f} / {native:.3f} | {padded / packed:.2f} | {packed / native:.2f}")
        print(f"| {shape} | {r['positions']:,} | {r['real']:,} | {r['computed']:,} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
