"""Dr. GRPO: group-mean baseline without the std division."""

from __future__ import annotations

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_centered, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("dr_grpo", min_group_size=2)
def mean_centered_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """Dr. GRPO advantages, one per sample [N]:

        A_i = r_i - mean_{j in g(i)} r_j

    Source: Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective" (2025). The
    paper removes two normalizations from GRPO: the division by the group std (done here: it
    over-weights too-easy and too-hard questions) and the division of each sequence's loss by its
    own length (not an advantage at all: that half of Dr. GRPO is a loss aggregation mode, chosen
    in the policy loss, which divides by a constant instead). Zero-variance groups get exactly 0.
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=2, estimator="dr_grpo")
    advantages = group_centered(inputs.rewards, stats)
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=sample_metrics(advantages, stats))
