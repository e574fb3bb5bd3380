"""Advantage estimators: pure functions from rewards to per-sample advantages."""

from __future__ import annotations

import torch


def group_normalized_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO advantages: each reward standardized within its group.

        A_i = (r_i - mean_{j in g(i)} r_j) / (std_{j in g(i)} r_j + eps)

    with the unbiased (n-1) standard deviation, as in TRL's GRPO trainer. Source: Shao et al.,
    "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models" (2024),
    section 4.1 (outcome supervision). A group whose rewards are all equal carries no signal: its
    advantages are exactly 0 and it is counted in `zero_variance_group_frac`.

    rewards, group_ids: [N]. Returns advantages [N] and metrics.
    """
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(f"rewards and group_ids must be 1-D of one shape, got {tuple(rewards.shape)} and {tuple(group_ids.shape)}")
    _, inverse, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    if (counts < 2).any():
        raise ValueError("group-normalized advantages need at least 2 samples per group")
    rewards = rewards.double()
    num_groups = counts.numel()
    sums = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, inverse, rewards)
    means = sums / counts
    centered = rewards - means[inverse]
    variances = torch.zeros(num_groups, dtype=rewards.dtype).index_add_(0, inverse, centered**2) / (counts - 1)
    stds = variances.sqrt()
    zero_variance = stds == 0
    advantages = torch.where(zero_variance[inverse], torch.zeros_like(centered), centered / (stds[inverse] + eps))
    metrics = {
        "zero_variance_group_frac": zero_variance.double().mean().item(),
        "advantage_abs_mean": advantages.abs().mean().item(),
    }
    return advantages.float(), metrics
