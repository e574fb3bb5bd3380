"""Where one update's time goes: matmuls, attention, the rest, eager and with `algo.compile_forward`.

What is measured: the step of `benchmarks/vs_trl.py` (the default recipe's `micro` model, or
`--widths` x its hidden and MLP sizes; 8 x 8 completions of 64 forced tokens, PPO-clip, KL 0.05 to
a reference), `PolicyLearner.train_step` on a fixed batch: its CPU time (median of `--rounds`), the
positions per CPU-second and the share of the fp32 matmul peak, then as many steps under
`torch.profiler`, each op's self CPU time summed by kind:

  matmul     aten::mm / addmm / bmm / matmul (the model's linear layers, forward and backward)
  attention  scaled_dot_product_attention kernels, or the C packed attention, forward and backward
  fused      inductor's generated kernels (compiled: every elementwise op it fused), or the C
             RMSNorm, rotary and SwiGLU (eager, algo.packed_kernels)
  other      everything else (elementwise ops in eager, log-softmax, optimizer, bookkeeping)

and the matmuls' own rate: the update's matmul FLOPs (6 x matmul params x computed positions) per
CPU-second of matmul time, against a 1024^3 fp32 matmul measured in the same process. That rate
bounds the update's share of the matmul peak whatever is done to the other kinds. The profiler
adds some overhead to every op, most to small ones; the shares are indicative, not exact.

    python benchmarks/update_profile.py [--widths 1,2,4,8] [--compile] [--rounds 3] [--top N]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rl_step import matmul_params  # noqa: E402
from vs_trl import Clock, computed_positions, matmul_peak_gflops_cpu, reinforge_alone, widened_preset  # noqa: E402

from reinforge.learner.batch import collate  # noqa: E402
from reinforge.rollout.episodes import rollout_groups  # noqa: E402
from reinforge.runtime.process_settings import configure_process  # noqa: E402

MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


def kind_of(name: str) -> str:
    if name in MATMUL_OPS:
        return "matmul"
    if "scaled_dot_product" in name or "flash_attention" in name or name.startswith("_PackedAttention"):
        return "attention"
    if "CompiledFxGraph" in name or name.startswith("cpp_fused") or "inductor" in name.lower():
        return "fused"
    if name.startswith(("_RMSNorm", "_SwiGLU", "_Rotary")):  # reinforge.kernels.layers (algo.packed_kernels)
        return "fused"
    return "other"


def measure(width: int, compiled: bool, rounds: int, top: int) -> dict:
    """One model: `rounds` timed updates on a fixed batch, then `rounds` more under the profiler."""
    ours, env = reinforge_alone(width, compiled, 4)
    for _ in range(2):  # warm-up (and the compile)
        ours.step(Clock())
    trajectories = rollout_groups(ours.engine, env, ours.task_batches[0], 8, ours.params, seed=0)
    batch = collate(trajectories, torch.randn(len(trajectories)), ours.pad)
    batch.ref_logprobs = ours.reference.logprobs(batch)
    ours.learner.train_step(batch, ours.loss_fn)
    times = []
    for _ in range(rounds):
        start = time.process_time()
        ours.learner.train_step(batch, ours.loss_fn)
        times.append(time.process_time() - start)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(rounds):
            ours.learner.train_step(batch, ours.loss_fn)
    by_kind: dict[str, float] = {}
    for event in prof.key_averages():
        by_kind[kind_of(event.key)] = by_kind.get(kind_of(event.key), 0.0) + event.self_cpu_time_total / 1e6 / rounds
    if top:
        print(prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=top))
    peak = matmul_peak_gflops_cpu()
    positions = computed_positions(ours.learner, batch)
    flops = 6 * matmul_params(ours.model) * positions
    update = statistics.median(times)
    return {
        "preset": widened_preset(width), "matmul_params": matmul_params(ours.model), "positions": positions,
        "update_s": update, "peak": peak, "update_pct": 100 * flops / update / 1e9 / peak,
        "kinds": by_kind, "matmul_pct": 100 * flops / by_kind["matmul"] / 1e9 / peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", default="1", help="comma-separated multiples of micro's hidden and MLP sizes")
    parser.add_argument("--compile", action="store_true", help="with algo.compile_forward")
    parser.add_argument("--rounds", type=int, default=3, help="timed updates, then as many profiled")
    parser.add_argument("--top", type=int, default=0, help="also print the N ops with the most self CPU time")
    args = parser.parse_args()
    configure_process(1)  # as `reinforge train` sets up its process (one thread, freed memory retained)
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    print(f"{'compiled' if args.compile else 'eager'} update, 64 x 64-token completions + prompts, 1 thread")
    print("| model | matmul params | update CPU-s | positions per CPU-s | % of fp32 peak | matmul / attention / fused / other share of the update | matmuls alone, % of peak |")
    print("|---|---|---|---|---|---|---|")
    for width in (int(w) for w in args.widths.split(",")):
        r = measure(width, args.compile, args.rounds, args.top)
        total = sum(r["kinds"].values())
        shares = " / ".join(f"{100 * r['kinds'].get(k, 0.0) / total:.0f}%" for k in ("matmul", "attention", "fused", "other"))
        print(f"| {r['preset']} | {r['matmul_params'] / 1e6:.2f}M | {r['update_s']:.3f} | {r['positions'] / r['update_s']:,.0f} | "
              f"{r['update_pct']:.0f}% (peak {r['peak']:.0f}) | {shares} | {r['matmul_pct']:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
