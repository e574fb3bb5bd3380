"""Optimal token baseline (OTB): a per-token group baseline weighted by each path's accumulated variance."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, check_token_tensor, last_sampled_token, token_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


def token_returns_and_weights(inputs: AdvantageInputs, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """G [N, T]: the reward-to-go of the sampled tokens' rewards (the outcome on the last sampled
    token, plus inputs.token_rewards, e.g. a KL in the reward); W [N, T]: cumulative
    sum_{j <= t, sampled} w_j, w_j = (1 - 2 pi_j + sum_v pi_j(v)^2) * rho_j^2 (rho: inputs.is_weights)."""
    if inputs.old_logprobs is None or inputs.sum_pi_squared is None:
        raise ValueError(f"{name} needs the policy's token log-probs and sum_v pi(v)^2 (inputs.old_logprobs, inputs.sum_pi_squared)")
    mask = inputs.mask
    n = inputs.rewards.shape[0]
    for field in ("old_logprobs", "sum_pi_squared", "token_rewards", "is_weights"):
        check_token_tensor(field, getattr(inputs, field), mask, n)
    rewards = last_sampled_token(mask).double() * inputs.rewards.double()[:, None]
    if inputs.token_rewards is not None:
        rewards = rewards + inputs.token_rewards.double()
    rewards = rewards.masked_fill(~mask, 0.0)
    returns = rewards.flip(1).cumsum(1).flip(1)
    w = 1.0 - 2.0 * inputs.old_logprobs.double().exp() + inputs.sum_pi_squared.double()
    if inputs.is_weights is not None:
        w = w * inputs.is_weights.double() ** 2
    return returns, w.masked_fill(~mask, 0.0).cumsum(1)


def grouped_baseline(returns: torch.Tensor, weights: torch.Tensor, valid: torch.Tensor, group_ids: torch.Tensor,
                     lengths: torch.Tensor, zero_tail: bool, eps: float) -> torch.Tensor:
    """B[i, t] = sum_{j in g(i)} G_j,t W_j,t v_j,t / (sum_{j in g(i)} W_j,t v_j,t + eps), 0 in a group of one;
    with `zero_tail`, 0 on the part of a group's single longest row beyond its second-longest."""
    _, index, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    groups, width = counts.numel(), returns.shape[1]
    v = valid.double()
    numerator = torch.zeros(groups, width, dtype=torch.float64).index_add_(0, index, returns * weights * v)
    denominator = torch.zeros(groups, width, dtype=torch.float64).index_add_(0, index, weights * v) + eps
    baseline = (numerator / denominator)[index]
    baseline[counts[index] == 1] = 0.0
    if zero_tail:
        for g in (counts > 1).nonzero().flatten().tolist():
            rows = (index == g).nonzero().flatten()
            ordered = lengths[rows].sort().values
            longest = rows[lengths[rows] == ordered[-1]]
            if len(longest) == 1 and ordered[-1] > ordered[-2]:
                baseline[longest[0], int(ordered[-2]):] = 0.0
    return baseline


@register_advantage("optimal_token_baseline", min_group_size=2, token_rewards=True, needs_policy_probs=True)
def optimal_token_baseline(inputs: AdvantageInputs) -> AdvantageOutput:
    """Per-token advantages [N, T] with a baseline per position t of each group:

        G_t = sum_{u >= t} r_u                                (reward-to-go; the outcome on the last token)
        w_j = (1 - 2 pi_j + sum_v pi_j(v)^2) * rho_j^2         (||d log pi(y_j) / d logits||^2, the logit-gradient proxy)
        W_t = sum_{j <= t} w_j                                (the path's accumulated "energy")
        B_t = sum_{i in g} G_t^(i) W_t^(i) / (sum_{i in g} W_t^(i) + eps),    A_t = G_t - B_t

    over the sampled tokens, eps = 1e-8; pi_j is the policy's probability of the sampled token j
    (`inputs.old_logprobs`) and sum_v pi_j(v)^2 the sum of its squared probabilities over the
    vocabulary (`inputs.sum_pi_squared`); both come from one no-grad forward of the learner before
    the update (reinforge.learner.sum_pi_squared); rho the truncated importance weights when
    algo.tis_cap is set. B_t* = E[G_t W_t] / E[W_t] minimizes the variance of the policy
    gradient's estimate at t when a token's squared gradient norm is W_t: paths that have
    accumulated more uncertainty weigh more. Positions are aligned across a group by index (the
    group's rows share one prompt, so position t is the same response token for all of them). A
    group of one gets no baseline (A = G).

    Source: the optimal token baseline of verl (Li et al., "Optimal Token Baseline", 2025, the
    blog linked from verl's docs/algo/otb.md), reference compute_optimal_token_baseline_advantage
    (handle_zero_tail=False, its default).
    """
    returns, weights = token_returns_and_weights(inputs, "optimal_token_baseline")
    mask = inputs.mask
    baseline = grouped_baseline(returns, weights, mask, inputs.group_ids, mask.sum(1), zero_tail=False, eps=1e-8)
    advantages = (returns - baseline).masked_fill(~mask, 0.0)
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), returns=returns.float(), metrics=token_metrics(advantages, mask))
