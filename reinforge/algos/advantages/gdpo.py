"""GDPO: each reward component normalized within its group, then summed and batch-standardized."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import (
    OUTPUT_DTYPE,
    batch_standardized,
    check_sample_tensors,
    group_standardized,
    group_stats,
    sample_metrics,
)
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("gdpo", min_group_size=2)
def decoupled_group_normalized_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """GDPO advantages, one per sample [N], from the named components of the reward:

        A^k_i   = (r^k_i - mean_{j in g(i)} r^k_j) / (std_{j in g(i)} r^k_j + eps)   for each component k
        S_i     = sum_k w_k A^k_i                                                      (w = inputs.reward_weights)
        A_i     = (S_i - mean_batch S) / (std_batch S + eps)

    (unbiased stds; a component constant within a group contributes 0 to that group.) Normalizing
    each component separately keeps reward combinations that GRPO's normalization of the summed
    reward collapses to one value (e.g. (1, 0) and (0, 1)) apart; the final batch-wise step keeps
    the scale independent of the number of components. Source: Liu et al. (NVIDIA), "GDPO: Group
    reward-Decoupled Normalization Policy Optimization for Multi-reward RL Optimization" (2026
    preprint, arXiv 2601.05242). What is implemented is exactly: per-component group
    normalization, weighted sum, then standardization (mean and unbiased std) over the batch.

    A group where every component is constant is a zero-variance group: exactly 0, and counted in
    `zero_variance_group_frac` (also reported per component). With a single component of weight
    w > 0 this is GRPO followed by batch standardization. `inputs.rewards` only fixes N here.
    """
    components, weights = inputs.reward_components, inputs.reward_weights
    if not components:
        raise ValueError("gdpo needs inputs.reward_components (name -> [N] unweighted rewards)")
    if set(components) != set(weights):
        raise ValueError(
            f"gdpo needs one weight per reward component: components {sorted(components)}, weights {sorted(weights)}"
        )
    check_sample_tensors(inputs.rewards, inputs.group_ids)
    summed = torch.zeros(inputs.rewards.shape[0], dtype=torch.float64)
    all_constant = None
    metrics: dict[str, float] = {}
    for name in sorted(components):
        if components[name].shape != inputs.rewards.shape:
            raise ValueError(f"reward component {name!r} has shape {tuple(components[name].shape)}, expected {tuple(inputs.rewards.shape)}")
        stats = group_stats(components[name], inputs.group_ids, min_group_size=2, estimator="gdpo")
        summed += weights[name] * group_standardized(components[name], stats, inputs.eps)
        all_constant = stats.constant if all_constant is None else all_constant & stats.constant
        metrics[f"zero_variance_group_frac/{name}"] = stats.zero_variance_frac
    advantages = batch_standardized(summed, inputs.eps).masked_fill(all_constant[stats.index], 0.0)
    metrics.update(sample_metrics(advantages))
    metrics["zero_variance_group_frac"] = all_constant.double().mean().item()
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=metrics)
