"""GAE: token-level advantages from a critic, as in PPO for language models."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import (
    OUTPUT_DTYPE,
    batch_standardized,
    check_sample_tensors,
    check_token_tensor,
    last_sampled_token,
    masked_reverse_discounted_sum,
    next_sampled_value,
    token_metrics,
)
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("gae", min_group_size=1, needs_critic=True, token_rewards=True)
def generalized_advantage_estimates(inputs: AdvantageInputs) -> AdvantageOutput:
    """Generalized Advantage Estimation per sampled token, [N, T], 0 outside the mask.

    The time steps of a row are its sampled positions (mask true), in order; they need not be
    contiguous (a multi-turn episode interleaves env tokens, which are skipped). Per step t:

        r_t     = token_rewards_t (if given) + [t is the row's last sampled step] * reward
        delta_t = r_t + gamma V_{t+1} - V_t        (V_{t+1} = value at the next sampled step; 0 after the last)
        A_t     = sum_{l >= 0} (gamma lam)^l delta_{t+l}
        returns = A + V                            (the critic's targets, before whitening)

    then A is whitened over all sampled tokens of the batch: (A - mean) / (std + eps), unbiased
    std (as verl's masked_whiten). Source: Schulman et al., "High-Dimensional Continuous Control
    Using Generalized Advantage Estimation" (2016); the LLM setting (reward on the last token, KL
    as per-token reward) follows Ouyang et al. (2022) and Ziegler et al. (2019). A multi-turn
    episode's per-turn rewards arrive in token_rewards at each turn's last sampled token
    (reinforge.trainer.turn_credit): token rewards outside the mask are never read.
    """
    if inputs.values is None:
        raise ValueError("gae needs inputs.values: critic values V(s_t) [N, T] (the estimator needs_critic)")
    check_sample_tensors(inputs.rewards, inputs.group_ids)
    mask = inputs.mask
    check_token_tensor("values", inputs.values, mask, inputs.rewards.shape[0])
    check_token_tensor("token_rewards", inputs.token_rewards, mask, inputs.rewards.shape[0])
    values = inputs.values.double().masked_fill(~mask, 0.0)
    step_rewards = last_sampled_token(mask) * inputs.rewards.double()[:, None]
    if inputs.token_rewards is not None:
        step_rewards = step_rewards + inputs.token_rewards.double().masked_fill(~mask, 0.0)
    deltas = step_rewards + inputs.gamma * next_sampled_value(values, mask) - values
    raw = masked_reverse_discounted_sum(deltas, mask, inputs.gamma * inputs.lam)
    returns = (raw + values).masked_fill(~mask, 0.0)
    advantages = batch_standardized(raw, inputs.eps, mask)
    metrics = token_metrics(advantages, mask)
    sampled = mask.sum().clamp(min=1).item()
    metrics["advantage_raw_mean"] = (raw.sum() / sampled).item()
    metrics["returns_mean"] = (returns.sum() / sampled).item()
    metrics["values_mean"] = (values.sum() / sampled).item()
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), returns=returns.to(OUTPUT_DTYPE), metrics=metrics)
