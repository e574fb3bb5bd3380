"""luspo, rloo_seq and vespo: by hand, and against TRL 1.16 (its get_gamma_weights for VESPO; the
lines of GRPOTrainer._compute_loss / RLOOTrainer._compute_loss for the others) on values and gradients."""

from __future__ import annotations

import math

import pytest
import torch
from reference.policy_loss_cases import SEEDS, random_case

from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.losses.luspo import luspo
from reinforge.algos.losses.policy import POLICY_LOSSES, REQUIRED_AGGREGATION, PolicyLossParams
from reinforge.algos.losses.rloo_seq import rloo_seq
from reinforge.algos.losses.vespo import vespo
from reinforge.algos.types import LossNormalizer

F64 = torch.float64
# token ratios (old_logp = 0): row 0 A = +2 over 2 tokens, row 1 A = +1 over 3, row 2 A = -1 over 1
RATIOS = [[2.0, 0.5, 7.0], [1.1, 1.1, 1.1], [0.9, 7.0, 7.0]]
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
ADV = torch.tensor([2.0, 1.0, -1.0], dtype=F64)
NORM = LossNormalizer(num_tokens=6, num_sequences=3, max_response_tokens=3)


def hand_inputs():
    return torch.tensor(RATIOS, dtype=F64).log().requires_grad_(True), torch.zeros(3, 3, dtype=F64)


def test_luspo_hand_computed() -> None:
    # eps 0.2: geometric-mean ratios s = (1.0, 1.1, 0.9), none clipped: L = -s A = (-2, -1.1, 0.9)
    # J = (n_i L_i summed) / N = (2 * -2 + 3 * -1.1 + 1 * 0.9) / 3 = -6.4 / 3
    # dJ/dlogp_t = n_i (-A_i s_i / n_i) / N = -A_i s_i / 3: row 0 -2/3, row 1 -1.1/3, row 2 +0.3
    logprobs, old = hand_inputs()
    per_token, _ = luspo(logprobs, old, ADV, MASK, PolicyLossParams(gspo_eps_low=0.2, gspo_eps_high=0.2))
    loss = aggregate(per_token, MASK, REQUIRED_AGGREGATION["luspo"], NORM)
    assert loss.item() == pytest.approx(-6.4 / 3, abs=1e-12)
    loss.backward()
    expected = [[-2 / 3, -2 / 3, 0.0], [-1.1 / 3] * 3, [0.3, 0.0, 0.0]]
    torch.testing.assert_close(logprobs.grad, torch.tensor(expected, dtype=F64), atol=1e-12, rtol=0)


def test_rloo_seq_hand_computed() -> None:
    # full-sequence ratios R = product: row 0 2 * 0.5 = 1; row 1 1.1^3 = 1.331 (A > 0, clipped at 1.2);
    # row 2 0.9 (inside [0.8, 1.2]). L = (-2, -1.2, 0.9); J = mean = -2.3 / 3
    # dJ/dlogp_t = -A_i R_i / 3 on every token of an unclipped row: row 0 -2/3, row 1 0, row 2 0.3
    logprobs, old = hand_inputs()
    per_token, metrics = rloo_seq(logprobs, old, ADV, MASK, PolicyLossParams())
    loss = aggregate(per_token, MASK, REQUIRED_AGGREGATION["rloo_seq"], NORM)
    assert loss.item() == pytest.approx(-2.3 / 3, abs=1e-12)
    loss.backward()
    expected = [[-2 / 3, -2 / 3, 0.0], [0.0] * 3, [0.3, 0.0, 0.0]]
    torch.testing.assert_close(logprobs.grad, torch.tensor(expected, dtype=F64), atol=1e-12, rtol=0)
    assert metrics["clip_frac_high"] == pytest.approx(1 / 3) and metrics["clip_frac_low"] == 0.0
    assert metrics["seq_ratio_mean"] == pytest.approx((1 + 1.331 + 0.9) / 3)


def test_vespo_hand_computed() -> None:
    # row 0: A = +1, log-ratios (ln 2, 0): w = 2, k = 2, lambda = 3: phi = e^3 * 2^2 * e^-6 = 4 e^-3 = 0.199148
    #        logp = (-1, -2): l = -phi * 1 * logp = (0.199148, 0.398297), dl/dlogp = -phi
    # row 1: A = -1, on-policy: w = 1, phi = e^2 * 1 * e^-2 = 1: l = +logp, dl/dlogp = +1
    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]], dtype=F64, requires_grad=True)
    old = logprobs.detach().clone()
    old[0, 0] -= math.log(2.0)
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    per_token, metrics = vespo(logprobs, old, adv, mask, PolicyLossParams())
    phi = 4 * math.exp(-3)
    assert phi == pytest.approx(0.199148, abs=1e-6)
    torch.testing.assert_close(per_token, torch.tensor([[phi, 2 * phi], [-0.5, -1.5]], dtype=F64), atol=1e-12, rtol=0)
    per_token.sum().backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-phi, -phi], [1.0, 1.0]], dtype=F64), atol=1e-12, rtol=0)
    assert metrics["phi_mean"] == pytest.approx((phi + 1) / 2)


def trl_gamma_weights(advantages, log_ratio, mask, is_ratio, params: PolicyLossParams):
    from trl.trainer.grpo_trainer import GRPOTrainer

    return GRPOTrainer.get_gamma_weights(
        advantages=advantages, log_ratio_per_token=log_ratio, mask=mask, importance_sampling_ratio=is_ratio,
        k_pos=params.vespo_k_pos, lambda_pos=params.vespo_lambda_pos, k_neg=params.vespo_k_neg, lambda_neg=params.vespo_lambda_neg,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kernel", [{}, {"vespo_k_pos": 0.5, "vespo_lambda_pos": 0.7, "vespo_k_neg": 4.0, "vespo_lambda_neg": 5.0}])
def test_vespo_matches_trl(seed: int, kernel: dict) -> None:
    # TRL: per_token_loss = -phi_seq * advantages * per_token_logps, aggregated by the token count (dapo)
    logprobs, old, adv, mask = random_case(seed, spread=0.2)
    tis = None
    if seed % 2:  # engine IS ratios enter w (TRL's vLLM importance_sampling_ratio), 1 off the mask there
        tis = torch.where(mask, torch.rand(mask.shape, generator=torch.Generator().manual_seed(seed), dtype=F64) + 0.5, 0.0)
    params = PolicyLossParams(tis_weights=tis, **kernel)
    per_token, _ = vespo(logprobs, old, adv, mask, params)
    ours = aggregate(per_token, mask, "token_mean", LossNormalizer(int(mask.sum()), 6, mask.shape[1]))
    (grad,) = torch.autograd.grad(ours, logprobs)

    ref_logprobs = logprobs.detach().clone().requires_grad_(True)
    m = mask.double()
    is_ratio = None if tis is None else torch.where(mask, tis, 1.0)
    advantages = adv.unsqueeze(1)
    phi_seq = trl_gamma_weights(advantages, ref_logprobs - old, m, is_ratio, params)
    per_token_loss = -phi_seq * advantages * ref_logprobs
    theirs = (per_token_loss * m).sum() / m.sum()
    (ref_grad,) = torch.autograd.grad(theirs, ref_logprobs)
    # TRL's torch.where(is_nonneg_adv, k_pos, k_neg) of Python floats is float32: exact for the
    # defaults (2, 3), to ~1e-8 for 0.7
    tol = 1e-12 if not kernel else 1e-7
    torch.testing.assert_close(ours, theirs, atol=tol, rtol=tol)
    torch.testing.assert_close(grad, ref_grad, atol=tol, rtol=tol)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("eps", [(3e-4, 4e-4), (0.2, 0.28)])
def test_luspo_matches_trl(seed: int, eps: tuple[float, float]) -> None:
    # TRL GRPOTrainer._compute_loss, importance_sampling_level="sequence", loss_type="luspo", beta = 0
    logprobs, old, adv, mask = random_case(seed, spread=0.05)
    per_token, _ = luspo(logprobs, old, adv, mask, PolicyLossParams(gspo_eps_low=eps[0], gspo_eps_high=eps[1]))
    ours = aggregate(per_token, mask, "seq_mean_token_sum", LossNormalizer(int(mask.sum()), 6, mask.shape[1]))
    (grad,) = torch.autograd.grad(ours, logprobs)

    ref_logprobs = logprobs.detach().clone().requires_grad_(True)
    m = mask.double()
    advantages = adv.unsqueeze(1)
    log_ratio = ref_logprobs - old
    log_importance_weights = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_importance_weights)
    coef_2 = torch.clamp(coef_1, 1 - eps[0], 1 + eps[1])
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    theirs = (per_token_loss * m).sum(-1).mean()
    (ref_grad,) = torch.autograd.grad(theirs, ref_logprobs)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.2, 0.28)])
def test_rloo_seq_matches_trl(seed: int, eps: tuple[float, float]) -> None:
    # TRL RLOOTrainer._compute_loss: logps = (per_token_logps * completion_mask).sum(1), ratio exp(logps - old_logps)
    logprobs, old, adv, mask = random_case(seed, spread=0.05)
    per_token, _ = rloo_seq(logprobs, old, adv, mask, PolicyLossParams(clip_eps_low=eps[0], clip_eps_high=eps[1]))
    ours = aggregate(per_token, mask, "seq_mean_token_mean", LossNormalizer(int(mask.sum()), 6, mask.shape[1]))
    (grad,) = torch.autograd.grad(ours, logprobs)

    ref_logprobs = logprobs.detach().clone().requires_grad_(True)
    m = mask.double()
    logps = (ref_logprobs * m).sum(1)
    old_logps = (old * m).sum(1)
    coef_1 = torch.exp(logps - old_logps)
    coef_2 = torch.clamp(coef_1, 1 - eps[0], 1 + eps[1])
    per_sequence_loss = -torch.min(coef_1 * adv, coef_2 * adv)
    theirs = per_sequence_loss.mean()
    (ref_grad,) = torch.autograd.grad(theirs, ref_logprobs)
    # TRL's empty row (row 0 here) has R = 1 and adds the constant -A_0 / N; it has no gradient
    empty = ~mask.any(-1)
    constant = (-adv[empty]).sum() / len(adv)
    torch.testing.assert_close(ours + constant, theirs, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=1e-10)


def test_registered_with_their_aggregations() -> None:
    assert (POLICY_LOSSES["luspo"], POLICY_LOSSES["vespo"], POLICY_LOSSES["rloo_seq"]) == (luspo, vespo, rloo_seq)
    assert REQUIRED_AGGREGATION["luspo"] == "seq_mean_token_sum"
    assert REQUIRED_AGGREGATION["rloo_seq"] == "seq_mean_token_mean"
    assert "vespo" not in REQUIRED_AGGREGATION
