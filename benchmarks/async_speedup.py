"""Wall time per 1,000 trained samples, sync vs async (k = 1, 2) vs partial rollouts, on long tails.

The workload: two-digit addition from an imperfect teacher (as in the default recipe: it drops
the carry in 60% of its answers), where a worked answer is first padded with a random run of
leading zeros: none in 90% of them, 8 to 32 in the rest ("0000046" still parses as 46). After the
supervised warm-up (the sums first, then the padding) the model samples that padding itself, so
response lengths are long-tailed: most responses are 3-4 tokens, ~10% run to 10-35, and a batch
of 128 takes as many decode steps as its longest row while almost every row has finished.

One shared warm start (`micro` model), then the same number of RL steps (so the same number of
trained samples) for each schedule, each with one torch thread:

  sync             today's loop (one thread: one core)
  sync + TIS       the same with the decoupled-PPO correction async needs (algo.tis_cap=2: one
                   more learner forward per step, for the proximal log-probs): same algorithm
                   as async, only the schedule differs
  async k=1/k=2    a producer thread samples step s with the weights of step s-1-k while the
                   learner trains (its own thread: async uses both cores, two one-thread pools)
  sync + partial   APRIL on its own: 1.5x the groups in flight, stop at 16 complete (k=1)
  async k=2 + partial  both (lag 1: a resumed group spends the last version of the budget)

Reported per variant: wall seconds per 1,000 trained samples of the RL steps (evaluation
excluded) and its ratio to sync and to sync + TIS (higher is faster); the seconds per 1,000 samples the learner sat idle waiting for
its batch and the engine sat idle (not sampling training rollouts), the two quantities async
removes; the engine's and the learner's busy time; and the greedy held-out accuracy before and
after. Optional variant `sync 2 threads` (sync on both cores through torch intra-op threads) is
left out by default: for models this small, two intra-op threads are slower than one, and far
slower when other processes share the cores (threads spin-wait).

How to read it. On this CPU the learner is most of a sync step (~5/6 here: it pads every row
to the batch's longest, and the tail makes that long), and the engine already drops finished
rows from its batch, so a long tail costs it per-step overhead rather than compute: the most
any overlap can save is the engine's share, and partial rollouts (which keep 1.5x the rows in
flight and re-read resumed prompts) save little engine time here.

What two cores bound: engine and learner share one machine and, for models this small, one
Python interpreter (the decode loop is per-token Python and kernel-launch overhead, and threads
take turns on the GIL), so overlapping them buys far less than their idle times suggest, and
nothing when other processes already keep both cores busy. Decoupled PPO needs the proximal
log-probs; with epochs = mini_batches = 1 (as here) they are the update's own forward, detached,
so no extra learner forward is paid (reinforge.trainer.advantage_step.proximal_forward_folds). With
separate devices (a GPU or a host per side, e.g. vLLM engines beside FSDP learners) the sync step
costs engine + learner time and the async one max(engine, learner): the script prints that
projection from the sync run's own busy times, (R + U) / max(R, U), and the same with the
rollout time partial rollouts leave. It is an upper bound (weight transfer is free in it).

    python benchmarks/async_speedup.py [--steps 16] [--sft-steps 1000] [--variants sync,async k=1] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import tempfile
import time
from pathlib import Path

from reinforge.config import load_config
from reinforge.tasks.arithmetic import add_without_carry
from reinforge.run.pipeline import run_sft_stage, run_training

PROMPTS, GROUP = 16, 8
MAX_PADDING, MAX_NEW_TOKENS = 32, 40
VARIANTS = {
    "sync": ["trainer.threads=1"],
    "sync 2 threads": ["trainer.threads=2"],
    "sync + TIS": ["trainer.threads=1", "algo.tis_cap=2.0"],
    "async k=1": ["trainer.threads=1", "trainer.schedule=async", "trainer.max_staleness=1", "algo.tis_cap=2.0"],
    "async k=2": ["trainer.threads=1", "trainer.schedule=async", "trainer.max_staleness=2", "algo.tis_cap=2.0"],
    "sync + partial": ["trainer.threads=1", "trainer.partial_rollouts=true", "trainer.max_staleness=1", "algo.tis_cap=2.0"],
    "async k=2 + partial": [
        "trainer.threads=1", "trainer.schedule=async", "trainer.max_staleness=2", "trainer.partial_rollouts=true", "algo.tis_cap=2.0",
    ],
}


def padding(rng: random.Random) -> int:
    return 0 if rng.random() < 0.9 else rng.randint(8, MAX_PADDING)


def write_tasks(directory: Path, train_size: int, eval_size: int, seed: int = 0) -> tuple[Path, Path, Path]:
    """Training tasks without and with the padding (same problems, same teacher), held-out tasks."""
    rng = random.Random(seed)
    pairs = [(a, b) for a in range(100) for b in range(100)]
    rng.shuffle(pairs)
    held_out, train = pairs[:eval_size], pairs[eval_size:]
    plain_path, padded_path, eval_path = directory / "plain.jsonl", directory / "padded.jsonl", directory / "eval.jsonl"
    with plain_path.open("w") as plain, padded_path.open("w") as padded:
        for i in range(train_size):
            a, b = train[i % len(train)]
            shown = str(a + b if rng.random() < 0.4 else add_without_carry(a, b))
            record = {"id": f"t{i}", "prompt": f"{a}+{b}=", "answer": a + b, "verifier": "numeric"}
            plain.write(json.dumps({**record, "solution": shown}) + "\n")
            padded.write(json.dumps({**record, "solution": "0" * padding(rng) + shown}) + "\n")
    with eval_path.open("w") as f:
        for a, b in held_out:
            f.write(json.dumps({"id": f"e{a}-{b}", "prompt": f"{a}+{b}=", "answer": a + b, "verifier": "numeric"}) + "\n")
    return plain_path, padded_path, eval_path


def base_overrides(train: Path, eval_: Path, steps: int) -> list[str]:
    return [
        "task.source=jsonl", f"task.path={train}", f"task.eval_path={eval_}", "model.preset=micro",
        f"rollout.max_new_tokens={MAX_NEW_TOKENS}", f"rollout.prompts_per_step={PROMPTS}", f"rollout.group_size={GROUP}",
        "reward.components=[{name: correct, fn: verifier, weight: 1.0}]", "rollout.temperature=1.0",
        # Pinned here, so that tuning the default recipe does not move this benchmark.
        "sft.batch_size=64", "sft.lr=0.0015", "sft.warmup_steps=100", "algo.advantage=grpo", "algo.lr=0.0002", "algo.clip_eps=0.2",
        f"trainer.steps={steps}", f"eval.every={steps}", "eval.samples=1", "trainer.checkpoint_every=0",
        "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'",
    ]


def measure(run_dir: Path, steps: int) -> dict[str, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = next(r["time"] for r in rows if r["stage"] == "eval" and r["step"] == 0)
    rl = [r for r in rows if r["stage"] == "rl"]
    per_1k = 1000 / (steps * PROMPTS * GROUP)
    evals = [r for r in rows if r["stage"] == "eval"]
    return {
        "wall_per_1k": (rl[-1]["time"] - start) * per_1k,
        "learner_idle_per_1k": sum(r["time/learner_idle"] for r in rl) * per_1k,
        "engine_idle_per_1k": sum(r["time/engine_idle"] for r in rl) * per_1k,
        "engine_busy_per_1k": sum(r["time/rollout"] + r["time/reward"] for r in rl) * per_1k,
        "learner_busy_per_1k": sum(r["time/prepare"] + r["time/update"] for r in rl) * per_1k,
        "response_length": sum(r["response_length"] for r in rl) / len(rl),
        "staleness_mean": sum(r["staleness_mean"] for r in rl) / len(rl),
        "accuracy_start": evals[0]["accuracy"],
        "accuracy": evals[-1]["accuracy"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=16, help="RL steps per variant (x 128 samples)")
    parser.add_argument("--sft-steps", type=int, default=1000, help="supervised warm-up steps on unpadded answers (shared)")
    parser.add_argument("--padded-sft-steps", type=int, default=150, help="then steps on padded answers (the long tail)")
    parser.add_argument("--eval-size", type=int, default=200, help="held-out problems")
    parser.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "sync 2 threads"), help="comma-separated subset of: " + ", ".join(VARIANTS))
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plain, padded, eval_ = write_tasks(tmp, 8000, args.eval_size)
        base = base_overrides(padded, eval_, args.steps)
        # Two warm-up stages: the sums on short sequences (cheap), then the padding (every batch
        # holds a long answer, so each step costs ~4x).
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            first = run_sft_stage(load_config("default", [
                *base_overrides(plain, eval_, args.steps), "trainer.threads=1", f"sft.steps={args.sft_steps}",
                f"trainer.output_dir={tmp / 'sft_plain'}",
            ]))
            warm = run_sft_stage(load_config("default", [
                *base, "trainer.threads=1", f"model.path={first}", f"sft.steps={args.padded_sft_steps}", "sft.lr=0.0005",
                "sft.warmup_steps=10", f"trainer.output_dir={tmp / 'sft_padded'}",
            ]))
        print(f"warm-up: {args.sft_steps} + {args.padded_sft_steps} SFT steps, {time.perf_counter() - started:.0f} s", flush=True)
        results: dict[str, dict[str, float]] = {}
        for name in (n.strip() for n in args.variants.split(",")):
            run_dir = tmp / name.replace(" ", "_").replace("+", "plus").replace("=", "")
            cfg = load_config("default", [*base, *VARIANTS[name], f"model.path={warm}", "sft.steps=0", f"trainer.output_dir={run_dir}"])
            started = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                run_training(cfg)
            results[name] = measure(run_dir, args.steps)
            print(f"  {name}: {time.perf_counter() - started:.0f} s", flush=True)

    sync, tis = results.get("sync"), results.get("sync + TIS")
    print(f"\n{args.steps} RL steps x {PROMPTS * GROUP} samples per variant; seconds per 1,000 trained samples")
    print(f"(1-minute load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores: above ~1 other processes share them)\n")
    header = f"{'variant':<22}{'wall':>8}{'x sync':>8}{'x sync+TIS':>11}{'learner idle':>14}{'engine idle':>13}{'engine busy':>13}{'learner busy':>14}{'resp len':>10}{'staleness':>11}{'held-out acc':>16}"
    print(header)
    for name, r in results.items():
        ratio = sync["wall_per_1k"] / r["wall_per_1k"] if sync else float("nan")
        ratio_tis = tis["wall_per_1k"] / r["wall_per_1k"] if tis else float("nan")
        print(
            f"{name:<22}{r['wall_per_1k']:>8.1f}{ratio:>7.2f}x{ratio_tis:>10.2f}x{r['learner_idle_per_1k']:>14.1f}{r['engine_idle_per_1k']:>13.1f}"
            f"{r['engine_busy_per_1k']:>13.1f}{r['learner_busy_per_1k']:>14.1f}{r['response_length']:>10.1f}{r['staleness_mean']:>11.2f}{r['accuracy_start']:>9.3f}->{r['accuracy']:.3f}"
        )
    if sync:
        engine, learner = sync["engine_busy_per_1k"], sync["learner_busy_per_1k"]
        print(f"\nseparate devices (projection from the sync run's busy times: engine R = {engine:.1f} s, learner U = {learner:.1f} s per 1k):")
        print(f"  async:            (R + U) / max(R, U) = {(engine + learner) / max(engine, learner):.2f}x")
        partial = results.get("sync + partial")
        if partial:
            r_partial = partial["engine_busy_per_1k"]
            print(f"  async + partial:  (R + U) / max(R_partial = {r_partial:.1f}, U) = {(engine + learner) / max(r_partial, learner):.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
