"""W-REINFORCE sign weights and ACE confidence-scaled negatives, by hand."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.losses.sample_weighting import confidence_scaled_negatives, sequence_log_ratio, weight_by_sign


def test_weight_by_sign() -> None:
    adv = torch.tensor([1.5, -2.0, 0.0, 0.4])
    # positives x 0.1, negatives x 1.0, zero stays zero: [0.15, -2.0, 0.0, 0.04]
    assert weight_by_sign(adv, 0.1, 1.0).tolist() == pytest.approx([0.15, -2.0, 0.0, 0.04])
    # per-token advantages work the same
    per_token = torch.tensor([[1.0, -1.0], [-3.0, 2.0]])
    assert weight_by_sign(per_token, 0.5, 2.0).tolist() == [[0.5, -2.0], [-6.0, 1.0]]


def test_sequence_log_ratio_sums_sampled_tokens_and_is_detached() -> None:
    logp = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -9.0, -9.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, 0.0], [-1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    ratio = sequence_log_ratio(logp, ref, mask)
    # row 0: (-1 + 1.5) + (-2 + 1) = 0.5 - 1 = -0.5;  row 1: -0.5 + 1 = 0.5
    assert ratio.tolist() == [-0.5, 0.5]
    assert not ratio.requires_grad


def test_confidence_scaled_negatives() -> None:
    adv = torch.tensor([-1.0, -1.0, 2.0, -0.5])
    seq_log_ratio = torch.tensor([0.5, -3.0, 4.0, 2.0], requires_grad=True)
    out = confidence_scaled_negatives(adv, seq_log_ratio, alpha=0.4, shape="relu")
    # -1 * (1 + 0.4 * 0.5) = -1.2 | -1 * (1 + 0.4 * max(0, -3)) = -1 | positive: 2 | -0.5 * (1 + 0.4 * 2) = -0.9
    assert out.tolist() == pytest.approx([-1.2, -1.0, 2.0, -0.9])
    assert not out.requires_grad  # the confidence scale is a constant
    # softplus (the paper's default): softplus(0.5) = ln(1 + e^0.5) = 0.974077, softplus(-3) = 0.048587,
    # softplus(2) = 2.126928  ->  -1.389631 | -1.019435 | 2 | -0.5 * 1.850771 = -0.925386
    soft = confidence_scaled_negatives(adv, seq_log_ratio, alpha=0.4)
    assert soft.tolist() == pytest.approx([-1.389631, -1.019435, 2.0, -0.925386], abs=1e-6)
    # [N, T] advantages: the row's scale on every token
    per_token = confidence_scaled_negatives(
        torch.tensor([[-1.0, -1.0], [1.0, 1.0]]), torch.tensor([1.0, 1.0]), alpha=0.5, shape="relu"
    )
    assert per_token.tolist() == [[-1.5, -1.5], [1.0, 1.0]]
    with pytest.raises(ValueError, match="softplus, relu"):
        confidence_scaled_negatives(adv, seq_log_ratio, alpha=0.4, shape="tanh")
    with pytest.raises(ValueError):
        confidence_scaled_negatives(adv, seq_log_ratio, alpha=-1.0)
