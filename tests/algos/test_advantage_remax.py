"""remax: return minus the greedy rollout's reward; by hand and against verl."""

from __future__ import annotations

import pytest
import torch

from reference.verl_remax import compute_remax_outcome_advantage
from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs
from verl_cases import random_batch


def remax(rewards, greedy, mask, token_rewards=None):
    n = len(rewards)
    inputs = AdvantageInputs(
        torch.as_tensor(rewards, dtype=torch.float64), torch.arange(n), mask, token_rewards=token_rewards,
        greedy_rewards=torch.as_tensor(greedy, dtype=torch.float64),
    )
    return get_estimator("remax").fn(inputs).advantages.double()


def test_hand_computed() -> None:
    # row 0: reward 1, greedy 0 -> +1 on each sampled token; row 1: reward 0, greedy 1 -> -1;
    # row 2 with a KL reward -0.1 on each of its two tokens, reward 1, greedy 1:
    #   G = [1 - 0.2, 1 - 0.1] -> A = [-0.2, -0.1]
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 1, 1]], dtype=torch.bool)
    kl = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, -0.1, -0.1]], dtype=torch.float64)
    out = remax([1.0, 0.0, 1.0], [0.0, 1.0, 1.0], mask, kl)
    assert torch.allclose(out, torch.tensor([[1.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, -0.2, -0.1]], dtype=torch.float64))


def test_refuses_without_greedy_rewards() -> None:
    with pytest.raises(ValueError, match="greedy_rewards"):
        get_estimator("remax").fn(AdvantageInputs(torch.ones(2), torch.arange(2), torch.ones(2, 1, dtype=torch.bool)))


@pytest.mark.parametrize("seed", range(8))
def test_matches_verl(seed: int) -> None:
    rewards, _, mask, token_rewards, _ = random_batch(seed)
    g = torch.Generator().manual_seed(seed + 1)
    greedy = torch.randn(len(rewards), generator=g, dtype=torch.float64)
    kl = torch.randn(mask.shape, generator=g, dtype=torch.float64) * 0.05 * mask
    expected, _ = compute_remax_outcome_advantage(token_rewards + kl, greedy, mask.double())
    ours = remax(rewards, greedy, mask, kl)
    assert torch.allclose(ours, expected * mask, atol=1e-6)
