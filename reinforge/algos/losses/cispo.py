"""CISPO: REINFORCE weighted by a clipped, detached importance weight, so no token loses its gradient.

    r_t = exp(logp_t - logp_old_t)
    w_t = sg(clip(r_t, 1 - eps_low, 1 + eps_high))         (no lower bound when eps_low is None)
    l_t = -w_t * A_t * logp_t             grad_theta l_t = -w_t * A_t * grad_theta logp_t

Source: MiniMax, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention"
(2025), the CISPO objective. PPO's clip zeroes the gradient of tokens whose ratio left the trust
region (often the rare "fork" tokens of a reasoning chain); CISPO clips the *weight* instead, so
every token keeps a bounded REINFORCE gradient. The report sets eps_low large (no lower bound) and
tunes only eps_high: params.cispo_eps_high, params.cispo_eps_low (default None: no lower bound).
The default eps_high = 5.0 (weights capped at 6) is this project's loose choice, not a value from
the report; smaller values (e.g. 0.2-2) cut the variance of stale data more.

Metrics: clip_frac (fraction of sampled tokens whose weight was truncated), weight_mean,
ratio_mean, approx_kl_old.
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.policy_common import (
    PolicyLossParams,
    finish,
    masked_log_ratio,
    masked_mean,
    ratio_metrics,
    token_advantages,
)


def cispo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask = mask.bool()
    log_ratio = masked_log_ratio(logprobs, old_logprobs, mask)
    ratio = torch.exp(log_ratio.detach())
    low = None if params.cispo_eps_low is None else 1.0 - params.cispo_eps_low
    weight = ratio.clamp(min=low, max=1.0 + params.cispo_eps_high)
    per_token = finish(-weight * token_advantages(advantages, logprobs) * logprobs, mask, params)
    metrics = {
        "clip_frac": masked_mean((weight != ratio).to(logprobs.dtype), mask),
        "weight_mean": masked_mean(weight, mask),
        **ratio_metrics(log_ratio, mask),
    }
    return per_token, metrics
