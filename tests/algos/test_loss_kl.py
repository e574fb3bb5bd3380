"""k1 / k2 / k3 KL estimators: hand values, exact expectations and sample means on a categorical."""

from __future__ import annotations

import math

import pytest
import torch

import reinforge.algos.kl as legacy
from reinforge.algos.losses.kl import KL_ESTIMATORS, k1, k2, k3, kl_penalty

P = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
Q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
# KL(P || Q) = 0.5 ln 2.5 + 0.3 ln 0.6 + 0.2 ln(2/3) = 0.458145 - 0.153248 - 0.081093 = 0.223804
TRUE_KL = 0.223804


def test_hand_computed_values() -> None:
    # (p, p_ref) = (0.5, 0.25): logp - logp_ref = ln 2 = 0.693147
    # (p, p_ref) = (0.25, 0.5): logp - logp_ref = -ln 2
    logp = torch.tensor([0.5, 0.25, 0.1], dtype=torch.float64).log()
    ref = torch.tensor([0.25, 0.5, 0.1], dtype=torch.float64).log()
    assert k1(logp, ref).tolist() == pytest.approx([0.693147, -0.693147, 0.0], abs=1e-6)
    # 0.5 * ln(2)^2 = 0.5 * 0.480453 = 0.240227 both ways
    assert k2(logp, ref).tolist() == pytest.approx([0.240227, 0.240227, 0.0], abs=1e-6)
    # exp(d) - d - 1, d = logp_ref - logp: 0.5 + 0.693147 - 1 = 0.193147 | 2 - 0.693147 - 1 = 0.306853
    assert k3(logp, ref).tolist() == pytest.approx([0.193147, 0.306853, 0.0], abs=1e-6)


def test_exact_expectations_under_the_sampling_distribution() -> None:
    true_kl = sum(p * math.log(p / q) for p, q in zip(P.tolist(), Q.tolist()))
    assert true_kl == pytest.approx(TRUE_KL, abs=1e-6)

    def expectation(fn) -> float:
        return (P * fn(P.log(), Q.log())).sum().item()

    assert expectation(k1) == pytest.approx(true_kl, abs=1e-12)  # unbiased
    assert expectation(k3) == pytest.approx(true_kl, abs=1e-12)  # unbiased: E_P[Q/P] = 1
    # k2 is biased: 0.5 * (0.5 * 0.839589 + 0.3 * 0.260943 + 0.2 * 0.164402) = 0.265479
    assert expectation(k2) == pytest.approx(0.265479, abs=1e-6)


def test_sample_means_estimate_the_true_kl() -> None:
    samples = torch.multinomial(P, 20_000, replacement=True, generator=torch.Generator().manual_seed(0))
    logp, ref = P.log()[samples], Q.log()[samples]
    assert k1(logp, ref).mean().item() == pytest.approx(TRUE_KL, abs=0.02)
    assert k3(logp, ref).mean().item() == pytest.approx(TRUE_KL, abs=0.02)
    assert k2(logp, ref).mean().item() == pytest.approx(TRUE_KL, abs=0.06)  # bias 0.042
    # k2 and k3 have lower variance than k1
    assert k2(logp, ref).var() < k1(logp, ref).var() and k3(logp, ref).var() < k1(logp, ref).var()


def test_registry_and_penalty() -> None:
    logp = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    for name, fn in KL_ESTIMATORS.items():
        assert torch.equal(kl_penalty(logp, ref, name), fn(logp, ref))
    with pytest.raises(ValueError, match=r"abs, k1, k1\+, k2, k3, k3\+, low_var_kl, low_var_kl\+"):
        kl_penalty(logp, ref, "k4")


def test_legacy_module_reexports() -> None:
    assert legacy.k3_kl is k3 and legacy.kl_penalty is kl_penalty
