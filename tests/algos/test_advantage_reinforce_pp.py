"""reinforce_pp and reinforce_pp_baseline: returns whitened over every sampled token of the batch.

One normalization with and without token rewards (OpenRLHF's `reinforce` / `reinforce_baseline`):
the hand-computed cases below check the formula, and the property tests check that a zero or tiny
token reward (a KL penalty of small coefficient) moves the advantages by zero or by O(coef).
"""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
ESTIMATORS = ["reinforce_pp", "reinforce_pp_baseline"]
EPS = AdvantageInputs(torch.zeros(1), torch.zeros(1), torch.ones(1, 1, dtype=torch.bool)).eps  # A = (G - mu) / (std + EPS)
# Outputs are float32: |A| < 3 is rounded by < 3 * 2**-24 = 1.8e-7, well inside this tolerance.
TOL = 1e-6


def run(name: str, rewards: list[float], groups: list[int], mask=None, token_rewards=None):
    n = len(rewards)
    mask = torch.ones(n, 1, dtype=torch.bool) if mask is None else torch.tensor(mask, dtype=torch.bool)
    tr = None if token_rewards is None else torch.as_tensor(token_rewards)
    return get_estimator(name).fn(AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), mask, token_rewards=tr))


def test_reinforce_pp_one_token_per_sample() -> None:
    # Seven 1s and five 0s, one sampled token each: mean 7/12, population var (7/12)(5/12) = 35/144,
    # std sqrt(35)/12.  A(1) = (5/12) / (sqrt(35)/12) = 5/sqrt(35) = 0.8451543;  A(0) = -7/sqrt(35).
    # Groups play no part: the all-ones group gets 0.845 too.
    out = run("reinforce_pp", REWARDS, GROUPS)
    std = math.sqrt(35) / 12 + EPS
    expected = [[(5 / 12) / std] if r == 1.0 else [(-7 / 12) / std] for r in REWARDS]
    assert expected[0][0] == pytest.approx(5 / math.sqrt(35), abs=1e-5)  # the hand arithmetic above
    assert out.advantages.shape == (12, 1)
    assert out.advantages.tolist() == [pytest.approx(row, abs=TOL) for row in expected]
    assert out.metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)  # monitoring only


def test_reinforce_pp_weighs_samples_by_their_sampled_tokens() -> None:
    # Rewards 1, 0, 0 with 1, 3 and 2 sampled tokens: the returns are 1 | 0 0 0 | 0 0 (6 tokens).
    # mean 1/6, population var (1/6)(5/6) = 5/36, std sqrt(5)/6:
    # A(1) = (5/6) / (sqrt(5)/6) = sqrt(5) = 2.2360680;  A(0) = -(1/6) / (sqrt(5)/6) = -1/sqrt(5).
    # (A per-sample z-score would give 1.1547 and -0.5774: the long wrong answer counts 3 times here.)
    out = run("reinforce_pp", [1.0, 0.0, 0.0], [0, 1, 2], mask=[[1, 0, 0], [1, 1, 1], [0, 1, 1]])
    std = math.sqrt(5) / 6 + EPS
    high, low = (5 / 6) / std, (-1 / 6) / std
    assert (high, low) == pytest.approx((math.sqrt(5), -1 / math.sqrt(5)), abs=1e-5)
    expected = [[high, 0.0, 0.0], [low, low, low], [0.0, low, low]]
    assert out.advantages.tolist() == [pytest.approx(row, abs=TOL) for row in expected]


def test_reinforce_pp_single_sample_and_constant_batch_are_zero() -> None:
    assert torch.equal(run("reinforce_pp", [0.7], [0]).advantages, torch.zeros(1, 1))
    assert torch.equal(run("reinforce_pp", [0.3, 0.3, 0.3], [0, 1, 2]).advantages, torch.zeros(3, 1))


def test_reinforce_pp_baseline_one_token_per_sample() -> None:
    # Centered by group: 0.5,-0.5,-0.5,0.5 | 0,0,0,0 | -0.25,-0.25,-0.25,0.75 (token mean 0).
    # Sum of squares 4 (0.25) + 3 (0.0625) + 0.5625 = 1.75; population var 1.75 / 12, std 0.3818813.
    # A = centered / std: +-1.3093073, -0.6546537, 1.9639610; the all-ones group 0 (its r~ and mu are 0).
    out = run("reinforce_pp_baseline", REWARDS, GROUPS)
    std = math.sqrt(1.75 / 12) + EPS
    centered = [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, -0.25, -0.25, -0.25, 0.75]
    assert out.advantages.tolist() == [pytest.approx([c / std], abs=TOL) for c in centered]
    assert torch.equal(out.advantages[4:8], torch.zeros(4, 1))
    assert out.metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)


def test_reinforce_pp_baseline_subtracts_the_token_mean_like_its_reference() -> None:
    # Groups {0, 1}: rewards 1, 0 -> r~ +0.5, -0.5;  {2, 3}: 1, 1 -> zero variance, r~ 0.
    # Lengths 3, 1, 2, 1: returns 0.5 0.5 0.5 | -0.5 | 0 0 | 0 (7 tokens), sum 1, mean mu = 1/7.
    # Deviations 5/14 (x3), -9/14, -1/7 (x3); squares sum 6/7, population var 6/49, std sqrt(6)/7.
    # A = dev / std: 2.5/sqrt(6) = 1.0206207, -4.5/sqrt(6) = -1.8371173, and -1/sqrt(6) = -0.4082483
    # for the zero-variance group (its r~ is 0 but the length-weighted mean mu is not).
    out = run(
        "reinforce_pp_baseline", [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1],
        mask=[[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0]],
    )
    std = math.sqrt(6) / 7 + EPS
    hi, lo, zv = (5 / 14) / std, (-9 / 14) / std, (-1 / 7) / std
    assert (hi, lo, zv) == pytest.approx((1.0206207, -1.8371173, -0.4082483), abs=1e-5)
    expected = [[hi] * 3, [lo, 0, 0], [zv, zv, 0], [zv, 0, 0]]
    assert out.advantages.tolist() == [pytest.approx(row, abs=TOL) for row in expected]


def test_reinforce_pp_baseline_interleaved_groups() -> None:
    perm = [11, 4, 0, 9, 2, 6, 1, 10, 5, 3, 8, 7]
    base = run("reinforce_pp_baseline", REWARDS, GROUPS).advantages
    out = run("reinforce_pp_baseline", [REWARDS[i] for i in perm], [[30, -1, 8][GROUPS[i]] for i in perm])
    assert out.advantages[:, 0].tolist() == pytest.approx(base[perm, 0].tolist(), abs=TOL)


def test_reinforce_pp_token_rewards() -> None:
    # Row 0 samples t=0,1; row 1 samples t=1,2 (the 9.0 and 5.0 are outside the mask: ignored).
    # Row 0: step rewards -0.1, -0.2 + 1 (scalar on the last sampled token) -> returns to go 0.7, 0.8
    # Row 1: step rewards -0.1, -0.1 + 0                                    -> returns to go -0.2, -0.1
    # Over the 4 sampled tokens: mean 1.2 / 4 = 0.3, deviations 0.4, 0.5, -0.5, -0.4,
    # squares sum 0.82, population var 0.82 / 4 = 0.205, std 0.4527693
    # -> 0.8834522, 1.1043153, -1.1043153, -0.8834522
    out = run(
        "reinforce_pp", [1.0, 0.0], [0, 0],
        mask=[[1, 1, 0], [0, 1, 1]], token_rewards=[[-0.1, -0.2, 9.0], [5.0, -0.1, -0.1]],
    )
    assert out.advantages.shape == (2, 3)
    std = math.sqrt(0.205) + EPS
    expected = [[0.4 / std, 0.5 / std, 0.0], [0.0, -0.5 / std, -0.4 / std]]
    assert out.advantages.tolist() == [pytest.approx(row, abs=TOL) for row in expected]
    assert out.advantages[0, 2] == 0.0 and out.advantages[1, 0] == 0.0


def test_reinforce_pp_baseline_token_rewards() -> None:
    # Groups {0, 1}: rewards 1, 0 -> centered +0.5, -0.5;  {2, 3}: 1, 1 -> zero variance, centered 0.
    # Row 0 (t=0,1): -0.1, -0.1 + 0.5  -> returns 0.3, 0.4
    # Row 1 (t=0,1):  0.0, -0.2 - 0.5  -> returns -0.7, -0.7
    # Row 2 (t=0,1): -0.3,  0.0 + 0    -> returns -0.3, 0.0
    # Row 3 (t=0 only; 7.0 is unmasked): -0.1 + 0 -> return -0.1
    # 7 sampled tokens, sum -1.1, mean -0.1571429; deviations 0.4571429, 0.5571429, -0.5428571 (x2),
    # -0.1428571, 0.1571429, 0.0571429; squares sum 1.1571429, population var / 7 = 0.1653061,
    # std 0.4065785 -> 1.1243651, 1.3703200, -1.3351836 (x2), -0.3513642, 0.3865006, 0.1405457.
    out = run(
        "reinforce_pp_baseline", [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1],
        mask=[[1, 1], [1, 1], [1, 1], [1, 0]], token_rewards=[[-0.1, -0.1], [0.0, -0.2], [-0.3, 0.0], [-0.1, 7.0]],
    )
    returns = [[0.3, 0.4], [-0.7, -0.7], [-0.3, 0.0], [-0.1, None]]
    mean = -1.1 / 7
    std = math.sqrt(sum((g - mean) ** 2 for row in returns for g in row if g is not None) / 7) + EPS
    expected = [[0.0 if g is None else (g - mean) / std for g in row] for row in returns]
    assert expected[0] == pytest.approx([1.1243651, 1.3703200], abs=1e-5)  # the hand arithmetic above
    assert out.advantages.tolist() == [pytest.approx(row, abs=TOL) for row in expected]
    assert out.metrics["zero_variance_group_frac"] == 0.5


def ragged_batch(seed: int, n: int = 12, t: int = 7):
    """Rewards in {0, 0.5, 1} in groups of 4 and a right-aligned ragged mask (1..t tokens a row)."""
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 3, (n,), generator=gen).double() / 2
    rewards[:2] = torch.tensor([0.0, 1.0])  # never a constant batch
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = torch.arange(t)[None, :] >= (t - lengths)[:, None]
    kl = torch.rand(n, t, generator=gen, dtype=torch.float64)  # a per-token KL estimate
    return rewards, torch.arange(n) // 4, mask, kl


def advantages(name, rewards, groups, mask, token_rewards=None) -> torch.Tensor:
    return get_estimator(name).fn(AdvantageInputs(rewards, groups, mask, token_rewards=token_rewards)).advantages


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_zero_token_rewards_are_the_same_computation_as_none(name, seed) -> None:
    rewards, groups, mask, _ = ragged_batch(seed)
    none = advantages(name, rewards, groups, mask)
    zeros = advantages(name, rewards, groups, mask, torch.zeros(mask.shape, dtype=torch.float64))
    assert none.shape == mask.shape
    assert torch.equal(none, zeros)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_tiny_kl_reward_moves_advantages_by_order_coef(name, seed) -> None:
    # A = (G - mu) / (sigma + eps). A token reward changes every return G by at most
    # delta = coef * max_row sum_t |KL_t|, so mu moves by <= delta and the population std sigma by
    # <= delta (the rms of the change of the centered returns). Hence, exactly,
    #   |A' - A| <= delta (2 + |A|) / (sigma + eps - delta),
    # plus float32 rounding of the outputs. (Before the fix, the per-sample path and the per-token
    # path were two normalizations, and any coef > 0 moved advantages by up to 0.8.)
    rewards, groups, mask, kl = ragged_batch(seed)
    coef = 1e-4
    base = advantages(name, rewards, groups, mask).double()
    moved = advantages(name, rewards, groups, mask, -coef * kl).double()
    delta = coef * (kl * mask).sum(1).max().item()
    scalar = rewards if name == "reinforce_pp" else rewards - rewards.reshape(-1, 4).mean(1).repeat_interleave(4)
    returns = scalar[:, None].expand(mask.shape)[mask]
    sigma = returns.std(correction=0).item()
    assert sigma > 10 * delta  # the regime the bound is about
    a_max = base[mask].abs().max().item()
    rounding = 4 * torch.finfo(torch.float32).eps * (1 + a_max)
    bound = delta * (2 + a_max) / (sigma - delta) + rounding
    change = (moved - base)[mask].abs().max().item()
    assert 0 < change <= bound
    assert torch.equal(moved[~mask], torch.zeros(int((~mask).sum()), dtype=torch.float64))


def test_token_rewards_shape_is_checked() -> None:
    with pytest.raises(ValueError, match="shape"):
        run("reinforce_pp", [1.0, 0.0], [0, 0], mask=[[1, 1], [1, 1]], token_rewards=[[0.0], [0.0]])


def test_baseline_group_of_one_raises() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        run("reinforce_pp_baseline", [1.0, 0.0, 1.0], [0, 0, 1])
