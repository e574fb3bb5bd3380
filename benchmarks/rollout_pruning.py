"""Rollout pruning (ARRoL) vs none: sampled tokens and held-out accuracy, from one warm start.

The workload: mixed-difficulty addition, each problem's operands with 1 to `--max-digits` digits
(equally often), from a teacher that drops the carry in a fraction 1 - `--teacher-accuracy` of its
worked answers (0.6 by default, as in the default recipe). One supervised warm start (`micro` model) is shared; then, per seed, the same number of
GRPO steps without pruning, with `success_head.prune` at its defaults (prune predicted failures,
p < 0.5, down to 2 rows per group), and conservatively (p < 0.2, at least half the group kept).
The head trains in the pruned runs from the first step and may prune from step `--warmup`. Reported per variant, as mean (min..max) over seeds:

  tokens      every token the engine sampled in RL (pruned rollouts' tokens included)
  saved       1 - tokens / tokens of the unpruned run of the same seed
  pruned      fraction of rollouts pruned
  acc         greedy held-out accuracy at the end (start: the warm start's)
  mean@4      fraction of 4 samples at temperature 1 that solve a held-out problem
  maj / best / vote   majority voting, best-of-4 and weighted voting by the success head (pruned runs)
  rollout s   seconds in the rollout phase (engine), and the head's own time (teacher-forced
              features + training) per run

    python benchmarks/rollout_pruning.py [--seeds 0,1,2] [--steps 40] [--sft-steps 1000] [--max-digits 4]
        [--teacher-accuracy 0.4] [--sft-lr 0.001] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from reinforge.config import load_config
from reinforge.run.pipeline import run_sft_stage, run_training
from reinforge.tasks.arithmetic import add_without_carry

PROMPTS, GROUP, MAX_NEW_TOKENS = 16, 8, 8


def operand(rng: random.Random, digits: int) -> int:
    return rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits)


def write_tasks(directory: Path, train_size: int, eval_size: int, max_digits: int, teacher_accuracy: float, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    held_out: set[tuple[int, int]] = set()

    def problem(training: bool) -> tuple[int, int, int]:
        # Held-out problems are distinct and never trained on; training problems may repeat (there
        # are only 100 one-digit pairs, and every difficulty must be trained on equally often).
        while True:
            digits = rng.randint(1, max_digits)
            a, b = operand(rng, digits), operand(rng, digits)
            if (a, b) not in held_out:
                if not training:
                    held_out.add((a, b))
                return a, b, digits

    eval_path, train_path = directory / "eval.jsonl", directory / "train.jsonl"
    with eval_path.open("w") as f:
        for i in range(eval_size):
            a, b, d = problem(training=False)
            f.write(json.dumps({"id": f"e{i}", "prompt": f"{a}+{b}=", "answer": a + b, "verifier": "numeric", "family": f"{d}digit"}) + "\n")
    with train_path.open("w") as f:
        for i in range(train_size):
            a, b, d = problem(training=True)
            shown = str(a + b if rng.random() < teacher_accuracy else add_without_carry(a, b))
            f.write(json.dumps({"id": f"t{i}", "prompt": f"{a}+{b}=", "answer": a + b, "verifier": "numeric", "solution": shown, "family": f"{d}digit"}) + "\n")
    return train_path, eval_path


def base_overrides(train: Path, eval_: Path, steps: int, sft_lr: float) -> list[str]:
    return [
        "task.source=jsonl", f"task.path={train}", f"task.eval_path={eval_}", "model.preset=micro",
        f"rollout.max_new_tokens={MAX_NEW_TOKENS}", f"rollout.prompts_per_step={PROMPTS}", f"rollout.group_size={GROUP}",
        "reward.components=[{name: correct, fn: verifier, weight: 1.0}]", "rollout.temperature=1.0",
        "sft.batch_size=64", f"sft.lr={sft_lr}", "sft.warmup_steps=100", "algo.advantage=grpo", "algo.lr=0.0002", "algo.clip_eps=0.2",
        f"trainer.steps={steps}", f"eval.every={steps}", "eval.samples=4", "trainer.checkpoint_every=0", "trainer.threads=1",
        "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'",
    ]


def measure(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    evals = [r for r in rows if r["stage"] == "eval"]
    tokens = sum(r.get("prune/tokens_sampled", r["response_length"] * PROMPTS * GROUP) for r in rl)
    last = evals[-1]
    out = {
        "tokens": tokens,
        "pruned": sum(r.get("prune/rollouts", 0.0) for r in rl) / (len(rl) * PROMPTS * GROUP),
        "accuracy_start": evals[0]["accuracy"],
        "accuracy": last["accuracy"],
        "mean@4": last["mean@4"],
        "rollout_s": sum(r["time/rollout"] for r in rl),
        "head_s": sum(r.get("time/value_heads", 0.0) for r in rl),
        **{k: last[k] for k in ("majority@4", "value_best@4", "value_vote@4") if k in last},
        **{k: last[k] for k in last if k.startswith("accuracy/")},
    }
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f} ({min(values):.3f}..{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="RL seeds (the warm start is shared)")
    parser.add_argument("--steps", type=int, default=40, help=f"RL steps per run (x {PROMPTS * GROUP} rollouts)")
    parser.add_argument("--sft-steps", type=int, default=1000, help="supervised warm-up steps (shared)")
    parser.add_argument("--max-digits", type=int, default=4, help="operands have 1..max-digits digits (equally often)")
    parser.add_argument("--teacher-accuracy", type=float, default=0.4, help="fraction of warm-up answers with the carry right")
    parser.add_argument("--sft-lr", type=float, default=0.001, help="supervised warm-up learning rate")
    parser.add_argument("--eval-size", type=int, default=400, help="held-out problems")
    parser.add_argument("--warmup", type=int, default=5, help="RL steps the success head trains before it prunes")
    parser.add_argument("--check-every", type=int, default=2, help="decode steps between pruning checks")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = {
        "no pruning": [],
        "pruning": [
            "success_head.enabled=true", "success_head.prune=true", f"success_head.warmup_steps={args.warmup}",
            f"success_head.check_every={args.check_every}",
        ],
        # Prunes only confident failures and keeps half of each group.
        "pruning, conservative": [
            "success_head.enabled=true", "success_head.prune=true", f"success_head.warmup_steps={args.warmup}",
            f"success_head.check_every={args.check_every}", "success_head.fail_below=0.2", f"success_head.min_group_size={GROUP // 2}",
        ],
    }
    load_before = os.getloadavg()[0]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train, eval_ = write_tasks(tmp, 20000, args.eval_size, args.max_digits, args.teacher_accuracy)
        base = base_overrides(train, eval_, args.steps, args.sft_lr)
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            warm = run_sft_stage(load_config("default", [*base, f"sft.steps={args.sft_steps}", f"trainer.output_dir={tmp / 'sft'}"]))
        print(f"warm-up: {args.sft_steps} SFT steps, {time.perf_counter() - started:.0f} s", flush=True)
        for seed in seeds:
            for name, extra in variants.items():
                run_dir = tmp / f"{name.replace(' ', '_')}_{seed}"
                cfg = load_config("default", [*base, *extra, f"trainer.seed={seed}", f"model.path={warm}", "sft.steps=0", f"trainer.output_dir={run_dir}"])
                started = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()):
                    run_training(cfg)
                results[name].append(measure(run_dir))
                print(f"  seed {seed} {name}: {time.perf_counter() - started:.0f} s", flush=True)

    print(f"\n1..{args.max_digits}-digit addition, teacher accuracy {args.teacher_accuracy}, {args.sft_steps} SFT steps at lr {args.sft_lr}")
    print(f"{len(seeds)} seeds x {args.steps} GRPO steps x {PROMPTS * GROUP} rollouts, max {MAX_NEW_TOKENS} new tokens, checks every {args.check_every}")
    print(f"(1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores)\n")
    base_tokens = [r["tokens"] for r in results["no pruning"]]
    for name, runs in results.items():
        saved = [1 - r["tokens"] / b for r, b in zip(runs, base_tokens)]
        print(f"{name}:")
        print(f"  tokens {spread([r['tokens'] for r in runs])}  saved {spread(saved)}  pruned {spread([r['pruned'] for r in runs])}")
        print(f"  acc {runs[0]['accuracy_start']:.3f} -> {spread([r['accuracy'] for r in runs])}  mean@4 {spread([r['mean@4'] for r in runs])}")
        families = sorted(k for k in runs[0] if k.startswith("accuracy/"))
        print("  " + "  ".join(f"{k.split('/')[1]} {spread([r[k] for r in runs])}" for k in families))
        if "value_vote@4" in runs[0]:
            print(f"  maj@4 {spread([r['majority@4'] for r in runs])}  best@4 {spread([r['value_best@4'] for r in runs])}  vote@4 {spread([r['value_vote@4'] for r in runs])}")
        print(f"  rollout s {spread([r['rollout_s'] for r in runs])}  head s {spread([r['head_s'] for r in runs])}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
