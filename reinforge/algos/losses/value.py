"""Value (critic) losses: pure functions of predicted values or value logits, returns and masks.

Shapes follow reinforge.algos.types: [N, T] tensors aligned so that index t is the state in which
token t+1 is sampled; `mask[n, t]` is true where that token was sampled by the policy. Every loss
returns the loss *per token* ([N, T], zero outside the mask) and leaves the aggregation to the
caller, so micro-batches can be summed and divided by the token count of the whole mini-batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

SQRT_2 = math.sqrt(2.0)


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var[R - V] / Var[R] over the masked tokens (nan when the returns do not vary).

    1 means the critic predicts the returns exactly, 0 means it does no better than their mean,
    negative means worse than the mean (as reported by OpenAI baselines and Stable-Baselines3).
    """
    with torch.no_grad():
        m = mask.to(torch.float64)
        count = m.sum()
        if count < 1:
            return math.nan
        r = returns.detach().to(torch.float64)
        err = r - values.detach().to(torch.float64)

        def masked_var(x: torch.Tensor) -> torch.Tensor:
            mean = (x * m).sum() / count
            return (((x - mean) ** 2) * m).sum() / count

        var_r = masked_var(r)
        if var_r.item() <= 1e-12:
            return math.nan
        return float(1.0 - masked_var(err).item() / var_r.item())


def clipped_mse_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float | None = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Squared error to the returns, with PPO2's value clipping.

        V_clip_t = V_old_t + clip(V_t - V_old_t, -eps, eps)
        l_t      = 0.5 * max((V_t - R_t)^2, (V_clip_t - R_t)^2)          (clip_eps = eps)
        l_t      = 0.5 * (V_t - R_t)^2                                    (clip_eps = None)

    Source: the value-function clipping of OpenAI baselines' PPO2 (the implementation of Schulman
    et al., "Proximal Policy Optimization Algorithms", 2017); Engstrom et al. 2020 ("Implementation
    Matters in Deep Policy Gradients") discuss its effect. Taking the max keeps the critic from
    moving further than eps away from the values it had when the rollout was scored.

    values: [N, T] (with grad); old_values, returns: [N, T] (treated as constants); mask: [N, T].
    Returns the per-token loss [N, T] (zero outside the mask) and metrics:
      value_clip_frac: fraction of masked tokens where the clipped term is the larger one;
      explained_variance: see `explained_variance`.
    """
    m = mask.to(values.dtype)
    returns = returns.detach().to(values.dtype)
    unclipped = (values - returns) ** 2
    if clip_eps is None:
        per_token = 0.5 * unclipped
        clip_frac = 0.0
    else:
        old_values = old_values.detach().to(values.dtype)
        clipped_values = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
        clipped = (clipped_values - returns) ** 2
        per_token = 0.5 * torch.maximum(unclipped, clipped)
        with torch.no_grad():
            clip_frac = ((clipped > unclipped).to(m.dtype) * m).sum().item() / max(m.sum().item(), 1.0)
    metrics = {"value_clip_frac": clip_frac, "explained_variance": explained_variance(values, returns, mask)}
    return per_token * m, metrics


def hl_gauss_bin_edges(support_min: float, support_max: float, num_bins: int, **like) -> torch.Tensor:
    """num_bins + 1 evenly spaced edges covering [support_min, support_max]."""
    if not support_max > support_min or num_bins < 2:
        raise ValueError(f"HL-Gauss needs support_min < support_max and num_bins >= 2, got ({support_min}, {support_max}), {num_bins}")
    return torch.linspace(support_min, support_max, num_bins + 1, **like)


def hl_gauss_bin_centers(support_min: float, support_max: float, num_bins: int, **like) -> torch.Tensor:
    """The value each bin stands for: the midpoint of its edges ([num_bins])."""
    edges = hl_gauss_bin_edges(support_min, support_max, num_bins, **like)
    return (edges[:-1] + edges[1:]) / 2


def hl_gauss_targets(
    returns: torch.Tensor, support_min: float, support_max: float, num_bins: int, sigma: float | None = None
) -> torch.Tensor:
    """The HL-Gauss histogram of each return: [..., num_bins], summing to 1 over the last axis.

        p_i = (Phi((e_{i+1} - R) / sigma) - Phi((e_i - R) / sigma)) / (Phi((e_B - R) / sigma) - Phi((e_0 - R) / sigma))

    the probability mass of N(R, sigma^2) in bin i (edges e_0 < ... < e_B), renormalized to the
    support; with Phi(x) = (1 + erf(x / sqrt 2)) / 2 the 1/2 factors cancel, so erf differences
    are enough. Source: Farebrother et al., "Stop Regressing: Training Value Functions via
    Classification for Scalable Deep RL" (ICML 2024), sec. 3 and their reference code; the
    default sigma = 0.75 * bin width is their recommended sigma/zeta ratio.

    Returns outside the support are clamped to it first: the expected value of any histogram lies
    inside the support anyway, and a return far outside would make the normalizer underflow to 0.
    """
    dtype = returns.dtype if returns.is_floating_point() else torch.float32
    returns = returns.detach().to(dtype)
    edges = hl_gauss_bin_edges(support_min, support_max, num_bins, dtype=dtype, device=returns.device)
    if sigma is None:
        sigma = 0.75 * (support_max - support_min) / num_bins
    if sigma <= 0:
        raise ValueError(f"HL-Gauss sigma must be > 0, got {sigma}")
    r = returns.clamp(support_min, support_max)[..., None]
    cdf = torch.erf((edges - r) / (SQRT_2 * sigma))
    mass = cdf[..., 1:] - cdf[..., :-1]
    return mass / (cdf[..., -1:] - cdf[..., :1])


def hl_gauss_value_loss(
    logits: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    support: tuple[float, float] = (-1.0, 1.5),
    sigma: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy between the predicted value histogram and the HL-Gauss target of the return.

        l_t = - sum_i p_i(R_t) * log softmax(logits_t)_i,       V_t = sum_i softmax(logits_t)_i * c_i

    with p(R) from `hl_gauss_targets` and c_i the bin centers. Source: Farebrother et al., "Stop
    Regressing: Training Value Functions via Classification for Scalable Deep RL" (ICML 2024).
    The loss does not go to 0: its minimum is the entropy of the target histogram.

    logits: [N, T, B]; returns, mask: [N, T]. No value clipping (PPO2's clip is defined for scalar
    values only). Returns the per-token loss [N, T] (zero outside the mask) and metrics:
      explained_variance of the expected values V_t.
    """
    support_min, support_max = support
    num_bins = logits.shape[-1]
    log_probs = logits.float().log_softmax(-1)
    targets = hl_gauss_targets(returns.float(), support_min, support_max, num_bins, sigma)
    m = mask.to(log_probs.dtype)
    per_token = -(targets * log_probs).sum(-1) * m
    with torch.no_grad():
        centers = hl_gauss_bin_centers(support_min, support_max, num_bins, dtype=log_probs.dtype, device=logits.device)
        values = (log_probs.exp() * centers).sum(-1)
        metrics = {"explained_variance": explained_variance(values, returns, mask)}
    return per_token, metrics


@dataclass(frozen=True)
class ValueLossSpec:
    fn: Callable[..., tuple[torch.Tensor, dict[str, float]]]
    uses_bins: bool  # True: takes logits [N, T, B] over a support; False: takes scalar values [N, T]


VALUE_LOSSES: dict[str, ValueLossSpec] = {
    "mse": ValueLossSpec(clipped_mse_value_loss, uses_bins=False),
    "hl_gauss": ValueLossSpec(hl_gauss_value_loss, uses_bins=True),
}


def get_value_loss(name: str) -> ValueLossSpec:
    if name not in VALUE_LOSSES:
        raise ValueError(f"unknown value loss {name!r}; valid: {', '.join(sorted(VALUE_LOSSES))}")
    return VALUE_LOSSES[name]
