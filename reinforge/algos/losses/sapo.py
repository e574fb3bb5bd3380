"""SAPO: a smooth, temperature-controlled gate on the token ratio instead of PPO's hard clip.

    r_t   = exp(clamp(logp_t - logp_old_t, -20, 20))
    tau_t = tau_pos if A_t > 0 else tau_neg
    f(r)  = (4 / tau) * sigmoid(tau * (r - 1))
    l_t   = -f(r_t) * A_t

    grad_theta l_t = -A_t * w_t * grad_theta logp_t,   w_t = 4 sigmoid(tau (r_t - 1)) (1 - sigmoid(...)) * r_t

Source: Gao et al., "Soft Adaptive Policy Optimization" (Qwen team, 2025, arXiv:2511.20347).
At r = 1 the gate has value 2 / tau and slope 1, so on-policy SAPO has exactly the gradient of the
plain surrogate r A; away from 1 the weight w_t = 4 s (1 - s) r decays smoothly (a hard clip drops
it to 0 at a cliff), so off-policy tokens still carry some signal while far-off ones fade. A
larger tau makes the fade faster; tau_neg > tau_pos (the paper's 1.05 vs 1.0) because negative
updates spread probability mass over the whole vocabulary and destabilize sooner.
Parameters: params.sapo_tau_pos, params.sapo_tau_neg (algo.sapo_tau_pos / algo.sapo_tau_neg).

The log-ratio clamp to [-20, 20] is verl's (compute_policy_loss_sapo), so exp() stays finite;
TRL's loss_type="sapo" has the same gate without it. Both aggregate by seq_mean_token_mean (the
paper's sequence-mean of token means): the `sapo` preset sets it; other aggregations are allowed.

Metrics: gate_weight_mean (mean of w_t / r_t = 4 s (1 - s), 1 on-policy: how much of the plain
gradient the gate keeps), ratio_mean, approx_kl_old.
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

LOG_RATIO_BOUND = 20.0


def sapo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask, adv, log_ratio = token_terms(logprobs, old_logprobs, advantages, mask)
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    tau_pos, tau_neg = (torch.tensor(t, dtype=logprobs.dtype, device=logprobs.device) for t in (params.sapo_tau_pos, params.sapo_tau_neg))
    tau = torch.where(adv > 0, tau_pos, tau_neg)  # tensors, not floats: where() of floats is float32
    gate = torch.sigmoid(tau * (ratio - 1.0))
    per_token = finish(-(4.0 / tau) * gate * adv, mask, params)
    with torch.no_grad():
        metrics = {"gate_weight_mean": masked_mean(4.0 * gate * (1.0 - gate), mask), **ratio_metrics(log_ratio, mask)}
    return per_token, metrics
