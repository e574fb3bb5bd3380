"""GPG: group-mean-centred rewards, scaled up by the batch's share of samples that carry a reward."""

from __future__ import annotations

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_centered, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("gpg", min_group_size=2)
def group_policy_gradient_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """GPG advantages, one per sample [N]:

        A_i = alpha * (r_i - mean_{j in g(i)} r_j) / F_norm,     alpha = B / max(1, M),  F_norm = 1

    B the batch's samples, M those whose reward is nonzero (verl's count_nonzero of the scores).
    No division by the group's std: GPG optimizes the plain policy-gradient objective (with
    algo.policy_loss=reinforce, no ratio, no clip, no KL, no reference; the gpg preset), and
    alpha restores the gradient's scale that samples without signal would otherwise dilute.

    Source: Chu, Huang, Zhang, Wei, Wang, "GPG: A Simple and Strong Reinforcement Learning Baseline
    for Model Reasoning" (arXiv 2504.02546, 2025); the reference formula is verl's
    compute_gpg_outcome_advantage (f_norm = 1, its default). A group whose rewards are all equal
    gets exactly 0 (counted in `zero_variance_group_frac`). `gpg_alpha` is logged.
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=2, estimator="gpg")
    rewarded = int((inputs.rewards != 0).sum())
    alpha = inputs.rewards.numel() / max(1, rewarded)
    advantages = alpha * group_centered(inputs.rewards, stats)
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics={**sample_metrics(advantages, stats), "gpg_alpha": alpha})
