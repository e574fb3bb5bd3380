"""Value losses: hand-computed clipped MSE, HL-Gauss targets and the HL-Gauss cross-entropy."""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.algos.losses.value import (
    VALUE_LOSSES,
    clipped_mse_value_loss,
    get_value_loss,
    hl_gauss_bin_centers,
    hl_gauss_targets,
    hl_gauss_value_loss,
)

CLIP = 0.2
VALUES = [[0.5, 0.9, 1.0]]
OLD_VALUES = [[0.4, 0.2, 0.0]]
RETURNS = [[1.0, 0.0, 1.0]]
# token 0: |V - V_old| = 0.1 < eps, so V_clip = V:  0.5 * max((0.5-1)^2, (0.5-1)^2) = 0.5 * 0.25 = 0.125
# token 1: V_clip = 0.2 + 0.2 = 0.4:               0.5 * max((0.9-0)^2 = 0.81, (0.4-0)^2 = 0.16) = 0.405
# token 2: V_clip = 0.0 + 0.2 = 0.2:               0.5 * max((1-1)^2 = 0, (0.2-1)^2 = 0.64)      = 0.32   (clipped)
EXPECTED_CLIPPED = [[0.125, 0.405, 0.32]]
EXPECTED_PLAIN = [[0.125, 0.405, 0.0]]  # 0.5 * (V - R)^2
# explained variance: R = [1, 0, 1] has variance 2/9; R - V = [0.5, -0.9, 0] has mean -2/15 and
# variance ((19/30)^2 + (23/30)^2 + (4/30)^2) / 3 = 906/2700;  1 - (906/2700) / (2/9) = -0.51
EXPECTED_EV = -0.51


def mse_inputs(requires_grad: bool = False):
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    return t(VALUES).requires_grad_(requires_grad), t(OLD_VALUES), t(RETURNS), torch.ones(1, 3, dtype=torch.bool)


def test_clipped_mse_hand_computed() -> None:
    values, old, returns, mask = mse_inputs(requires_grad=True)
    loss, metrics = clipped_mse_value_loss(values, old, returns, mask, clip_eps=CLIP)
    assert torch.allclose(loss, torch.tensor(EXPECTED_CLIPPED, dtype=torch.float64), atol=1e-12)
    assert metrics["value_clip_frac"] == pytest.approx(1 / 3)
    assert metrics["explained_variance"] == pytest.approx(EXPECTED_EV)
    loss.sum().backward()
    # d/dV: (V - R) on the unclipped tokens; 0 on the clipped one (its max term is constant in V).
    assert torch.allclose(values.grad, torch.tensor([[-0.5, 0.9, 0.0]], dtype=torch.float64), atol=1e-12)


def test_plain_mse_and_mask() -> None:
    values, old, returns, mask = mse_inputs()
    loss, metrics = clipped_mse_value_loss(values, old, returns, mask, clip_eps=None)
    assert torch.allclose(loss, torch.tensor(EXPECTED_PLAIN, dtype=torch.float64), atol=1e-12)
    assert metrics["value_clip_frac"] == 0.0
    partial = torch.tensor([[True, True, False]])
    loss, metrics = clipped_mse_value_loss(values, old, returns, partial, clip_eps=CLIP)
    assert torch.allclose(loss, torch.tensor([[0.125, 0.405, 0.0]], dtype=torch.float64), atol=1e-12)
    assert metrics["value_clip_frac"] == 0.0  # the only clipped token is masked


def test_hl_gauss_targets_hand_computed() -> None:
    # support [0, 3], 3 bins (edges 0, 1, 2, 3), R = 1.5, sigma = 0.5: the edges sit at -3, -1, +1, +3 sigma.
    # mass: Phi(1) - Phi(-1) = 0.682689 in the middle, Phi(-1) - Phi(-3) = 0.157305 on each side;
    # normalized by Phi(3) - Phi(-3) = 0.997300:  [0.157731, 0.684537, 0.157731]
    probs = hl_gauss_targets(torch.tensor([1.5], dtype=torch.float64), 0.0, 3.0, 3, sigma=0.5)
    assert torch.allclose(probs, torch.tensor([[0.157731, 0.684537, 0.157731]], dtype=torch.float64), atol=1e-6)
    # symmetric case: two bins, return on the shared edge -> half and half
    assert torch.allclose(hl_gauss_targets(torch.tensor(1.0), 0.0, 2.0, 2), torch.tensor([0.5, 0.5]))


def test_hl_gauss_targets_sum_to_one_and_mean_is_the_return() -> None:
    support, bins = (-1.0, 1.5), 51
    returns = torch.linspace(-0.8, 1.3, 97, dtype=torch.float64)  # well inside the support
    probs = hl_gauss_targets(returns, *support, bins)
    assert probs.shape == (97, bins) and (probs >= 0).all()
    assert torch.allclose(probs.sum(-1), torch.ones(97, dtype=torch.float64), atol=1e-9)
    centers = hl_gauss_bin_centers(*support, bins, dtype=torch.float64)
    assert torch.allclose(probs @ centers, returns, atol=1e-4)
    # Any shape, and returns outside the support (clamped) still give a finite histogram.
    outside = hl_gauss_targets(torch.tensor([[-50.0, 1e9], [0.0, 1.5]]), *support, bins)
    assert outside.shape == (2, 2, bins) and torch.isfinite(outside).all()
    assert torch.allclose(outside.sum(-1), torch.ones(2, 2), atol=1e-5)


def test_hl_gauss_default_sigma_and_mode() -> None:
    support, bins = (-1.0, 1.5), 25
    width = 2.5 / bins
    centers = hl_gauss_bin_centers(*support, bins)
    probs = hl_gauss_targets(centers, *support, bins)
    assert torch.equal(probs.argmax(-1), torch.arange(bins))  # a return at a bin center peaks there
    assert torch.allclose(probs, hl_gauss_targets(centers, *support, bins, sigma=0.75 * width))
    assert not torch.allclose(probs, hl_gauss_targets(centers, *support, bins, sigma=2 * width))


def test_hl_gauss_loss_minimum_mask_and_gradient_direction() -> None:
    support, bins = (-1.0, 1.5), 21
    returns = torch.tensor([[1.0, -0.5]])
    target = hl_gauss_targets(returns, *support, bins)
    # At logits = log(target) the cross-entropy equals the target's entropy (its minimum).
    # (Far-tail bins have exactly 0 mass in float32: clamp before the log, 0 * log 0 = 0.)
    loss, _ = hl_gauss_value_loss(target.clamp_min(1e-30).log(), returns, torch.ones(1, 2, dtype=torch.bool), support)
    entropy = -torch.special.xlogy(target, target).sum(-1)
    assert torch.allclose(loss, entropy, atol=1e-5)
    assert (loss < math.log(bins)).all()
    # Masked tokens contribute nothing.
    loss, _ = hl_gauss_value_loss(torch.zeros(1, 2, bins), returns, torch.tensor([[True, False]]), support)
    # Uniform logits: the cross-entropy with any target is log(bins).
    assert loss[0, 1] == 0 and loss[0, 0].item() == pytest.approx(math.log(bins), abs=1e-5)
    # Gradient steps on the logits move the predicted mean toward the return.
    centers = hl_gauss_bin_centers(*support, bins)
    logits = torch.randn(1, 2, bins, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    mask = torch.ones(1, 2, dtype=torch.bool)
    distance = lambda: ((logits.softmax(-1) @ centers) - returns).abs()  # noqa: E731
    start = previous = distance().detach()
    for _ in range(10):
        loss, _ = hl_gauss_value_loss(logits, returns, mask, support)
        (grad,) = torch.autograd.grad(loss.sum(), logits)
        with torch.no_grad():
            logits -= 3.0 * grad
            now = distance()
        assert (now < previous).all()
        previous = now
    assert (previous < 0.25 * start).all()


def test_registry() -> None:
    assert set(VALUE_LOSSES) == {"mse", "hl_gauss"}
    assert get_value_loss("mse").fn is clipped_mse_value_loss and not get_value_loss("mse").uses_bins
    assert get_value_loss("hl_gauss").fn is hl_gauss_value_loss and get_value_loss("hl_gauss").uses_bins
    with pytest.raises(ValueError, match="valid: hl_gauss, mse"):
        get_value_loss("huber")
