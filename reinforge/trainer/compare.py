"""`reinforge compare`: one recipe under several methods and seeds, from one shared warm start.

The supervised warm-up runs once; every (method, seed) run starts RL from that checkpoint, so
the methods differ only in what the RL phase does with the same starting policy. Writes
`learning_curves.png` (held-out accuracy and reward, mean +- std over seeds), `results.md` and
`results.json` in the comparison directory.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from reinforge.algos.methods import method_overrides
from reinforge.config import ConfigError, load_config
from reinforge.telemetry import print_summary
from reinforge.telemetry.plots import plot_learning_curves
from reinforge.trainer.pipeline import run_sft_stage, run_training
from reinforge.trainer.preflight import preflight


@dataclass
class RunSummary:
    method: str
    seed: int
    accuracy_start: float
    accuracy_end: float
    seconds_per_step: float
    entropy: float
    response_length: float
    accuracy_curve: list[tuple[float, float]]
    reward_curve: list[tuple[float, float]]


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}"


def compare(recipe: str, methods: list[str], seeds: int, overrides: list[str], output: Path | None) -> Path:
    for method in methods:
        try:
            method_overrides(method)
        except ValueError as err:
            raise ConfigError(f"--algos: {err}") from None
    if seeds < 1:
        raise ConfigError("--seeds must be at least 1")
    out = output or Path("runs") / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"comparison directory {out} already holds files; choose a new one")
    quiet = ["telemetry.progress=false", "telemetry.tensorboard=false"]
    # Validate every run's config before any compute.
    for method in methods:
        preflight(load_config(recipe, [*overrides, f"algo.method={method}"]))

    base = load_config(recipe, [*overrides, f"trainer.output_dir={out / 'warm_start_run'}"])
    if base.model.path is not None and base.sft.steps == 0:
        warm_start = Path(base.model.path)
    else:
        warm_start = run_sft_stage(base)

    summaries: list[RunSummary] = []
    for method in methods:
        for seed in range(seeds):
            cfg = load_config(
                recipe,
                [*overrides, *quiet, f"algo.method={method}", f"trainer.seed={seed}", f"model.path={warm_start}",
                 "sft.steps=0", f"trainer.output_dir={out / method / f'seed{seed}'}"],
            )
            print(f"compare: {method}, seed {seed}")
            outcome = run_training(cfg)
            steps = outcome.rl.steps
            summaries.append(
                RunSummary(
                    method, seed, outcome.accuracy_before, outcome.accuracy_after,
                    seconds_per_step=statistics.fmean(s["step_seconds"] for s in steps),
                    entropy=statistics.fmean(s["entropy"] for s in steps[-10:]),
                    response_length=statistics.fmean(s["response_length"] for s in steps[-10:]),
                    accuracy_curve=[(e["step"], e["accuracy"]) for e in outcome.rl.evals],
                    reward_curve=[(i + 1, r) for i, r in enumerate(outcome.rl.rewards)],
                )
            )
    return write_comparison(out, summaries, recipe)


def write_comparison(out: Path, summaries: list[RunSummary], recipe: str) -> Path:
    methods = list(dict.fromkeys(s.method for s in summaries))
    by_method = {m: [s for s in summaries if s.method == m] for m in methods}
    plot_learning_curves(
        {
            "held-out greedy accuracy": {m: [s.accuracy_curve for s in runs] for m, runs in by_method.items()},
            "training reward": {m: [s.reward_curve for s in runs] for m, runs in by_method.items()},
        },
        out / "learning_curves.png",
        title=f"{recipe}: {len(next(iter(by_method.values())))} seed(s) per method",
    )
    header = "| method | held-out accuracy (start -> end) | gain | s / step | entropy | response tokens |"
    lines = [header, "|---|---|---|---|---|---|"]
    for method, runs in by_method.items():
        lines.append(
            f"| {method} | {statistics.fmean(r.accuracy_start for r in runs):.3f} -> {_mean_std([r.accuracy_end for r in runs])} "
            f"| {statistics.fmean(r.accuracy_end - r.accuracy_start for r in runs):+.3f} "
            f"| {statistics.fmean(r.seconds_per_step for r in runs):.2f} | {statistics.fmean(r.entropy for r in runs):.3f} "
            f"| {statistics.fmean(r.response_length for r in runs):.2f} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps([s.__dict__ for s in summaries], indent=1))
    print_summary(
        [(m, f"{_mean_std([r.accuracy_end for r in runs])} ({statistics.fmean(r.accuracy_end - r.accuracy_start for r in runs):+.3f})") for m, runs in by_method.items()]
        + [("plot", str(out / "learning_curves.png"))],
        title="reinforge compare: final held-out accuracy (gain)",
    )
    return out
