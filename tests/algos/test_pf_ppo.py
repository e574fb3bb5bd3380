"""PF-PPO's reward-based re-sampling: weights by hand, and weights and draws against verl's
compute_pf_ppo_reweight_data."""

from __future__ import annotations

import pytest
import torch

from reference.verl_rollout_corr import compute_pf_ppo_sample_indices, compute_pf_ppo_weights
from reinforge.algos.losses.pf_ppo import METHODS, pf_ppo_rows, pf_ppo_weights


def test_weights_by_hand() -> None:
    scores = torch.tensor([1.0, -2.0, 0.0, 0.5], dtype=torch.float64)
    # pow 2: |R|^2 = 1, 4, 0, 0.25 (+1e-8 each, so a zero reward keeps a tiny chance)
    torch.testing.assert_close(pf_ppo_weights(scores, "pow", 2.0), torch.tensor([1.0, 4.0, 0.0, 0.25], dtype=torch.float64) + 1e-8)
    # max_min: the best (1.0) and the worst (-2.0) only
    torch.testing.assert_close(pf_ppo_weights(scores, "max_min"), torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64) + 1e-8)
    # max_random: 0.4 for the best, 0.1 for the rest
    torch.testing.assert_close(pf_ppo_weights(scores, "max_random"), torch.tensor([0.4, 0.1, 0.1, 0.1], dtype=torch.float64) + 1e-8)
    with pytest.raises(ValueError, match="valid: pow, max_min, max_random"):
        pf_ppo_weights(scores, "best_of_n")


def test_draws_follow_the_weights() -> None:
    scores = torch.tensor([1.0, 0.0, 0.0, 0.0])  # pow: only the first sample has weight
    rows = pf_ppo_rows(scores, "pow", 2.0, torch.Generator().manual_seed(0))
    assert rows.tolist() == [0, 0, 0, 0]
    same = pf_ppo_rows(scores * 3, "max_min", generator=torch.Generator().manual_seed(0))
    assert set(same.tolist()) <= {0, 1, 2, 3} and len(same) == 4  # max 3, min 0: every sample is an extreme


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("method", METHODS)
def test_matches_verl(seed, method) -> None:
    g = torch.Generator().manual_seed(seed)
    scores = torch.randint(-2, 3, (12,), generator=g).float() * 0.5  # ties: several bests and worsts
    if seed == 0:
        scores = torch.zeros(12)  # one value: every sample is both the best and the worst
    torch.testing.assert_close(pf_ppo_weights(scores, method, 1.5), compute_pf_ppo_weights(scores, method, 1.5))
    torch.manual_seed(100 + seed)  # verl draws from the global generator; the same seed in ours gives the same rows
    expected = compute_pf_ppo_sample_indices(scores, method, 1.5)
    assert pf_ppo_rows(scores, method, 1.5, torch.Generator().manual_seed(100 + seed)).tolist() == expected.tolist()
