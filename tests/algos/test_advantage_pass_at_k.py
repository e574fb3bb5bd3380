"""pass_at_k: the analytic Pass@k group advantage for binary rewards."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs

# Four groups of 4: 1,0,0,1 | 0,0,0,1 | 1,1,1,1 | 0.7,0.2,0.9,0.4 (binarized at > 0.5: 1,0,1,0)
REWARDS = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.7, 0.2, 0.9, 0.4]
GROUPS = [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4


def run(rewards: list[float], groups: list[int], k: int):
    n = len(rewards)
    inputs = AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), torch.ones(n, 1, dtype=torch.bool), pass_k=k)
    return get_estimator("pass_at_k").fn(inputs)


def test_k2_hand_computed() -> None:
    # n = 4, k = 2, C(4,2) = 6, C(3,1) = 3.
    # 1,0,0,1 (n_neg 2): R = 1 - C(2,2)/6 = 5/6, s = sqrt(5/6 * 1/6) = 0.3726780
    #   A_pos = (1/6) / s = 0.4472136;  A_neg = (1/6 - C(1,1)/3) / s = (-1/6) / s = -0.4472136
    # 0,0,0,1 (n_neg 3): R = 1 - C(3,2)/6 = 0.5, s = 0.5
    #   A_pos = 0.5 / 0.5 = 1;  A_neg = (0.5 - C(2,1)/3) / 0.5 = -1/3
    # 1,1,1,1: R = 1, s = 0 -> 0.   0.7,0.2,0.9,0.4 -> 1,0,1,0: as the first group.
    out = run(REWARDS, GROUPS, 2)
    expected = [0.4472136, -0.4472136, -0.4472136, 0.4472136, -1 / 3, -1 / 3, -1 / 3, 1.0,
                0.0, 0.0, 0.0, 0.0, 0.4472136, -0.4472136, 0.4472136, -0.4472136]
    assert out.advantages.tolist() == pytest.approx(expected, abs=1e-6)
    assert torch.equal(out.advantages[8:12], torch.zeros(4))
    assert out.metrics["zero_variance_group_frac"] == 0.25
    assert out.metrics["pass_at_k_mean"] == pytest.approx((5 / 6 + 0.5 + 1 + 5 / 6) / 4)


def test_k3_hand_computed_and_saturation() -> None:
    # k = 3, C(4,3) = 4, C(3,2) = 3.
    # 1,0,0,1 (n_neg 2 < 3): every 3-subset holds a 1, R = 1, s = 0 -> 0 (saturated, not zero-variance)
    # 0,0,0,1 (n_neg 3): R = 1 - C(3,3)/4 = 0.75, s = sqrt(0.75 * 0.25) = 0.4330127
    #   A_pos = 0.25 / s = 0.5773503;  A_neg = (0.25 - C(2,2)/3) / s = -0.0833333 / s = -0.1924501
    out = run(REWARDS, GROUPS, 3)
    expected = [0.0] * 4 + [-0.1924501] * 3 + [0.5773503] + [0.0] * 8
    assert out.advantages.tolist() == pytest.approx(expected, abs=1e-6)
    assert torch.equal(out.advantages[:4], torch.zeros(4))
    assert out.metrics["pass_k_saturated_group_frac"] == 0.5
    assert out.metrics["zero_variance_group_frac"] == 0.25


def test_k1_is_grpo_with_population_std() -> None:
    # k = 1: R = mean, A = (r - R) / sqrt(R (1 - R)).
    #   1,0,0,1: R = 0.5, s = 0.5 -> +-1;  0,0,0,1: R = 0.25, s = sqrt(0.1875) = 0.4330127
    #   -> -0.25 / s = -0.5773503, 0.75 / s = 1.7320508
    out = run(REWARDS, GROUPS, 1)
    expected = [1, -1, -1, 1, -0.5773503, -0.5773503, -0.5773503, 1.7320508, 0, 0, 0, 0, 1, -1, 1, -1]
    assert out.advantages.tolist() == pytest.approx(expected, abs=1e-6)
    binary = (torch.tensor(REWARDS) > 0.5).double().view(4, 4)
    grpo_pop = (binary - binary.mean(1, keepdim=True)) / binary.std(1, unbiased=False, keepdim=True)
    grpo_pop = torch.nan_to_num(grpo_pop, nan=0.0).flatten()
    assert out.advantages.tolist() == pytest.approx(grpo_pop.tolist(), abs=1e-6)


def test_interleaved_group_ids() -> None:
    perm = [15, 4, 0, 9, 2, 6, 12, 1, 10, 5, 14, 3, 8, 7, 11, 13]
    base = run(REWARDS, GROUPS, 2).advantages
    out = run([REWARDS[i] for i in perm], [[30, -1, 8, 2][GROUPS[i]] for i in perm], 2)
    assert out.advantages.tolist() == pytest.approx(base[perm].tolist(), abs=1e-6)


def test_k_larger_than_a_group_raises() -> None:
    with pytest.raises(ValueError, match="pass_k"):
        run([1.0, 0.0, 1.0, 0.0, 0.0], [0, 0, 0, 1, 1], 3)
    with pytest.raises(ValueError, match="pass_k"):
        run([1.0, 0.0], [0, 0], 0)
    with pytest.raises(ValueError, match="at least 2"):
        run([1.0, 0.0, 1.0], [0, 0, 1], 1)
