"""REINFORCE++: returns-to-go normalized over every sampled token of the batch, not within a group."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import (
    OUTPUT_DTYPE,
    GroupStats,
    batch_standardized,
    check_token_tensor,
    group_centered,
    group_stats,
    last_sampled_token,
    masked_reverse_discounted_sum,
    token_metrics,
)
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


def token_whitened_returns(scalar: torch.Tensor, inputs: AdvantageInputs, stats: GroupStats) -> AdvantageOutput:
    """Per-token returns built on `scalar` [N] (and `inputs.token_rewards` if any), whitened over
    every sampled token of the batch. One path with or without token rewards: no token rewards is
    the same computation as all-zero ones, so a KL reward of coefficient beta moves the
    advantages by O(beta), never by a change of normalization."""
    mask = inputs.mask
    check_token_tensor("token_rewards", inputs.token_rewards, mask, scalar.shape[0])
    step_rewards = torch.zeros(mask.shape, dtype=torch.float64)
    if inputs.token_rewards is not None:
        step_rewards = inputs.token_rewards.double().masked_fill(~mask, 0.0)
    step_rewards = step_rewards + last_sampled_token(mask) * scalar.double()[:, None]
    returns = masked_reverse_discounted_sum(step_rewards, mask, 1.0)
    advantages = batch_standardized(returns, inputs.eps, mask, unbiased=False)
    metrics = token_metrics(advantages, mask)
    metrics["zero_variance_group_frac"] = stats.zero_variance_frac
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=metrics)


@register_advantage("reinforce_pp", min_group_size=1, token_rewards=True)
def batch_normalized_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """REINFORCE++ advantages: returns-to-go standardized over every sampled token of the batch.

    With the scalar reward r_i on the last sampled token of sample i and the token rewards tr
    (e.g. a per-token KL penalty -beta * KL_s; 0 when `inputs.token_rewards` is None), the return
    at each sampled token t is (gamma = 1, as in the paper; `inputs.gamma` is not used)

        G_{i,t} = r_i + sum_{s >= t, s sampled} tr_{i,s}
        A_{i,t} = (G_{i,t} - mu) / (sigma + eps)

    with mu and sigma the mean and population std (divisor n) of G over every sampled token of the
    batch; output [N, T], 0 outside `inputs.mask`. Without token rewards every token of sample i
    has G = r_i, so mu and sigma weigh each sample by its number of sampled tokens: this is not
    the per-sample z-score (r_i - mean r) / std r unless all samples have one length.

    Source: Hu et al., "REINFORCE++: Stabilizing Critic-Free Policy Optimization with Global
    Advantage Normalization" (arXiv 2501.03262, 2025; first titled "REINFORCE++: A Simple and
    Efficient Approach for Aligning Large Language Models"), and its reference implementation,
    OpenRLHF's `reinforce` estimator (experience_maker.compute_advantages_and_returns: cumulative
    returns of the token rewards, then mean and population variance over all action-mask tokens
    of the batch). Differences: OpenRLHF scales by rsqrt(max(var, 1e-8)) where this divides by
    (sigma + eps), which differ only when sigma is below ~1e-4; verl's reinforce_plus_plus also
    whitens per token but with the unbiased variance (n - 1), a factor sqrt((n - 1) / n) in the
    scale with n the batch's sampled tokens. A batch whose returns are all equal gets exactly 0.

    Groups play no part; `zero_variance_group_frac` is still reported, for monitoring only.
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=1, estimator="reinforce_pp")
    return token_whitened_returns(inputs.rewards.double(), inputs, stats)


@register_advantage("reinforce_pp_baseline", min_group_size=2, token_rewards=True)
def group_baseline_batch_normalized_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """REINFORCE++ with a group baseline: subtract the group mean, then reinforce_pp's whitening.

        r~_i    = r_i - mean_{j in g(i)} r_j
        G_{i,t} = r~_i + sum_{s >= t, s sampled} tr_{i,s}
        A_{i,t} = (G_{i,t} - mu) / (sigma + eps)      (mu, population sigma over all sampled tokens)

    output [N, T]. The token mean mu is subtracted even though the r~ of each group sum to 0, as
    OpenRLHF's `reinforce_baseline` and verl's `reinforce_plus_plus_baseline` do: mu weighs each
    sample by its length, so it is not 0 when lengths differ. A zero-variance group (r~ = 0)
    therefore gets -mu / sigma plus its token rewards' signal (e.g. the KL penalty), exactly 0
    only when the batch's mu is 0 and it has no token rewards; it is not forced to 0, so that
    zero token rewards and no token rewards stay one computation. Source: Hu et al.,
    "REINFORCE++" (arXiv 2501.03262, 2025), the "REINFORCE++ w/ baseline" variant for group
    sampling (k > 1), and OpenRLHF's `reinforce_baseline` estimator.
    """
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=2, estimator="reinforce_pp_baseline")
    return token_whitened_returns(group_centered(inputs.rewards, stats), inputs, stats)
