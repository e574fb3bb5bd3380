"""ppo_clip: decoupled clip range (DAPO), dual clip, per-token output, metrics and gradients."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.losses.policy import POLICY_LOSSES, PolicyLossParams, get_policy_loss
from reinforge.algos.losses.ppo_clip import ppo_clip
from reinforge.algos.policy_loss import ppo_clip_loss
from reinforge.algos.types import LossNormalizer

# ratios r = exp(logp - old_logp) with old_logp = 0; clip range [1 - 0.2, 1 + 0.28] = [0.8, 1.28]
RATIOS = [
    [1.1, 1.25, 1.35, 0.5],  # A = +1
    [0.85, 0.75, 4.0, 0.1],  # A = -2, last token masked
]
MASK = [[1, 1, 1, 1], [1, 1, 1, 0]]
ADVANTAGES = [1.0, -2.0]
DAPO = PolicyLossParams(clip_eps_low=0.2, clip_eps_high=0.28)
# l = -min(r A, clip(r) A):
#   row 0: 1.1 inside -> -1.1 | 1.25 inside (1.25 < 1.28) -> -1.25 | 1.35 -> min(1.35, 1.28) -> -1.28 (clip high)
#          | 0.5 below but A > 0 -> min(0.5, 0.8) -> -0.5 (not clipped)
#   row 1: 0.85 inside -> -(-1.7) = 1.7 | 0.75 -> min(-1.5, -1.6) -> 1.6 (clip low)
#          | 4.0 above but A < 0 -> min(-8, -2.56) -> 8.0 (not clipped) | masked -> 0
EXPECTED = [[-1.1, -1.25, -1.28, -0.5], [1.7, 1.6, 8.0, 0.0]]


def assert_equal_to(t: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(t, torch.tensor(expected, dtype=t.dtype), atol=1e-12, rtol=0)


def inputs(requires_grad: bool = False):
    logprobs = torch.tensor(RATIOS, dtype=torch.float64).log().requires_grad_(requires_grad)
    return logprobs, torch.zeros(2, 4, dtype=torch.float64), torch.tensor(ADVANTAGES, dtype=torch.float64), torch.tensor(MASK, dtype=torch.bool)


def test_hand_computed_per_token_loss_and_metrics() -> None:
    per_token, metrics = ppo_clip(*inputs(), DAPO)
    assert_equal_to(per_token, EXPECTED)
    # 7 sampled tokens: one clipped high (row 0, r = 1.35), one clipped low (row 1, r = 0.75)
    assert metrics["clip_frac_high"] == pytest.approx(1 / 7)
    assert metrics["clip_frac_low"] == pytest.approx(1 / 7)
    assert metrics["clip_frac"] == pytest.approx(2 / 7)
    assert metrics["dual_clip_frac"] == 0.0
    # ratio_mean = (1.1 + 1.25 + 1.35 + 0.5 + 0.85 + 0.75 + 4.0) / 7 = 9.8 / 7 = 1.4
    assert metrics["ratio_mean"] == pytest.approx(1.4)


def test_gradient_is_zero_exactly_where_clipped() -> None:
    logprobs, old, adv, mask = inputs(requires_grad=True)
    per_token, _ = ppo_clip(logprobs, old, adv, mask, DAPO)
    per_token.sum().backward()
    # d(-r A)/dlogp = -r A on unclipped tokens, 0 on clipped and masked ones
    assert_equal_to(logprobs.grad, [[-1.1, -1.25, 0.0, -0.5], [1.7, 0.0, 8.0, 0.0]])


def test_clip_higher_lets_a_rising_token_through_that_symmetric_clip_stops() -> None:
    logprobs, old, adv, mask = inputs(requires_grad=True)
    per_token, metrics = ppo_clip(logprobs, old, adv, mask, PolicyLossParams(0.2, 0.2))
    # r = 1.25 > 1.2: clipped to -1.2 with zero gradient, where eps_high = 0.28 kept -1.25 and its gradient
    assert per_token[0, 1].item() == pytest.approx(-1.2)
    per_token.sum().backward()
    assert logprobs.grad[0, 1].item() == 0.0
    assert metrics["clip_frac_high"] == pytest.approx(2 / 7)  # 1.25 and 1.35


def test_dual_clip_bounds_the_loss_of_negative_advantages() -> None:
    logprobs, old, adv, mask = inputs(requires_grad=True)
    per_token, metrics = ppo_clip(logprobs, old, adv, mask, PolicyLossParams(0.2, 0.28, dual_clip_c=3.0))
    # row 1 token 2: max(min(4 * -2, 1.28 * -2), 3 * -2) = max(-8, -6) = -6 -> loss 6 (was 8); the rest unchanged
    expected = [row[:] for row in EXPECTED]
    expected[1][2] = 6.0
    assert_equal_to(per_token, expected)
    assert metrics["dual_clip_frac"] == pytest.approx(1 / 7)
    per_token.sum().backward()
    assert logprobs.grad[1, 2].item() == 0.0  # the bound is a constant
    # A > 0 tokens are never dual-clipped, even with r > c
    big, _ = ppo_clip(torch.tensor([[5.0]]).log(), torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1, dtype=torch.bool), PolicyLossParams(dual_clip_c=3.0))
    assert big.item() == pytest.approx(-1.2)  # -min(5, 1.2)


def test_invalid_dual_clip_constant() -> None:
    with pytest.raises(ValueError, match="dual_clip_c"):
        PolicyLossParams(dual_clip_c=1.0)


def test_per_token_advantages_equal_broadcast_ones() -> None:
    logprobs, old, adv, mask = inputs()
    a, _ = ppo_clip(logprobs, old, adv, mask, DAPO)
    b, _ = ppo_clip(logprobs, old, adv[:, None].expand(2, 4).clone(), mask, DAPO)
    assert torch.equal(a, b)


def test_padding_with_extreme_logprobs_gives_no_nan() -> None:
    logprobs, old, adv, mask = inputs()
    logprobs = logprobs.clone()
    logprobs[1, 3] = 1e4  # exp would overflow; it is masked
    logprobs.requires_grad_(True)
    per_token, metrics = ppo_clip(logprobs, old, adv, mask, DAPO)
    per_token.sum().backward()
    assert torch.isfinite(per_token).all() and torch.isfinite(logprobs.grad).all()
    assert logprobs.grad[1, 3] == 0 and per_token[1, 3] == 0


def test_legacy_shim_is_ppo_clip_with_token_mean() -> None:
    logprobs, old, adv, mask = inputs()
    per_token, _ = ppo_clip(logprobs, old, adv, mask, PolicyLossParams(0.2, 0.2))
    loss, metrics = ppo_clip_loss(logprobs, old, adv, mask, clip_eps=0.2)
    assert loss.item() == pytest.approx(aggregate(per_token, mask, "token_mean", LossNormalizer(7, 2, 4)).item(), abs=1e-12)
    assert {"clip_frac", "ratio_mean", "approx_kl_old"} <= set(metrics)


def test_registry() -> None:
    assert set(POLICY_LOSSES) == {
        "ppo_clip", "gspo", "cispo", "reinforce", "sapo", "gmpo", "clip_cov", "kl_cov", "luspo", "vespo", "rloo_seq",
    }
    assert get_policy_loss("ppo_clip") is ppo_clip
    with pytest.raises(ValueError, match="cispo, clip_cov, gmpo, gspo, kl_cov, luspo, ppo_clip, reinforce, rloo_seq, sapo, vespo"):
        get_policy_loss("ppo")
