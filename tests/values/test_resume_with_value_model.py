"""Exact resume with the prompt-value model and PCL's pool in the checkpoint (invariant 5): a run
resumed from its first checkpoint ends with the same weights and metrics (value/* included) as the
run never interrupted. Slow (two short runs with a warm-up): `python -m pytest -m slow`."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.cli import main
from run_records import assert_same_run, copy_at_first_checkpoint, run_metrics

TINY_PCL = [
    "model.preset=nano", "task.train_size=200", "task.eval_size=16", "task.params={digits: [1, 2]}", "sft.steps=60", "sft.lr=0.003",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "trainer.steps=6", "eval.every=3", "eval.samples=2",
    "trainer.checkpoint_every=2", "telemetry.progress=false", "telemetry.tensorboard=false",
    "reward.components=[{name: correct, fn: verifier}]",
    "prompt_value.enabled=true", "prompt_value.curriculum=pcl", "algo.advantage=v05_prior",
]


@pytest.mark.slow
def test_a_run_with_pcl_and_v05_resumes_exactly(tmp_path: Path) -> None:
    reference = tmp_path / "reference"
    assert main(["train", "--output", str(reference), *TINY_PCL]) == 0
    rows = [r for r in run_metrics(reference) if r.get("stage") == "rl"]
    assert all("value/brier" in r and "prior_weight_mean" in r for r in rows)  # the value model ran every step
    copy = tmp_path / "copy"
    copy_at_first_checkpoint(reference, copy)
    assert main(["train", "--resume", str(copy)]) == 0
    assert_same_run(copy, reference)
