"""Rollout rejection by a divergence between the learner and the engine, chained over several criteria.

With d_t = logp_proximal_t - logp_behaviour_t (clamped to [-20, 20]) on the sampled tokens of sample i:

    k2_t = d_t^2 / 2                 k3_t = exp(d_t) - 1 - d_t          (Schulman 2020; both >= 0)

    token_kX      reject token t           if kX_t > c
    seq_sum_kX    reject all of sample i   if sum_t kX_t > c
    seq_mean_kX   reject all of sample i   if (1 / n_i) sum_t kX_t > c
    seq_max_kX    reject all of sample i   if max_t kX_t > c

`algo.rollout_reject` lists one or more criteria and `algo.rollout_reject_threshold` their c (one
shared or one each); a token stays only if every criterion keeps it (logical AND), and with
`algo.rollout_mask` (the ratio band of rollout_correction.py, verl's k1 options) as well.

Source: Liu, Li, Fu, Wang, Liu, Shen, "When Speed Kills Stability: Demystifying RL Collapse from
the Training-Inference Mismatch" (2025): a sample the engine produced far from the learner's
policy is a numerical fault, not a rare trajectory, and is rejected (a hard trust region) rather
than down-weighted. Transcribed from verl's `compute_rollout_rejection_mask`
(verl/trainer/ppo/rollout_corr_helper.py, options token_k2 ... seq_max_k3), including its
[-20, 20] safety clamp of d. A divergence has no lower bound to keep: every threshold c > 0 is an
upper bound (verl's k1 options, with their two-sided band, are algo.rollout_mask here).

Metrics: mask/rollout_reject_frac (sampled tokens rejected), mask/rollout_reject_samples_frac
(samples with a rejected token, over samples with a sampled token), and per criterion
rollout_reject/<option>_frac (sampled tokens it rejects on its own).
"""

from __future__ import annotations

import torch

SAFETY_BOUND = 20.0
ESTIMATORS = ("k2", "k3")
LEVELS = ("token", "seq_sum", "seq_mean", "seq_max")
OPTIONS: tuple[str, ...] = tuple(f"{level}_{k}" for level in LEVELS for k in ESTIMATORS)


def _token_divergence(log_ratio: torch.Tensor, estimator: str) -> torch.Tensor:
    if estimator == "k2":
        return 0.5 * log_ratio**2
    return torch.exp(log_ratio) - 1.0 - log_ratio


def _statistic(per_token: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """[N, T]: the token's own value, or its sample's sum / mean / max on every position."""
    if level == "token":
        return per_token
    zeros = torch.zeros_like(per_token)
    if level == "seq_max":
        # a sample with no sampled token has a max of 0 (nothing to reject), as in verl
        stat = torch.where(mask, per_token, torch.full_like(per_token, float("-inf"))).max(-1).values
        stat = torch.where(torch.isinf(stat), torch.zeros_like(stat), stat)
    else:
        stat = torch.where(mask, per_token, zeros).sum(-1)
        if level == "seq_mean":
            stat = stat / mask.sum(-1).clamp(min=1)
    return stat[:, None].expand_as(per_token)


def parse_option(option: str) -> tuple[str, str]:
    """'seq_mean_k3' -> ('seq_mean', 'k3'); a clear error for an unknown option."""
    if option not in OPTIONS:
        raise ValueError(f"unknown rollout rejection criterion {option!r}; valid: {', '.join(OPTIONS)}")
    level, _, estimator = option.rpartition("_")
    return level, estimator


def divergence_rejection_mask(
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    options: list[str],
    thresholds: list[float],
) -> tuple[torch.Tensor, dict[str, float]]:
    """[N, T] bool: the sampled tokens every criterion keeps; `thresholds` one shared or one per option."""
    if not options:
        raise ValueError("at least one rollout rejection criterion is needed")
    if len(thresholds) not in (1, len(options)):
        raise ValueError(f"{len(thresholds)} thresholds for {len(options)} criteria: give one shared or one each")
    if any(c <= 0 for c in thresholds):
        raise ValueError(f"rollout rejection thresholds must be > 0 (a divergence is >= 0), got {thresholds}")
    thresholds = thresholds * len(options) if len(thresholds) == 1 else thresholds
    mask = mask.bool()
    with torch.no_grad():
        log_ratio = torch.where(mask, proximal_logprobs.double() - behaviour_logprobs.double(), 0.0)
        log_ratio = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
        keep = mask.clone()
        count = int(mask.sum())
        metrics: dict[str, float] = {}
        for option, threshold in zip(options, thresholds):
            level, estimator = parse_option(option)
            passed = _statistic(_token_divergence(log_ratio, estimator), mask, level) <= threshold
            metrics[f"rollout_reject/{option}_frac"] = int((mask & ~passed).sum()) / count if count else 0.0
            keep &= passed
        live = mask.any(-1)
        rejected_rows = (mask & ~keep).any(-1)
        metrics["mask/rollout_reject_frac"] = int((mask & ~keep).sum()) / count if count else 0.0
        metrics["mask/rollout_reject_samples_frac"] = int(rejected_rows.sum()) / max(int(live.sum()), 1)
    return keep, metrics
