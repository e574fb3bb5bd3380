"""reinforce_pp and reinforce_pp_baseline: batch-global normalization, per sample and per token."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]


def run(name: str, rewards: list[float], groups: list[int], mask=None, token_rewards=None):
    n = len(rewards)
    mask = torch.ones(n, 1, dtype=torch.bool) if mask is None else torch.tensor(mask, dtype=torch.bool)
    tr = None if token_rewards is None else torch.tensor(token_rewards)
    return get_estimator(name).fn(AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), mask, token_rewards=tr))


def test_reinforce_pp_per_sample() -> None:
    # Seven 1s and five 0s: batch mean 7/12 = 0.5833333; squared deviations 7 (5/12)^2 + 5 (7/12)^2 = 420/144
    # = 2.9166667, unbiased var / 11 = 0.2651515, std 0.5149287.
    # A(1) = 0.4166667 / 0.5149287 = 0.8091736;  A(0) = -0.5833333 / 0.5149287 = -1.1328430.
    # Groups play no part: the all-ones group gets 0.809 too.
    out = run("reinforce_pp", REWARDS, GROUPS)
    expected = [0.8091736 if r == 1.0 else -1.1328430 for r in REWARDS]
    assert out.advantages.shape == (12,)
    assert out.advantages.tolist() == pytest.approx(expected, abs=1e-5)
    assert out.metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)  # monitoring only


def test_reinforce_pp_single_sample_and_constant_batch_are_zero() -> None:
    assert torch.equal(run("reinforce_pp", [0.7], [0]).advantages, torch.zeros(1))
    assert torch.equal(run("reinforce_pp", [0.3, 0.3, 0.3], [0, 1, 2]).advantages, torch.zeros(3))


def test_reinforce_pp_baseline_per_sample() -> None:
    # Centered by group: 0.5,-0.5,-0.5,0.5 | 0,0,0,0 | -0.25,-0.25,-0.25,0.75 (batch mean 0).
    # Sum of squares 4 (0.25) + 3 (0.0625) + 0.5625 = 1.75; unbiased var 1.75 / 11 = 0.1590909, std 0.3988620.
    # A = centered / 0.3988620: +-1.2535663, -0.6267832, 1.8803495; the all-ones group exactly 0.
    out = run("reinforce_pp_baseline", REWARDS, GROUPS)
    expected = [1.2535663, -1.2535663, -1.2535663, 1.2535663, 0, 0, 0, 0, -0.6267832, -0.6267832, -0.6267832, 1.8803495]
    assert out.advantages.tolist() == pytest.approx(expected, abs=1e-5)
    assert torch.equal(out.advantages[4:8], torch.zeros(4))
    assert out.metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)


def test_reinforce_pp_baseline_interleaved_groups() -> None:
    perm = [11, 4, 0, 9, 2, 6, 1, 10, 5, 3, 8, 7]
    base = run("reinforce_pp_baseline", REWARDS, GROUPS).advantages
    out = run("reinforce_pp_baseline", [REWARDS[i] for i in perm], [[30, -1, 8][GROUPS[i]] for i in perm])
    assert out.advantages.tolist() == pytest.approx(base[perm].tolist(), abs=1e-6)


def test_reinforce_pp_token_rewards() -> None:
    # Row 0 samples t=0,1; row 1 samples t=1,2 (the 9.0 and 5.0 are outside the mask: ignored).
    # Row 0: step rewards -0.1, -0.2 + 1 (scalar on the last sampled token) -> returns to go 0.7, 0.8
    # Row 1: step rewards -0.1, -0.1 + 0                                    -> returns to go -0.2, -0.1
    # Over the 4 sampled tokens: mean 1.2 / 4 = 0.3, deviations 0.4, 0.5, -0.5, -0.4,
    # squares sum 0.82, unbiased var 0.82 / 3 = 0.2733333, std 0.5228129
    # -> 0.7650920, 0.9563650, -0.9563650, -0.7650920
    out = run(
        "reinforce_pp", [1.0, 0.0], [0, 0],
        mask=[[1, 1, 0], [0, 1, 1]], token_rewards=[[-0.1, -0.2, 9.0], [5.0, -0.1, -0.1]],
    )
    assert out.advantages.shape == (2, 3)
    expected = [[0.7650920, 0.9563650, 0.0], [0.0, -0.9563650, -0.7650920]]
    assert out.advantages.tolist() == [pytest.approx(row, abs=1e-5) for row in expected]
    assert out.advantages[0, 2] == 0.0 and out.advantages[1, 0] == 0.0


def test_reinforce_pp_baseline_token_rewards() -> None:
    # Groups {0, 1}: rewards 1, 0 -> centered +0.5, -0.5;  {2, 3}: 1, 1 -> zero variance, centered 0.
    # Row 0 (t=0,1): -0.1, -0.1 + 0.5  -> returns 0.3, 0.4
    # Row 1 (t=0,1):  0.0, -0.2 - 0.5  -> returns -0.7, -0.7
    # Row 2 (t=0,1): -0.3,  0.0 + 0    -> returns -0.3, 0.0
    # Row 3 (t=0 only; 7.0 is unmasked): -0.1 + 0 -> return -0.1
    # 7 sampled tokens, sum -1.1, mean -0.1571429; deviations 0.4571429, 0.5571429, -0.5428571 (x2),
    # -0.1428571, 0.1571429, 0.0571429; squares sum 1.1571429, unbiased var / 6 = 0.1928571, std 0.4391550
    # -> 1.0409608, 1.2686709, -1.2361410 (x2), -0.3253016, 0.3578318, 0.1301201.
    # The zero-variance group keeps its token rewards' signal (not zeroed) when token rewards are given.
    out = run(
        "reinforce_pp_baseline", [1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1],
        mask=[[1, 1], [1, 1], [1, 1], [1, 0]], token_rewards=[[-0.1, -0.1], [0.0, -0.2], [-0.3, 0.0], [-0.1, 7.0]],
    )
    expected = [[1.0409608, 1.2686709], [-1.2361410, -1.2361410], [-0.3253016, 0.3578318], [0.1301201, 0.0]]
    assert out.advantages.tolist() == [pytest.approx(row, abs=1e-5) for row in expected]
    assert out.metrics["zero_variance_group_frac"] == 0.5


def test_token_rewards_shape_is_checked() -> None:
    with pytest.raises(ValueError, match="shape"):
        run("reinforce_pp", [1.0, 0.0], [0, 0], mask=[[1, 1], [1, 1]], token_rewards=[[0.0], [0.0]])


def test_baseline_group_of_one_raises() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        run("reinforce_pp_baseline", [1.0, 0.0, 1.0], [0, 0, 1])
