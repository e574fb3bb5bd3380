"""optimal_token_baseline (single- and multi-turn): by hand and against verl's two functions."""

from __future__ import annotations

import pytest
import torch

from reference.verl_optimal_token_baseline import (
    compute_multi_turn_optimal_token_baseline_advantage,
    compute_optimal_token_baseline_advantage,
)
from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs
from verl_cases import random_batch


def run(name, rewards, groups, mask, logprobs, squares, is_weights=None, token_rewards=None):
    inputs = AdvantageInputs(
        torch.as_tensor(rewards, dtype=torch.float64), torch.as_tensor(groups), mask, token_rewards=token_rewards,
        old_logprobs=logprobs, sum_pi_squared=squares, is_weights=is_weights,
    )
    return get_estimator(name).fn(inputs).advantages.double()


def test_hand_computed() -> None:
    # One group of two rows, two tokens each, rewards 1 and 0 (on the last token): G = [[1, 1], [0, 0]].
    # pi = 0.5 everywhere, sum pi^2 = 0.5 -> w = 1 - 1 + 0.5 = 0.5; row 1's second token pi = 0.25,
    # sum pi^2 = 0.25 -> w = 1 - 0.5 + 0.25 = 0.75. W = [[0.5, 1.0], [0.5, 1.25]].
    #   t=0: B = (1 * 0.5 + 0) / (0.5 + 0.5) = 0.5;  t=1: B = (1 * 1.0) / (1.0 + 1.25) = 0.44444
    mask = torch.ones(2, 2, dtype=torch.bool)
    logprobs = torch.tensor([[0.5, 0.5], [0.5, 0.25]]).log()
    squares = torch.tensor([[0.5, 0.5], [0.5, 0.25]])
    out = run("optimal_token_baseline", [1.0, 0.0], [0, 0], mask, logprobs, squares)
    assert torch.allclose(out, torch.tensor([[0.5, 1 - 4 / 9], [-0.5, -4 / 9]], dtype=torch.float64), atol=1e-6)
    # Multi-turn with a gap (an observation token) in row 0: the same steps, so the same values.
    gapped = torch.tensor([[True, False, True], [True, True, False]])
    lp = torch.tensor([[0.5, 0.9, 0.5], [0.5, 0.25, 0.9]]).log()
    sq = torch.tensor([[0.5, 0.9, 0.5], [0.5, 0.25, 0.9]])
    multi = run("optimal_token_baseline_multi_turn", [1.0, 0.0], [0, 0], gapped, lp, sq)
    assert torch.allclose(multi, torch.tensor([[0.5, 0.0, 1 - 4 / 9], [-0.5, -4 / 9, 0.0]], dtype=torch.float64), atol=1e-6)


def random_policy(seed: int, mask: torch.Tensor):
    g = torch.Generator().manual_seed(seed + 100)
    probs = torch.rand(mask.shape, generator=g, dtype=torch.float64) * 0.98 + 0.01
    squares = probs**2 + torch.rand(mask.shape, generator=g, dtype=torch.float64) * (1 - probs) ** 2
    is_weights = torch.rand(mask.shape, generator=g, dtype=torch.float64) * 2
    return probs.log(), squares, is_weights


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("with_is", [False, True])
def test_single_turn_matches_verl(seed: int, with_is: bool) -> None:
    rewards, ids, mask, token_rewards, index = random_batch(seed)
    logprobs, squares, is_weights = random_policy(seed, mask)
    is_weights = is_weights if with_is else None
    kl = torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 0.01 * mask
    expected, _ = compute_optimal_token_baseline_advantage(token_rewards + kl, mask.double(), index, logprobs, squares, is_weights)
    ours = run("optimal_token_baseline", rewards, ids, mask, logprobs, squares, is_weights, token_rewards=kl)
    assert torch.allclose(ours, expected, atol=1e-5)


@pytest.mark.parametrize("seed", range(8))
def test_multi_turn_matches_verl(seed: int) -> None:
    rewards, ids, mask, _, index = random_batch(seed, length=14)
    g = torch.Generator().manual_seed(seed + 7)
    mask = mask & (torch.rand(mask.shape, generator=g) > 0.3)  # gaps: observation tokens between turns
    mask[2] = False  # another empty row
    lengths = mask.sum(1)
    rewards = torch.where(lengths > 0, rewards, 0.0)
    token_rewards = torch.zeros(mask.shape, dtype=torch.float64)
    last = mask & (mask.long().cumsum(1) == lengths[:, None])
    token_rewards[last] = rewards[lengths > 0]
    logprobs, squares, is_weights = random_policy(seed, mask)
    expected, _ = compute_multi_turn_optimal_token_baseline_advantage(token_rewards, mask.double(), index, logprobs, squares, is_weights)
    ours = run("optimal_token_baseline_multi_turn", rewards, ids, mask, logprobs, squares, is_weights)
    assert torch.allclose(ours, expected, atol=1e-5)
