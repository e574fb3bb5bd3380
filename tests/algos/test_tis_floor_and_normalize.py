"""The lower clip of truncated IS weights (algo.tis_floor) and their normalization to mean 1
(algo.tis_normalize): by hand, and against verl's compute_rollout_correction_weights."""

from __future__ import annotations

import math

import pytest
import torch

from reference.verl_rollout_corr import compute_rollout_correction_weights
from reinforge.algos.losses.rollout_correction import normalize_is_weights, rollout_is_weights

# Behaviour log-probs 0; token ratios
#   sample 0: 2.0, 1.5, (padding)      sample 1: 0.5, 0.8, 0.25      sample 2: nothing sampled
# sequence ratios 3.0 and 0.1.
RATIOS = [[2.0, 1.5, 1.0], [0.5, 0.8, 0.25], [1.0, 1.0, 1.0]]
MASK = torch.tensor([[True, True, False], [True, True, True], [False, False, False]])


def logprobs():
    return torch.tensor(RATIOS, dtype=torch.float64).log(), torch.zeros(3, 3, dtype=torch.float64)


def test_token_weights_are_clipped_on_both_sides() -> None:
    proximal, behaviour = logprobs()
    weights, metrics = rollout_is_weights(proximal, behaviour, MASK, cap=1.8, level="token", floor=0.6)
    # clip(2.0) = 1.8, 1.5 stays, clip(0.5) = 0.6, 0.8 stays, clip(0.25) = 0.6
    torch.testing.assert_close(weights, torch.tensor([[1.8, 1.5, 0.0], [0.6, 0.8, 0.6], [0.0, 0.0, 0.0]], dtype=torch.float64))
    assert metrics["tis_floored_frac"] == pytest.approx(2 / 5) and metrics["tis_capped_frac"] == pytest.approx(1 / 5)
    _, no_floor = rollout_is_weights(proximal, behaviour, MASK, cap=1.8, level="token")
    assert "tis_floored_frac" not in no_floor  # the metric appears with the option


def test_sequence_weights_are_clipped_on_both_sides() -> None:
    proximal, behaviour = logprobs()
    weights, metrics = rollout_is_weights(proximal, behaviour, MASK, cap=2.0, level="sequence", floor=0.5)
    # min(3.0, 2) on sample 0's tokens; max(0.1, 0.5) on sample 1's
    torch.testing.assert_close(weights[:2], torch.tensor([[2.0, 2.0, 0.0], [0.5, 0.5, 0.5]], dtype=torch.float64))
    assert metrics["tis_floored_frac"] == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="floor must be in"):
        rollout_is_weights(proximal, behaviour, MASK, cap=2.0, level="sequence", floor=3.0)


def test_normalization_by_hand() -> None:
    proximal, behaviour = logprobs()
    weights, _ = rollout_is_weights(proximal, behaviour, MASK, cap=1.8, level="token")
    # token weights 1.8, 1.5, 0.5, 0.8, 0.25: mean 4.85 / 5 = 0.97
    normalized, metrics = normalize_is_weights(weights, MASK, "token")
    assert metrics["tis_norm_factor"] == pytest.approx(0.97)
    torch.testing.assert_close(normalized, weights / 0.97)
    assert normalized[MASK].mean().item() == pytest.approx(1.0)
    # sequence: weights 2.0 (x2 tokens) and 0.1 (x3): one weight per sample, mean (2.0 + 0.1) / 2 = 1.05
    seq, _ = rollout_is_weights(proximal, behaviour, MASK, cap=2.0, level="sequence")
    seq_normalized, seq_metrics = normalize_is_weights(seq, MASK, "sequence")
    assert seq_metrics["tis_norm_factor"] == pytest.approx(1.05)
    torch.testing.assert_close(seq_normalized[:2, 0], torch.tensor([2.0 / 1.05, 0.1 / 1.05], dtype=torch.float64))
    assert not seq_normalized[2].any() and not seq_normalized.requires_grad


def test_all_zero_weights_are_left_alone() -> None:
    weights = torch.zeros(2, 3)
    same, metrics = normalize_is_weights(weights, torch.ones(2, 3, dtype=torch.bool))
    assert same is weights and metrics == {"tis_norm_factor": 1.0}


def random_case(seed: int, n: int = 6, t: int = 9):
    g = torch.Generator().manual_seed(seed)
    behaviour = torch.log(torch.rand(n, t, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    proximal = behaviour + torch.randn(n, t, generator=g, dtype=torch.float64) * 0.5
    mask = torch.rand(n, t, generator=g) < 0.7
    mask &= torch.arange(t)[None, :] < torch.randint(0, t + 1, (n,), generator=g)[:, None]
    mask[0] = False
    return proximal, behaviour, mask


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_normalized_weights_match_verl(seed, level) -> None:
    proximal, behaviour, mask = random_case(seed)
    cap = 1.5
    weights, _ = rollout_is_weights(proximal, behaviour, mask, cap, level)
    ours, _ = normalize_is_weights(weights, mask, level)
    expected = compute_rollout_correction_weights(proximal - behaviour, mask.double(), level, cap, rollout_is_batch_normalize=True)
    # verl divides its means by count + 1e-8: equal to ~1e-9 relative
    torch.testing.assert_close(ours, expected * mask, rtol=1e-7, atol=1e-9)
    unnormalized = compute_rollout_correction_weights(proximal - behaviour, mask.double(), level, cap)
    torch.testing.assert_close(weights, unnormalized * mask, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_floor_weights_are_torch_clamp(seed) -> None:
    # TRL's *_truncate modes: clamp(exp(d), min=C_min, max=C_max)
    proximal, behaviour, mask = random_case(seed)
    weights, _ = rollout_is_weights(proximal, behaviour, mask, cap=1.4, level="token", floor=0.7)
    expected = torch.where(mask, torch.exp(proximal - behaviour).clamp(min=0.7, max=1.4), 0.0)
    torch.testing.assert_close(weights, expected)
    assert math.isclose(weights[mask].min().item(), 0.7) and math.isclose(weights[mask].max().item(), 1.4)
