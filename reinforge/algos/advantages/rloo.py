"""RLOO: the leave-one-out baseline."""

from __future__ import annotations

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_centered, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("rloo", min_group_size=2)
def leave_one_out_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """REINFORCE Leave-One-Out advantages, one per sample [N]:

        A_i = r_i - 1/(n-1) sum_{j in g(i), j != i} r_j  =  n/(n-1) (r_i - mean_{j in g(i)} r_j)

    with n the size of sample i's group (groups may differ in size). The baseline of each sample
    is the mean of the *other* samples of its group, so it is independent of that sample and the
    gradient estimate stays unbiased. Sources: Ahmadian et al., "Back to Basics: Revisiting
    REINFORCE Style Optimization for Learning from Human Feedback in LLMs" (2024); Kool et al.,
    "Buy 4 REINFORCE Samples, Get a Baseline for Free!" (2019). Zero-variance groups get exactly 0.
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=2, estimator="rloo")
    n = stats.counts[stats.index]
    advantages = n / (n - 1) * group_centered(inputs.rewards, stats)
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=sample_metrics(advantages, stats))
