"""End to end, shrunk to seconds: each text game's recipe warms up, plays, trains two RL steps and
evaluates (success rate, turns, illegal moves), and the games show turn by turn in the records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_training

RECIPES = Path(__file__).parents[2] / "recipes"
MICRO = [
    "model.preset=nano", "model.max_positions=384", "task.train_size=24", "task.eval_size=2", "sft.steps=2", "sft.batch_size=4",
    "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8", "trainer.steps=2", "eval.every=2",
    "eval.samples=1", "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off",
]
# Wordle with a list of its own, so the smoke run needs no wordfreq (its list is tested in test_wordle.py)
WORDS = "[crane, abbey, kebab, those, geese, abide, speed, array, eerie, level, hello, about]"


@pytest.mark.parametrize(
    ("recipe", "extra"),
    [("maze", ["env.max_turns=4", "task.params.options.max_moves=4"]),
     ("twenty-questions", ["env.max_turns=4", "task.params.options.max_questions=3"]),
     ("wordle", [f"task.params.options={{words: {WORDS}, guesses: 3}}", "env.max_turns=4"])],
)
def test_two_rl_steps_and_an_evaluation(tmp_path, recipe, extra) -> None:
    outcome = run_training(load_config(str(RECIPES / f"{recipe}.yaml"), [*MICRO, *extra, f"trainer.output_dir={tmp_path / 'run'}"]))
    rows = [json.loads(line) for line in (outcome.run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 2 and all("env/illegal_moves" in r and "env/solved" in r for r in rl)
    evals = [r for r in rows if r["stage"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2]
    for r in evals:
        finishes = sum(r[f"finish/{reason}"] for reason in ("stop", "illegal_moves", "max_turns", "max_tokens", "error"))
        assert finishes == pytest.approx(1.0) and 0.0 <= r["textgame/success"] == r["accuracy"] <= 1.0
        assert 1.0 <= r["textgame/turns"] <= 4.0 and 0.0 <= r["illegal_move_rate"] <= 1.0 and r["eval_tasks"] == 2
    records = [json.loads(line) for line in (outcome.run_dir / "eval_samples.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(r["turns"][0]["role"] == "policy" and r["answer"] for r in records)
