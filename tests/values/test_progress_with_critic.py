"""SPA turn progress with a critic and gae (SPA-RL's own setup: PPO on the per-step progress rewards):
a few steps of the tool-agent recipe on the tiny model, where the critic trains on returns built
from each turn's progress reward paid at that turn's last token."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from reinforge.config import load_config
from reinforge.run.pipeline import run_training
from reinforge.trainer import advantage_step

RUN = [
    # A short warm-up on traces that all call the calculator, so that a fair share of episodes have two turns.
    "model.preset=nano", "task.train_size=256", "task.eval_size=4", "task.params={op: '*', digits: 3, digits_b: 2, tool_traces: 1.0}",
    "sft.steps=60", "sft.batch_size=16", "rollout.prompts_per_step=4", "rollout.group_size=4", "trainer.steps=3", "eval.every=3",
    "eval.samples=1", "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'",
    "progress.enabled=true", "critic.enabled=true", "algo.advantage=gae",
]


def test_the_critic_learns_from_progress_rewards_at_turn_ends(tmp_path: Path, monkeypatch) -> None:
    placed: list[tuple[torch.Tensor, torch.Tensor]] = []
    place = advantage_step.turn_end_token_rewards

    def recording(layout, mask):
        out = place(layout, mask)
        placed.append((out, mask.clone()))
        return out

    monkeypatch.setattr(advantage_step, "turn_end_token_rewards", recording)
    run_training(load_config("tool-agent", [*RUN, f"trainer.output_dir={tmp_path}"]))
    rl = [r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if r["stage"] == "rl"]
    assert len(rl) == 3 and all("progress/loss" in r and "value_loss" in r and r["turns"] > 1 for r in rl)
    assert len(placed) == 3  # every step's episodes paid their progress at turn ends
    mid_episode = 0
    for rewards, mask in placed:
        for row in range(mask.shape[0]):
            last = mask[row].nonzero().flatten()[-1:]
            paid = rewards[row].nonzero().flatten()
            assert set(paid.tolist()) <= set(mask[row].nonzero().flatten().tolist())  # only on trained tokens
            mid_episode += int(any(p < last[0] for p in paid)) if len(last) else 0
    # A two-turn episode's first turn gets its own progress reward before the end (the estimator's
    # contribution plus the residual: never exactly 0 for an untrained estimator).
    assert mid_episode > 0
