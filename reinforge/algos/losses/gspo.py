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

from reinforge.algos.losses.policy_common import PolicyLossParams, finish, masked_log_ratio, ratio_metrics


def sequence_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N] advantages; [N, T] ones must not vary along the sampled tokens of a row."""
    if advantages.dim() == 1:
        return advantages
    zeros = torch.zeros_like(advantages)
    per_seq = torch.where(mask, advantages, zeros).sum(-1) / mask.sum(-1).clamp(min=1)  # mean over sampled tokens
    spread = torch.where(mask, (advantages - per_seq[:, None]).abs(), zeros)
    if (spread > 1e-6 * (1.0 + per_seq.abs()[:, None])).any():
        raise ValueError("gspo needs one advantage per sequence: got [N, T] advantages that vary along the sampled tokens")
    return per_seq


def gspo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask = mask.bool()
    adv = sequence_advantages(advantages, mask).to(logprobs.dtype)
    log_ratio = masked_log_ratio(logprobs, old_logprobs, mask)
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
