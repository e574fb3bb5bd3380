"""KL-Cov: the unclipped surrogate, plus a |log-ratio| penalty on the tokens of largest covariance.

    r_t   = exp(logp_t - logp_old_t)
    cov_t = (A_t - mean A) (logp_t - mean logp)          means over the sampled tokens of the batch
    S     = the max(1, floor(ratio * #sampled)) sampled tokens of largest cov_t
    l_t   = -r_t A_t + [t in S] * beta * |logp_t - logp_old_t|

Source: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models" (2025, arXiv:2505.22617), section 4. Entropy falls with the covariance of a token's
log-prob and its advantage; a KL-like penalty on only the highest-covariance tokens keeps them
near the old policy and entropy from collapsing, while every other token trains without a clip.
The paper's k = 2e-3 (7B) or 2e-4 (32B), beta = 1: params.kl_cov_ratio, params.kl_cov_coef
(algo.kl_cov_ratio, algo.kl_cov_coef). The selection is a deterministic top-k (verl's
compute_policy_loss_kl_cov, which this follows); means and count are over the call's sampled
tokens (a micro-batch).

Metrics: kl_cov_frac (share of sampled tokens penalized), abs_log_ratio_mean (verl's ppo_kl for
this loss), ratio_mean, approx_kl_old.
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.clip_cov import token_covariance
from reinforge.algos.losses.policy_common import (
    PolicyLossParams,
    finish,
    masked_mean,
    ratio_metrics,
    token_terms,
)


def kl_cov(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask, adv, log_ratio = token_terms(logprobs, old_logprobs, advantages, mask)
    ratio = torch.exp(log_ratio)

    with torch.no_grad():
        selected = torch.zeros_like(mask)
        count = int(mask.sum())
        if count:
            valid = torch.nonzero(mask.reshape(-1), as_tuple=True)[0]
            cov = token_covariance(adv, logprobs, mask).reshape(-1)[valid]
            top = torch.topk(cov, max(1, int(count * params.kl_cov_ratio)), largest=True).indices
            selected.view(-1)[valid[top]] = True

    penalty = params.kl_cov_coef * log_ratio.abs()
    per_token = finish(-ratio * adv + torch.where(selected, penalty, torch.zeros_like(penalty)), mask, params)
    metrics = {
        "kl_cov_frac": masked_mean(selected.to(logprobs.dtype), mask),
        "abs_log_ratio_mean": masked_mean(log_ratio.abs(), mask),
        **ratio_metrics(log_ratio, mask),
    }
    return per_token, metrics
