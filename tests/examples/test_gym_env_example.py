"""examples/gym_env run as a user runs it: from a copy of the directory (no file of the package
touched), `reinforge train recipe.yaml`, a few steps. The recipe names the env by import
path ("./hangman.py:Hangman", a gym-style class) and trains on its reward (`env_reward`)."""

from __future__ import annotations

import json

from example_runs import run_example

FEW_STEPS = [
    "sft.steps=40", "trainer.steps=3", "eval.every=3", "eval.samples=1", "task.train_size=200",
    "rollout.prompts_per_step=4", "rollout.group_size=4",
]


def test_gym_env_example_trains_through_the_adapter(tmp_path) -> None:
    run_dir, _ = run_example("gym_env", tmp_path, *FEW_STEPS)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 3
    # the env's reward reached the scorer as the `env` component, every sample scored
    assert all("reward/env/mean" in r and r["reward_errors"] == 0 for r in rl)
    episodes = [json.loads(line) for line in (run_dir / "eval_samples.jsonl").read_text().splitlines()]
    played = next(e for e in episodes if e.get("turns") and len(e["turns"]) > 1)
    assert played["turns"][1]["role"] == "env" and played["turns"][1]["text"].startswith(("yes: ", "no: "))
