"""tests/float_bounds.py's AdamW bound at later steps: it covers what Adam's map does to gradient
noise (checked against the exact map in float64), and it is far below what a wrong step moves."""

from __future__ import annotations

import copy

import torch

from float_bounds import EPS32, adam_step_bound


def adam_map(g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, t: int, betas=(0.9, 0.999), eps=1e-8) -> torch.Tensor:
    """f(g) of Adam's step t from moments m, v (Kingma & Ba 2015, Algorithm 1), in float64."""
    b1, b2 = betas
    m_hat = (b1 * m + (1 - b1) * g) / (1 - b1**t)
    v_hat = (b2 * v + (1 - b2) * g * g) / (1 - b2**t)
    return m_hat / (v_hat.sqrt() + eps)


def test_the_bound_covers_the_exact_map_of_gradient_noise() -> None:
    """Random histories and gradients of every size (near-zero ones and sign flips included), each
    pair differing by relative noise up to 1e-5: lr * |f(g_a) - f(g_b)| stays under the bound."""
    gen = torch.Generator().manual_seed(0)
    n, lr = 200_000, 1e-3
    for t in (2, 3, 10, 1000):
        scale = 10 ** (-12 * torch.rand(n, generator=gen, dtype=torch.float64))  # 1 .. 1e-12
        g_a = torch.randn(n, generator=gen, dtype=torch.float64) * scale
        g_b = g_a * (1 + 1e-5 * torch.randn(n, generator=gen, dtype=torch.float64)) + 1e-13 * torch.randn(n, generator=gen, dtype=torch.float64)
        m = torch.randn(n, generator=gen, dtype=torch.float64) * 10 ** (-12 * torch.rand(n, generator=gen, dtype=torch.float64))
        v = (torch.randn(n, generator=gen, dtype=torch.float64) * 10 ** (-12 * torch.rand(n, generator=gen, dtype=torch.float64))) ** 2
        state = {"step": torch.tensor(float(t - 1)), "exp_avg": m, "exp_avg_sq": v}
        exact = lr * (adam_map(g_a, m, v, t) - adam_map(g_b, m, v, t)).abs()
        bound = adam_step_bound(torch.zeros(n), g_a, g_b, lr, state)
        step = torch.clamp(adam_map(g_a, m, v, t).abs(), min=1)
        derivative_part = bound - lr * 16 * EPS32 * step - EPS32 * 2 * lr * step  # the float32 rounding terms off
        float64_noise = 4 * torch.finfo(torch.float64).eps * lr * step  # of `exact` itself
        assert (exact <= derivative_part + float64_noise).all(), t
        assert (exact / derivative_part).median() > 0.3  # and it is not loose by orders of magnitude


def test_a_wrong_adam_step_breaks_the_bound() -> None:
    """One real AdamW step at t = 3 against the same step with a wrong state: moments dropped
    (a follower that missed the resumed optimizer state) or the learning rate doubled."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3, weight_decay=0.0)
    for _ in range(2):
        optimizer.zero_grad()
        layer(torch.randn(16, 64)).pow(2).mean().backward()
        optimizer.step()
    optimizer.zero_grad()
    layer(torch.randn(16, 64)).pow(2).mean().backward()
    start = layer.weight.detach().clone()
    grad = layer.weight.grad.clone()
    state = copy.deepcopy(optimizer.state_dict()["state"][0])
    bound = adam_step_bound(start, grad, grad, 1e-3, state)

    def step(reset_moments: bool, lr: float) -> torch.Tensor:
        w = torch.nn.Parameter(start.clone())
        opt = torch.optim.AdamW([w], lr=lr, weight_decay=0.0)
        if not reset_moments:
            opt.load_state_dict({"state": {0: copy.deepcopy(state)}, "param_groups": [{**opt.state_dict()["param_groups"][0], "lr": lr}]})
        w.grad = grad.clone()
        opt.step()
        return w.detach()

    optimizer.step()
    right = layer.weight.detach()
    assert ((step(False, 1e-3) - right).abs() <= bound).all()  # the same step: within (here: equal)
    for wrong in (step(True, 1e-3), step(False, 2e-3)):
        outside = ((wrong - right).abs() > bound).float().mean().item()
        assert outside > 0.9, outside  # nearly every entry leaves the bound
