"""reinforce: no baseline; raw rewards, or a [0, 1] score read as +-1 (W-REINFORCE's rewards)."""

from __future__ import annotations

import pytest
import torch

from reference.rlvr_decomposed_psr_nsr import compute_psr_nsr_outcome_advantage
from reinforge.algos.advantages import get_estimator
from reinforge.algos.losses.sample_weighting import weight_by_sign
from reinforge.algos.types import AdvantageInputs


def run(rewards: list[float], groups: list[int], how: str):
    n = len(rewards)
    inputs = AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), torch.ones(n, 1, dtype=torch.bool), reinforce_reward=how)
    return get_estimator("reinforce").fn(inputs)


def test_hand_computed_raw_and_signed() -> None:
    # raw: the rewards themselves, whatever the group; an all-wrong group (group 1) is not 0 when signed:
    #   signed 2r - 1: 1 -> 1, 0 -> -1, 0.25 -> -0.5
    rewards, groups = [1.0, 0.0, 0.25, 0.0, 0.0], [0, 0, 0, 1, 1]
    assert run(rewards, groups, "raw").advantages.tolist() == [1.0, 0.0, 0.25, 0.0, 0.0]
    assert run(rewards, groups, "signed").advantages.tolist() == [1.0, -1.0, -0.5, -1.0, -1.0]
    # W-REINFORCE (lambda 0.1 on the positives): +0.1 for a correct answer, -1 for a wrong one.
    assert weight_by_sign(run(rewards, groups, "signed").advantages, 0.1, 1.0).tolist() == pytest.approx([0.1, -1.0, -0.5, -1.0, -1.0])


def test_groups_of_one_are_fine_and_signed_refuses_scores_outside_0_1() -> None:
    assert run([0.3], [0], "raw").advantages.tolist() == pytest.approx([0.3])
    with pytest.raises(ValueError, match="reinforce_reward=signed reads each reward as a \\[0, 1\\]"):
        run([1.5, 0.0], [0, 0], "signed")


@pytest.mark.parametrize("seed", range(8))
def test_signed_with_positive_weight_is_the_authors_w_reinforce(seed: int) -> None:
    """Binary scores on random ragged masks (an empty row among them): the authors' advantages
    (score at the last response token, gamma 1, no KL) equal signed rewards weighted by sign."""
    g = torch.Generator().manual_seed(seed)
    n, length, lam = 12, 9, float(torch.rand(1, generator=g)) * 0.5
    scores = torch.randint(0, 2, (n,), generator=g).double()
    lengths = torch.randint(0, length + 1, (n,), generator=g)
    lengths[0] = 0  # an empty response
    mask = torch.arange(length)[None, :] < lengths[:, None]
    token_scores = torch.zeros(n, length, dtype=torch.float64)
    rows = lengths > 0
    token_scores[rows, lengths[rows] - 1] = scores[rows]
    expected, _ = compute_psr_nsr_outcome_advantage(token_scores, token_scores, mask.double(), 1.0, "weighted", lam)
    # An empty row has no token to carry its score: the authors read it as wrong (score sum 0); so do we.
    signed = run(torch.where(rows, scores, 0.0).tolist(), list(range(n)), "signed").advantages
    ours = weight_by_sign(signed.double(), lam, 1.0)[:, None] * mask
    assert torch.allclose(ours, expected, atol=1e-7)
