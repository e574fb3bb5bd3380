"""grpo's algo.scale_rewards: group (GRPO), batch (group mean, batch std: TRL's 'batch'), none."""

from __future__ import annotations

import pytest
import torch
from trl.trainer.utils import nanstd

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs


def grpo(rewards, groups, scale: str):
    n = len(rewards)
    inputs = AdvantageInputs(torch.as_tensor(rewards, dtype=torch.float64), torch.as_tensor(groups), torch.ones(n, 1, dtype=torch.bool), scale_rewards=scale)
    return get_estimator("grpo").fn(inputs)


def test_hand_computed() -> None:
    # rewards 1, 0 | 1, 1 | 3, 1: group means 0.5, 1, 2; centred 0.5, -0.5, 0, 0, 1, -1
    # batch: mean 7/6, unbiased var = sum (r - 7/6)^2 / 5 = (1/36 + 49/36 + 1/36 + 1/36 + 121/36 + 1/36) / 5 = 29/30
    rewards, groups = [1.0, 0.0, 1.0, 1.0, 3.0, 1.0], [0, 0, 1, 1, 2, 2]
    std = (29 / 30) ** 0.5
    batch = grpo(rewards, groups, "batch")
    assert batch.advantages.tolist() == pytest.approx([0.5 / std, -0.5 / std, 0, 0, 1 / std, -1 / std], rel=1e-6)
    assert batch.metrics["reward_std_batch"] == pytest.approx(std)
    assert grpo(rewards, groups, "none").advantages.tolist() == pytest.approx([0.5, -0.5, 0, 0, 1, -1])
    # group: each group's own std (sqrt(0.5) and sqrt(2)), + eps 1e-6
    a, b = 0.5 / (0.5**0.5 + 1e-6), 1 / (2**0.5 + 1e-6)
    assert grpo(rewards, groups, "group").advantages.tolist() == pytest.approx([a, -a, 0, 0, b, -b], rel=1e-6)


def trl_advantages(rewards: torch.Tensor, num_generations: int, scale_rewards: str, eps: float) -> torch.Tensor:
    """TRL 1.16 GRPOTrainer._generate_and_score_completions, sum_then_normalize branch (transcribed,
    with its nanstd imported; its 1e-4 is `eps` here so that reinforge's 1e-6 can be compared)."""
    mean_grouped_rewards = torch.nanmean(rewards.view(-1, num_generations), dim=1)
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, dim=0)
    if scale_rewards in ["group", "none"]:
        std_rewards = nanstd(rewards.view(-1, num_generations), dim=1).repeat_interleave(num_generations, dim=0)
    else:
        std_rewards = nanstd(rewards).expand_as(rewards)
    advantages = rewards - mean_grouped_rewards
    if scale_rewards != "none":
        advantages = advantages / (std_rewards + eps)
    return advantages


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("scale", ["batch", "none", "group"])
def test_matches_trl(seed: int, scale: str) -> None:
    g = torch.Generator().manual_seed(seed)
    groups, size = 5, 4
    rewards = torch.randn(groups * size, generator=g, dtype=torch.float64)
    rewards[:size] = 0.3  # a zero-variance group (contiguous groups, as TRL lays them out)
    ours = grpo(rewards, torch.arange(groups).repeat_interleave(size), scale).advantages.double()
    expected = trl_advantages(rewards, size, scale, 1e-6)
    assert torch.allclose(ours, expected, atol=1e-6)
    assert torch.equal(ours[:size], torch.zeros(size, dtype=torch.float64))
