"""REINFORCE++: returns normalized over the whole batch instead of within a group."""

from __future__ import annotations

import torch

from reinforge.algos.advantages import register_advantage
from reinforge.algos.advantages.group_stats import (
    OUTPUT_DTYPE,
    GroupStats,
    batch_standardized,
    check_token_tensor,
    group_centered,
    group_stats,
    last_sampled_token,
    masked_reverse_discounted_sum,
    sample_metrics,
    token_metrics,
)
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


def _globally_normalized(scalar: torch.Tensor, inputs: AdvantageInputs, stats: GroupStats) -> AdvantageOutput:
    """Batch-standardize `scalar` [N], or, with token rewards, the per-token returns built on it."""
    if inputs.token_rewards is None:
        advantages = batch_standardized(scalar, inputs.eps)
        return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=sample_metrics(advantages, stats))
    mask = inputs.mask
    check_token_tensor("token_rewards", inputs.token_rewards, mask, scalar.shape[0])
    step_rewards = inputs.token_rewards.double().masked_fill(~mask, 0.0)
    step_rewards = step_rewards + last_sampled_token(mask) * scalar.double()[:, None]
    returns = masked_reverse_discounted_sum(step_rewards, mask, 1.0)
    advantages = batch_standardized(returns, inputs.eps, mask)
    metrics = token_metrics(advantages, mask)
    metrics["zero_variance_group_frac"] = stats.zero_variance_frac
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=metrics)


@register_advantage("reinforce_pp", min_group_size=1, token_rewards=True)
def batch_normalized_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """REINFORCE++ advantages: the reward standardized over the whole batch, not within a group.

    Without token rewards, one per sample [N]:

        A_i = (r_i - mean_batch r) / (std_batch r + eps)          (unbiased std over the N samples)

    With `inputs.token_rewards` (e.g. a per-token KL penalty -beta * KL_t), one per token [N, T]:
    the return at sampled token t is the (undiscounted) sum of the token rewards from t to the end
    of the row's sampled tokens, plus the scalar reward (placed on the last sampled token),

        G_{i,t} = sum_{s >= t, s sampled} tr_{i,s} + r_i,

    and A = (G - mean) / (std + eps) with mean and std over every sampled token of the batch;
    0 outside the mask. Source: Hu, "REINFORCE++: A Simple and Efficient Approach for Aligning
    Large Language Models" (2025; later versions titled "... Stabilizing Critic-Free Policy
    Optimization with Global Advantage Normalization"), and its reference implementation in
    OpenRLHF. The paper's gamma is 1; `inputs.gamma` is not used.

    Groups play no part; `zero_variance_group_frac` is still reported, for monitoring only, and
    zero-variance groups are *not* zeroed (the batch mean is their baseline).
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=1, estimator="reinforce_pp")
    return _globally_normalized(inputs.rewards.double(), inputs, stats)


@register_advantage("reinforce_pp_baseline", min_group_size=2, token_rewards=True)
def group_baseline_batch_normalized_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """REINFORCE++ with a group baseline: subtract the group mean, then standardize over the batch.

        r~_i = r_i - mean_{j in g(i)} r_j
        A_i  = (r~_i - mean_batch r~) / (std_batch r~ + eps)     (unbiased std over the N samples)

    Without token rewards mean_batch r~ is 0 (every group's centered rewards sum to 0), so this is
    r~ divided by the batch std of the centered rewards, as in the paper; output [N], and
    zero-variance groups get exactly 0 (their r~ is 0 and no float residue of the mean is added).
    With `inputs.token_rewards`, r~_i takes the place of r_i in reinforce_pp's per-token returns,
    which are then standardized over every sampled token (mean subtracted too, as OpenRLHF does);
    output [N, T]. A zero-variance group then still gets the token rewards' signal (e.g. the KL
    penalty), so it is not zeroed. Source: Hu, "REINFORCE++" (2025), the "REINFORCE++ w/ baseline"
    variant for group sampling (k > 1).
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=2, estimator="reinforce_pp_baseline")
    output = _globally_normalized(group_centered(inputs.rewards, stats), inputs, stats)
    if inputs.token_rewards is None:
        zero = stats.constant[stats.index]
        output.advantages = output.advantages.masked_fill(zero, 0.0)
    return output
