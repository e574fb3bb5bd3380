"""v05_prior: the group mean shrunk toward the value model's predicted pass rate, by hand."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs


def inputs(rewards, groups, priors, tau2, z):
    rewards = torch.tensor(rewards, dtype=torch.float64)
    return AdvantageInputs(
        rewards=rewards, group_ids=torch.tensor(groups), mask=torch.ones(len(rewards), 3, dtype=torch.bool),
        prompt_values=torch.tensor(priors, dtype=torch.float64), prompt_value_var=torch.tensor(tau2, dtype=torch.float64),
        prior_test_z=z,
    )


REWARDS = [1, 0, 0, 0, 1, 1, 0, 0, 0, 0]
GROUPS = [0, 0, 0, 0, 1, 1, 2, 2, 2, 2]
PRIORS = [0.5] * 4 + [0.2] * 2 + [0.3] * 4
TAU2 = [0.01] * 6 + [0.04] * 4


def test_shrinkage_baseline_by_hand_with_the_deviation_test():
    estimator = get_estimator("v05_prior")
    assert estimator.needs_prompt_values and estimator.min_group_size == 1
    out = estimator.fn(inputs(REWARDS, GROUPS, PRIORS, TAU2, z=2.0))
    # group 0: r_bar = 0.25, p = 0.5, sigma^2/n = 0.25/4 = 0.0625, w = 0.0625 / 0.0725 = 0.862069
    #          |0.25 - 0.5| = 0.25 <= 2 sqrt(0.0725) = 0.5385: kept; b = 0.862069*0.5 + 0.137931*0.25 = 0.465517
    # group 1: r_bar = 1, p = 0.2, sigma^2/n = 0.16/2 = 0.08; |1 - 0.2| = 0.8 > 2 sqrt(0.09) = 0.6: rejected, b = 1
    # group 2: r_bar = 0, p = 0.3, sigma^2/n = 0.21/4 = 0.0525, w = 0.0525 / 0.0925 = 0.567568
    #          |0 - 0.3| = 0.3 <= 2 sqrt(0.0925) = 0.6083: kept; b = 0.567568 * 0.3 = 0.170270
    expected = [0.534483, -0.465517, -0.465517, -0.465517, 0.0, 0.0, -0.170270, -0.170270, -0.170270, -0.170270]
    assert out.advantages.tolist() == pytest.approx(expected, abs=1e-6)
    assert out.advantages.dtype == torch.float32
    assert out.metrics["prior_rejected_frac"] == pytest.approx(1 / 3)
    assert out.metrics["prior_weight_mean"] == pytest.approx((0.862069 + 0.0 + 0.567568) / 3, abs=1e-6)
    assert out.metrics["zero_variance_group_frac"] == pytest.approx(2 / 3)  # groups 1 and 2 are constant


def test_without_the_test_a_contradicted_prior_still_pulls_the_baseline():
    out = get_estimator("v05_prior").fn(inputs(REWARDS, GROUPS, PRIORS, TAU2, z=None))
    # group 1: w = 0.08 / 0.09 = 0.888889, b = 0.888889*0.2 + 0.111111*1 = 0.288889, A = 0.711111
    assert out.advantages[4:6].tolist() == pytest.approx([0.711111, 0.711111], abs=1e-6)
    assert out.metrics["prior_rejected_frac"] == 0.0


def test_a_certain_prior_has_no_weight_and_a_large_group_little():
    # p = 1: sigma^2 = 0, the prior adds nothing (w = 0): the group's own mean
    out = get_estimator("v05_prior").fn(inputs([1, 0], [0, 0], [1.0, 1.0], [0.01, 0.01], z=None))
    assert out.advantages.tolist() == pytest.approx([0.5, -0.5])
    # n = 100, p = 0.5, tau^2 = 0.01: w = 0.0025 / 0.0125 = 0.2
    rewards = [1] * 30 + [0] * 70
    out = get_estimator("v05_prior").fn(inputs(rewards, [0] * 100, [0.5] * 100, [0.01] * 100, z=None))
    assert out.advantages[0].item() == pytest.approx(1 - (0.2 * 0.5 + 0.8 * 0.3))


def test_without_a_prior_it_says_what_is_missing():
    bare = AdvantageInputs(rewards=torch.tensor([1.0, 0.0]), group_ids=torch.tensor([0, 0]), mask=torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="prompt_values"):
        get_estimator("v05_prior").fn(bare)
