"""sapo: the smooth gate by hand, and against verl's compute_policy_loss_sapo and TRL's sapo formula."""

from __future__ import annotations

import math

import pytest
import torch
from reference.policy_loss_cases import SEEDS, live_rows, random_case
from reference.verl_sapo import compute_policy_loss_sapo

from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.losses.policy import POLICY_LOSSES, PolicyLossParams
from reinforge.algos.losses.sapo import sapo
from reinforge.algos.types import LossNormalizer


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_gate_hand_computed() -> None:
    # tokens (ratio, A): (1, +1), (2, +1), (0.5, -2); taus 1.0 (A > 0) and 1.05 (A <= 0)
    #   (1, +1):   f = 4 sigmoid(0) / 1 = 2          l = -2       dl/dlogp = -1 * 4 * 0.25 * 1 = -1
    #   (2, +1):   f = 4 sigmoid(1) = 2.924234       l = -2.924234
    #              dl/dlogp = -4 s (1 - s) r = -4 * 0.731059 * 0.268941 * 2 = -1.572895
    #   (0.5, -2): f = 4 / 1.05 * sigmoid(-0.525) = 3.809524 * 0.371684 = 1.415938   l = +2.831877
    #              dl/dlogp = +2 * 4 s (1 - s) r = 2 * 4 * 0.371684 * 0.628316 * 0.5 = 0.934140
    logprobs = torch.tensor([[0.0, math.log(2.0)], [math.log(0.5), 0.0]], dtype=torch.float64, requires_grad=True)
    old = torch.zeros(2, 2, dtype=torch.float64)
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False]])
    per_token, metrics = sapo(logprobs, old, adv, mask, PolicyLossParams())
    s1, s2 = sigmoid(1.0), sigmoid(-0.525)
    expected = [[-2.0, -4 * s1], [2 * 4 / 1.05 * s2, 0.0]]
    torch.testing.assert_close(per_token, torch.tensor(expected, dtype=torch.float64), atol=1e-12, rtol=0)
    per_token.sum().backward()
    grad = [[-1.0, -4 * s1 * (1 - s1) * 2], [2 * 4 * s2 * (1 - s2) * 0.5, 0.0]]
    torch.testing.assert_close(logprobs.grad, torch.tensor(grad, dtype=torch.float64), atol=1e-12, rtol=0)
    assert grad[0][1] == pytest.approx(-1.572895, abs=1e-6) and grad[1][0] == pytest.approx(0.934140, abs=1e-6)
    # gate weight 4 s (1 - s): 1, 0.786448, 0.934140 -> mean 0.906863
    assert metrics["gate_weight_mean"] == pytest.approx((1 + 4 * s1 * (1 - s1) + 4 * s2 * (1 - s2)) / 3)


def test_on_policy_gradient_is_the_plain_policy_gradient() -> None:
    # at r = 1 the gate's slope is 1, whatever tau: the gradient is -A on every token
    logprobs = torch.full((2, 3), -1.0, dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([0.7, -1.3], dtype=torch.float64)
    per_token, _ = sapo(logprobs, logprobs.detach(), adv, torch.ones(2, 3, dtype=torch.bool), PolicyLossParams(sapo_tau_pos=3.0, sapo_tau_neg=0.2))
    per_token.sum().backward()
    torch.testing.assert_close(logprobs.grad, -adv[:, None].expand(2, 3), atol=1e-12, rtol=0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("taus", [(1.0, 1.05), (0.5, 2.0)])
def test_matches_verl(seed: int, taus: tuple[float, float]) -> None:
    logprobs, old, adv, mask = random_case(seed, spread=1.0)
    tis = torch.rand(mask.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.5 if seed % 2 else None
    params = PolicyLossParams(sapo_tau_pos=taus[0], sapo_tau_neg=taus[1], tis_weights=tis)
    per_token, _ = sapo(logprobs, old, adv, mask, params)
    norm = LossNormalizer(int(mask.sum()), mask.shape[0], mask.shape[1])
    # verl divides the sum of sequence means by the live rows, reinforge by all rows
    ours = aggregate(per_token, mask, "seq_mean_token_mean", norm) * mask.shape[0] / live_rows(mask)
    (grad,) = torch.autograd.grad(ours, logprobs)
    ref_logprobs = logprobs.detach().clone().requires_grad_(True)
    theirs = compute_policy_loss_sapo(old, ref_logprobs, adv[:, None].expand_as(old), mask.double(), *taus, rollout_is_weights=tis)
    (ref_grad,) = torch.autograd.grad(theirs, ref_logprobs)
    # verl divides each row's sum by (n + 1e-8) where reinforge divides by n: a relative 1e-8 difference
    torch.testing.assert_close(ours, theirs, atol=1e-8, rtol=1e-7)
    torch.testing.assert_close(grad, ref_grad, atol=1e-8, rtol=1e-7)


@pytest.mark.parametrize("seed", SEEDS)
def test_matches_trl_formula(seed: int) -> None:
    # TRL 1.16 GRPOTrainer._compute_loss, loss_type="sapo", token-level ratios, beta = 0: its lines
    #   soft_coef_1 = torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures
    #   per_token_loss = -soft_coef_1 * advantages
    #   loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    # run on the same tensors (TRL has no log-ratio clamp: the ratios here stay far inside it).
    from trl import GRPOConfig

    fields = GRPOConfig.__dataclass_fields__  # TRL's defaults (building a GRPOConfig wants a GPU for bf16)
    tau_pos, tau_neg = fields["sapo_temperature_pos"].default, fields["sapo_temperature_neg"].default
    assert (tau_pos, tau_neg) == (PolicyLossParams().sapo_tau_pos, PolicyLossParams().sapo_tau_neg)
    logprobs, old, adv, mask = random_case(seed, spread=1.0)
    per_token, _ = sapo(logprobs, old, adv, mask, PolicyLossParams(sapo_tau_pos=tau_pos, sapo_tau_neg=tau_neg))
    norm = LossNormalizer(int(mask.sum()), mask.shape[0], mask.shape[1])
    ours = aggregate(per_token, mask, "seq_mean_token_mean", norm)
    (grad,) = torch.autograd.grad(ours, logprobs)

    ref_logprobs = logprobs.detach().clone().requires_grad_(True)
    advantages = adv.unsqueeze(1)
    coef_1 = torch.exp(ref_logprobs - old)
    temperatures = torch.where(advantages > 0, tau_pos, tau_neg)
    soft_coef_1 = torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures
    per_token_loss = -soft_coef_1 * advantages
    m = mask.double()
    theirs = ((per_token_loss * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    (ref_grad,) = torch.autograd.grad(theirs, ref_logprobs)
    # TRL's torch.where(advantages > 0, 1.0, 1.05) of Python floats is float32: 1.05 to 4e-8
    torch.testing.assert_close(ours, theirs, atol=1e-7, rtol=1e-7)
    torch.testing.assert_close(grad, ref_grad, atol=1e-7, rtol=1e-7)


def test_registered_and_far_ratios_stay_finite() -> None:
    assert POLICY_LOSSES["sapo"] is sapo
    logprobs = torch.tensor([[0.0, -60.0]], dtype=torch.float64)
    old = torch.tensor([[-60.0, 0.0]], dtype=torch.float64)  # log-ratios +60 and -60, clamped to +-20
    per_token, _ = sapo(logprobs, old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 2, dtype=torch.bool), PolicyLossParams())
    assert torch.isfinite(per_token).all()
    assert per_token[0, 0].item() == pytest.approx(-4.0)  # the gate saturates at 4 / tau
