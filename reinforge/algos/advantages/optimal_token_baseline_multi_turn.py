"""Optimal token baseline for multi-turn episodes: positions aligned by sampled-token count, not by position."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, token_metrics
from reinforge.algos.advantages.optimal_token_baseline import grouped_baseline, token_returns_and_weights
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("optimal_token_baseline_multi_turn", min_group_size=2, token_rewards=True, needs_policy_probs=True)
def multi_turn_optimal_token_baseline(inputs: AdvantageInputs) -> AdvantageOutput:
    """Per-token advantages [N, T]: the optimal token baseline (see `optimal_token_baseline` for
    G, W and B) with each row's sampled tokens taken in order as its steps k = 0, 1, ...: the
    env's observation tokens between turns, which differ in length between episodes, are skipped,
    so step k of one episode is compared with step k of the others. A row with no sampled token is
    left out of its group; a group of one keeps A = G; the part of a group's single longest row
    beyond its second-longest gets baseline 0 (handle_zero_tail=True, as verl's default here).

    Source: verl's compute_multi_turn_optimal_token_baseline_advantage (AdvantageEstimator
    TIR_OPTIMAL_TOKEN_BASELINE), the reference; the baseline as in `optimal_token_baseline`.
    """
    returns, weights = token_returns_and_weights(inputs, "optimal_token_baseline_multi_turn")
    mask = inputs.mask
    lengths = mask.sum(1)
    steps = int(lengths.max()) if lengths.numel() else 0
    # Row i's sampled tokens, in order, into columns 0 .. lengths[i] - 1.
    where = mask.nonzero(as_tuple=True)
    column = (mask.long().cumsum(1) - 1)[where]
    compact_returns = torch.zeros(len(lengths), steps, dtype=torch.float64).index_put((where[0], column), returns[where])
    compact_weights = torch.zeros(len(lengths), steps, dtype=torch.float64).index_put((where[0], column), weights[where])
    live = lengths > 0
    baseline = torch.zeros_like(compact_returns)
    if live.any():
        baseline[live] = grouped_baseline(
            compact_returns[live], compact_weights[live], torch.ones_like(compact_returns[live], dtype=torch.bool),
            inputs.group_ids[live], lengths[live], zero_tail=True, eps=1e-8,
        )
    advantages = torch.zeros_like(returns)
    advantages[where] = (compact_returns - baseline)[where[0], column]
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), returns=returns.float(), metrics=token_metrics(advantages, mask))
