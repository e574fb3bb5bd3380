"""End to end, shrunk to seconds: a self-play run warms up, plays, trains, evaluates, reports games."""

from __future__ import annotations

import json
from pathlib import Path

from reinforge.config import load_config
from reinforge.run.pipeline import run_training
from reinforge.telemetry.report import write_report

RECIPE = str(Path(__file__).parents[2] / "recipes" / "tictactoe-selfplay.yaml")
MICRO = [
    "model.preset=nano", "task.params.train_seats=[[policy, policy]]", "task.train_size=16", "task.params.eval_games=1", "sft.steps=2", "sft.batch_size=4",
    "rollout.prompts_per_step=2", "rollout.group_size=4", "trainer.steps=2", "eval.every=2", "trainer.checkpoint_every=0",
    "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off",
]


def test_micro_self_play_run(tmp_path) -> None:
    outcome = run_training(load_config(RECIPE, [*MICRO, f"trainer.output_dir={tmp_path / 'run'}"]))
    run_dir = outcome.run_dir
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 2 and all("env/illegal_moves" in r and "env/game_moves" in r for r in rl)
    evals = [r for r in rows if r["stage"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2]
    for r in evals:  # every opponent, every seat; the rates add up
        for opponent in ("random", "minimax"):
            rates = [r[f"game/vs-{opponent}/{o}"] for o in ("win", "draw", "loss", "unfinished")]
            assert sum(rates) == 1.0 and f"game/vs-{opponent}/as-O/win_draw" in r
        assert 0.0 <= r["illegal_move_rate"] <= 1.0 and r["game_length"] >= 0 and r["eval_tasks"] == 4
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["task_id"] for s in samples} and all(s["turns"][0]["role"] == "env" for s in samples)
    records = [json.loads(line) for line in (run_dir / "eval_samples.jsonl").read_text().splitlines()]
    assert len(records) == 8 and {r["game"]["players"]["X"] for r in records} >= {"policy", "random", "minimax"}
    game = records[0]["game"]  # move by move, with the policy's own view
    assert game["moves"] and set(game["views"]) == {"X"} and records[0]["turns"] == game["views"]["X"]
    assert "Board 123/456/789" in write_report(run_dir).read_text()  # the report shows the games turn by turn
    seats = {(s["group_id"], s["task_id"]): [] for s in samples}
    for s in samples:
        seats[(s["group_id"], s["task_id"])].append(s["turns"][0]["text"])
    assert any(any("You are X" in t for t in v) and any("You are O" in t for t in v) for v in seats.values())  # each seat's view
