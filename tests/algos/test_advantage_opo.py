"""opo: the group's length-weighted mean reward as baseline; by hand and against verl."""

from __future__ import annotations

import pytest
import torch

from reference.verl_opo import compute_opo_outcome_advantage
from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs
from verl_cases import random_batch


def opo(rewards, groups, mask):
    return get_estimator("opo").fn(AdvantageInputs(torch.as_tensor(rewards), torch.as_tensor(groups), mask))


def test_hand_computed() -> None:
    # group 0: rewards 1, 0 with 3 and 1 sampled tokens: b = (3*1 + 1*0) / 4 = 0.75 -> A = 0.25, -0.75
    # group 1: rewards 2, 2: constant -> exactly 0
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    out = opo([1.0, 0.0, 2.0, 2.0], [0, 0, 1, 1], mask)
    assert out.advantages.tolist() == pytest.approx([0.25, -0.75, 0.0, 0.0])
    assert out.metrics["zero_variance_group_frac"] == 0.5


def test_a_group_without_sampled_tokens_takes_its_mean() -> None:
    out = opo([1.0, 0.0], [0, 0], torch.zeros(2, 3, dtype=torch.bool))
    assert out.advantages.tolist() == [0.5, -0.5]


@pytest.mark.parametrize("seed", range(8))
def test_matches_verl(seed: int) -> None:
    rewards, ids, mask, token_rewards, index = random_batch(seed)
    expected, _ = compute_opo_outcome_advantage(token_rewards.clone(), mask.double(), index)
    ours = opo(rewards, ids, mask).advantages.double()
    assert torch.allclose(ours[:, None] * mask, expected, atol=1e-6)
