"""Rollout correction at the level of whole samples: sequence-level truncated IS weights, and
masking (rejection) of tokens or samples whose importance ratio leaves a band.

With d_t = logp_proximal_t - logp_behaviour_t on the sampled tokens of sample i (n_i of them):

    token       r_t = exp(d_t)                                   (one ratio per token)
    sequence    r_i = exp(sum_t d_t)       = prod_t r_t           (the sample's likelihood ratio)
    geometric   r_i = exp(sum_t d_t / n_i) = (prod_t r_t)^(1/n_i) (its per-token geometric mean)

Truncated IS weights (`algo.tis_cap` = C, `algo.tis_level`): w = min(r, C), detached; a sequence
or geometric weight is given to every sampled token of its sample, so it multiplies the sample's
whole loss. The token level is reinforge.algos.losses.importance. The sequence ratio is the
unbiased correction of a sample's probability under the learner vs the engine (verl's
`rollout_is: sequence`, "Seq-TIS"), with a variance that grows with the length; the geometric mean
is length-normalized and stays near 1 (only for masking in verl, a weight here too).
A lower clip `algo.tis_floor` = F makes it w = clip(r, F, C) at every level.

Normalization (`algo.tis_normalize`): w <- w / mean(w), the mean over the batch's sampled tokens
(token level) or over its samples with a sampled token (sequence, geometric: each sample's one
weight), so the weights only re-distribute the batch's gradient and do not scale it; verl's
`rollout_is_batch_normalize` (compute_rollout_correction_weights: truncate, detach, then divide
by the mean when it is above 1e-8). Metric tis_norm_factor (the mean divided by).

Masking (`algo.rollout_mask`, band [low, high] = `algo.rollout_mask_low`, `algo.rollout_mask_high`):
a token (level token) or a whole sample (sequence, geometric) whose ratio r is outside [low, high]
leaves the loss, as verl's rejection sampling `rollout_rs: token | sequence | geometric` with
`rollout_rs_threshold_lower` / `rollout_rs_threshold` (low defaults to 1 / high there and here).
Rejected, not down-weighted: a sample the engine sampled far from the learner's policy is
evidence of a numerical fault, not a rare trajectory to learn from.

Sources: Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
(2025) (truncated IS against the engine's log-probs); Liu, Li, Fu, Wang, Liu, Shen, "When Speed
Kills Stability: Demystifying RL Collapse from the Training-Inference Mismatch" (2025) (sequence-
level IS and masked IS "MIS", geometric-mean rejection; implemented in verl as
`algorithm.rollout_correction`, verl/trainer/ppo/rollout_corr_helper.py); the token-level band is
IcePop (Ling team, "Every Step Evolves: Scaling Reinforcement Learning for Trillion-Scale Thinking
Model", 2025), which masks the tokens whose ratio leaves a two-sided band.

The ratios are compared in log space (log r against log C, log low, log high), so a long sample's
sum of log-ratios cannot overflow exp.

Metrics, over sampled tokens (so micro-batch values combine as token-weighted means):
tis_weight_mean, tis_capped_frac (the token's weight was capped) for the weights;
rollout_masked_frac (sampled tokens masked) and rollout_masked_samples (samples with a masked
token, over samples with a sampled token) for the mask.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from reinforge.algos.losses.importance import truncated_is_weights

Level = Literal["token", "sequence", "geometric"]
LEVELS: tuple[str, ...] = ("token", "sequence", "geometric")


def log_ratios(proximal_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """log r at `level`, shaped [N, T]: per token, or each sample's value on all of its positions."""
    if level not in LEVELS:
        raise ValueError(f"unknown rollout correction level {level!r}; valid: {', '.join(LEVELS)}")
    mask = mask.bool()
    diff = torch.where(mask, proximal_logprobs.detach().double() - behaviour_logprobs.detach().double(), 0.0)
    if level == "token":
        return diff
    total = diff.sum(1, keepdim=True)
    if level == "geometric":
        total = total / mask.sum(1, keepdim=True).clamp(min=1)
    return total.expand_as(diff)


def rollout_is_weights(
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
    level: str = "token",
    floor: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """w = clip(r, floor, cap) at `level` on sampled tokens (no lower clip when floor is None), 0
    elsewhere, detached, in the dtype of the log-probs; metrics tis_weight_mean, tis_capped_frac
    (and tis_floored_frac with a floor)."""
    if level == "token":
        return truncated_is_weights(proximal_logprobs, behaviour_logprobs, mask, cap, floor)
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    if floor is not None and not 0 < floor <= cap:
        raise ValueError(f"floor must be in (0, cap={cap}], got {floor}")
    mask = mask.bool()
    log_r = log_ratios(proximal_logprobs, behaviour_logprobs, mask, level)
    log_cap = math.log(cap)
    log_floor = None if floor is None else math.log(floor)
    weights = torch.where(mask, torch.exp(log_r.clamp(min=log_floor, max=log_cap)), 0.0).to(proximal_logprobs.dtype)
    count = int(mask.sum())
    metrics = {
        "tis_weight_mean": weights.double().sum().item() / count if count else 0.0,
        "tis_capped_frac": (mask & (log_r > log_cap)).sum().item() / count if count else 0.0,
    }
    if log_floor is not None:
        metrics["tis_floored_frac"] = (mask & (log_r < log_floor)).sum().item() / count if count else 0.0
    return weights, metrics


def normalize_is_weights(weights: torch.Tensor, mask: torch.Tensor, level: str = "token") -> tuple[torch.Tensor, dict[str, float]]:
    """Weights divided by their mean: over sampled tokens (token level) or over samples with a
    sampled token (sequence, geometric); left as they are when that mean is <= 1e-8 (verl)."""
    if level not in LEVELS:
        raise ValueError(f"unknown rollout correction level {level!r}; valid: {', '.join(LEVELS)}")
    mask = mask.bool()
    with torch.no_grad():
        w = torch.where(mask, weights.detach().double(), 0.0)
        if level == "token":
            mean = w.sum() / mask.sum().clamp(min=1)
        else:
            live = mask.any(-1)
            per_sample = w.sum(-1) / mask.sum(-1).clamp(min=1)  # one weight per sample, on each of its tokens
            mean = per_sample[live].sum() / live.sum().clamp(min=1)
    if mean.item() <= 1e-8:
        return weights, {"tis_norm_factor": 1.0}
    return (weights / mean.to(weights.dtype)).detach(), {"tis_norm_factor": mean.item()}


def rollout_rejection_mask(
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    low: float,
    high: float,
    level: str,
) -> tuple[torch.Tensor, dict[str, float]]:
    """[N, T] bool: the sampled tokens that stay in the loss, those whose ratio r at `level` is in
    [low, high] (at the sequence and geometric levels a sample keeps or loses all its tokens)."""
    if not 0 < low <= high:
        raise ValueError(f"the band needs 0 < low <= high, got [{low}, {high}]")
    mask = mask.bool()
    log_r = log_ratios(proximal_logprobs, behaviour_logprobs, mask, level)
    keep = mask & (log_r >= math.log(low)) & (log_r <= math.log(high))
    count = int(mask.sum())
    sampled_rows = mask.any(1)
    masked_rows = (mask & ~keep).any(1)
    metrics = {
        "rollout_masked_frac": (mask & ~keep).sum().item() / count if count else 0.0,
        "rollout_masked_samples": masked_rows.sum().item() / max(int(sampled_rows.sum()), 1),
    }
    return keep, metrics
