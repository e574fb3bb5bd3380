"""GRPO: each reward standardized within its group."""

from __future__ import annotations

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_centered, group_standardized, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("grpo", min_group_size=2)
def group_normalized_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """GRPO advantages, one per sample [N]:

        A_i = (r_i - mean_{j in g(i)} r_j) / (std_{j in g(i)} r_j + eps)

    with the unbiased (n-1) standard deviation, as in TRL's GRPO trainer. Source: Shao et al.,
    "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models" (2024),
    section 4.1 (outcome supervision). A group whose rewards are all equal carries no signal: its
    advantages are exactly 0 and it is counted in `zero_variance_group_frac`.

    The scale (`inputs.scale_rewards`, algo.scale_rewards; TRL's GRPOConfig.scale_rewards):
      group  (default) the group's std, as above;
      batch  the unbiased std of all the batch's rewards: A_i = (r_i - mean_g(i)) / (std_batch + eps),
             group mean with batch std as Liu et al. recommend ("Part I: Tricks or Traps? A Deep Dive
             into RL for LLM Reasoning", arXiv 2508.08221, 2025: Lite PPO), so a group's advantages
             keep their size relative to other groups' (logged: reward_std_batch);
      none   no division, A_i = r_i - mean_g(i) (Dr. GRPO's advantage, as algo.advantage=dr_grpo).
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=2, estimator="grpo")
    metrics: dict[str, float] = {}
    if inputs.scale_rewards == "group":
        advantages = group_standardized(inputs.rewards, stats, inputs.eps)
    elif inputs.scale_rewards == "batch":
        batch_std = inputs.rewards.double().std().item() if inputs.rewards.numel() > 1 else 0.0
        advantages = group_centered(inputs.rewards, stats) / (batch_std + inputs.eps)
        metrics["reward_std_batch"] = batch_std
    elif inputs.scale_rewards == "none":
        advantages = group_centered(inputs.rewards, stats)
    else:
        raise ValueError(f"unknown scale_rewards {inputs.scale_rewards!r}; valid: group, batch, none")
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics={**sample_metrics(advantages, stats), **metrics})
