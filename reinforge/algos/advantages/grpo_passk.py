"""GRPO pass@k: only the best sample of a group is credited, by its margin over the runner-up."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("grpo_passk", min_group_size=2)
def best_of_group_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """Pass@k advantages, one per sample [N]: in each group g, only its best sample i* gets one,

        A_{i*} = (r_max - r_second) / (std_g + eps),    A_i = 0 for every other i

    with r_max, r_second the group's two largest rewards (a tie for the best gives 0) and std_g
    the unbiased std of the group's rewards. The group's reward is its best sample's (pass@k with
    k = the group size); the gradient of that max flows only through the sample attaining it.

    The max's leave-one-out baseline is the runner-up: the others' best. Source: verl's
    compute_grpo_passk_outcome_advantage (the reference; norm_adv_by_std_in_grpo=True, its
    default; its docstring cites arXiv 2503.19595); it is the k = n case of Walder and Karkhanis,
    "Pass@K Policy Optimization: Solving Harder Reinforcement Learning Problems" (arXiv 2505.15201,
    2025), who extend it to any k <= n. Unlike `pass_at_k` (Chen et al.'s analytic advantage over
    all k-subsets of binary rewards), every sample but one gets 0. A group whose rewards are all
    equal gets exactly 0 (counted in `zero_variance_group_frac`).
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=2, estimator="grpo_passk")
    rewards = inputs.rewards.double()
    advantages = torch.zeros_like(rewards)
    for g in range(stats.counts.numel()):
        rows = (stats.index == g).nonzero().squeeze(1)
        top, where = torch.topk(rewards[rows], 2)
        advantages[rows[where[0]]] = (top[0] - top[1]) / (stats.stds[g] + inputs.eps)
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=sample_metrics(advantages, stats))
