"""clip_cov and kl_cov: the covariance selection by hand, and against verl's compute_policy_loss_clip_cov /
compute_policy_loss_kl_cov (Clip-Cov's random draw under one seed for both)."""

from __future__ import annotations

import math

import pytest
import torch
from reference.policy_loss_cases import SEEDS, live_rows, random_case
from reference.verl_cov_losses import compute_policy_loss_clip_cov, compute_policy_loss_kl_cov

from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.losses.clip_cov import clip_cov
from reinforge.algos.losses.kl_cov import kl_cov
from reinforge.algos.losses.policy import POLICY_LOSSES, PolicyLossParams
from reinforge.algos.types import LossNormalizer

F64 = torch.float64


def test_clip_cov_hand_computed() -> None:
    # logp = [[-1, -3], [-1, -3]], A = [+2, -2]: mean A = 0, mean logp = -2, so
    # cov = [[2 * 1, 2 * -1], [-2 * 1, -2 * -1]] = [[2, -2], [-2, 2]]: (0,0) and (1,1) in the band (1, 5).
    # Token (0,0) has ratio 2 (old = logp - ln 2) and A > 0: PPO already clips it (-min(4, 2.4) = -2.4,
    # no gradient), so it is no candidate; budget max(1, floor(0.5 * 4)) = 2 > 1 candidate: (1,1) is cut.
    #   per token: [[-2.4, -2 (r = 1: -A)], [+2, 0 (cut)]]     gradient -A r: [[0, -2], [2, 0]]
    logprobs = torch.tensor([[-1.0, -3.0], [-1.0, -3.0]], dtype=F64, requires_grad=True)
    old = logprobs.detach().clone()
    old[0, 0] -= math.log(2.0)
    adv = torch.tensor([2.0, -2.0], dtype=F64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    per_token, metrics = clip_cov(logprobs, old, adv, mask, PolicyLossParams(clip_cov_ratio=0.5))
    torch.testing.assert_close(per_token, torch.tensor([[-2.4, -2.0], [2.0, 0.0]], dtype=F64), atol=1e-12, rtol=0)
    per_token.sum().backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, -2.0], [2.0, 0.0]], dtype=F64), atol=1e-12, rtol=0)
    assert metrics["cov_cut_frac"] == 0.25 and metrics["clip_frac"] == 0.25


def test_clip_cov_draws_budget_tokens_with_the_given_generator() -> None:
    # on-policy: candidates (0,0) and (1,1) (cov 2); budget max(1, floor(0.25 * 4)) = 1: one of them is cut
    logprobs = torch.tensor([[-1.0, -3.0], [-1.0, -3.0]], dtype=F64)
    adv = torch.tensor([2.0, -2.0], dtype=F64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    cuts = set()
    for seed in range(12):
        params = PolicyLossParams(clip_cov_ratio=0.25, generator=torch.Generator().manual_seed(seed))
        per_token, metrics = clip_cov(logprobs, logprobs, adv, mask, params)
        cut = {(i, j) for i in range(2) for j in range(2) if per_token[i, j] == 0}
        assert len(cut) == 1 and cut <= {(0, 0), (1, 1)} and metrics["cov_cut_frac"] == 0.25
        again, _ = clip_cov(logprobs, logprobs, adv, mask, PolicyLossParams(clip_cov_ratio=0.25, generator=torch.Generator().manual_seed(seed)))
        assert torch.equal(again, per_token)  # the same seed draws the same token
        cuts |= cut
    assert cuts == {(0, 0), (1, 1)}  # both get drawn over the seeds


def test_kl_cov_hand_computed() -> None:
    # logp = [[-1, -3], [-1, -3.5]], A = [+2, -2]: mean logp = -2.125, mean A = 0
    # cov = [[2 * 1.125, 2 * -0.875], [-2 * 1.125, -2 * -1.375]] = [[2.25, -1.75], [-2.25, 2.75]]
    # k = max(1, floor(0.25 * 4)) = 1 token of largest cov: (1,1). Its log-ratio is 0.1 (old = logp - 0.1):
    #   l = -r A + |0.1| = 2 e^0.1 + 0.1 = 2.210342 + 0.1 = 2.310342, dl/dlogp = 2 e^0.1 + 1 = 3.210342
    # the others are on-policy: l = -A, dl/dlogp = -A
    logprobs = torch.tensor([[-1.0, -3.0], [-1.0, -3.5]], dtype=F64, requires_grad=True)
    old = logprobs.detach().clone()
    old[1, 1] -= 0.1
    adv = torch.tensor([2.0, -2.0], dtype=F64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    per_token, metrics = kl_cov(logprobs, old, adv, mask, PolicyLossParams(kl_cov_ratio=0.25))
    e = math.exp(0.1)
    torch.testing.assert_close(per_token, torch.tensor([[-2.0, -2.0], [2.0, 2 * e + 0.1]], dtype=F64), atol=1e-12, rtol=0)
    assert 2 * e + 0.1 == pytest.approx(2.310342, abs=1e-6)
    per_token.sum().backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-2.0, -2.0], [2.0, 2 * e + 1]], dtype=F64), atol=1e-12, rtol=0)
    assert metrics["kl_cov_frac"] == 0.25 and metrics["abs_log_ratio_mean"] == pytest.approx(0.025)


def norms(mask: torch.Tensor) -> LossNormalizer:
    return LossNormalizer(int(mask.sum()), mask.shape[0], mask.shape[1])


def compare(ours: torch.Tensor, logprobs: torch.Tensor, reference, atol: float = 1e-12) -> None:
    (grad,) = torch.autograd.grad(ours, logprobs)
    ref_logprobs = logprobs.detach().clone().requires_grad_(True)
    theirs = reference(ref_logprobs)
    (ref_grad,) = torch.autograd.grad(theirs, ref_logprobs)
    torch.testing.assert_close(ours, theirs, atol=atol, rtol=1e-7)
    torch.testing.assert_close(grad, ref_grad, atol=atol, rtol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ratio, band", [(2e-4, (1.0, 5.0)), (0.2, (0.05, 5.0)), (0.5, (-1.0, 0.5))])
def test_clip_cov_matches_verl(seed: int, ratio: float, band: tuple[float, float]) -> None:
    logprobs, old, adv, mask = random_case(seed, spread=0.3)
    adv = adv * 2.0  # covariances reach into the band
    tis = torch.rand(mask.shape, generator=torch.Generator().manual_seed(seed), dtype=F64) + 0.5 if seed % 2 else None
    params = PolicyLossParams(clip_eps_low=0.2, clip_eps_high=0.28, clip_cov_ratio=ratio, clip_cov_lb=band[0], clip_cov_ub=band[1], tis_weights=tis)
    torch.manual_seed(1000 + seed)  # both draw from torch's global generator
    per_token, metrics = clip_cov(logprobs, old, adv, mask, params)
    ours = aggregate(per_token, mask, "token_mean", norms(mask))
    torch.manual_seed(1000 + seed)
    compare(ours, logprobs, lambda lp: compute_policy_loss_clip_cov(
        old, lp, adv[:, None].expand_as(old), mask.double(), 0.2, 0.28, "token-mean", ratio, *band, rollout_is_weights=tis,
    ))
    if ratio > 0.1:
        assert metrics["cov_cut_frac"] > 0  # the comparison covered cut tokens


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ratio, coef", [(2e-4, 1.0), (0.1, 1.0), (0.3, 0.1)])
@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
def test_kl_cov_matches_verl(seed: int, ratio: float, coef: float, agg: str) -> None:
    logprobs, old, adv, mask = random_case(seed, spread=0.3)
    tis = torch.rand(mask.shape, generator=torch.Generator().manual_seed(seed), dtype=F64) + 0.5 if seed % 2 else None
    per_token, _ = kl_cov(logprobs, old, adv, mask, PolicyLossParams(kl_cov_ratio=ratio, kl_cov_coef=coef, tis_weights=tis))
    ours = aggregate(per_token, mask, agg, norms(mask))
    if agg == "seq_mean_token_mean":  # verl divides by the live rows, reinforge by all rows
        ours = ours * mask.shape[0] / live_rows(mask)
    verl_agg = agg.replace("_", "-")
    compare(ours, logprobs, lambda lp: compute_policy_loss_kl_cov(
        old, lp, adv[:, None].expand_as(old), mask.double(), verl_agg, ratio, coef, rollout_is_weights=tis,
    ), atol=1e-8)


def test_registered_and_empty_batch() -> None:
    assert POLICY_LOSSES["clip_cov"] is clip_cov and POLICY_LOSSES["kl_cov"] is kl_cov
    logprobs = torch.zeros(2, 3, dtype=F64)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    for loss in (clip_cov, kl_cov):
        per_token, metrics = loss(logprobs, logprobs, torch.ones(2, dtype=F64), mask, PolicyLossParams())
        assert (per_token == 0).all() and all(math.isfinite(v) for v in metrics.values())
