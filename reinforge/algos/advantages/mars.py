"""MARS: agent-specific normalization of the game's result, then turn-level returns over each player's turns."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.dr_mas import agent_group_keys
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_standardized, group_stats, masked_reverse_discounted_sum
from reinforge.algos.advantages.turn_rloo import turn_returns
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


@register_advantage("mars", min_group_size=2, turn_level=True)
def turn_level_agent_normalized_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """Per-token advantages [N, T]: each player's result standardized within that player's own
    samples of the group, then returned to each of its turns with a per-turn discount:

        R~_i     = (R_i - mean_{j in g(i), a(j) = a(i)} R_j) / (s_{g(i),a(i)} + eps)     (agent-specific normalization)
        r~_{i,k} = r_{i,k} / (s_{g(i),a(i)} + eps)                                        (turn rewards, same scale)
        A_{i,k}  = sum_{j = k}^{n_i - 1} gamma^(j - k) (r~_{i,j} + [j = n_i - 1] R~_i)    (turn-level return)
        A_{i,t}  = A_{i,k(t)} for every token t of the player's turn k(t)

    R_i is the trajectory's outcome reward (a game's result for that player), g(i) its group (one
    task's games), a(i) its agent (the role whose turns it holds, `inputs.agent_ids`), s the
    unbiased (n-1) std of R over the (group, agent) samples, n_i the player's own turns (a
    player's trajectory holds only its own turns, so the discount runs over its moves, not the
    opponent's). With gamma = 1 and no turn rewards every turn gets R~_i (dr_mas); gamma < 1
    credits a move by how close it came to the end, so early moves of a long game move less.

    Two discounts (`inputs.mars_discount`, algo.mars_discount), equal when gamma = 1:
      turn  (default, the paper's formula above): gamma^(j - k) per policy turn.
      token (the authors' code): each turn's r~_{i,k} (+ R~_i on the last turn) is placed on the
            turn's last token u_k, and every position t gets sum_u gamma^(u - t) r~_u over the
            positions u >= t of the whole sequence, the opponent's / env's observation tokens
            between turns included; so tokens within a turn differ, and a turn is discounted by
            the token distance to the rewards after it, not the turn count.

    Source: Yuan, Xu, Tan et al., "MARS: Reinforcing Multi-Agent Reasoning of LLMs through Self-Play
    in Strategic Games" (arXiv 2510.15414, 2025; v2 titled MARSHAL): a turn-level advantage
    estimator and agent-specific advantage normalization. The order (normalize each player's
    rewards within its group first, then the discounted return over turns) follows the authors'
    code (thu-nics/MARS, roll/utils/functionals.py: reward_normalize_by_player, then
    compute_reinforce_return). A (group, agent) whose results are all equal gets R~ = 0 exactly
    (counted in `zero_variance_group_frac`) and its turn rewards unscaled; without agent ids (one
    player) it normalizes per group.
    """
    if inputs.turn_index is None or inputs.turn_counts is None:
        raise ValueError("mars needs turn_index and turn_counts (multi-turn trajectories)")
    counts = inputs.turn_counts.long()
    if (counts < 1).any():
        raise ValueError("mars: every trajectory needs at least one turn of its player")
    keys = agent_group_keys(inputs.group_ids, inputs.agent_ids)
    stats = group_stats(inputs.rewards, keys, min_group_size=2, estimator="mars (per group and agent)")
    outcome = group_standardized(inputs.rewards, stats, inputs.eps)
    k_max = int(counts.max())
    turn_rewards = torch.zeros(len(counts), k_max, dtype=torch.float64)
    if inputs.turn_rewards is not None:
        # A (group, agent) whose results are all equal has no scale to borrow: its turn rewards stay as they are.
        scale = torch.where(stats.constant, torch.ones_like(stats.stds), stats.stds + inputs.eps)[stats.index]
        turn_rewards = inputs.turn_rewards[:, :k_max].double() / scale[:, None]
    turn_advantages = turn_returns(turn_rewards, counts, outcome, inputs.gamma)  # [N, K]

    index = inputs.turn_index.long()
    if inputs.mars_discount == "token":
        per_token = token_discounted_returns(turn_rewards, counts, outcome, index, inputs.gamma)
    elif inputs.mars_discount == "turn":
        per_token = turn_advantages.gather(1, index.clamp(min=0))
    else:
        raise ValueError(f"unknown mars_discount {inputs.mars_discount!r}; valid: turn, token")
    advantages = torch.where(inputs.mask & (index >= 0), per_token, torch.zeros_like(per_token))
    live = torch.arange(k_max)[None, :] < counts[:, None]
    metrics = {
        "advantage_abs_mean": turn_advantages[live].abs().mean().item(),
        "zero_variance_group_frac": stats.zero_variance_frac,
        "turns_mean": counts.double().mean().item(),
    }
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=metrics)


def token_discounted_returns(
    turn_rewards: torch.Tensor, counts: torch.Tensor, outcome: torch.Tensor, index: torch.Tensor, gamma: float
) -> torch.Tensor:
    """[N, T]: sum_{u >= t} gamma^(u - t) x_u over every position, with x the turn's reward (plus
    the outcome on the last turn) on the last position of each turn and 0 elsewhere, as the
    MARS authors' compute_reinforce_return (thu-nics/MARS, roll/utils/functionals.py) discounts the
    token-level rewards that their env manager places on each turn's end-of-turn token."""
    n = len(counts)
    totals = turn_rewards.double().clone()
    totals[torch.arange(n), counts - 1] += outcome.double()
    following = torch.cat([index[:, 1:], torch.full_like(index[:, :1], -1)], dim=1)
    turn_end = (index >= 0) & (following != index)
    rewards = torch.where(turn_end, totals.gather(1, index.clamp(min=0)), torch.zeros(index.shape, dtype=torch.float64))
    return masked_reverse_discounted_sum(rewards, torch.ones_like(turn_end), gamma)
