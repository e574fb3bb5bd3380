"""The k3 KL estimator: hand values, non-negativity, and unbiasedness on a small categorical."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reinforge.algos.kl import k3_kl


def test_hand_computed_values() -> None:
    # k3 = exp(d) - d - 1 with d = logp_ref - logp
    #   p = 0.5,  p_ref = 0.25: d = ln 0.5 = -0.693147  -> 0.5 + 0.693147 - 1 = 0.193147
    #   p = 0.25, p_ref = 0.5:  d = ln 2   =  0.693147  -> 2 - 0.693147 - 1 = 0.306853
    #   p = 0.1,  p_ref = 0.1:  d = 0                   -> 0
    logp = torch.tensor([0.5, 0.25, 0.1], dtype=torch.float64).log()
    ref = torch.tensor([0.25, 0.5, 0.1], dtype=torch.float64).log()
    assert k3_kl(logp, ref).tolist() == pytest.approx([0.1931472, 0.3068528, 0.0], abs=1e-7)


def test_zero_when_equal() -> None:
    logp = torch.tensor([[-0.1, -2.0, -7.5], [0.0, -30.0, -1e-4]])
    assert torch.equal(k3_kl(logp, logp.clone()), torch.zeros(2, 3))


def test_tiny_float32_log_ratios_are_not_negative() -> None:
    # Regression: exp(d) - d - 1 rounded to -5.96e-8 at d = 5e-8 in float32.
    ref = torch.tensor([5e-8, -5e-8, 1e-7, 3e-7, -3e-8, 1e-4, -1e-4], dtype=torch.float32)
    assert (k3_kl(torch.zeros_like(ref), ref) >= 0).all()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(-30, 0, width=32), min_size=1, max_size=16),
    st.lists(st.floats(-30, 0, width=32), min_size=16, max_size=16),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_non_negative(logp: list[float], ref: list[float], dtype: torch.dtype) -> None:
    a = torch.tensor(logp, dtype=dtype)
    b = torch.tensor(ref[: len(logp)], dtype=dtype)
    kl = k3_kl(a, b)
    assert torch.isfinite(kl).all()
    assert (kl >= 0).all(), (a, b, kl)
    # Near-equal inputs give near-zero estimates (second order in the log-ratio).
    assert (k3_kl(a, a + 1e-3) < 1e-6).all()


def test_sample_mean_estimates_true_kl() -> None:
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    # KL(p || q) = 0.5 ln 2.5 + 0.3 ln 0.6 + 0.2 ln(2/3) = 0.458145 - 0.153248 - 0.081093 = 0.223804
    true_kl = sum(pi * math.log(pi / qi) for pi, qi in zip(p.tolist(), q.tolist()))
    assert true_kl == pytest.approx(0.223804, abs=1e-6)

    samples = torch.multinomial(p, 20_000, replacement=True, generator=torch.Generator().manual_seed(0))
    estimate = k3_kl(p.log()[samples], q.log()[samples]).mean().item()
    assert estimate == pytest.approx(true_kl, abs=0.02)
    # It estimates KL(p || q), not KL(q || p) = 0.2 ln 0.4 + 0.5 ln(5/3) + 0.3 ln 1.5 = 0.194 (std error ~7e-4).
    reverse = sum(qi * math.log(qi / pi) for pi, qi in zip(p.tolist(), q.tolist()))
    assert abs(estimate - true_kl) < abs(estimate - reverse)
