"""PPO clipped surrogate: a hand-computed batch, micro-batch normalization, clipped gradients."""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.algos.policy_loss import ppo_clip_loss

CLIP = 0.2
# ratios rho = exp(logp - old_logp), old_logp = 0.
RATIOS = [
    [1.1, 1.5, 0.5],  # A = +1: inside | above 1+eps (clipped, min -> 1.2) | below 1-eps (unclipped, min -> 0.5)
    [0.5, 1.5, 0.1],  # A = -2: below 1-eps (clipped, min -> 0.8*-2 = -1.6) | above 1+eps (unclipped, -3.0) | masked
]
MASK = [[1, 1, 1], [1, 1, 0]]
ADVANTAGES = [1.0, -2.0]
# min(rho*A, clip(rho)*A) per unmasked token:
#   row 0: min(1.1, 1.1) = 1.1   min(1.5, 1.2) = 1.2   min(0.5, 0.8) = 0.5
#   row 1: min(-1.0, -1.6) = -1.6   min(-3.0, -2.4) = -3.0
#   sum = 1.1 + 1.2 + 0.5 - 1.6 - 3.0 = -1.8;  Z = 5 unmasked tokens;  L = -(-1.8) / 5 = 0.36
EXPECTED_LOSS = 0.36
# clipped (unclipped > clipped): row 0 token 1, row 1 token 0 -> 2 of 5 tokens. The masked token
# (0.1 * -2 = -0.2 > 0.8 * -2 = -1.6) would count if the mask were ignored.
EXPECTED_CLIP_FRAC = 0.4


def inputs(requires_grad: bool = False):
    logprobs = torch.tensor(RATIOS, dtype=torch.float64).log().requires_grad_(requires_grad)
    return logprobs, torch.zeros(2, 3, dtype=torch.float64), torch.tensor(ADVANTAGES, dtype=torch.float64), torch.tensor(MASK, dtype=torch.bool)


def test_hand_computed_loss_and_metrics() -> None:
    loss, metrics = ppo_clip_loss(*inputs(), clip_eps=CLIP)
    assert loss.item() == pytest.approx(EXPECTED_LOSS, abs=1e-9)
    assert metrics["clip_frac"] == pytest.approx(EXPECTED_CLIP_FRAC)
    # ratio_mean over unmasked tokens: (1.1 + 1.5 + 0.5 + 0.5 + 1.5) / 5 = 1.02
    assert metrics["ratio_mean"] == pytest.approx(1.02)
    # approx_kl_old = mean(rho - 1 - log rho) over unmasked tokens
    expected_kl = sum(r - 1 - math.log(r) for r in [1.1, 1.5, 0.5, 0.5, 1.5]) / 5
    assert metrics["approx_kl_old"] == pytest.approx(expected_kl)


def test_per_token_advantages_equal_broadcast_ones() -> None:
    logprobs, old, adv, mask = inputs()
    loss_1d, _ = ppo_clip_loss(logprobs, old, adv, mask, clip_eps=CLIP)
    loss_2d, _ = ppo_clip_loss(logprobs, old, adv[:, None].expand(2, 3).clone(), mask, clip_eps=CLIP)
    assert loss_2d.item() == pytest.approx(loss_1d.item(), abs=1e-12)


def test_equal_policies_give_minus_mean_advantage() -> None:
    # rho = 1 everywhere: L = -sum(mask * A) / Z = -(3 * 1 + 2 * -2) / 5 = 0.2
    _, old, adv, mask = inputs()
    loss, metrics = ppo_clip_loss(old.clone(), old, adv, mask, clip_eps=CLIP)
    assert loss.item() == pytest.approx(0.2)
    assert metrics["clip_frac"] == 0.0


def test_normalizer_makes_micro_batches_add_up() -> None:
    logprobs, old, adv, mask = inputs(requires_grad=True)
    full, _ = ppo_clip_loss(logprobs, old, adv, mask, clip_eps=CLIP)
    (full_grad,) = torch.autograd.grad(full, logprobs)

    z = float(mask.sum())  # 5
    halves = [ppo_clip_loss(logprobs[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], CLIP, normalizer=z)[0] for i in (0, 1)]
    # row 0: -(1.1 + 1.2 + 0.5) / 5 = -0.56;  row 1: -(-1.6 - 3.0) / 5 = 0.92
    assert halves[0].item() == pytest.approx(-0.56)
    assert halves[1].item() == pytest.approx(0.92)
    assert (halves[0] + halves[1]).item() == pytest.approx(full.item(), abs=1e-12)
    (split_grad,) = torch.autograd.grad(halves[0] + halves[1], logprobs)
    assert torch.allclose(split_grad, full_grad)

    # Without the shared normalizer each half is averaged over its own tokens: -2.8/3 + 4.6/2 != 0.36.
    own = sum(ppo_clip_loss(logprobs[i : i + 1], old[i : i + 1], adv[i : i + 1], mask[i : i + 1], CLIP)[0].item() for i in (0, 1))
    assert own == pytest.approx(-2.8 / 3 + 2.3)
    assert own != pytest.approx(full.item())


def test_gradient_is_zero_where_clipped_in_the_advantage_direction() -> None:
    logprobs, old, adv, mask = inputs(requires_grad=True)
    loss, _ = ppo_clip_loss(logprobs, old, adv, mask, clip_eps=CLIP)
    loss.backward()
    grad = logprobs.grad
    # d/dlogp of -rho * A / Z = -A * rho / Z on unclipped tokens; 0 on clipped and masked ones.
    expected = torch.tensor(
        [
            [-1.0 * 1.1 / 5, 0.0, -1.0 * 0.5 / 5],  # -0.22, clipped, -0.1 (below the range but A > 0: not clipped)
            [0.0, 2.0 * 1.5 / 5, 0.0],  # clipped, 0.6 (above the range but A < 0: not clipped), masked
        ],
        dtype=torch.float64,
    )
    assert torch.allclose(grad, expected, atol=1e-12)
    assert grad[0, 1] == 0 and grad[1, 0] == 0 and grad[1, 2] == 0
    assert (grad[0, 0] != 0) and (grad[0, 2] != 0) and (grad[1, 1] != 0)


def test_fully_masked_batch_is_zero_not_nan() -> None:
    logprobs, old, adv, _ = inputs()
    loss, metrics = ppo_clip_loss(logprobs, old, adv, torch.zeros(2, 3, dtype=torch.bool), clip_eps=CLIP)
    assert loss.item() == 0.0
    assert metrics["clip_frac"] == 0.0
