"""Pass@k training: the analytic advantage of the best-of-k reward for binary rewards."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


def _comb_ratio(a: torch.Tensor, b: torch.Tensor, k: int) -> torch.Tensor:
    """C(a, k) / C(b, k) for 0 <= a <= b, k <= b, as prod_{i<k} (a - i) / (b - i); 0 when a < k."""
    ratio = torch.ones_like(a, dtype=torch.float64)
    for i in range(k):
        ratio = ratio * (a - i).clamp(min=0) / (b - i)
    return ratio


@register_advantage("pass_at_k", min_group_size=2)
def pass_at_k_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """Pass@k training advantages, one per sample [N], for binary rewards (r > 0.5 is a pass).

    The reward of a k-subset of a group is 1 if any of its k samples passes. Averaged over all
    C(n, k) subsets of a group of n samples with n_neg failures (k = inputs.pass_k):

        R = 1 - C(n_neg, k) / C(n, k)                       (the group's unbiased pass@k estimate)
        s = sqrt(R (1 - R))                                 (std of the binary subset reward)
        A_pos = (1 - R) / s
        A_neg = (1 - R - C(n_neg - 1, k - 1) / C(n - 1, k - 1)) / s

    A failure's advantage is lowered only by the subsets it is in that fail entirely. Source:
    Chen et al., "Pass@k Training for Adaptively Balancing Exploration and Exploitation of Large
    Reasoning Models" (2025), the analytical derivation of the group advantage. For k = 1 this is
    GRPO with the population std: R = mean r, A = (r - R) / sqrt(R (1 - R)). No eps is added.

    A group with s = 0 gets exactly 0: either all samples equal (counted in
    `zero_variance_group_frac`) or fewer than k failures, so every k-subset passes
    (`pass_k_saturated_group_frac`). `pass_at_k_mean` is the mean of R over groups.
    Raises ValueError unless 1 <= k <= the size of every group.
    """
    k = inputs.pass_k
    passed = (inputs.rewards > 0.5).double()
    stats = group_stats(passed, inputs.group_ids, min_group_size=2, estimator="pass_at_k")
    if k < 1 or k > stats.counts.min().item():
        raise ValueError(f"pass_at_k needs 1 <= pass_k <= group size; got pass_k={k}, smallest group {int(stats.counts.min())}")
    n = stats.counts
    n_neg = torch.zeros_like(n).index_add_(0, stats.index, 1.0 - passed)
    group_pass_at_k = 1.0 - _comb_ratio(n_neg, n, k)
    sigma = (group_pass_at_k * (1.0 - group_pass_at_k)).clamp(min=0).sqrt()
    no_signal = sigma == 0
    safe_sigma = torch.where(no_signal, torch.ones_like(sigma), sigma)
    a_pos = (1.0 - group_pass_at_k) / safe_sigma
    a_neg = (1.0 - group_pass_at_k - _comb_ratio(n_neg - 1, n - 1, k - 1)) / safe_sigma
    advantages = torch.where(passed.bool(), a_pos[stats.index], a_neg[stats.index])
    advantages = advantages.masked_fill(no_signal[stats.index], 0.0)
    metrics = sample_metrics(advantages, stats)
    metrics["pass_k_saturated_group_frac"] = (no_signal & ~stats.constant).double().mean().item()
    metrics["pass_at_k_mean"] = group_pass_at_k.mean().item()
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=metrics)
