"""Clip-Cov: PPO's clipped surrogate, with the gradient cut on a few tokens of high covariance.

    r_t    = exp(logp_t - logp_old_t)
    o_t    = min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)           (PPO)
    cov_t  = (A_t - mean A) (logp_t - mean logp)        means over the sampled tokens of the batch
    C      = { t sampled, not already clipped by PPO, lb < cov_t < ub }
    S      = max(1, floor(ratio * #sampled)) tokens drawn uniformly from C (all of C if smaller)
    l_t    = -o_t  for t not in S,   0 (no gradient) for t in S

Source: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models" (2025, arXiv:2505.22617), section 4. Under policy gradient the policy's entropy falls by
the covariance of a token's log-prob and its advantage: confident tokens with positive advantage
drive the collapse. Cutting the gradient of a tiny share of high-covariance tokens (ratio 2e-4,
band [1, 5] in the paper) holds entropy up. Parameters: params.clip_cov_ratio, clip_cov_lb,
clip_cov_ub (algo.clip_cov_*); the PPO range is params.clip_eps_low / clip_eps_high (the paper's
recipe sets both to 1, i.e. ratios in [0, 2], leaving the covariance cut to do the work).

The means and the count are over the call's sampled tokens (a micro-batch, as in verl's
compute_policy_loss_clip_cov, which this follows line for line). The draw uses
params.generator, or torch's global generator when None (its state is in every checkpoint, so a
resumed run draws the same tokens).

Metrics: cov_cut_frac (share of sampled tokens cut), clip_frac (PPO's clip), ratio_mean, approx_kl_old.
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


def token_covariance(advantages: torch.Tensor, logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(A_t - mean A)(logp_t - mean logp) per token [N, T], means over the sampled tokens; detached."""
    count = mask.sum().clamp(min=1)
    advantages, logprobs = advantages.detach(), logprobs.detach()
    zeros = torch.zeros_like(logprobs)
    mean_adv = torch.where(mask, advantages, zeros).sum() / count
    mean_logp = torch.where(mask, logprobs, zeros).sum() / count
    return (advantages - mean_adv) * (logprobs - mean_logp)


def clip_cov(
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
    clip_active = (unclipped > clipped) & mask

    with torch.no_grad():
        cov = token_covariance(adv, logprobs, mask)
        candidates = torch.nonzero(mask & ~clip_active & (cov > params.clip_cov_lb) & (cov < params.clip_cov_ub))
        budget = max(int(params.clip_cov_ratio * int(mask.sum())), 1)
        if len(candidates) > 0:  # drawn even when all are kept, as verl does: the same random stream
            order = torch.randperm(len(candidates), generator=params.generator, device="cpu").to(candidates.device)
            candidates = candidates[order[:budget]]
        cut = torch.zeros_like(mask)
        cut[candidates[:, 0], candidates[:, 1]] = True

    per_token = finish(torch.where(cut, torch.zeros_like(logprobs), -torch.minimum(unclipped, clipped)), mask, params)
    metrics = {
        "cov_cut_frac": masked_mean(cut.to(logprobs.dtype), mask),
        "clip_frac": masked_mean(clip_active.to(logprobs.dtype), mask),
        **ratio_metrics(log_ratio, mask),
    }
    return per_token, metrics
