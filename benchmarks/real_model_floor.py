"""How far reinforge's RL step on a real model is from the fastest step its fp32 matmuls allow.

`benchmarks/vs_trl.py --model DIR` compares reinforge's step with TRL's. This asks a different
question: if everything but the matmuls were free, how long would each phase take on this CPU?
It runs reinforge's side of that comparison in this process (`vs_trl_sides.reinforge_side`: the
same config, the same `--set` keys, random rewards), `--steps` timed steps after one warm-up, then:

- counts each phase's matmul FLOPs from the model and the tokens the steps computed (attention's
  own products are left out: under 1% at these lengths). With P the model's matmul parameters
  without the LM head, V x H the head, n the positions the learner's forward computes (each
  group's prompt once, as the packed forward does; every padded position with
  `algo.pack_sequences=false`) and c the completion tokens (the head runs on them only):
    reference  2 (P n + V H c)
    update     3 x the reference (forward, then the backward's two products), + 2 V H c when the
               chunked log-softmax computes the head's logits again in its backward (a
               micro-batch of more than KEEP_ROWS_SHARE chunks' tokens: chunked_logprobs)
    rollout    2 (P + V H) c + 2 P (prompt tokens, prefilled once per group)
- measures torch's one-thread fp32 rate on the model's own weights: every `nn.Linear` of the
  model once on an [m, in] input, the way a forward meets them (best of 3, CPU time), at m = the
  rollout's rows (a decode step: every weight comes from memory) and at m = the learner's
  micro-batch tokens;
- prints, per phase, the measured CPU seconds, the floor (its FLOPs at that rate) and their
  ratio. With `--trl-step-cpu S` (TRL's step from vs_trl.py's output) it prints the ratio to TRL
  that the floor would give: the best that faster non-matmul code could reach.

    python benchmarks/real_model_floor.py --model DIR [--tasks 8 --group-size 4 --new-tokens 128 --kl 0.04
        --micro-batch 32 --set algo.max_tokens_per_microbatch=672] [--steps 2] [--trl-step-cpu 133.9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from rl_step import matmul_params  # noqa: E402
from vs_trl_real import reinforge_overrides  # noqa: E402
from vs_trl_sides import reinforge_side  # noqa: E402


class LocalChannel:
    """vs_trl_sides' channel without a driver: runs `steps` steps and keeps their events."""

    def __init__(self, steps: int):
        self.left, self.events, self.started = steps, [], None

    def command(self) -> str:
        self.left -= 1
        return "step" if self.left >= 0 else "quit"

    def send(self, event: str, **fields) -> None:
        self.events.append({"event": event, **fields})

    def begin_step(self) -> tuple[float, float]:
        return time.process_time(), time.perf_counter()

    def end_step(self, started, phases: dict[str, float], **fields) -> None:
        cpu = time.process_time() - started[0]
        phases = {**phases, "update": cpu - phases.get("rollout", 0.0) - phases.get("reference", 0.0)}
        self.send("step", cpu=cpu, phases=phases, load=os.getloadavg()[0], **fields)

    def finish(self) -> None:
        pass


def linear_gflops(model: torch.nn.Module, rows: int, rounds: int = 3) -> float:
    """fp32 GFLOP per CPU-second of every nn.Linear of `model` applied once to [rows, in], in module order."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {m.in_features: torch.randn(rows, m.in_features) for m in linears}
    flops = sum(2 * rows * m.in_features * m.out_features for m in linears)
    best = float("inf")
    with torch.no_grad():
        for _ in range(rounds):
            start = time.process_time()
            for m in linears:
                F.linear(inputs[m.in_features], m.weight)
            best = min(best, time.process_time() - start)
    return flops / best / 1e9


def phase_flops(model, step: dict, packed: bool, head_recomputed: bool) -> dict[str, float]:
    """Matmul FLOPs of one step's phases (the module docstring has the formulas)."""
    head = model.get_output_embeddings().weight.numel()
    body = matmul_params(model) - head
    prompts = [len(p) for p in step["prompt_ids"]]
    completions = sum(step["completion_lengths"])
    if packed:
        positions = sum(prompts) + completions
    else:
        longest = max(prompts) + max(step["completion_lengths"])
        positions = longest * len(step["completion_lengths"])
    reference = 2 * (body * positions + head * completions)
    return {
        "rollout": 2 * (body + head) * completions + 2 * body * sum(prompts),
        "reference": reference,
        "update": 3 * reference + (2 * head * completions if head_recomputed else 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a Hugging Face directory (SmolLM2-135M-Instruct)")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--kl", type=float, default=0.04)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2, help="timed steps after one warm-up")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a reinforge config override")
    parser.add_argument("--trl-step-cpu", type=float, help="TRL's CPU-s per step at these settings (vs_trl.py's output)")
    args = parser.parse_args()
    args.pairs = args.steps
    overrides = reinforge_overrides(args)
    channel = LocalChannel(args.steps + 1)
    reinforge_side({"reinforge_overrides": overrides, "group_size": args.group_size, "tasks": args.tasks}, channel)
    steps = [e for e in channel.events if e["event"] == "step"][1:]  # the first is the warm-up

    from transformers import AutoModelForCausalLM

    from reinforge.config import load_config
    from reinforge.learner import chunked_logprobs

    cfg = load_config("default", overrides)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    rows = args.tasks * args.group_size
    learner_rows = cfg.algo.max_tokens_per_microbatch or args.micro_batch * (args.new_tokens + 40)
    chunk = cfg.algo.logprob_chunk_tokens
    recomputed = chunk is not None and learner_rows > chunked_logprobs.KEEP_ROWS_SHARE * chunk
    flops = phase_flops(model, steps[-1], cfg.algo.pack_sequences, recomputed)
    rate = {"rollout": linear_gflops(model, rows)}
    rate["reference"] = rate["update"] = linear_gflops(model, learner_rows)
    load = statistics.mean(s["load"] for s in steps)
    print(f"one thread, fp32; {len(steps)} timed steps, load {load:.1f}; matmul rate on the model's own weights: "
          f"{rate['rollout']:.0f} GFLOP/s at {rows} rows, {rate['update']:.0f} at {learner_rows}")
    print("| phase | measured cpu-s | matmul TFLOP | floor cpu-s (matmuls only) | measured / floor |")
    print("|---|---|---|---|---|")
    total_measured = total_floor = 0.0
    for phase in ("rollout", "reference", "update"):
        if phase not in steps[0]["phases"]:
            continue
        measured = statistics.median(s["phases"][phase] for s in steps)
        floor = flops[phase] / rate[phase] / 1e9
        total_measured, total_floor = total_measured + measured, total_floor + floor
        print(f"| {phase} | {measured:.1f} | {flops[phase] / 1e12:.2f} | {floor:.1f} | {measured / floor:.2f} |")
    print(f"| step | {total_measured:.1f} | | {total_floor:.1f} | {total_measured / total_floor:.2f} |")
    if args.trl_step_cpu:
        print(f"TRL {args.trl_step_cpu:.1f} cpu-s per step: {args.trl_step_cpu / total_measured:.2f}x measured, "
              f"{args.trl_step_cpu / total_floor:.2f}x at the floor")


if __name__ == "__main__":
    main()
