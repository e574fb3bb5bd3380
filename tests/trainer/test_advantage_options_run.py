"""The estimators and options of issue 28 take effect in a real (tiny) run: two RL steps of the nano
model from scratch each, with the batch the learner trains on recorded (prepare_batch spied on)."""

from __future__ import annotations

import json

import pytest
import torch

from reinforge.config import load_config
from reinforge.run.pipeline import run_training
from reinforge.trainer import rl_loop

TINY = [
    "model.preset=nano", "task.train_size=64", "task.eval_size=8", "telemetry.progress=false", "telemetry.tensorboard=false",
    "telemetry.wandb='off'", "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
    "trainer.steps=2", "eval.every=100", "eval.samples=1", "trainer.checkpoint_every=0", "sft.steps=0",
]
# A reward that varies on an untrained model (the verifier gives it 0 everywhere): a length penalty.
LENGTH = ["reward.components=[{name: short, fn: length, params: {target_tokens: 2, per_token: 0.5}}]"]


def run(tmp_path, monkeypatch, *overrides: str):
    seen: list[tuple[list, object]] = []
    original = rl_loop.prepare_batch

    def spy(trajectories, *rest):
        batch, metrics = original(trajectories, *rest)
        seen.append((list(trajectories), batch))
        return batch, metrics

    monkeypatch.setattr(rl_loop, "prepare_batch", spy)
    outcome = run_training(load_config("default", [*TINY, f"trainer.output_dir={tmp_path / 'run'}", *overrides]))
    rows = [json.loads(line) for line in (outcome.run_dir / "metrics.jsonl").read_text().splitlines()]
    return seen, [r for r in rows if "loss" in r or "greedy_reward_mean" in r or "sum_pi_squared_mean" in r]


def test_remax_rolls_out_each_prompt_greedily_and_uses_its_reward(tmp_path, monkeypatch) -> None:
    seen, rows = run(tmp_path, monkeypatch, "algo.method=remax", "rollout.group_size=2")
    assert len(seen) == 2 and any("greedy_reward_mean" in r for r in rows)
    for trajectories, batch in seen:
        baselines = torch.tensor([t.baseline_reward for t in trajectories], dtype=torch.float64)
        rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float64)
        mask = batch.loss_mask
        expected = (rewards - baselines)[:, None] * mask
        assert torch.allclose(batch.advantages.double() * mask, expected, atol=1e-6)
        # one greedy rollout per prompt: a group's samples share it
        by_group = {}
        for t in trajectories:
            assert by_group.setdefault(t.group_id, t.baseline_reward) == t.baseline_reward


@pytest.mark.parametrize("name", ["optimal_token_baseline", "optimal_token_baseline_multi_turn"])
def test_optimal_token_baseline_gets_the_learners_probabilities(tmp_path, monkeypatch, name: str) -> None:
    seen, rows = run(tmp_path, monkeypatch, f"algo.advantage={name}", *LENGTH)
    assert any(0 < r.get("sum_pi_squared_mean", 0) <= 1 for r in rows)
    _, batch = seen[0]
    assert batch.advantages.shape == batch.loss_mask.shape and batch.advantages[batch.loss_mask].abs().sum() > 0


def test_w_reinforce_and_batch_scaling_change_the_trained_advantages(tmp_path, monkeypatch) -> None:
    seen, _ = run(tmp_path / "w", monkeypatch, "algo.method=w_reinforce")
    for trajectories, batch in seen:
        rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float64)
        expected = torch.where(rewards > 0.5, 0.1 * (2 * rewards - 1), 2 * rewards - 1)
        assert torch.allclose(batch.advantages.double(), expected, atol=1e-6)
    seen, _ = run(tmp_path / "b", monkeypatch, "algo.scale_rewards=batch", *LENGTH)
    assert seen[0][1].advantages.abs().sum() > 0
    rewards = torch.tensor([t.reward for t in seen[0][0]], dtype=torch.float64)
    assert torch.allclose(batch_scaled(rewards, seen[0][0]), seen[0][1].advantages.double(), atol=1e-5)


def batch_scaled(rewards: torch.Tensor, trajectories) -> torch.Tensor:
    groups = torch.tensor([t.group_id for t in trajectories])
    means = torch.stack([rewards[groups == g].mean() for g in groups])
    return (rewards - means) / (rewards.std() + 1e-6)
