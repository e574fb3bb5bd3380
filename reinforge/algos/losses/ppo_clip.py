"""PPO's clipped surrogate, with DAPO's decoupled clip range and the optional dual clip.

    r_t  = exp(logp_t - logp_old_t)
    o_t  = min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)
    o_t  = max(o_t, c A_t)      if A_t < 0 and dual_clip_c = c is set
    l_t  = -o_t

Sources: Schulman et al., "Proximal Policy Optimization Algorithms" (2017), eq. 7; the separate
eps_low / eps_high ("clip-higher", eps_high = 0.28 > eps_low = 0.2, so low-probability tokens can
grow) from Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (2025);
the dual clip from Ye et al., "Mastering Complex Control in MOBA Games with Deep Reinforcement
Learning" (AAAI 2020): with A < 0 a huge ratio would make the term -r A unbounded, so it is
bounded by -c A = c |A| (c > 1; the paper uses c = 3).

Metrics (fractions of sampled tokens whose gradient the clip removes): clip_frac_low (A < 0,
r < 1 - eps_low), clip_frac_high (A > 0, r > 1 + eps_high), clip_frac (their sum), dual_clip_frac
(A < 0, r > c), plus ratio_mean and approx_kl_old.
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.policy_common import (
    PolicyLossParams,
    finish,
    masked_mean,
    ratio_metrics,
    token_terms,
)


def ppo_clip(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask, adv, log_ratio = token_terms(logprobs, old_logprobs, advantages, mask)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - params.clip_eps_low, 1.0 + params.clip_eps_high) * adv
    objective = torch.minimum(unclipped, clipped)
    clip_active = unclipped > clipped
    dual_active = torch.zeros_like(mask)
    if params.dual_clip_c is not None:
        bound = params.dual_clip_c * adv
        dual_active = (adv < 0) & (bound > objective)
        objective = torch.where(dual_active, bound, objective)
    per_token = finish(-objective, mask, params)

    with torch.no_grad():
        low = masked_mean((clip_active & (ratio < 1)).to(logprobs.dtype), mask)
        high = masked_mean((clip_active & (ratio > 1)).to(logprobs.dtype), mask)
        metrics = {
            "clip_frac": low + high,
            "clip_frac_low": low,
            "clip_frac_high": high,
            "dual_clip_frac": masked_mean(dual_active.to(logprobs.dtype), mask),
            **ratio_metrics(log_ratio, mask),
        }
    return per_token, metrics
