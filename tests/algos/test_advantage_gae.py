"""gae: token-level GAE over the sampled positions, returns before whitening, whitened advantages."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs

NaN = float("nan")  # values outside the mask must never be read


def run(rewards, mask, values, token_rewards=None, gamma=1.0, lam=1.0, groups=None):
    n = len(rewards)
    inputs = AdvantageInputs(
        torch.tensor(rewards), torch.tensor(list(range(n)) if groups is None else groups),
        torch.tensor(mask, dtype=torch.bool), values=torch.tensor(values, dtype=torch.float64),
        token_rewards=None if token_rewards is None else torch.tensor(token_rewards, dtype=torch.float64),
        gamma=gamma, lam=lam,
    )
    return get_estimator("gae").fn(inputs)


def test_hand_computed_non_contiguous_mask() -> None:
    # gamma 0.9, lam 0.5 (gamma lam = 0.45).
    # Row 0, steps t=0,1,2, V 0.5, 0.4, 0.6, reward 1 on t=2:
    #   delta2 = 1 - 0.6 = 0.4;  delta1 = 0.9 * 0.6 - 0.4 = 0.14;  delta0 = 0.9 * 0.4 - 0.5 = -0.14
    #   A2 = 0.4;  A1 = 0.14 + 0.45 * 0.4 = 0.32;  A0 = -0.14 + 0.45 * 0.32 = 0.004
    #   returns = A + V = 0.504, 0.72, 1.0
    # Row 1, steps t=1 and t=3 (t=0, 2 are env tokens), V 0.2, 0.5, reward 0:
    #   delta(t3) = 0 - 0.5 = -0.5;  delta(t1) = 0.9 * 0.5 - 0.2 = 0.25
    #   A(t3) = -0.5;  A(t1) = 0.25 + 0.45 * -0.5 = 0.025;  returns 0.225, 0.0
    # Whitening over the 5 tokens 0.004, 0.32, 0.4, 0.025, -0.5: mean 0.0498,
    # deviations -0.0458, 0.2702, 0.3502, -0.0248, -0.5498, squares sum 0.5006408, unbiased var 0.1251602,
    # std 0.3537799 -> -0.1294590, 0.7637518, 0.9898811, -0.0701001, -1.5540737
    out = run([1.0, 0.0], [[1, 1, 1, 0], [0, 1, 0, 1]], [[0.5, 0.4, 0.6, NaN], [NaN, 0.2, NaN, 0.5]], gamma=0.9, lam=0.5)
    assert out.advantages.shape == (2, 4) and out.returns.shape == (2, 4)
    expected = [[-0.1294590, 0.7637518, 0.9898811, 0.0], [0.0, -0.0701001, 0.0, -1.5540737]]
    assert out.advantages.tolist() == [pytest.approx(row, abs=1e-5) for row in expected]
    assert out.returns.tolist() == [pytest.approx(row, abs=1e-6) for row in [[0.504, 0.72, 1.0, 0.0], [0.0, 0.225, 0.0, 0.0]]]
    assert out.advantages[0, 3] == 0.0 and out.advantages[1, 0] == 0.0 and out.advantages[1, 2] == 0.0
    assert out.metrics["advantage_raw_mean"] == pytest.approx(0.0498, abs=1e-9)


def test_gamma_lam_one_is_monte_carlo_with_token_rewards() -> None:
    # gamma = lam = 1: A_t = (sum of rewards from t on) - V_t, returns = rewards to go.
    # Row 0: token rewards -0.1, -0.1, -0.1, scalar 2 on t=2: rewards to go 1.7, 1.8, 1.9
    #   V 1.0, 1.5, 2.0 -> A 0.7, 0.3, -0.1
    # Row 1: t=0 only, token reward 0, scalar -1: return -1, V 0 -> A -1
    # Whitening 0.7, 0.3, -0.1, -1: mean -0.025, deviations 0.725, 0.325, -0.075, -0.975,
    # squares sum 1.5875, unbiased var 0.5291667, std 0.7274384 -> 0.9966479, 0.4467732, -0.1031015, -1.3403196
    out = run(
        [2.0, -1.0], [[1, 1, 1], [1, 0, 0]], [[1.0, 1.5, 2.0], [0.0, NaN, NaN]],
        token_rewards=[[-0.1, -0.1, -0.1], [0.0, 5.0, 5.0]],
    )
    assert out.returns.tolist() == [pytest.approx(r, abs=1e-6) for r in [[1.7, 1.8, 1.9], [-1.0, 0.0, 0.0]]]
    expected = [[0.9966479, 0.4467732, -0.1031015], [-1.3403196, 0.0, 0.0]]
    assert out.advantages.tolist() == [pytest.approx(row, abs=1e-5) for row in expected]


def test_needs_values_and_matching_shapes() -> None:
    inputs = AdvantageInputs(torch.tensor([1.0]), torch.tensor([0]), torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="values"):
        get_estimator("gae").fn(inputs)
    with pytest.raises(ValueError, match="shape"):
        run([1.0], [[1, 1]], [[0.0, 0.0, 0.0]])
