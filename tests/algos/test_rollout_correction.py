"""Sequence-level truncated IS weights and rollout masking, by hand.

Two samples, behaviour log-probs 0, proximal ones chosen so the token ratios are
    sample 0: r = 2.0, 1.5        (sampled)  + one padded position with a huge log-ratio
    sample 1: r = 0.5, 0.8, 0.25  (sampled)
so the sequence ratios are 3.0 and 0.1, the geometric ones sqrt(3) = 1.732 and 0.1^(1/3) = 0.464.
"""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.algos.losses.importance import truncated_is_weights
from reinforge.algos.losses.rollout_correction import log_ratios, rollout_is_weights, rollout_rejection_mask

RATIOS = [[2.0, 1.5, 1.0], [0.5, 0.8, 0.25]]
MASK = torch.tensor([[True, True, False], [True, True, True]])


def logprobs() -> tuple[torch.Tensor, torch.Tensor]:
    proximal = torch.tensor(RATIOS, dtype=torch.float64).log()
    proximal[0, 2] = 1e4  # a padded position: never counted, never overflows
    return proximal, torch.zeros(2, 3, dtype=torch.float64)


def test_sequence_and_geometric_log_ratios() -> None:
    proximal, behaviour = logprobs()
    seq = log_ratios(proximal, behaviour, MASK, "sequence")
    assert seq[0].exp().tolist() == pytest.approx([3.0] * 3) and seq[1].exp().tolist() == pytest.approx([0.1] * 3)
    geo = log_ratios(proximal, behaviour, MASK, "geometric")
    assert geo[0, 0].exp().item() == pytest.approx(math.sqrt(3.0)) and geo[1, 0].exp().item() == pytest.approx(0.1 ** (1 / 3))
    with pytest.raises(ValueError, match="valid: token, sequence, geometric"):
        log_ratios(proximal, behaviour, MASK, "turn")


def test_sequence_weights_are_the_capped_product_on_every_sampled_token() -> None:
    proximal, behaviour = logprobs()
    weights, metrics = rollout_is_weights(proximal, behaviour, MASK, cap=2.0, level="sequence")
    # min(3.0, 2) on sample 0's two tokens, min(0.1, 2) on sample 1's three, 0 on padding
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.0, 0.0], [0.1, 0.1, 0.1]], dtype=torch.float64))
    assert not weights.requires_grad
    assert metrics["tis_weight_mean"] == pytest.approx((2 * 2.0 + 3 * 0.1) / 5)
    assert metrics["tis_capped_frac"] == pytest.approx(2 / 5)  # sample 0's tokens


def test_geometric_weights_and_token_level_is_todays_tis() -> None:
    proximal, behaviour = logprobs()
    weights, metrics = rollout_is_weights(proximal, behaviour, MASK, cap=1.5, level="geometric")
    torch.testing.assert_close(weights[0, :2], torch.tensor([1.5, 1.5], dtype=torch.float64))  # sqrt(3) capped
    torch.testing.assert_close(weights[1], torch.full((3,), 0.1 ** (1 / 3), dtype=torch.float64))
    assert metrics["tis_capped_frac"] == pytest.approx(2 / 5)
    token, token_metrics = rollout_is_weights(proximal, behaviour, MASK, cap=1.5, level="token")
    expected, expected_metrics = truncated_is_weights(proximal, behaviour, MASK, 1.5)
    assert torch.equal(token, expected) and token_metrics == expected_metrics


def test_a_long_sample_cannot_overflow() -> None:
    proximal = torch.full((1, 400), 5.0)  # a sequence log-ratio of 2000: exp overflows float64
    weights, metrics = rollout_is_weights(proximal, torch.zeros(1, 400), torch.ones(1, 400, dtype=torch.bool), 2.0, "sequence")
    assert weights.eq(2.0).all() and metrics["tis_capped_frac"] == 1.0


@pytest.mark.parametrize(
    ("level", "low", "high", "keep", "masked_frac", "masked_samples"),
    [
        # token (IcePop): ratios 2.0 and 0.25 leave [0.5, 1.9]
        ("token", 0.5, 1.9, [[False, True, False], [True, True, False]], 2 / 5, 2 / 2),
        # sequence: 3.0 leaves [0.05, 2.5], 0.1 stays
        ("sequence", 0.05, 2.5, [[False, False, False], [True, True, True]], 2 / 5, 1 / 2),
        # geometric: 1.732 stays in [0.5, 2], 0.464 leaves it
        ("geometric", 0.5, 2.0, [[True, True, False], [False, False, False]], 3 / 5, 1 / 2),
    ],
)
def test_masking_keeps_ratios_inside_the_band(level, low, high, keep, masked_frac, masked_samples) -> None:
    proximal, behaviour = logprobs()
    kept, metrics = rollout_rejection_mask(proximal, behaviour, MASK, low, high, level)
    assert kept.tolist() == keep  # padding is never kept
    assert metrics["rollout_masked_frac"] == pytest.approx(masked_frac)
    assert metrics["rollout_masked_samples"] == pytest.approx(masked_samples)


def test_bad_band_and_cap_are_refused() -> None:
    proximal, behaviour = logprobs()
    with pytest.raises(ValueError, match="0 < low <= high"):
        rollout_rejection_mask(proximal, behaviour, MASK, 2.0, 1.0, "sequence")
    with pytest.raises(ValueError, match="cap must be > 0"):
        rollout_is_weights(proximal, behaviour, MASK, 0.0, "sequence")
