"""gmpo: geometric mean of log-clipped ratios by hand, and against verl's compute_policy_loss_geo_mean."""

from __future__ import annotations

import math

import pytest
import torch
from reference.policy_loss_cases import SEEDS, random_case
from reference.verl_geo_mean import compute_policy_loss_geo_mean

from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.losses.gmpo import gmpo
from reinforge.algos.losses.policy import POLICY_LOSSES, REQUIRED_AGGREGATION, PolicyLossParams
from reinforge.algos.types import LossNormalizer

NORM = LossNormalizer(num_tokens=5, num_sequences=3, max_response_tokens=2)


def test_hand_computed() -> None:
    # eps = 0.4 both sides; log-ratios d (old_logp = 0):
    #   row 0, A = +1, d = (0.2, 0.6): 0.6 > 0.4 is clipped (A > 0, above)  -> c = (0.2, 0.4)
    #          rho = exp(0.3) = 1.349859, L = -1.349859; grad only via the unclipped token:
    #          dL/dd_0 = -A rho / n = -1.349859 / 2, then / 3 rows = -0.224977; dL/dd_1 = 0
    #   row 1, A = -2, d = (-0.6, 0.6): -0.6 < -0.4 clipped (A < 0, below); 0.6 kept (pessimistic)
    #          c = (-0.4, 0.6), rho = exp(0.1) = 1.105171, L = +2.210342
    #          dL/dd_1 = 2 rho / 2 / 3 = 0.368390; dL/dd_0 = 0
    #   row 2, A = 0: L = 0 and no gradient
    logprobs = torch.tensor([[0.2, 0.6], [-0.6, 0.6], [0.3, 0.0]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(3, 2, dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, True], [True, False]])
    per_token, metrics = gmpo(logprobs, old, adv, mask, PolicyLossParams())
    row0, row1 = -math.exp(0.3), 2 * math.exp(0.1)
    torch.testing.assert_close(per_token, torch.tensor([[row0] * 2, [row1] * 2, [0.0, 0.0]], dtype=torch.float64), atol=1e-12, rtol=0)
    loss = aggregate(per_token, mask, "seq_mean_token_mean", NORM)
    assert loss.item() == pytest.approx((row0 + row1) / 3, abs=1e-12)
    loss.backward()
    grad = [[-math.exp(0.3) / 6, 0.0], [0.0, 2 * math.exp(0.1) / 6], [0.0, 0.0]]
    torch.testing.assert_close(logprobs.grad, torch.tensor(grad, dtype=torch.float64), atol=1e-12, rtol=0)
    # outside the range: row 0 token 1 (A > 0), row 1 both tokens (A < 0): 1/5 high, 2/5 low
    assert metrics["clip_frac_high"] == pytest.approx(1 / 5)
    assert metrics["clip_frac_low"] == pytest.approx(2 / 5)
    assert metrics["seq_ratio_mean"] == pytest.approx((math.exp(0.3) + math.exp(0.1) + 1.0) / 3)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("eps", [(0.4, 0.4), (0.2, 0.28)])
def test_matches_verl(seed: int, eps: tuple[float, float]) -> None:
    logprobs, old, adv, mask = random_case(seed)
    tis = torch.rand(mask.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.5 if seed % 2 else None
    per_token, _ = gmpo(logprobs, old, adv, mask, PolicyLossParams(gmpo_eps_low=eps[0], gmpo_eps_high=eps[1], tis_weights=tis))
    norm = LossNormalizer(int(mask.sum()), mask.shape[0], mask.shape[1])
    ours = aggregate(per_token, mask, "seq_mean_token_mean", norm)  # verl: torch.mean over all rows, as here
    (grad,) = torch.autograd.grad(ours, logprobs)
    ref_logprobs = logprobs.detach().clone().requires_grad_(True)
    theirs = compute_policy_loss_geo_mean(old, ref_logprobs, adv[:, None].expand_as(old), mask.double(), *eps, rollout_is_weights=tis)
    (ref_grad,) = torch.autograd.grad(theirs, ref_logprobs)
    # verl divides by (n + 1e-8) where reinforge divides by n: a relative 1e-8 difference
    torch.testing.assert_close(ours, theirs, atol=1e-8, rtol=1e-7)
    torch.testing.assert_close(grad, ref_grad, atol=1e-8, rtol=1e-7)


def test_registered_with_its_one_aggregation_and_sequence_advantages() -> None:
    assert POLICY_LOSSES["gmpo"] is gmpo
    assert REQUIRED_AGGREGATION["gmpo"] == "seq_mean_token_mean"
    logprobs, old, adv, mask = random_case(0)
    varying = adv[:, None].expand_as(old).clone()
    varying[2, 1] += 1.0
    with pytest.raises(ValueError, match="one advantage per sequence"):
        gmpo(logprobs, old, varying, mask, PolicyLossParams())
