"""Held-out accuracy against sampled tokens: uniform sampling, DAPO dynamic sampling, PCL, PCL + V0.5.

The task: addition with 1 to 4 digits mixed (task.params.digits=[1,2,3,4]) from the imperfect teacher
of the default recipe (it forgets the carry in 60% of its worked answers), so the warm-started
policy's pass rate runs from near 1 (short sums without a carry) to near 0 (long sums with several):
many groups of a uniform batch have all-equal rewards. One supervised warm start (shared), then, for
each arm and seed, the same number of RL steps from it; each arm is one row of ARMS (a list of config
overrides), so another arm is one more line.

Reported per arm (mean over seeds): greedy held-out accuracy at the end; the tokens sampled
(`sampled_tokens`, every rollout round: the groups dynamic sampling threw away included); the
fraction of sampled groups whose rewards were all equal; tokens until the held-out accuracy first
reached the target (default: the dynamic-sampling arm's final accuracy, mean over seeds) and the
saving against dynamic sampling; and for arms with the value model, its Brier score against that of
the batch's own pass rate as a constant, over the second half of the run. A plot (PNG): accuracy
against tokens, the zero-variance fraction per step and the value model's reliability curve.

    python benchmarks/value_curriculum.py [--seeds 0,1,2] [--steps 200] [--eval-every 20] [--arms uniform,dapo,pcl,pcl_v05]
        [--out DIR] [--plot PATH] [--json PATH]

Runs already in --out's results.json are not run again (a killed benchmark continues where it stopped).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import time
from pathlib import Path

from reinforge.config import load_config
from reinforge.run.pipeline import run_sft_stage, run_training

ARMS: dict[str, list[str]] = {
    "uniform": [],
    "dapo": ["algo.dynamic_sampling=true", "algo.max_sampling_rounds=3"],
    "pcl": ["prompt_value.enabled=true", "prompt_value.curriculum=pcl"],
    "pcl_v05": ["prompt_value.enabled=true", "prompt_value.curriculum=pcl", "algo.advantage=v05_prior"],
    "dump": ["prompt_value.enabled=true", "prompt_value.curriculum=dump", "prompt_value.dump_key=digits"],
    # rollout pruning by the success head (docs/rollout_pruning.md), uniform prompts
    "prune": ["success_head.enabled=true", "success_head.prune=true"],
}
DEFAULT_ARMS = "uniform,dapo,pcl,pcl_v05,dump"


def base_overrides(steps: int, eval_every: int) -> list[str]:
    return [
        "model.preset=nano", "task.params={digits: [1, 2, 3]}", "task.train_size=4000", "task.eval_size=150",
        "rollout.prompts_per_step=16", "rollout.group_size=4", "rollout.max_new_tokens=8",
        "reward.components=[{name: correct, fn: verifier}]", "algo.lr=0.0002",
        f"trainer.steps={steps}", f"eval.every={eval_every}", "eval.samples=1", "trainer.checkpoint_every=0",
        "trainer.threads=1", "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off",
    ]


def read_run(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rl = sorted((r for r in rows if r.get("stage") == "rl"), key=lambda r: r["step"])
    evals = sorted((r for r in rows if r.get("stage") == "eval"), key=lambda r: r["step"])
    tokens, cumulative = {0: 0.0}, 0.0
    for r in rl:
        cumulative += r["sampled_tokens"]
        tokens[r["step"]] = cumulative
    half = rl[len(rl) // 2 :]
    out = {
        "curve": [(tokens[e["step"]], e["accuracy"]) for e in evals],
        "zero_variance": [r["sampled_zero_variance_group_frac"] for r in rl],
        "tokens": cumulative,
        "seconds": sum(r["step_seconds"] for r in rl),
    }
    if "value/brier" in rl[-1]:
        out["brier"] = sum(r["value/brier"] for r in half) / len(half)
        out["brier_constant"] = sum(r["value/brier_constant"] for r in half) / len(half)
        out["feature_seconds"] = sum(r.get("value/feature_seconds", 0.0) for r in rl)
        out["value_train_seconds"] = sum(r["value/train_seconds"] for r in rl)
        last = rl[-1]
        out["reliability"] = [
            (last[f"value/reliability/pred_{k}"], last[f"value/reliability/obs_{k}"], last[f"value/reliability/n_{k}"])
            for k in range(10) if f"value/reliability/n_{k}" in last
        ]
    return out


def mean_curve(runs: dict[str, dict]) -> list[tuple[float, float]]:
    """The arm's accuracy curve averaged over seeds, evaluation by evaluation: (mean tokens, mean accuracy)."""
    curves = [r["curve"] for r in runs.values()]
    points = min(len(c) for c in curves)
    return [(mean([c[i][0] for c in curves]), mean([c[i][1] for c in curves])) for i in range(points)]


def tokens_to_reach(curve: list[tuple[float, float]], target: float) -> float:
    """Tokens at which `curve` first reaches `target`, linear between evaluations (inf: never)."""
    for (x0, y0), (x1, y1) in zip(curve, curve[1:]):
        if y0 >= target - 1e-9:
            return x0
        if y1 >= target - 1e-9:
            return x0 + (x1 - x0) * (target - y0) / (y1 - y0)
    return curve[-1][0] if curve and curve[-1][1] >= target - 1e-9 else math.inf


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def summarize(results: dict[str, dict[str, dict]], target: float | None) -> tuple[list[dict], float]:
    """Per arm, over seeds. Tokens to the target are read off the seed-mean curve (each seed holds out
    its own split, so single seeds start apart by more than the arms differ)."""
    if target is None:
        dapo = results.get("dapo", {})
        target = mean([r["curve"][-1][1] for r in dapo.values()]) if dapo else 0.5
    rows = []
    for arm, runs in results.items():
        curve = mean_curve(runs)
        per_seed = [tokens_to_reach(r["curve"], target) for r in runs.values()]
        row = {
            "arm": arm, "seeds": len(runs),
            "start_accuracy": curve[0][1],
            "final_accuracy": curve[-1][1],
            "final_accuracy_min": min(r["curve"][-1][1] for r in runs.values()),
            "final_accuracy_max": max(r["curve"][-1][1] for r in runs.values()),
            "tokens": mean([r["tokens"] for r in runs.values()]),
            "zero_variance_frac": mean([mean(r["zero_variance"]) for r in runs.values()]),
            "tokens_to_target": tokens_to_reach(curve, target),
            "reached": f"{sum(math.isfinite(t) for t in per_seed)}/{len(per_seed)}",
            "rl_seconds": mean([r["seconds"] for r in runs.values()]),
        }
        if all("brier" in r for r in runs.values()):
            row["brier"] = mean([r["brier"] for r in runs.values()])
            row["brier_constant"] = mean([r["brier_constant"] for r in runs.values()])
            row["feature_share"] = mean([r["feature_seconds"] / r["seconds"] for r in runs.values()])
            row["value_train_share"] = mean([r["value_train_seconds"] / r["seconds"] for r in runs.values()])
        rows.append(row)
    dapo_row = next((r for r in rows if r["arm"] == "dapo"), None)
    for row in rows:
        dapo_tokens = dapo_row["tokens_to_target"] if dapo_row is not None else math.inf
        if 0 < dapo_tokens < math.inf and math.isfinite(row["tokens_to_target"]):
            row["saving_vs_dapo"] = 1 - row["tokens_to_target"] / dapo_tokens
    return rows, target


def table(rows: list[dict], target: float) -> str:
    lines = [
        f"| arm | held-out acc, start -> end (end min-max over seeds) | tokens sampled | zero-variance groups | tokens to {target:.3f} (mean curve; seeds reaching it) | vs dapo | Brier (constant) | RL seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        to_target = f"{r['tokens_to_target']:,.0f} ({r['reached']})" if math.isfinite(r["tokens_to_target"]) else f"never ({r['reached']})"
        saving = f"{r['saving_vs_dapo']:+.0%}" if "saving_vs_dapo" in r else "-"
        brier = f"{r['brier']:.3f} ({r['brier_constant']:.3f})" if "brier" in r else "-"
        lines.append(
            f"| {r['arm']} | {r['start_accuracy']:.3f} -> {r['final_accuracy']:.3f} ({r['final_accuracy_min']:.3f}-{r['final_accuracy_max']:.3f}) "
            f"| {r['tokens']:,.0f} | {r['zero_variance_frac']:.2f} | {to_target} | {saving} | {brier} | {r['rl_seconds']:.0f} |"
        )
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict]], target: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (acc, zero, rel) = plt.subplots(1, 3, figsize=(16, 4.5))
    for arm, runs in results.items():
        curves = list(runs.values())
        xs, means = zip(*mean_curve(runs))
        ys = [[r["curve"][i][1] for r in curves] for i in range(len(xs))]
        line = acc.plot(xs, means, marker="o", ms=3, label=arm)[0]
        acc.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], color=line.get_color(), alpha=0.15)
        steps = min(len(r["zero_variance"]) for r in curves)
        zero.plot(range(1, steps + 1), [mean([r["zero_variance"][s] for r in curves]) for s in range(steps)], label=arm, lw=1)
        if all("reliability" in r for r in curves):
            bins: dict[int, list[float]] = {}
            for r in curves:  # pooled over seeds: sums of predictions, outcomes and counts per bin
                for p, y, n in r["reliability"]:
                    k = min(int(p * 10), 9)
                    b = bins.setdefault(k, [0.0, 0.0, 0.0])
                    b[0] += p * n
                    b[1] += y * n
                    b[2] += n
            pts = sorted((b[0] / b[2], b[1] / b[2]) for b in bins.values())
            rel.plot([p for p, _ in pts], [y for _, y in pts], marker="o", label=arm)
    acc.axhline(target, color="grey", ls=":", lw=1, label=f"target {target:.3f}")
    acc.set(title="Held-out greedy accuracy (mean, min-max over seeds)", xlabel="sampled tokens", ylabel="accuracy")
    zero.set(title="Sampled groups with all-equal rewards", xlabel="RL step", ylabel="fraction")
    rel.plot([0, 1], [0, 1], color="grey", ls=":", lw=1)
    rel.set(title="Value model reliability (all steps)", xlabel="predicted pass rate", ylabel="observed pass rate", xlim=(0, 1), ylim=(0, 1))
    for ax in (acc, zero, rel):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=200, help="RL steps per run")
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--sft-steps", type=int, default=3000)
    parser.add_argument("--warm-start", default=None, metavar="DIR", help="a warm start saved by an earlier run of this script's SFT (its OUT/sft/warm_start); default: train it")
    parser.add_argument("--arms", default=DEFAULT_ARMS, help="comma-separated subset of: " + ", ".join(ARMS))
    parser.add_argument("--target", type=float, default=None, help="accuracy target; default: the dapo arm's final accuracy")
    parser.add_argument("--out", default="value_curriculum_runs", help="directory of the runs and results.json")
    parser.add_argument("--plot", default=None, metavar="PNG", help="default: OUT/value_curriculum.png")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the summary rows as JSON")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    results: dict[str, dict[str, dict]] = json.loads(results_path.read_text()) if results_path.exists() else {}
    base = base_overrides(args.steps, args.eval_every)
    warm = Path(args.warm_start) if args.warm_start else out / "sft" / "warm_start"
    if not warm.exists():
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            run_sft_stage(load_config("default", [*base, f"sft.steps={args.sft_steps}", "sft.lr=0.003", f"trainer.output_dir={out / 'sft'}"]))
        print(f"warm start: {args.sft_steps} SFT steps, {time.perf_counter() - started:.0f} s", flush=True)
    load_before = os.getloadavg()[0]
    for arm in (a.strip() for a in args.arms.split(",")):
        for seed in (s.strip() for s in args.seeds.split(",")):
            if seed in results.get(arm, {}):
                continue
            run_dir = out / f"{arm}_seed{seed}"
            if run_dir.exists():  # an unfinished run of a killed benchmark: start it over
                import shutil

                shutil.rmtree(run_dir)
            cfg = load_config("default", [*base, *ARMS[arm], f"model.path={warm}", "sft.steps=0", f"trainer.seed={seed}", f"trainer.output_dir={run_dir}"])
            started = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                run_training(cfg)
            results.setdefault(arm, {})[seed] = read_run(run_dir)
            results_path.write_text(json.dumps(results))
            r = results[arm][seed]
            print(f"  {arm} seed {seed}: {time.perf_counter() - started:.0f} s, accuracy {r['curve'][0][1]:.3f} -> {r['curve'][-1][1]:.3f}, {r['tokens']:,.0f} tokens", flush=True)

    rows, target = summarize(results, args.target)
    print(f"\n{args.steps} RL steps x 16 prompts x 4 samples per run; 1-minute load {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores\n")
    print(table(rows, target))
    for r in rows:
        if "feature_share" in r:
            print(f"{r['arm']}: prompt-state forward {r['feature_share']:.1%} and value-model training {r['value_train_share']:.1%} of the RL step time")
    plot_path = Path(args.plot) if args.plot else out / "value_curriculum.png"
    plot(results, target, plot_path)
    print(f"plot: {plot_path}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
