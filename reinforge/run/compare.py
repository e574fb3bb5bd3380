"""`reinforge compare`: one recipe under several methods and seeds, from one shared warm start.

The supervised warm-up runs once; every (method, seed) run starts RL from that checkpoint, so
the methods differ only in what the RL phase does with the same starting policy. Writes
`learning_curves.png` (held-out accuracy and reward, mean +- std over seeds), `results.md` and
`results.json` in the comparison directory.

Besides methods (`--algos`), a comparison can hold variants (`--variants`): named lists of config
overrides, e.g. `gated=reward.gates=[{part: short, requires: correct, threshold: 1}];algo.lr=1e-4`
(`NAME=` with nothing after it is the recipe as is). Overrides are separated by `;`; a variant
can instead come from a YAML file mapping each name to a list of `KEY=VALUE` strings. Methods
and variants may be mixed; every run is labelled by its method or variant name.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from reinforge.algos.methods import method_overrides
from reinforge.config import ConfigError, load_config
from reinforge.telemetry import print_summary
from reinforge.telemetry.plots import plot_learning_curves
from reinforge.run.pipeline import run_sft_stage, run_training
from reinforge.run.preflight import preflight


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
    reward_parts: dict[str, float] = field(default_factory=dict)  # per component, mean of the last 10 steps


_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def parse_variants(specs: list[str]) -> dict[str, list[str]]:
    """`--variants` values -> {name: overrides}. Each value is `NAME=KEY=VALUE;KEY=VALUE` (`NAME=`
    alone: no overrides) or the path of a YAML file mapping names to lists of `KEY=VALUE`."""
    from reinforge.config import load_yaml_file

    variants: dict[str, list[str]] = {}

    def add(name: str, overrides: list[str], origin: str) -> None:
        if not _VARIANT_NAME.fullmatch(name):
            raise ConfigError(f"--variants {origin!r}: variant name {name!r} must be letters, digits, _ . + -")
        if name in variants:
            raise ConfigError(f"--variants: variant {name!r} is given twice")
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"--variants {origin!r}: override {item!r} is not of the form key.sub=value")
        variants[name] = overrides

    for spec in specs:
        path = Path(spec)
        if path.suffix in (".yaml", ".yml") and "=" not in spec:
            if not path.is_file():
                raise ConfigError(f"--variants: file {path} does not exist")
            loaded = load_yaml_file(path) or {}
            if not isinstance(loaded, dict):
                raise ConfigError(f"--variants {path}: expected a mapping of variant name -> list of KEY=VALUE")
            for name, overrides in loaded.items():
                overrides = [] if overrides is None else overrides
                if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
                    raise ConfigError(f"--variants {path}: variant {name!r} must map to a list of KEY=VALUE strings")
                add(str(name), [o.strip() for o in overrides], str(path))
            continue
        if "=" not in spec:
            raise ConfigError(f"--variants {spec!r}: expected NAME=KEY=VALUE;KEY=VALUE, NAME= or a YAML file")
        name, rest = spec.split("=", 1)
        add(name.strip(), [o.strip() for o in rest.split(";") if o.strip()], spec)
    return variants


def _mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}"


def compare(
    recipe: str, methods: list[str], seeds: int, overrides: list[str], output: Path | None,
    variants: dict[str, list[str]] | None = None,
) -> Path:
    variants = variants or {}
    if not methods and not variants:
        raise ConfigError("nothing to compare: give --algos and/or --variants")
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
    # Each arm of the comparison: label -> overrides on top of the shared ones.
    arms: dict[str, list[str]] = {method: [f"algo.method={method}"] for method in methods}
    for name, extra in variants.items():
        if name in arms:
            raise ConfigError(f"--variants: {name!r} is also a method in --algos; rename the variant")
        arms[name] = list(extra)
    quiet = ["telemetry.progress=false", "telemetry.tensorboard=false"]
    # Validate every run's config before any compute.
    for label, extra in arms.items():
        try:
            preflight(load_config(recipe, [*overrides, *extra]))
        except ConfigError as err:
            raise ConfigError(f"{label}: {err}") from None

    base = load_config(recipe, [*overrides, f"trainer.output_dir={out / 'warm_start_run'}"])
    if base.model.path is not None and base.sft.steps == 0:
        warm_start = Path(base.model.path)
    else:
        warm_start = run_sft_stage(base)

    summaries: list[RunSummary] = []
    for label, extra in arms.items():
        for seed in range(seeds):
            cfg = load_config(
                recipe,
                [*overrides, *quiet, *extra, f"trainer.seed={seed}", f"model.path={warm_start}",
                 "sft.steps=0", f"trainer.output_dir={out / label / f'seed{seed}'}"],
            )
            print(f"compare: {label}, seed {seed}")
            outcome = run_training(cfg)
            steps = outcome.rl.steps
            last = steps[-10:]
            parts = [k for k in last[0] if k.startswith("reward/") and k.endswith("/mean")] if last else []
            summaries.append(
                RunSummary(
                    label, seed, outcome.accuracy_before, outcome.accuracy_after,
                    seconds_per_step=statistics.fmean(s["step_seconds"] for s in steps),
                    entropy=statistics.fmean(s["entropy"] for s in steps[-10:]),
                    response_length=statistics.fmean(s["response_length"] for s in steps[-10:]),
                    accuracy_curve=[(e["step"], e["accuracy"]) for e in outcome.rl.evals],
                    reward_curve=[(i + 1, r) for i, r in enumerate(outcome.rl.rewards)],
                    reward_parts={k[len("reward/"):-len("/mean")]: statistics.fmean(s[k] for s in last) for k in parts},
                )
            )
    return write_comparison(out, summaries, recipe, label="variant" if variants else "method")


def write_comparison(out: Path, summaries: list[RunSummary], recipe: str, label: str = "method") -> Path:
    methods = list(dict.fromkeys(s.method for s in summaries))
    by_method = {m: [s for s in summaries if s.method == m] for m in methods}
    plot_learning_curves(
        {
            "held-out greedy accuracy": {m: [s.accuracy_curve for s in runs] for m, runs in by_method.items()},
            "training reward": {m: [s.reward_curve for s in runs] for m, runs in by_method.items()},
        },
        out / "learning_curves.png",
        title=f"{recipe}: {len(next(iter(by_method.values())))} seed(s) per {label}",
    )
    part_names = list(dict.fromkeys(p for s in summaries for p in s.reward_parts))
    header = f"| {label} | held-out accuracy (start -> end) | gain | s / step | entropy | response tokens |"
    header += "".join(f" train {p} (last 10 steps) |" for p in part_names)
    lines = [header, "|---|---|---|---|---|---|" + "---|" * len(part_names)]
    for method, runs in by_method.items():
        parts = "".join(
            f" {_mean_std([r.reward_parts[p] for r in runs if p in r.reward_parts])} |"
            if any(p in r.reward_parts for r in runs) else " - |"
            for p in part_names
        )
        lines.append(
            f"| {method} | {statistics.fmean(r.accuracy_start for r in runs):.3f} -> {_mean_std([r.accuracy_end for r in runs])} "
            f"| {statistics.fmean(r.accuracy_end - r.accuracy_start for r in runs):+.3f} "
            f"| {statistics.fmean(r.seconds_per_step for r in runs):.2f} | {statistics.fmean(r.entropy for r in runs):.3f} "
            f"| {statistics.fmean(r.response_length for r in runs):.2f} |" + parts
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    (out / "results.json").write_text(json.dumps([s.__dict__ for s in summaries], indent=1))
    print_summary(
        [(m, f"{_mean_std([r.accuracy_end for r in runs])} ({statistics.fmean(r.accuracy_end - r.accuracy_start for r in runs):+.3f})") for m, runs in by_method.items()]
        + [("plot", str(out / "learning_curves.png"))],
        title="reinforge compare: final held-out accuracy (gain)",
    )
    return out
