"""No detector fires on the default recipe's run with the default thresholds.

default_run_metrics.jsonl is the metric history of `reinforge train` (the default recipe, seed 0,
one thread, 150 RL steps; written by scripts/record_default_metrics.py, which keeps the metrics
the detectors read). It is replayed here step by step, as the RL loop would read it: after step
s, the steps 1..s and the evaluations up to s.
"""

from __future__ import annotations

import json
from pathlib import Path

from reinforge.config import load_config
from reinforge.trainer.health import HealthMonitor

FIXTURE = Path(__file__).with_name("default_run_metrics.jsonl")


def replay(cfg):
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    rl = [{k: v for k, v in r.items() if k not in ("stage", "step")} for r in rows if r["stage"] == "rl"]
    evals = [{k: v for k, v in r.items() if k != "stage"} for r in rows if r["stage"] == "eval"]
    monitor = HealthMonitor(cfg)
    steps: list[dict] = []
    verdicts = []
    for metrics in rl:
        steps.append(dict(metrics))
        verdict = monitor.check(steps, [e for e in evals if e["step"] <= len(steps)])
        steps[-1].update(verdict.metrics)
        verdicts.append(verdict)
    return steps, verdicts


def test_the_fixture_is_the_default_recipe_run() -> None:
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    cfg = load_config("default")
    assert sum(r["stage"] == "rl" for r in rows) == cfg.trainer.steps
    assert [r["step"] for r in rows if r["stage"] == "eval"] == [0, 25, 50, 75, 100, 125, 150]  # eval.every=25


def test_no_detector_fires_on_the_default_run() -> None:
    steps, verdicts = replay(load_config("default"))
    fired = [(s, r.name, r.message) for s, v in enumerate(verdicts, 1) for r in v.onsets]
    assert fired == []
    assert all(v.action is None for v in verdicts)
    # Every detector with something to watch read it (no reference model: no kl_ref in this run).
    read = {k.split("/")[1] for m in steps for k in m if k.startswith("monitor/")}
    assert read == {"entropy_collapse", "logprob_gap_blowup", "clip_spike", "response_length", "reward_hacking",
                    "format_hacking", "mode_collapse", "zero_variance"}
    assert sum("monitor/reward_hacking" in m for m in steps) == 6  # at each evaluation after the first


def test_the_same_history_fires_with_a_tight_threshold() -> None:
    """The replay can fire: entropy falls to ~0.4-0.6x its start in this run, so min_ratio=0.7 trips."""
    _, verdicts = replay(load_config("default", ["monitor.entropy_collapse.min_ratio=0.7"]))
    onsets = [(s, r.name) for s, v in enumerate(verdicts, 1) for r in v.onsets]
    assert onsets and {name for _, name in onsets} == {"entropy_collapse"}
