"""gpg: alpha * (r - group mean), alpha = B / #nonzero rewards; by hand and against verl."""

from __future__ import annotations

import pytest
import torch

from reference.verl_gpg import compute_gpg_outcome_advantage
from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs
from verl_cases import random_batch


def gpg(rewards, groups, mask=None):
    n = len(rewards)
    mask = torch.ones(n, 1, dtype=torch.bool) if mask is None else mask
    return get_estimator("gpg").fn(AdvantageInputs(torch.as_tensor(rewards, dtype=torch.float64), torch.as_tensor(groups), mask))


def test_hand_computed() -> None:
    # 6 samples, 2 nonzero rewards: alpha = 6 / 2 = 3.
    # group 0: 1, 0, 0: mean 1/3 -> 3 * (2/3, -1/3, -1/3) = (2, -1, -1); group 1: 0, 0, 1 -> (-1, -1, 2)
    out = gpg([1.0, 0.0, 0.0, 0.0, 0.0, 1.0], [0, 0, 0, 1, 1, 1])
    assert out.advantages.tolist() == pytest.approx([2.0, -1.0, -1.0, -1.0, -1.0, 2.0])
    assert out.metrics["gpg_alpha"] == 3.0
    # no reward anywhere: alpha = 6 / max(1, 0), every group constant -> 0
    assert gpg([0.0] * 6, [0, 0, 0, 1, 1, 1]).advantages.tolist() == [0.0] * 6


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("binary", [False, True])
def test_matches_verl(seed: int, binary: bool) -> None:
    rewards, ids, mask, token_rewards, index = random_batch(seed, binary=binary)
    expected, _ = compute_gpg_outcome_advantage(token_rewards.clone(), mask.double(), index)
    ours = gpg(rewards, ids, mask).advantages.double()
    assert torch.allclose(ours[:, None] * mask, expected, atol=1e-5)
