"""GSPO: PPO's clipped surrogate on a sequence-level, length-normalized importance ratio.

    s_i = exp( (1 / n_i) sum_{t in mask_i} (logp_t - logp_old_t) )    (geometric mean of token ratios)
    L_i = -min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)
    J   = mean_i L_i

Source: Zheng et al., "Group Sequence Policy Optimization" (Qwen team, 2025). The reward
and the advantage belong to the whole response, so the importance ratio and its clip should too;
token-level ratios add noise that grows with length (and with MoE routing changes). Because s_i
is a geometric mean it stays close to 1, so the clip range is tiny: params.gspo_eps_low /
params.gspo_eps_high, default 3e-4 / 4e-4 as in the paper's section 5.1.

Aggregation: the per-token output puts L_i on every sampled token of sequence i, so that the
`seq_mean_token_mean` aggregation gives exactly mean_i L_i, gradient included (each of the n_i
copies carries 1 / n_i). It is the only aggregation GSPO is defined for (REQUIRED_AGGREGATION in
policy.py; the config validation enforces it).

Advantages must be one per sequence: [N], or [N, T] constant along the sampled tokens of each row.
Metrics are over sequences with at least one sampled token: clip_frac (low + high), clip_frac_low,
clip_frac_high, seq_ratio_mean; plus the token-level ratio_mean and approx_kl_old.
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.policy_common import PolicyLossParams, finish, ratio_metrics, sequence_terms


def gspo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask, adv, log_ratio = sequence_terms(logprobs, old_logprobs, advantages, mask)
    lengths = mask.sum(-1)
    seq_ratio = torch.exp(log_ratio.sum(-1) / lengths.clamp(min=1))
    unclipped = seq_ratio * adv
    clipped = seq_ratio.clamp(1.0 - params.gspo_eps_low, 1.0 + params.gspo_eps_high) * adv
    seq_loss = -torch.minimum(unclipped, clipped)
    per_token = finish(seq_loss[:, None].expand_as(logprobs), mask, params)

    with torch.no_grad():
        live = lengths > 0
        n = int(live.sum())
        clip_active = (unclipped > clipped) & live
        low = int((clip_active & (seq_ratio < 1)).sum()) / n if n else 0.0
        high = int((clip_active & (seq_ratio > 1)).sum()) / n if n else 0.0
        metrics = {
            "clip_frac": low + high,
            "clip_frac_low": low,
            "clip_frac_high": high,
            "seq_ratio_mean": seq_ratio[live].mean().item() if n else 0.0,
            **ratio_metrics(log_ratio, mask),
        }
    return per_token, metrics
