"""OPO: the group's length-weighted mean reward as the baseline, no std division."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, check_token_tensor, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("opo", min_group_size=2)
def length_weighted_baseline(inputs: AdvantageInputs) -> AdvantageOutput:
    """OPO advantages, one per sample [N]:

        b_g = sum_{j in g} l_j r_j / sum_{j in g} l_j,     A_i = r_i - b_{g(i)}

    with l_j the sample's sampled (trained) tokens, `inputs.mask.sum(1)`. Under exact on-policy
    training (one optimizer step per batch) and a sequence-level objective, this is the baseline
    that minimizes the gradient's variance when the squared gradient norm of a response grows
    with its length: longer responses weigh more in the baseline.

    Source: Hao, Huang, Li, Chen et al., "On-Policy RL with Optimal Reward Baseline" (arXiv
    2505.23585, 2025); the reference is verl's compute_opo_outcome_advantage (a group of one gets
    baseline 0 there; groups here hold at least two). A group whose rewards are all equal gets
    exactly 0 (counted in `zero_variance_group_frac`), and a group with no sampled token at all
    (whose rows train nothing) takes its plain mean, where verl's 0 / 0 would give NaN.
    """
    check_token_tensor("mask", None, inputs.mask, inputs.rewards.shape[0])
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=2, estimator="opo")
    rewards = inputs.rewards.double()
    lengths = inputs.mask.sum(1).double()
    groups = stats.counts.numel()
    weighted = torch.zeros(groups, dtype=torch.float64).index_add_(0, stats.index, lengths * rewards)
    total = torch.zeros(groups, dtype=torch.float64).index_add_(0, stats.index, lengths)
    baseline = torch.where(total > 0, weighted / total.clamp(min=1), stats.means)
    advantages = torch.where(stats.constant[stats.index], torch.zeros_like(rewards), rewards - baseline[stats.index])
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=sample_metrics(advantages, stats))
