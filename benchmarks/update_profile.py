"""Where one update's time goes: matmuls, attention, the rest, eager and with `algo.compile_forward`.

What is measured: the step of `benchmarks/vs_trl.py` (the default recipe's `micro` model, 8 x 8
completions of 64 forced tokens, PPO-clip, KL 0.05 to a reference), one `PolicyLearner.train_step`
on a fixed batch under `torch.profiler`, each op's self CPU time summed by kind:

  matmul     aten::mm / addmm / bmm / matmul (the model's linear layers, forward and backward)
  attention  scaled_dot_product_attention kernels, forward and backward
  fused      inductor's generated kernels (compiled only: every elementwise op it fused)
  other      everything else (elementwise ops in eager, log-softmax, optimizer, bookkeeping)

and the matmuls' own rate: the update's matmul FLOPs (6 x matmul params x batch positions) per
CPU-second of matmul time, against a 1024^3 fp32 matmul measured in the same process. That rate
bounds the update's share of the matmul peak whatever is done to the other kinds. The profiler
adds some overhead to every op, most to small ones; the shares are indicative, not exact.

    python benchmarks/update_profile.py [--width 1] [--compile] [--rounds 3] [--top N]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rl_step import matmul_params  # noqa: E402
from vs_trl import Clock, Reinforge, matmul_peak_gflops_cpu, widened_preset  # noqa: E402

from reinforge.config import load_config  # noqa: E402
from reinforge.envs.factory import build_env  # noqa: E402
from reinforge.learner.batch import collate  # noqa: E402
from reinforge.rollout.episodes import rollout_groups  # noqa: E402
from reinforge.run.pipeline import build_policy  # noqa: E402
from reinforge.tasks.registry import load_tasks  # noqa: E402

MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


def kind_of(name: str) -> str:
    if name in MATMUL_OPS:
        return "matmul"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    if "CompiledFxGraph" in name or name.startswith("cpp_fused") or "inductor" in name.lower():
        return "fused"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=1, help="hidden and MLP sizes as a multiple of micro's")
    parser.add_argument("--compile", action="store_true", help="with algo.compile_forward")
    parser.add_argument("--rounds", type=int, default=3, help="profiled updates (their sum is reported)")
    parser.add_argument("--top", type=int, default=0, help="also print the N ops with the most self CPU time")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    overrides = ["algo.clip_eps=0.2", "algo.kl_coef=0.05", "rollout.max_new_tokens=64",
                 f"model.preset={widened_preset(args.width)}", "model.max_positions=128"]
    cfg = load_config("default", overrides)
    torch.manual_seed(cfg.trainer.seed)
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed)
    model, tokenizer = build_policy(cfg, tasks)
    env = build_env(cfg, tokenizer)
    batches = [tasks.train[i * 8 : (i + 1) * 8] for i in range(4)]
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        ours = Reinforge(tmp, cfg, env, batches, 8, 64, 0.05, args.compile)
    for _ in range(2):  # warm-up (and the compile)
        ours.step(Clock())
    trajectories = rollout_groups(ours.engine, env, batches[0], 8, ours.params, seed=0)
    batch = collate(trajectories, torch.randn(len(trajectories)), ours.pad)
    batch.ref_logprobs = ours.reference.logprobs(batch)
    ours.learner.train_step(batch, ours.loss_fn)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.rounds):
            ours.learner.train_step(batch, ours.loss_fn)
    by_kind: dict[str, float] = {}
    for event in prof.key_averages():
        by_kind[kind_of(event.key)] = by_kind.get(kind_of(event.key), 0.0) + event.self_cpu_time_total / 1e6
    total = sum(by_kind.values())
    peak = matmul_peak_gflops_cpu()
    flops = 6 * matmul_params(ours.model) * batch.input_ids.numel() * args.rounds
    print(f"model {cfg.model.preset}, batch {list(batch.input_ids.shape)}, {'compiled' if args.compile else 'eager'}, "
          f"{args.rounds} updates: {total / args.rounds:.3f} CPU-s each under the profiler")
    for kind in ("matmul", "attention", "fused", "other"):
        if kind in by_kind:
            print(f"  {kind:9s} {by_kind[kind] / args.rounds:.3f} s  {100 * by_kind[kind] / total:4.0f}%")
    if args.top:
        print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=args.top))
    rate = flops / by_kind["matmul"] / 1e9
    print(f"matmuls alone: {rate:.0f} GFLOP per CPU-second = {100 * rate / peak:.0f}% of the fp32 peak ({peak:.0f}); "
          f"the whole update: {100 * flops / total / 1e9 / peak:.0f}%")


if __name__ == "__main__":
    main()
