"""GRPO: each reward standardized within its group."""

from __future__ import annotations

from reinforge.algos.advantages import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_standardized, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("grpo", min_group_size=2)
def group_normalized_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """GRPO advantages, one per sample [N]:

        A_i = (r_i - mean_{j in g(i)} r_j) / (std_{j in g(i)} r_j + eps)

    with the unbiased (n-1) standard deviation, as in TRL's GRPO trainer. Source: Shao et al.,
    "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models" (2024),
    section 4.1 (outcome supervision). A group whose rewards are all equal carries no signal: its
    advantages are exactly 0 and it is counted in `zero_variance_group_frac`.
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=2, estimator="grpo")
    advantages = group_standardized(inputs.rewards, stats, inputs.eps)
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=sample_metrics(advantages, stats))
