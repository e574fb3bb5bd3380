"""Seconds per RL step of the default recipe's model, split by phase, against the machine's matmul peak.

What is measured: the default recipe's tokenizer and model (preset `micro`, built exactly as
`reinforge train` builds them, before any training), 64 completions (8 arithmetic tasks x group
8) of exactly 64 sampled tokens each (no stop tokens), and three phases of one RL step:

  rollout    TorchEngine.generate through `rollout_groups` (prompt prefill + 64 decode steps)
  reference  ReferenceModel.logprobs over the collated batch (one forward, no gradients)
  update     PolicyLearner.train_step with the PPO-clip loss (clip 0.2) plus a KL penalty to the
             reference (coef 0.05), then the engine's sync_weights, as in the RL loop

Reward scoring and advantage estimation are left out (they cost microseconds for arithmetic).
One warm-up step, then `--steps` timed steps; each phase reports its median.

How to read it: `tokens` are the positions each phase runs through the model (rollout: padded
prompt positions in the prefill plus one position per decode step; reference and update: the
padded [N, T] batch). FLOPs are estimated as 2 x params x tokens for a forward and 6 x params x
tokens for forward + backward, where params = non-embedding parameters plus the lm_head (the
attention score FLOPs and the optimizer are ignored), so `% fp32 peak` is a rough utilisation:
the peak is a large fp32 matmul (1024 x 1024 @ 1024 x 1024, repeated) measured in the same run,
with the same thread count; the bf16 peak is printed for reference. Tiny models are dominated by
per-op overhead, so expect a few percent. Absolute times move 2-3x between runs on a shared box.

    python benchmarks/rl_step.py [--preset micro] [--steps 3] [--threads N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.run.env_factory import build_env
from reinforge.learner.batch import collate
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.registry import load_tasks
from reinforge.run.pipeline import build_policy

PHASES = ("rollout", "reference", "update")


def matmul_peak_gflops(dtype: torch.dtype, n: int = 1024, repeats: int = 10) -> float:
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 * repeats / best / 1e9


def make_loss(cfg):
    """PPO-clip + KL-to-reference loss, through whichever of the trainer's APIs this checkout has."""
    try:
        from reinforge.learner.policy_objective import make_policy_objective
    except ImportError:  # older layout: one function in the RL loop
        from reinforge.trainer.rl_loop import make_policy_loss

        return make_policy_loss(cfg.algo.clip_eps, kl_coef=cfg.algo.kl_coef)
    return make_policy_objective(cfg.algo)


def matmul_params(model: torch.nn.Module) -> int:
    """Non-embedding parameters plus the lm_head (counted once when tied to the embedding)."""
    total = sum(p.numel() for p in model.parameters())
    embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    return total if embed is head else total - embed.numel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default=None, help="model preset (default: the default recipe's, micro)")
    parser.add_argument("--tasks", type=int, default=8, help="tasks per step")
    parser.add_argument("--group-size", type=int, default=8, help="completions per task")
    parser.add_argument("--new-tokens", type=int, default=64, help="sampled tokens per completion")
    parser.add_argument("--steps", type=int, default=3, help="timed RL steps after one warm-up step")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch's choice)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    overrides = ["algo.clip_eps=0.2", "algo.kl_coef=0.05", f"rollout.max_new_tokens={args.new_tokens}"]
    overrides += [f"model.preset={args.preset}"] if args.preset else []
    cfg = load_config("default", overrides)
    torch.manual_seed(cfg.trainer.seed)
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed)
    model, tokenizer = build_policy(cfg, tasks)
    env = build_env(cfg, tokenizer)
    pad = tokenizer.pad_token_id

    engine = TorchEngine(model, pad, dtype=cfg.rollout.engine_dtype)
    learner = PolicyLearner(
        model, cfg.algo.lr, cfg.algo.weight_decay, cfg.algo.max_grad_norm,
        cfg.algo.micro_batch_size, cfg.algo.bf16_autocast, cfg.rollout.temperature,
    )
    reference = ReferenceModel(model, cfg.algo.micro_batch_size, cfg.rollout.temperature)
    loss_fn = make_loss(cfg)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=cfg.rollout.temperature)  # no stop tokens
    engine.sync_weights(learner.version)

    seconds: dict[str, list[float]] = {phase: [] for phase in PHASES}
    tokens: dict[str, int] = {}
    for step in range(args.steps + 1):
        batch_tasks = tasks.train[step * args.tasks : (step + 1) * args.tasks]
        t0 = time.perf_counter()
        trajectories = rollout_groups(engine, env, batch_tasks, args.group_size, params, seed=step)
        t1 = time.perf_counter()
        advantages = torch.randn(len(trajectories), generator=torch.Generator().manual_seed(step))
        batch = collate(trajectories, advantages, pad)
        t2 = time.perf_counter()
        batch.ref_logprobs = reference.logprobs(batch)
        t3 = time.perf_counter()
        learner.train_step(batch, loss_fn)
        engine.sync_weights(learner.version)
        t4 = time.perf_counter()

        sampled = sum(t.num_sampled_tokens for t in trajectories)
        if sampled != len(trajectories) * args.new_tokens:
            raise RuntimeError(f"sampled {sampled} tokens, expected {len(trajectories) * args.new_tokens}")
        prompt_width = max(t.prompt_length for t in trajectories)
        tokens = {
            "rollout": len(trajectories) * (prompt_width + args.new_tokens - 1),
            "reference": batch.input_ids.numel(),
            "update": batch.input_ids.numel(),
        }
        if step > 0:  # step 0 is the warm-up
            for phase, s in zip(PHASES, (t1 - t0, t3 - t2, t4 - t3)):
                seconds[phase].append(s)

    peak_fp32, peak_bf16 = matmul_peak_gflops(torch.float32), matmul_peak_gflops(torch.bfloat16)
    n_params = matmul_params(model)
    flops_per_token = {"rollout": 2 * n_params, "reference": 2 * n_params, "update": 6 * n_params}
    results = {}
    for phase in PHASES:
        s = statistics.median(seconds[phase])
        gflop = flops_per_token[phase] * tokens[phase] / 1e9
        results[phase] = {
            "seconds": s, "tokens": tokens[phase], "tokens_per_s": tokens[phase] / s,
            "gflop": gflop, "gflops": gflop / s, "pct_fp32_peak": 100 * gflop / s / peak_fp32,
            "all_seconds": seconds[phase],
        }
    total = sum(r["seconds"] for r in results.values())
    total_gflop = sum(r["gflop"] for r in results.values())

    print(
        f"model: preset {cfg.model.preset} ({n_params / 1e6:.2f}M matmul params), "
        f"{len(trajectories)} completions x {args.new_tokens} tokens, prompt width {prompt_width}, "
        f"threads={torch.get_num_threads()}, median of {args.steps} steps"
    )
    print(f"matmul peak (1024^3): fp32 {peak_fp32:.0f} GFLOP/s, bf16 {peak_bf16:.0f} GFLOP/s")
    print(f"{'phase':<11}{'s/step':>8}{'share':>7}{'tokens':>8}{'tok/s':>9}{'GFLOP':>8}{'GFLOP/s':>9}{'% fp32 peak':>13}")
    for phase, r in results.items():
        print(
            f"{phase:<11}{r['seconds']:>8.3f}{r['seconds'] / total:>7.0%}{r['tokens']:>8}{r['tokens_per_s']:>9.0f}"
            f"{r['gflop']:>8.2f}{r['gflops']:>9.1f}{r['pct_fp32_peak']:>12.1f}%"
        )
    print(f"{'total':<11}{total:>8.3f}{'':>7}{'':>8}{'':>9}{total_gflop:>8.2f}{total_gflop / total:>9.1f}{100 * total_gflop / total / peak_fp32:>12.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": vars(args), "threads": torch.get_num_threads(), "peak_gflops": {"float32": peak_fp32, "bfloat16": peak_bf16},
                 "matmul_params": n_params, "results": results},
                f, indent=2,
            )


if __name__ == "__main__":
    main()
