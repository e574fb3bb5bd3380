"""cispo: detached clipped IS weight times REINFORCE; every token keeps its gradient."""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.algos.losses.cispo import cispo
from reinforge.algos.losses.policy import PolicyLossParams
from reinforge.algos.losses.ppo_clip import ppo_clip

# ratios with old_logp = 0, so logp = ln r
RATIOS = [[1.5, 8.0], [0.5, 3.0]]  # row 0: A = +1; row 1: A = -2, second token masked
MASK = [[1, 1], [1, 0]]
ADVANTAGES = [1.0, -2.0]
PARAMS = PolicyLossParams(cispo_eps_high=1.0)  # weights truncated at 2.0, no lower bound


def assert_equal_to(t: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(t, torch.tensor(expected, dtype=t.dtype), atol=1e-12, rtol=0)


def inputs(requires_grad: bool = False):
    logprobs = torch.tensor(RATIOS, dtype=torch.float64).log().requires_grad_(requires_grad)
    return logprobs, torch.zeros(2, 2, dtype=torch.float64), torch.tensor(ADVANTAGES, dtype=torch.float64), torch.tensor(MASK, dtype=torch.bool)


def test_hand_computed_loss_gradient_and_metrics() -> None:
    logprobs, old, adv, mask = inputs(requires_grad=True)
    per_token, metrics = cispo(logprobs, old, adv, mask, PARAMS)
    # w = min(r, 2) = [[1.5, 2.0], [0.5, -]];  l = -w A logp
    #   -1.5 * 1 * ln 1.5 = -0.608198 | -2.0 * 1 * ln 8 = -4.158883 | -0.5 * -2 * ln 0.5 = -0.693147 | masked 0
    assert_equal_to(per_token, [[-1.5 * math.log(1.5), -2.0 * math.log(8.0)], [math.log(0.5), 0.0]])
    assert per_token[0].tolist() == pytest.approx([-0.608198, -4.158883], abs=1e-6)
    per_token.sum().backward()
    # dl/dlogp = -w A (w detached: no d w / d logp term): [[-1.5, -2.0], [1.0, 0]]
    assert_equal_to(logprobs.grad, [[-1.5, -2.0], [1.0, 0.0]])
    assert metrics["clip_frac"] == pytest.approx(1 / 3)  # r = 8 truncated
    assert metrics["weight_mean"] == pytest.approx(4 / 3)  # (1.5 + 2 + 0.5) / 3


def test_gradient_survives_where_ppo_clips_it_away() -> None:
    logprobs, old, adv, mask = inputs(requires_grad=True)
    ppo, _ = ppo_clip(logprobs, old, adv, mask, PolicyLossParams(0.2, 0.2))
    (ppo_grad,) = torch.autograd.grad(ppo.sum(), logprobs)
    ours, _ = cispo(logprobs, old, adv, mask, PARAMS)
    (cispo_grad,) = torch.autograd.grad(ours.sum(), logprobs)
    # r = 1.5 and 8 with A > 0, r = 0.5 with A < 0: all outside [0.8, 1.2] on the clipped side
    assert (ppo_grad == 0).all()
    assert (cispo_grad[mask] != 0).all()


def test_optional_lower_bound_and_default_cap() -> None:
    logprobs, old, adv, mask = inputs(requires_grad=True)
    per_token, _ = cispo(logprobs, old, adv, mask, PolicyLossParams(cispo_eps_high=1.0, cispo_eps_low=0.2))
    per_token.sum().backward()
    # row 1: w = max(0.5, 0.8) = 0.8 -> grad -0.8 * -2 = 1.6
    assert logprobs.grad[1, 0].item() == pytest.approx(1.6)
    # default eps_high = 5: cap 6, so r = 8 -> 6
    per_token, metrics = cispo(*inputs(), PolicyLossParams())
    assert per_token[0, 1].item() == pytest.approx(-6.0 * math.log(8.0))
    assert metrics["clip_frac"] == pytest.approx(1 / 3)
