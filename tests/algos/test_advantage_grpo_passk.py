"""grpo_passk: only each group's best sample is credited, (r_max - r_second) / (std + eps)."""

from __future__ import annotations

import pytest
import torch

from reference.verl_grpo_passk import compute_grpo_passk_outcome_advantage
from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs
from verl_cases import random_batch


def passk(rewards, groups, mask=None):
    n = len(rewards)
    mask = torch.ones(n, 1, dtype=torch.bool) if mask is None else mask
    return get_estimator("grpo_passk").fn(AdvantageInputs(torch.as_tensor(rewards, dtype=torch.float64), torch.as_tensor(groups), mask))


def test_hand_computed() -> None:
    # group 0: 0, 3, 1: best 3, runner-up 1, std of (0, 3, 1) = sqrt(7/3) = 1.52753 -> 2 / 1.52753 = 1.30931
    # group 1: 1, 1, 0: a tie for the best -> 0 everywhere; group 2: 2, 2: constant -> 0
    out = passk([0.0, 3.0, 1.0, 1.0, 1.0, 0.0, 2.0, 2.0], [0, 0, 0, 1, 1, 1, 2, 2])
    assert out.advantages.tolist() == pytest.approx([0.0, 1.309307, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], abs=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_matches_verl(seed: int) -> None:
    rewards, ids, mask, token_rewards, index = random_batch(seed)
    expected, _ = compute_grpo_passk_outcome_advantage(token_rewards.clone(), mask.double(), index, config={"norm_adv_by_std_in_grpo": True})
    ours = passk(rewards, ids, mask).advantages.double()
    assert torch.allclose(ours[:, None] * mask, expected, atol=1e-6)
