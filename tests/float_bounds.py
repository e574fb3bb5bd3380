"""How far two float32 computations of the same quantity may drift apart when only the order of
their additions differs, and no further.

Two computations that are the same math but add in another order (another batch shape or
micro-batching, another kernel, another thread count, another CPU's SIMD width) round
differently. These bounds are derived from float32's unit roundoff and the sizes involved, not
from one machine's result, so they hold on any CPU (AVX2 / AVX-512 / scalar kernels, 1 or 2
threads); each is far below what a real bug moves (a wrong sign, a missing term, an off-by-one
token: changes of order 1e-2 and more in log-probs, of order the step size lr in weights).

Sources: Higham, "Accuracy and Stability of Numerical Algorithms" (2nd ed., 2002), section 3.1
and 4.2: a sum of n terms computed in any order has error <= (n - 1) * u * sum|x_i| with
u = EPS32 / 2; the error of a typical (not adversarial) order grows like sqrt(n) * u * sum|x_i|,
which is what these bounds use, times a factor that covers the constant.
"""

from __future__ import annotations

import math

import torch

EPS32 = torch.finfo(torch.float32).eps  # 2**-23 = 1.19e-7: twice the unit roundoff of float32

# Typical-case error constants are not worst-case bounds: a factor of 8 above sqrt(n) * u per
# reduction leaves room for the constant (and for the wider, unrolled reductions of some
# kernels) without coming near the size of a real error.
SLACK = 8.0


def network_sizes(model: torch.nn.Module) -> tuple[int, int]:
    """(layers, longest reduction): the depth and the longest dot product of a transformer forward."""
    config = model.config
    mlp = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * config.hidden_size  # GPT-2: 4 x width
    return config.num_hidden_layers, max(config.hidden_size, mlp)


def forward_bound(model: torch.nn.Module, scale: float) -> float:
    """Bound on |a - b| for one output (logit, log-prob, value) of `model` computed twice in float32
    with a different summation order (batch shape, padding width, micro-batching, kernel, threads).

    Each dot product of length n <= `longest` errs by ~sqrt(n) * u relative to the magnitude of
    its result; every layer adds its own (residual stream: errors add up over the layers, and
    RMSNorm keeps activations O(1), so they do not compound); the output inherits the relative
    error at its own magnitude `scale` (the largest |logit| or |log-prob| compared; a log-softmax
    subtracts a log-sum-exp of the same size as the logits). So:
        SLACK * (layers + 1) * sqrt(longest) * EPS32 * scale   (+1: the lm_head / value head).
    For the `nano` preset (2 layers, longest 256) at scale 10 this is 4.6e-4: an off-by-one
    token, a wrong mask or position moves log-probs by 1e-2 .. 1 on these models.
    """
    layers, longest = network_sizes(model)
    return SLACK * (layers + 1) * math.sqrt(longest) * EPS32 * max(scale, 1.0)


def gradient_bound(grad: torch.Tensor, terms: int, depth: int) -> float:
    """Bound on max|a - b| for one parameter's gradient computed twice with another summation order
    (micro-batches accumulated vs one batch, another kernel or thread count).

    Every gradient entry is a sum over `terms` (tokens x positions) of back-propagated products
    through `depth` layers; with cancellation between tokens of positive and negative advantage an
    entry can be far smaller than its terms, so the error is measured against the tensor's largest
    entry, which is of the size of the terms:
        SLACK * depth * sqrt(terms) * EPS32 * max|grad|.
    A missing or doubled term (one token's contribution) moves entries by ~max|grad| / terms,
    still >10x above this bound for terms <= 1000.
    """
    return SLACK * depth * math.sqrt(terms) * EPS32 * grad.abs().max().item()


def adam_first_step_bound(start: torch.Tensor, grad_a: torch.Tensor, grad_b: torch.Tensor, lr: float, adam_eps: float = 1e-8) -> torch.Tensor:
    """Elementwise bound on |w_a - w_b| after one Adam(W) step from the same weights `start` with
    the gradients `grad_a` and `grad_b` (the gradients the optimizer saw, after clipping).

    Adam's first step is w - lr * f(g) with f(g) = g / (|g| + eps) (bias-corrected moments:
    m = g, v = g^2; Kingma & Ba 2015, Algorithm 1; weight decay scales both starts the same way).
    f'(x) = eps / (|x| + eps)^2 <= 1 / (|x| + eps), so on the segment between g_a and g_b
        |f(g_a) - f(g_b)| <= min(2, |g_a - g_b| / (m + eps)),  m = min(|g_a|, |g_b|), 0 if signs differ.
    Where |g| >> eps the step is ~lr * sign(g) and float noise in g barely moves it; where
    |g| ~ eps (entries that cancel to ~0) the same noise moves it by a visible fraction of lr:
    this is why a fixed absolute tolerance on weights fails on some CPUs. Add the rounding of the
    update (a few operations, 8 * EPS32 * lr) and of the stored weight (EPS32 * |w|).
    A wrong step (wrong sign, doubled or missing step, wrong lr) moves entries with |g| >> eps by
    ~lr, where this bound is ~lr * 1e-4 or less.
    """
    ga, gb = grad_a.double(), grad_b.double()
    same_sign = (ga.sign() * gb.sign()) > 0
    nearest_zero = torch.where(same_sign, torch.minimum(ga.abs(), gb.abs()), torch.zeros_like(ga))
    direction = torch.clamp((ga - gb).abs() / (nearest_zero + adam_eps), max=2.0)
    return lr * (direction + 8 * EPS32) + EPS32 * (start.double().abs() + 2 * lr)


def adam_step_bound(
    start: torch.Tensor, grad_a: torch.Tensor, grad_b: torch.Tensor, lr: float, state: dict | None = None,
    betas: tuple[float, float] = (0.9, 0.999), adam_eps: float = 1e-8,
) -> torch.Tensor:
    """Elementwise bound on |w_a - w_b| after one Adam(W) step from the same weights `start` and the
    same optimizer `state` (this parameter's entry of an optimizer state dict: step, exp_avg,
    exp_avg_sq, as before the step; None or empty for the first step) with gradients `grad_a`
    and `grad_b` that differ only by float noise (checked separately with gradient_bound).

    Step t (Kingma & Ba 2015, Algorithm 1; AdamW's decay scales both starts the same way) is
    w - lr * f(g) with, from the shared history m = exp_avg, v = exp_avg_sq,
        f(g) = M(g) / (S(g) + eps),  M(g) = (b1 m + (1 - b1) g) / c1,  S(g) = sqrt((b2 v + (1 - b2) g^2) / c2),
    c1 = 1 - b1^t, c2 = 1 - b2^t. Its sensitivity to g (generalizing adam_first_step_bound's
    eps / (|g| + eps)^2; at t = 1, m = v = 0, that tighter exact form is used):
        f'(g) = (1 - b1) / (c1 (S + eps)) - M S' / (S + eps)^2,  S' = (1 - b2) g / (c2 S),
    and S >= sqrt((1 - b2) / c2) |g| gives |S'| <= sqrt((1 - b2) / c2). On the segment between g_a
    and g_b, S is smallest where |g| is (S_min: at g = 0 if the signs differ) and |M| largest at an
    end (M is linear in g), so
        |f(g_a) - f(g_b)| <= |g_a - g_b| * ((1 - b1) / (c1 (S_min + eps)) + max|M| sqrt((1 - b2) / c2) / (S_min + eps)^2),
    and never more than |f(g_a)| + |f(g_b)|. The history m, v makes S_min large for an entry whose
    past gradients were large, so after the first step noise in a near-zero gradient moves its
    weight much less than the up-to-2 * lr of the first step; where the history is small as well,
    the bound says so. Add the rounding of the update: on each side under 16 roundings of
    u = EPS32 / 2 (moment updates, square root, bias corrections, eps, division, step size), so
    16 * EPS32 * lr * max(|f|, 1) for both; and of the stored weight: w - s_a and w - s_b rounded
    to nearest differ by at most |s_a - s_b| plus one ulp of the result, and one ulp of x is at
    most EPS32 * |x| <= EPS32 * (|w| + 2 lr max(|f|, 1)). (A one-ulp difference can come close to
    this last term, so measured ratios near 1 are expected where the step itself is noise-free.)
    A wrong step (wrong gradient, sign, moments, step count or lr) moves entries with |g| >> eps
    by a good fraction of lr, far above this bound there.
    """
    if not state or "exp_avg" not in state:
        return adam_first_step_bound(start, grad_a, grad_b, lr, adam_eps)
    b1, b2 = betas
    t = int(state["step"]) + 1
    c1, c2 = 1 - b1**t, 1 - b2**t
    m, v = state["exp_avg"].double(), state["exp_avg_sq"].double()
    ga, gb = grad_a.double(), grad_b.double()

    def moment(g):  # M(g)
        return (b1 * m + (1 - b1) * g) / c1

    def size(g):  # S(g)
        return ((b2 * v + (1 - b2) * g * g) / c2).sqrt()

    f_a, f_b = moment(ga) / (size(ga) + adam_eps), moment(gb) / (size(gb) + adam_eps)
    same_sign = (ga.sign() * gb.sign()) > 0
    s_min = size(torch.where(same_sign, torch.minimum(ga.abs(), gb.abs()), torch.zeros_like(ga))) + adam_eps
    m_max = torch.maximum(moment(ga).abs(), moment(gb).abs())
    slope = (1 - b1) / (c1 * s_min) + m_max * math.sqrt((1 - b2) / c2) / s_min**2
    direction = torch.minimum((ga - gb).abs() * slope, f_a.abs() + f_b.abs())
    step = torch.clamp(torch.maximum(f_a.abs(), f_b.abs()), min=1.0)
    return lr * (direction + 16 * EPS32 * step) + EPS32 * (start.double().abs() + 2 * lr * step)


def assert_adam_steps_agree(start: torch.nn.Module, a: torch.nn.Module, b: torch.nn.Module, lr: float) -> None:
    """`a` and `b` took one Adam(W) step from `start`'s weights with gradients that differ only by
    float noise (their .grad, checked separately with gradient_bound): their weights differ by no
    more than Adam maps that noise to (adam_first_step_bound), entry by entry."""
    for (name, w0), wa, wb in zip(start.named_parameters(), a.parameters(), b.parameters()):
        assert_within(wa.detach(), wb.detach(), adam_first_step_bound(w0.detach(), wa.grad, wb.grad, lr), name)


def assert_within(a: torch.Tensor, b: torch.Tensor, bound: torch.Tensor | float, what: str) -> None:
    excess = ((a.double() - b.double()).abs() - bound).max().item()
    assert excess <= 0, f"{what}: differs by {excess:.3g} more than the float-noise bound"


@torch.no_grad()
def logit_bound(model: torch.nn.Module, sequences: list[list[int]]) -> float:
    """forward_bound at the scale of `model`'s largest |logit| on `sequences` (each run alone): the
    bound for logits and for log-probs (a log-softmax errs as much as the logits it reads)."""
    scale = max(model(torch.tensor([s])).logits.abs().max().item() for s in sequences)
    return forward_bound(model, scale)
