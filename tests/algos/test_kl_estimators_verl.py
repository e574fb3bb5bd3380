"""verl's KL estimators (abs, low_var_kl, and the straight-through k1+ / k3+ / low_var_kl+): by hand,
and against verl's kl_penalty on values and gradients."""

from __future__ import annotations

import math

import pytest
import torch
from reference.verl_kl_penalty import kl_penalty as verl_kl_penalty

from reinforge.algos.losses.kl import KL_ESTIMATORS, kl_penalty

F64 = torch.float64


def test_hand_computed() -> None:
    # logp = -1, logp_ref = -1.5: d = logp_ref - logp = -0.5
    #   abs = 0.5; k1 = 0.5; k2 = 0.125; k3 = e^-0.5 - 1 + 0.5 = 0.106531
    #   every "+" estimator: its own value, and k2's gradient d k2 / d logp = logp - logp_ref = 0.5
    for name, value in [("abs", 0.5), ("low_var_kl", math.exp(-0.5) - 0.5), ("k1+", 0.5), ("k3+", math.exp(-0.5) - 0.5), ("low_var_kl+", math.exp(-0.5) - 0.5)]:
        logprobs = torch.tensor([-1.0], dtype=F64, requires_grad=True)
        kl = kl_penalty(logprobs, torch.tensor([-1.5], dtype=F64), name)
        assert kl.item() == pytest.approx(value, abs=1e-12), name
        kl.sum().backward()
        expected_grad = 1.0 if name == "abs" else (1 - math.exp(-0.5) if name == "low_var_kl" else 0.5)
        assert logprobs.grad.item() == pytest.approx(expected_grad, abs=1e-12), name
    assert math.exp(-0.5) - 0.5 == pytest.approx(0.106531, abs=1e-6)


def test_low_var_kl_is_bounded() -> None:
    # d = 30 is clamped to 20; e^20 - 21 is clamped to 10
    value = kl_penalty(torch.tensor([0.0]), torch.tensor([30.0]), "low_var_kl")
    assert value.item() == 10.0 and kl_penalty(torch.tensor([0.0]), torch.tensor([30.0]), "k3").item() > 1e12


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("name", ["k1", "k2", "abs", "low_var_kl", "k1+", "k3+", "low_var_kl+"])
def test_matches_verl(seed: int, name: str) -> None:
    g = torch.Generator().manual_seed(seed)
    logprobs = (-3 * torch.rand(5, 7, generator=g, dtype=F64)).requires_grad_(True)
    # log-ratios up to ~3 reach low_var_kl's clamp at 10; k3+ (unclamped here, clamped in verl) stays below it
    spread = 0.5 if name == "k3+" else 1.5
    ref = logprobs.detach() + spread * torch.randn(5, 7, generator=g, dtype=F64)
    weights = torch.rand(5, 7, generator=g, dtype=F64)  # an arbitrary downstream use of the penalty
    ours = kl_penalty(logprobs, ref, name)
    (grad,) = torch.autograd.grad((ours * weights).sum(), logprobs)
    ref_logprobs = logprobs.detach().clone().requires_grad_(True)
    verl_name = {"k3+": "low_var_kl+"}.get(name, name)  # verl's k3 is its clamped low_var_kl: equal below the clamp
    theirs = verl_kl_penalty(ref_logprobs, ref, verl_name)
    (ref_grad,) = torch.autograd.grad((theirs * weights).sum(), ref_logprobs)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=1e-12)


def test_every_estimator_is_a_config_choice() -> None:
    from typing import get_args

    from reinforge.config.schema import AlgoConfig

    assert set(get_args(AlgoConfig.model_fields["kl_estimator"].annotation)) == set(KL_ESTIMATORS)
