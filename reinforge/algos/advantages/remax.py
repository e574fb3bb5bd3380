"""ReMax: REINFORCE with the reward of the greedy response to the same prompt as the baseline."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, check_sample_tensors, check_token_tensor, last_sampled_token, token_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("remax", token_rewards=True, needs_greedy_baseline=True)
def greedy_baseline_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """Per-token advantages [N, T]:

        G_{i,t} = sum_{u >= t} r_{i,u}        (the outcome on the last sampled token, plus any per-token reward: a KL in the reward)
        A_{i,t} = G_{i,t} - b_i,             b_i = R(x_i, y_greedy(x_i))

    b_i is the reward of the policy's greedy (temperature 0) response to sample i's prompt, rolled
    out with the same weights and scored by the same reward functions (`inputs.greedy_rewards`; the
    trainer adds that rollout when this estimator is chosen: reinforge.trainer.greedy_baseline).
    Without a KL in the reward, A_i = r_i - b_i on every token. The greedy response does not depend
    on the sample, so the baseline leaves the gradient unbiased, and it tracks how good the policy
    already is on this prompt: no critic, one extra (greedy) rollout per prompt.

    Source: Li, Xu, Sun, Zhang, Yu, Luo, "ReMax: A Simple, Effective, and Efficient Reinforcement
    Learning Method for Aligning Large Language Models" (arXiv 2310.10505, 2023); the reference is
    verl's compute_remax_outcome_advantage. Works with any group size (the paper samples one
    response per prompt).
    """
    check_sample_tensors(inputs.rewards, inputs.group_ids)
    mask = inputs.mask
    check_token_tensor("token_rewards", inputs.token_rewards, mask, inputs.rewards.shape[0])
    if inputs.greedy_rewards is None or inputs.greedy_rewards.shape != inputs.rewards.shape:
        raise ValueError("remax needs inputs.greedy_rewards [N]: the reward of a greedy rollout of each sample's prompt")
    rewards = last_sampled_token(mask).double() * inputs.rewards.double()[:, None]
    if inputs.token_rewards is not None:
        rewards = rewards + inputs.token_rewards.double()
    returns = rewards.masked_fill(~mask, 0.0).flip(1).cumsum(1).flip(1)
    advantages = (returns - inputs.greedy_rewards.double()[:, None]).masked_fill(~mask, 0.0)
    metrics = {**token_metrics(advantages, mask), "remax_baseline_mean": inputs.greedy_rewards.double().mean().item()}
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), returns=returns.float(), metrics=metrics)
