"""TRL's RLOO loss: PPO's clip on the ratio of whole-sequence probabilities.

    R_i = exp( sum_{t in mask_i} (logp_t - logp_old_t) ) = pi_theta(y_i | x) / pi_old(y_i | x)
    L_i = -min(R_i A_i, clip(R_i, 1 - eps_low, 1 + eps_high) A_i)
    J   = mean_i L_i

Source: TRL 1.16, RLOOTrainer._compute_loss (the trainer of Ahmadian et al., "Back to Basics:
Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs", 2024,
arXiv:2402.14740, which treats the whole completion as one action). Unlike GSPO's geometric mean,
R_i is the product of the token ratios, so it moves with the length of the response and the
ordinary PPO range applies: params.clip_eps_low / clip_eps_high (algo.clip_eps / clip_eps_high).
The log-ratio is summed in float as TRL does; a long, stale response can make R_i overflow, which
the clip then bounds on the side that matters (its gradient is 0 there).

Aggregation: L_i sits on every sampled token of row i, so `seq_mean_token_mean` gives exactly
mean_i L_i (REQUIRED_AGGREGATION). TRL counts a row without sampled tokens as R = 1, L = -A
(a constant, no gradient); here it adds 0. Advantages must be one per sequence.

Metrics over sequences with a sampled token: clip_frac (low + high), clip_frac_low, clip_frac_high,
seq_ratio_mean; plus the token-level ratio_mean and approx_kl_old.
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.policy_common import PolicyLossParams, finish, ratio_metrics, sequence_terms


def rloo_seq(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask, adv, log_ratio = sequence_terms(logprobs, old_logprobs, advantages, mask)
    seq_ratio = torch.exp(log_ratio.sum(-1))
    unclipped = seq_ratio * adv
    clipped = seq_ratio.clamp(1.0 - params.clip_eps_low, 1.0 + params.clip_eps_high) * adv
    seq_loss = -torch.minimum(unclipped, clipped)
    per_token = finish(seq_loss[:, None].expand_as(logprobs), mask, params)

    with torch.no_grad():
        live = mask.sum(-1) > 0
        n = int(live.sum())
        # TRL's counts: the ratio outside the range on the side where the clip bites
        low = int(((seq_ratio < 1 - params.clip_eps_low) & (adv < 0) & live).sum()) / n if n else 0.0
        high = int(((seq_ratio > 1 + params.clip_eps_high) & (adv > 0) & live).sum()) / n if n else 0.0
        metrics = {
            "clip_frac": low + high,
            "clip_frac_low": low,
            "clip_frac_high": high,
            "seq_ratio_mean": seq_ratio[live].mean().item() if n else 0.0,
            **ratio_metrics(log_ratio, mask),
        }
    return per_token, metrics
