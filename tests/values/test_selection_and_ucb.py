"""PCL's selection rule and DUMP's UCB, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.values.dump import DistributionBandit, sampling_probabilities, ucb_scores
from reinforge.values.selection import nearest_to_target


def test_pcl_keeps_the_predictions_nearest_the_target_nearest_first():
    # |p - 0.5| = 0.4, 0.05, 0.3, 0.0, 0.05, 0.45  -> order 3, 1, 4 (tie: pool order), 2, 0, 5
    predicted = torch.tensor([0.9, 0.45, 0.2, 0.5, 0.55, 0.05])
    assert nearest_to_target(predicted, 3) == [3, 1, 4]
    assert nearest_to_target(predicted, 6) == [3, 1, 4, 2, 0, 5]


def test_pcl_target_other_than_one_half():
    # target 0.8: distances 0.1, 0.35, 0.6, 0.3, 0.25, 0.75 -> 0, 4, 3
    assert nearest_to_target(torch.tensor([0.9, 0.45, 0.2, 0.5, 0.55, 0.05]), 3, target=0.8) == [0, 4, 3]


def test_pcl_refuses_to_select_more_than_the_pool():
    with pytest.raises(ValueError, match="cannot select 4 prompts from a pool of 3"):
        nearest_to_target(torch.tensor([0.1, 0.2, 0.3]), 4)


def test_ucb_scores_by_hand():
    # N = 4 + 1 = 5; c = 0.5: 0.2 + 0.5 sqrt(2 ln5 / 4) and 0.1 + 0.5 sqrt(2 ln5 / 1)
    scores = ucb_scores([0.2, 0.1, 0.0], [4, 1, 0], c=0.5)
    ln5 = math.log(5)
    assert scores[0] == pytest.approx(0.2 + 0.5 * math.sqrt(2 * ln5 / 4))  # 0.6485
    assert scores[1] == pytest.approx(0.1 + 0.5 * math.sqrt(2 * ln5 / 1))  # 1.0971
    assert scores[2] == math.inf


def test_softmax_over_ucb_and_uniform_over_unvisited():
    # softmax([1, 0] / 0.5) = [e^2, 1] / (e^2 + 1) = [0.8808, 0.1192]
    assert sampling_probabilities([1.0, 0.0], temperature=0.5) == pytest.approx([0.880797, 0.119203], abs=1e-6)
    assert sampling_probabilities([1.0, math.inf, math.inf], temperature=0.5) == [0.0, 0.5, 0.5]


def test_bandit_visits_every_distribution_first_then_favours_the_learnable_one():
    bandit = DistributionBandit(["a", "b", "c"], c=0.0, window=4, temperature=0.05, seed=0)
    assert sorted(bandit.draw(3)) == ["a", "b", "c"]  # each unvisited one has an infinite bound
    for value in (0.4, 0.4):
        bandit.observe("b", value)
    bandit.observe("a", 0.0)
    bandit.observe("c", 0.1)
    # c = 0: scores are the learnabilities 0, 0.4, 0.1; softmax / 0.05 puts ~0.9975 on b
    probabilities = bandit.probabilities()
    assert probabilities[1] == pytest.approx(math.exp(8) / (1 + math.exp(8) + math.exp(2)))
    assert bandit.draw(20).count("b") >= 18


def test_bandit_window_forgets_old_learnability():
    bandit = DistributionBandit(["a"], c=1.0, window=2, temperature=1.0, seed=0)
    for value in (1.0, 0.2, 0.4):
        bandit.observe("a", value)
    assert bandit.learnability() == [pytest.approx(0.3)]  # only the last two: (0.2 + 0.4) / 2
